"""Message conversion between `apache.rocketmq.v2.Message` and the store's records (Apache
proxy GrpcConverter; spec rocketmq-v2-protocol.md §1 SendMessage, §3 items 1-3, §4).

Sent messages keep the producer's message id (UNIQ_KEY), tag, keys, message group, delivery
time and user properties as record properties (rmq.rocketmq_v2.properties), so rmq.v1 and the
Spark source read them as any other message. Received messages carry every field the official
clients read: body encoding IDENTITY, an uppercase MD5 digest, the delivery attempt (>= 1), the
receipt handle, born/store host and time."""

from __future__ import annotations

import hashlib
import ipaddress
import time

from google.protobuf.timestamp_pb2 import Timestamp

from rmq import message_format as mf
from rmq import retry
from rmq.broker_server.rocketmq_v2.status import V2Error
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2.properties import (
    PROPERTY_BORN_HOST,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRANSACTION_PREPARED,
    SYSTEM_PROPERTIES,
)
from rmq.store import MessageToStore
from rmq.stored_message import StoredMessage, offset_msg_id

MILLIS_THRESHOLD = 100_000_000_000  # a delivery "seconds" value above this is milliseconds (§3.7)


class InvalidMessage(V2Error):
    """A sent message the broker refuses, with the v2 Code it answers."""


def timestamp_ms(stamp: Timestamp) -> int:
    return stamp.seconds * 1000 + stamp.nanos // 1_000_000


def delivery_time_ms(stamp: Timestamp) -> int:
    """The producer writes the delivery time into `seconds` as the application gave it: the
    official example passes seconds, the client's own test milliseconds (§3.7)."""
    if stamp.seconds > MILLIS_THRESHOLD:
        return stamp.seconds + stamp.nanos // 1_000_000
    return timestamp_ms(stamp)


def _timestamp(ms: int) -> Timestamp:
    stamp = Timestamp()
    stamp.FromMilliseconds(ms)
    return stamp


def host_string(host: bytes) -> str:
    """A record's 8-byte IPv4 host (address + port) as "a.b.c.d:port"."""
    if len(host) != mf.HOST_SIZE:
        return ""
    return f"{ipaddress.IPv4Address(host[:4])}:{int.from_bytes(host[4:], 'big')}"


def message_type(message: v2.Message) -> int:
    return message.system_properties.message_type or v2.NORMAL


def record_properties(message: v2.Message) -> dict[str, str]:
    """The record properties of a sent v2 message (user properties, then the system ones)."""
    tag, keys, properties = sent_properties(message, message_type(message))
    if tag:
        properties[mf.PROPERTY_TAGS] = tag
    if keys:
        properties[mf.PROPERTY_KEYS] = keys
    return properties


