"""Transactional messages from 4.x producers (docs/remoting-protocol.md, "Transactions"), kept by
the broker's one EndTransactionProcessor (the RocketMQ 5 clients' too): a send whose sysFlag says
prepared is stored as a half message, END_TRANSACTION commits or rolls it back, and a transaction
left open is checked back by a CHECK_TRANSACTION_STATE request to a connected producer of its
group (PGROUP), whose answer is an END_TRANSACTION marked fromTransactionCheck."""

from __future__ import annotations

import dataclasses
import itertools
import struct

from rmq import message_format as mf
from rmq.broker_server.processors.end_transaction_processor import HALF_TOPIC, OpenTransaction, Resolution
from rmq.broker_server.remoting.remoting_server import Channel
from rmq.remoting.remoting_command import RemotingCommand
from rmq.remoting.request_code import RequestCode
from rmq.rocketmq_v2.properties import PROPERTY_PRODUCER_GROUP, PROPERTY_TRANSACTION_PREPARED
from rmq.store import MessageToStore
from rmq.store.commit_log import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE
from rmq.stored_message import StoredMessage, offset_msg_id
from rmq.v1 import rmq_pb2

MAX_PRODUCER_GROUPS_PER_CONNECTION = 64
RESOLUTIONS = {TRANSACTION_COMMIT_TYPE: Resolution.COMMIT, TRANSACTION_ROLLBACK_TYPE: Resolution.ROLLBACK}


def half_message(
    message: rmq_pb2.Message, topic: str, queue_id: int, group: str, born_host: bytes
) -> MessageToStore:
    """The half message of a prepared send: in the half topic, real topic and queue in properties."""
    properties = dict(message.properties)
    if message.tags:
        properties[mf.PROPERTY_TAGS] = message.tags
    if message.keys:
        properties[mf.PROPERTY_KEYS] = message.keys
    properties.update(
        {
            mf.PROPERTY_REAL_TOPIC: topic,
            mf.PROPERTY_REAL_QUEUE_ID: str(queue_id),
            PROPERTY_TRANSACTION_PREPARED: "true",
        }
    )
    properties.setdefault(PROPERTY_PRODUCER_GROUP, group)
    return MessageToStore(
        HALF_TOPIC, 0, message.body, properties, message.flag, message.born_timestamp, born_host
    )


def encode_record(message: StoredMessage) -> bytes:
    """MessageDecoder.encode: a message in the CommitLog record layout (what a check's body holds)."""
    body, topic = message.body, message.topic.encode()
    properties = mf.encode_properties(message.properties).encode()
    size = mf.calc_msg_length(len(body), len(topic), len(properties))
    header = mf.HEADER.pack(
        size,
        mf.MESSAGE_MAGIC_CODE,
        0,
        message.queue_id,
        message.flag,
        message.queue_offset,
        message.physical_offset,
        message.sys_flag,
        message.born_timestamp,
        message.born_host,
        message.store_timestamp,
        message.store_host,
        message.reconsume_times,
        0,
        len(body),
    )
    return b"".join(
        (header, body, struct.pack(">b", len(topic)), topic, struct.pack(">h", len(properties)), properties)
    )


class ProducerChannels:
    """Connected 4.x producers by group (from their heartbeats), asked in turn to check; a
    transaction is only shown to producers of the account that opened it (the heartbeat's signer).
    Bounded: at most MAX_PRODUCER_GROUPS_PER_CONNECTION groups per connection, and a connection's
    entries leave with it."""

    def __init__(self) -> None:
        self._groups: dict[str, dict[Channel, None]] = {}
        self._by_channel: dict[Channel, set[str]] = {}
        self._accounts: dict[Channel, str] = {}      # the account a producer's heartbeat was signed by
        self._turn = itertools.count()

    def register(self, group: str, channel: Channel, account: str = "") -> None:
        self._accounts[channel] = account
        groups = self._by_channel.get(channel)
        if groups is None:
            groups = self._by_channel[channel] = set()
            channel.close_callbacks.append(self._forget)
        if group in groups or len(groups) >= MAX_PRODUCER_GROUPS_PER_CONNECTION:
            return
        groups.add(group)
        self._groups.setdefault(group, {})[channel] = None

    def _forget(self, channel: Channel) -> None:
        self._accounts.pop(channel, None)
        for group in self._by_channel.pop(channel, set()):
            channels = self._groups.get(group, {})
            channels.pop(channel, None)
            if not channels:
                self._groups.pop(group, None)

    def ask(self, transaction_id: str, transaction: OpenTransaction, half: StoredMessage) -> bool:
        """Send CHECK_TRANSACTION_STATE to a producer of the half message's group; False when
        none is connected here."""
        group = self._groups.get(half.properties.get(PROPERTY_PRODUCER_GROUP, ""), {})
        channels = [channel for channel in group
                    if not transaction.owner or self._accounts.get(channel) == transaction.owner]
        if not channels:
            return False
        real = dataclasses.replace(
            half, topic=transaction.topic, queue_id=int(half.properties.get(mf.PROPERTY_REAL_QUEUE_ID, "0"))
        )
        fields = {
            "tranStateTableOffset": str(transaction.half_offset),
            "commitLogOffset": str(half.physical_offset),
            "msgId": transaction.message_id,
            "transactionId": transaction_id,
            "offsetMsgId": offset_msg_id(half),
        }
        channel = channels[next(self._turn) % len(channels)]
        channel.send_oneway(
            RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE, ext_fields=fields, body=encode_record(real))
        )
        return True