def sent_properties(message: v2.Message, kind: int) -> tuple[str, str, dict[str, str]]:
    """The tag, the keys (space-separated) and the other record properties of a sent v2 message,
    as the single-message path takes them (SendMessageProcessor's OneMessage); `kind`: its
    `message_type`. InvalidMessage
    names the first property, tag, key or id the broker refuses."""
    system = message.system_properties
    user_properties = message.user_properties
    # dict() of the protobuf map runs three Python-level Mapping calls: none for the common empty map
    properties = dict(user_properties) if user_properties else {}
    if not properties.keys().isdisjoint(SYSTEM_PROPERTIES):
        reserved = sorted(set(properties) & SYSTEM_PROPERTIES)
        raise InvalidMessage(v2.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property key {reserved[0]!r} is reserved")
    tag = ""
    if system.HasField("tag"):
        tag = system.tag
        if not tag.strip() or "|" in tag:
            raise InvalidMessage(v2.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is empty or holds '|'")
    keys = [key for key in system.keys if key.strip()]
    if keys and any(mf.KEY_SEPARATOR in key for key in keys):
        raise InvalidMessage(v2.ILLEGAL_MESSAGE_KEY, "a message key must not contain a space")
    message_id = system.message_id
    if not message_id:
        raise InvalidMessage(v2.ILLEGAL_MESSAGE_ID, "message_id is empty")
    properties[mf.PROPERTY_UNIQ_KEY] = message_id
    if system.born_host:
        properties[PROPERTY_BORN_HOST] = system.born_host
    if kind == v2.FIFO:
        if not system.message_group:
            raise InvalidMessage(v2.ILLEGAL_MESSAGE_GROUP, "a FIFO message needs a message group")
        properties[PROPERTY_MESSAGE_GROUP] = system.message_group
    if kind == v2.TRANSACTION:
        properties[PROPERTY_TRANSACTION_PREPARED] = "true"
    joined = mf.KEY_SEPARATOR.join(keys)
    for name, value in (*properties.items(), (mf.PROPERTY_TAGS, tag), (mf.PROPERTY_KEYS, joined)):
        if mf.NAME_VALUE_SEPARATOR in name + value or mf.PROPERTY_SEPARATOR in name + value:
            raise InvalidMessage(
                v2.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {name!r} holds a reserved separator character"
            )
    return tag, joined, properties


def to_store(message: v2.Message, topic: str, queue_id: int, properties: dict[str, str],
             born_host: bytes) -> MessageToStore:
    born = timestamp_ms(message.system_properties.born_timestamp) or int(time.time() * 1000)
    return MessageToStore(
        topic=topic,
        queue_id=queue_id,
        body=message.body,
        properties=properties,
        born_timestamp=born,
        born_host=born_host,
    )


def message_id_of(stored: StoredMessage) -> str:
    """The producer's message id (UNIQ_KEY; a retried or dead copy keeps its origin's), else
    the record's offset id (messages from clients that set none)."""
    properties = stored.properties
    return (properties.get(mf.PROPERTY_UNIQ_KEY) or properties.get(retry.PROPERTY_ORIGIN_MESSAGE_ID)
            or offset_msg_id(stored))


def stored_message_type(properties: dict[str, str]) -> v2.MessageType:
    if properties.get(PROPERTY_TRANSACTION_PREPARED) == "true":
        return v2.TRANSACTION
    if PROPERTY_MESSAGE_GROUP in properties:
        return v2.FIFO
    if PROPERTY_TIMER_DELIVER_MS in properties:
        return v2.DELAY
    return v2.NORMAL


def to_v2(stored: StoredMessage, topic: str, receipt_handle: str = "", delivery_attempt: int = 0,
          invisible_ms: int = 0) -> v2.Message:
    """The v2 message a consumer receives (`topic` is the name it subscribed to)."""
    properties = stored.properties
    message = v2.Message(
        topic=v2.Resource(name=topic),
        body=stored.body,
        user_properties={k: v for k, v in properties.items() if k not in SYSTEM_PROPERTIES},
    )
    system = message.system_properties
    if mf.PROPERTY_TAGS in properties:
        system.tag = properties[mf.PROPERTY_TAGS]
    keys = properties.get(mf.PROPERTY_KEYS, "")
    system.keys.extend(key for key in keys.split(mf.KEY_SEPARATOR) if key)
    system.message_id = message_id_of(stored)
    system.body_digest.type = v2.MD5
    system.body_digest.checksum = hashlib.md5(stored.body).hexdigest().upper()
    system.body_encoding = v2.IDENTITY
    system.message_type = stored_message_type(properties)
    system.born_timestamp.CopyFrom(_timestamp(stored.born_timestamp))
    system.born_host = properties.get(PROPERTY_BORN_HOST) or host_string(stored.born_host).partition(":")[0]
    system.store_timestamp.CopyFrom(_timestamp(stored.store_timestamp))
    system.store_host = host_string(stored.store_host)
    if PROPERTY_TIMER_DELIVER_MS in properties:
        system.delivery_timestamp.CopyFrom(_timestamp(int(properties[PROPERTY_TIMER_DELIVER_MS])))
    if PROPERTY_MESSAGE_GROUP in properties:
        system.message_group = properties[PROPERTY_MESSAGE_GROUP]
    system.queue_id = stored.queue_id
    system.queue_offset = stored.queue_offset
    system.delivery_attempt = max(delivery_attempt, stored.reconsume_times + 1)
    if receipt_handle:
        system.receipt_handle = receipt_handle
        system.invisible_duration.FromMilliseconds(invisible_ms)
    return message
