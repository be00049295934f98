"""The broker's remoting requests (docs/remoting-protocol.md, "Request codes"): each request code is
translated into a call of the processor that serves its kind (processors/pipeline.py), so 4.x
clients go through the same processors, checks and bounds as every other protocol's (send, pull with
long polling, offsets, membership, send-back, locks); prepared sends and END_TRANSACTION go to the
broker's EndTransactionProcessor (transactions.py translates). A request is authorized against the
rmq.v1 request it stands for (remoting_acl.py; single sends, offset updates and heartbeats build it
only when an ACL is on). The answer is written back in RocketMQ's header fields and response codes.
Unknown codes are answered REQUEST_CODE_NOT_SUPPORTED. A consumer whose connection closes leaves
its groups at once (doChannelCloseEvent), and every change of a group's members is pushed to its
remoting consumers (NOTIFY_CONSUMER_IDS_CHANGED).

Bounds: a connection registers at most MAX_CLIENT_IDS_PER_CONNECTION client ids. Held pulls share
the broker's one hold table with the gRPC ports (max_held_pulls, shared fairly between accounts:
long_polling/fair_shares.py), counted against the account the dispatcher admitted the request for; a
pull past an account's share is answered SYSTEM_BUSY at once."""

from __future__ import annotations

import functools
import json
import logging
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from google.protobuf.message import Message

from rmq import message_format as mf
from rmq.broker_server.errors import TopicRouteNotFound, UnknownTransaction
from rmq.broker_server.offsets.consumer_manager import ConsumerManager
from rmq.broker_server.processors.admin_broker_processor import to_message_queues
from rmq.broker_server.processors.pipeline import BrokerProcessors
from rmq.broker_server.processors.send_message_processor import OneMessage, SendResult, born_host_from_peer
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.broker_server.remoting import headers
from rmq.broker_server.remoting.dispatch import (
    RESPONSE_CODES,
    Call,
    Refusal,
    RequestDispatcher,
    check_ok,
    refusal_of,
)
from rmq.broker_server.remoting.remoting_acl import RemotingAuthenticator
from rmq.broker_server.remoting.remoting_server import CallContext, Channel, ConnectionTable, Immediate
from rmq.broker_server.remoting.topic_route_data import BrokerData, encode_topic_route
from rmq.broker_server.remoting.transactions import (
    MAX_PRODUCER_GROUPS_PER_CONNECTION,
    RESOLUTIONS,
    ProducerChannels,
    half_message,
)
from rmq.remoting.remoting_command import LanguageCode, RemotingCommand
from rmq.remoting.request_code import RequestCode, ResponseCode
from rmq.store.commit_log import TRANSACTION_PREPARED_TYPE, TRANSACTION_TYPE_MASK
from rmq.topic_config import QueueData
from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)
MAX_CLIENT_IDS_PER_CONNECTION = 64
CONSUMER_RUNNING_INFO_TIMEOUT_S = 5.0
SYS_FLAG_COMPRESSED = 0x1  # MessageSysFlag.COMPRESSED_FLAG
METHOD = "/rmq.v1.MessagingService/"

SINGLE_SEND_CODES = frozenset({RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2})

# rmq.v1 PullStatus as the PULL_MESSAGE response code the client reads it from.
PULL_RESPONSE_CODES: dict[int, ResponseCode] = {
    rmq_pb2.FOUND: ResponseCode.SUCCESS,
    rmq_pb2.NO_NEW_MSG: ResponseCode.PULL_NOT_FOUND,
    rmq_pb2.NO_MATCHED_MSG: ResponseCode.PULL_RETRY_IMMEDIATELY,
    rmq_pb2.OFFSET_ILLEGAL: ResponseCode.PULL_OFFSET_MOVED,
}


@dataclass(frozen=True)
class BrokerIdentity:
    broker_name: str
    broker_id: int  # 0: master; a slave's route names it as a slave, so 4.x producers do not send to it
    remoting_address: str  # what route lookups on this port name as the broker's address
    cluster_name: str  # brokerClusterName, in the route


MESSAGE_INT_FIELDS = (("flag", 0), ("bornTimestamp", 0))   # a single send's, after its topic is authorized


def _send_fields(request: RemotingCommand) -> tuple[dict[str, str], int, str, int]:
    """A send's header fields (SendMessageRequestHeader's names), sysFlag, topic and queueId."""
    header = headers.send_header(request)
    return (header, headers.int_field(header, "sysFlag", 0), headers.required(header, "topic"),
            headers.int_field(header, "queueId", -1))


def _single(request: RemotingCommand, header: dict[str, str]) -> bool:
    """A send of one message (not SEND_BATCH_MESSAGE, nor a V2 send flagged as a batch)."""
    return request.code != RequestCode.SEND_BATCH_MESSAGE and header.get("batch") not in ("true", "1")


def _send_answer(request: RemotingCommand, result: SendResult) -> RemotingCommand:
    ext = {"msgId": result.msg_id, "queueId": str(result.queue_id), "queueOffset": str(result.queue_offset)}
    if result.recall_handle:   # a timer message (RocketMQ 5.3 SendMessageResponseHeader)
        ext["recallHandle"] = result.recall_handle
    return request.response(RESPONSE_CODES[result.code], result.reason or None, ext)


def reset_offset_body(language: LanguageCode, broker_name: str, topic: str, offsets: dict[int, int]) -> bytes:
    """ResetOffsetBody's offsetTable as the client decodes it: the C++ client reads a list of
    {brokerName, queueId, topic, offset}; the Java client fastjson's map keyed by the queue object
    (`{{"brokerName":…,"queueId":…,"topic":…}:offset}`, as the Java broker writes it)."""
    queues = [({"brokerName": broker_name, "queueId": queue_id, "topic": topic}, offset)
              for queue_id, offset in sorted(offsets.items())]
    if language is LanguageCode.CPP:
        return json.dumps({"offsetTable": [{**queue, "offset": offset} for queue, offset in queues]}).encode()
    entries = ",".join(f"{json.dumps(queue, separators=(',', ':'))}:{offset}" for queue, offset in queues)
    return f'{{"offsetTable":{{{entries}}}}}'.encode()


class BrokerRemotingProcessor:
    def __init__(
        self,
        identity: BrokerIdentity,
        processors: BrokerProcessors,
        topics: TopicConfigManager,
        consumers: ConsumerManager,
        authenticator: RemotingAuthenticator | None,
        max_message_size: int,
    ) -> None:
        self.identity = identity
        self.processors = processors
        self.topics = topics
        self.consumers = consumers
        self.max_message_size = max_message_size
        self.connections = ConnectionTable()
        self.transactions = processors.end_transaction
        self.producers = ProducerChannels()
        self._producer_ids: dict[Channel, set[tuple[str, str]]] = {}   # a connection's (group, client id)s
        self.transactions.add_check(self.producers)
        self.dispatcher = RequestDispatcher(
            {
                RequestCode.GET_ROUTEINFO_BY_TOPIC: self._route,
                RequestCode.HEART_BEAT: self._heartbeat,
                RequestCode.UNREGISTER_CLIENT: self._unregister,
                RequestCode.SEND_MESSAGE: self._send,
                RequestCode.SEND_MESSAGE_V2: self._send,
                RequestCode.SEND_BATCH_MESSAGE: self._send,
                RequestCode.PULL_MESSAGE: self._pull,
                RequestCode.QUERY_CONSUMER_OFFSET: self._query_offset,
                RequestCode.UPDATE_CONSUMER_OFFSET: self._update_offset,
                RequestCode.GET_MAX_OFFSET: self._max_offset,
                RequestCode.GET_MIN_OFFSET: self._min_offset,
                RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self._search_offset,
                RequestCode.GET_CONSUMER_LIST_BY_GROUP: self._consumer_list,
                RequestCode.CONSUMER_SEND_MSG_BACK: self._send_back,
                RequestCode.LOCK_BATCH_MQ: self._lock,
                RequestCode.UNLOCK_BATCH_MQ: self._unlock,
                RequestCode.CHECK_CLIENT_CONFIG: self._check_client_config,
                RequestCode.GET_CONSUMER_RUNNING_INFO: self._consumer_running_info,
                RequestCode.END_TRANSACTION: self._end_transaction,
                RequestCode.RECALL_MESSAGE: self._recall,
            },
            authenticator,
        )
        consumers.add_listener(self._consumer_ids_changed)
        processors.consumer_manage.add_reset_teller(self)

    def process(self, context: CallContext, request: RemotingCommand) -> Awaitable[RemotingCommand | None]:
        return self.dispatcher.process(context, request)   # no coroutine of its own per request

    def _authorize(self, call: Call, method: str, request: Message) -> None:
        self.dispatcher.authorize(call, METHOD + method, request)

    # -- route and membership -----------------------------------------------------------
    async def _route(self, call: Call) -> RemotingCommand:
        topic = headers.text(call.request, "topic")
        try:
            # a 4.x producer sends to a topic without a route through the default topic's route;
            # its send then creates the topic (auto_create_topic_enable)
            config = self.processors.route.own_route(topic, through_default_topic=True)
        except TopicRouteNotFound as missing:
            raise Refusal(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic} "
                f"(broker {missing.broker_name} does not hold it)",
            ) from None
        name = self.identity.broker_name
        body = encode_topic_route(
            [BrokerData(name, {self.identity.broker_id: self.identity.remoting_address},
                        self.identity.cluster_name)],
            [QueueData(name, config.read_queue_nums, config.write_queue_nums, config.perm)],
        )
        return call.request.response(ResponseCode.SUCCESS, body=body)

    async def _heartbeat(self, call: Call) -> RemotingCommand:
        data = headers.json_body(call.request)
        client_id = headers.json_text(data, "clientID")
        call.channel.language = call.request.language
        for producer in headers.json_list(data, "producerDataSet"):
            group = headers.json_text(producer, "groupName")
            self.producers.register(group, call.channel, call.access_key)
            self._producer_heartbeat(call, group, client_id)
        for consumer in headers.json_list(data, "consumerDataSet"):
            group, model = headers.json_text(consumer, "groupName"), headers.message_model(consumer)
            subscriptions = {
                headers.json_text(s, "topic"): headers.json_text(s, "subString") or "*"
                for s in headers.json_list(consumer, "subscriptionDataSet")
            }
            if self.dispatcher.authenticator is not None:
                self._authorize(call, "Heartbeat", rmq_pb2.HeartbeatRequest(
                    client_id=client_id, consumer_group=group, message_model=model, subscriptions=[
                        rmq_pb2.Subscription(topic=topic, sub_expression=expression)
                        for topic, expression in subscriptions.items()
                    ],
                ))
            self._register(call.channel, client_id, group)
            self.processors.client_manage.heartbeat(
                client_id, group, model, subscriptions, rmq_pb2.CLIENT_PROTOCOL_REMOTING, call.context.peer()
            )
        return call.request.response(ResponseCode.SUCCESS)

    def _producer_heartbeat(self, call: Call, group: str, client_id: str) -> None:
        """Into the producer table (producerConnection); the producer leaves it with its connection."""
        known = self._producer_ids.setdefault(call.channel, set())
        if (group, client_id) not in known and len(known) >= MAX_PRODUCER_GROUPS_PER_CONNECTION:
            raise Refusal(ResponseCode.SYSTEM_BUSY, f"one connection may register at most "
                                                    f"{MAX_PRODUCER_GROUPS_PER_CONNECTION} producers")
        request = call.request
        self.processors.client_manage.producer_heartbeat(group, client_id, rmq_pb2.CLIENT_PROTOCOL_REMOTING,
                                                         call.context.peer(), request.language.name,
                                                         request.version)
        if not known:
            call.channel.close_callbacks.append(self._producers_gone)
        known.add((group, client_id))

    def _producers_gone(self, channel: Channel) -> None:
        for group, client_id in self._producer_ids.pop(channel, set()):
            self.processors.client_manage.producer_left(group, client_id)

    def _register(self, channel: Channel, client_id: str, group: str) -> None:
        if client_id not in channel.client_ids and len(channel.client_ids) >= MAX_CLIENT_IDS_PER_CONNECTION:
            raise Refusal(
                ResponseCode.SYSTEM_BUSY,
                f"one connection may register at most {MAX_CLIENT_IDS_PER_CONNECTION} client ids",
            )
        if not channel.client_ids:
            channel.close_callbacks.append(self._channel_closed)
        self.connections.register(channel, client_id, group)

    def _channel_closed(self, channel: Channel) -> None:
        """A consumer's connection is gone: it leaves its groups now (doChannelCloseEvent)."""
        self.connections.forget(channel)
        for client_id, groups in channel.client_ids.items():
            if client_id not in self.connections.by_client:
                for group in groups:
                    self.consumers.unregister(client_id, group)

    async def _unregister(self, call: Call) -> RemotingCommand:
        group = headers.text(call.request, "consumerGroup", "")
        if group:
            request = rmq_pb2.UnregisterClientRequest(
                client_id=headers.text(call.request, "clientID"), consumer_group=group
            )
            self._authorize(call, "UnregisterClient", request)
            self.processors.client_manage.unregister(request.client_id, group)
        return call.request.response(ResponseCode.SUCCESS)

    def _consumer_ids_changed(self, group: str, removed: list[str]) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED to the group's remoting consumers (oneway)."""
        for client_id in self.consumers.consumer_list(group):
            channel = self.connections.by_client.get(client_id)
            if channel is not None:
                channel.send_oneway(
                    RemotingCommand(
                        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext_fields={"consumerGroup": group}
                    )
                )

    def tellable(self, group: str) -> set[str]:
        """The group's consumers connected here, which RESET_CONSUMER_CLIENT_OFFSET reaches."""
        return {client_id for client_id in self.consumers.consumer_list(group)
                if (channel := self.connections.by_client.get(client_id)) is not None and not channel.closed}

    def tell_reset(self, group: str, offsets: Mapping[tuple[str, int], int]) -> list[str]:
        """RocketMQ's Broker2Client.resetOffset: RESET_CONSUMER_CLIENT_OFFSET (oneway, as the C++
        client expects) per topic to each connected consumer of the group, with the body its
        client decodes (reset_offset_body)."""
        by_topic: dict[str, dict[int, int]] = {}
        for (topic, queue_id), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, {})[queue_id] = offset
        told = sorted(self.tellable(group))
        for client_id in told:
            channel = self.connections.by_client[client_id]
            for topic, table in by_topic.items():
                channel.send_oneway(RemotingCommand(
                    RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                    ext_fields={"topic": topic, "group": group, "timestamp": "0", "isForce": "true"},
                    body=reset_offset_body(channel.language, self.identity.broker_name, topic, table)))
        return told

    async def _consumer_list(self, call: Call) -> RemotingCommand:
        group = headers.text(call.request, "consumerGroup")
        self._authorize(call, "GetConsumerList", rmq_pb2.GetConsumerListRequest(consumer_group=group))
        client_ids = self.processors.consumer_manage.consumer_list(group)
        body = json.dumps({"consumerIdList": client_ids}).encode()
        return call.request.response(ResponseCode.SUCCESS, body=body)

    async def _consumer_running_info(self, call: Call) -> RemotingCommand:
        """Forwarded to the client, whose answer is the answer: an admin's question, or the
        account's that registered the client (the answer shows its properties, offsets, threads)."""
        group, client_id = headers.text(call.request, "consumerGroup"), headers.text(call.request, "clientId")
        self._authorize(call, "GetConsumerList", rmq_pb2.GetConsumerListRequest(consumer_group=group))
        self.dispatcher.authorize_client(call, client_id)
        self.processors.consumer_manage.check_online(group, client_id)
        channel = self.connections.by_client.get(client_id)
        if channel is None or channel.closed:
            raise Refusal(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        question = RemotingCommand(
            RequestCode.GET_CONSUMER_RUNNING_INFO, ext_fields=dict(call.request.ext_fields)
        )
        try:
            answer = await channel.invoke(question, CONSUMER_RUNNING_INFO_TIMEOUT_S)
        except TimeoutError:
            raise Refusal(ResponseCode.SYSTEM_ERROR, f"consumer {client_id} did not answer in time") from None
        return call.request.response(answer.code, answer.remark, body=answer.body)

    async def _check_client_config(self, call: Call) -> RemotingCommand:
        data = headers.json_body(call.request)
        subscription = data.get("subscriptionData") or {}
        if isinstance(subscription, dict) and subscription.get("expressionType") == "SQL92":
            self.processors.client_manage.check_sql92(headers.json_text(subscription, "subString"))
        return call.request.response(ResponseCode.SUCCESS)

    # -- sending -------------------------------------------------------------------------
    async def _send(self, call: Call) -> RemotingCommand:
        header, sys_flag, topic, queue_id = _send_fields(call.request)
        if sys_flag & TRANSACTION_TYPE_MASK:
            return await self._send_half(call, header, sys_flag, topic, queue_id)
        if _single(call.request, header):   # straight to SendMessageProcessor's single-message path
            one = self._single_message(call, header, sys_flag, topic, queue_id)
            result = await self.processors.send.send_one(one, born_host_from_peer(call.context.peer()))
            return _send_answer(call.request, result)
        messages = [
            self._message(body, properties, flag, sys_flag, queue_id)
            for body, properties, flag in headers.batch_messages(call.request.body)
        ]
        for message in messages:
            message.born_timestamp = headers.int_field(header, "bornTimestamp", 0)
        request = rmq_pb2.SendMessageRequest(topic=topic, messages=messages)
        self._authorize(call, "SendMessage", request)
        response = await self.processors.send.process(request, call.context.peer())
        if response.status.code not in (rmq_pb2.OK, rmq_pb2.FLUSH_SLAVE_TIMEOUT, rmq_pb2.SLAVE_NOT_AVAILABLE):
            raise refusal_of(response.status)
        ext = {
            "msgId": ",".join(response.msg_ids),
            "queueId": str(response.queue_ids[0]),
            "queueOffset": str(response.queue_offsets[0]),
        }
        if any(response.recall_handles):   # a timer message (RocketMQ 5.3 SendMessageResponseHeader)
            ext["recallHandle"] = ",".join(response.recall_handles)
        return call.request.response(
            RESPONSE_CODES[response.status.code], response.status.message or None, ext
        )

    def immediate(self) -> dict[int, Immediate]:
        """What answers a request on the read without a coroutine (RemotingServer's `immediate`),
        by code: a plain single-message send (SEND_MESSAGE / SEND_MESSAGE_V2) the store can take at
        once, through the dispatcher (authentication, account, refusals) and
        SendMessageProcessor.send_one_now (every check of a send); it answers None for any other
        send, which takes `process`, as every other code does."""
        answer_now = functools.partial(self.dispatcher.answer_now, handler=self._send_now)
        return dict.fromkeys(SINGLE_SEND_CODES, answer_now)

    def _send_now(self, call: Call) -> RemotingCommand | None:
        header, sys_flag, topic, queue_id = _send_fields(call.request)
        if sys_flag & TRANSACTION_TYPE_MASK or not _single(call.request, header):
            return None
        message = self._single_message(call, header, sys_flag, topic, queue_id)
        result = self.processors.send.send_one_now(message, born_host_from_peer(call.context.channel.peer))
        return None if result is None else _send_answer(call.request, result)

    def _single_message(
        self, call: Call, header: dict[str, str], sys_flag: int, topic: str, queue_id: int
    ) -> OneMessage:
        """A single send's message, its topic authorized for the call's account (when an ACL is on)."""
        if self.dispatcher.authenticator is not None:
            self._authorize(call, "SendMessage", rmq_pb2.SendMessageRequest(topic=topic))
        flag, born_timestamp = headers.int_fields(header, MESSAGE_INT_FIELDS)
        message = self._one_message(topic, call.request.body, header.get("properties", ""), flag, sys_flag,
                                    queue_id)
        message.born_timestamp = born_timestamp
        return message

    async def _send_half(
        self, call: Call, header: dict[str, str], sys_flag: int, topic: str, queue_id: int
    ) -> RemotingCommand:
        """A prepared send: stored as a half message, answered with the transaction's id."""
        if sys_flag & TRANSACTION_TYPE_MASK != TRANSACTION_PREPARED_TYPE:
            raise Refusal(ResponseCode.MESSAGE_ILLEGAL, f"sysFlag {sys_flag}: a send can only be prepared")
        if call.request.code == RequestCode.SEND_BATCH_MESSAGE or header.get("batch") in ("true", "1"):
            raise Refusal(ResponseCode.MESSAGE_ILLEGAL, "a transactional message cannot be sent in a batch")
        self._authorize(call, "SendMessage", rmq_pb2.SendMessageRequest(topic=topic))
        config = self.topics.require(topic)
        if not config.writeable:
            raise Refusal(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        message = self._message(
            call.request.body,
            header.get("properties", ""),
            headers.int_field(header, "flag", 0),
            sys_flag,
            queue_id,
        )
        message.born_timestamp = headers.int_field(header, "bornTimestamp", 0)
        real_queue = queue_id if 0 <= queue_id < config.write_queue_nums else 0
        half = half_message(
            message,
            topic,
            real_queue,
            header.get("producerGroup", ""),
            born_host_from_peer(call.context.peer()),
        )
        self.transactions.check_room()   # before the half message is stored, as a RocketMQ 5 send
        result, = await self.processors.send.put_records(half.topic, [half])   # counted where stored
        transaction_id = await self.transactions.opened(
            topic,
            half.properties.get(mf.PROPERTY_UNIQ_KEY) or result.msg_id,
            result.queue_offset,
            half.properties,
        )
        ext = {
            "msgId": result.msg_id,
            "queueId": str(real_queue),
            "queueOffset": str(result.queue_offset),
            "transactionId": transaction_id,
        }
        return call.request.response(ResponseCode.SUCCESS, ext_fields=ext)

    async def _end_transaction(self, call: Call) -> RemotingCommand:
        """COMMIT or ROLLBACK an open transaction by the id its prepared send was answered with;
        "unknown" (0) leaves it to the check."""
        resolution = RESOLUTIONS.get(headers.int_field(call.request.ext_fields, "commitOrRollback"))
        if resolution is None:
            return call.request.response(ResponseCode.SUCCESS)
        transaction_id = headers.text(call.request, "transactionId")
        try:
            transaction = self.transactions.require(transaction_id)
            self._authorize(call, "SendMessage", rmq_pb2.SendMessageRequest(topic=transaction.topic))
            await self.transactions.end(transaction_id, transaction.message_id, resolution)
        except UnknownTransaction as error:   # RocketMQ: no prepared message found
            raise Refusal(ResponseCode.SYSTEM_ERROR, error.message) from None
        return call.request.response(ResponseCode.SUCCESS)

    async def _recall(self, call: Call) -> RemotingCommand:
        """RocketMQ 5.3 RECALL_MESSAGE (RecallMessageRequestHeader: topic, recallHandle; PUB on
        the topic): cancel a pending timer message; the answer's msgId is its UNIQ_KEY."""
        request = rmq_pb2.RecallMessageRequest(topic=headers.text(call.request, "topic"),
                                               recall_handle=headers.text(call.request, "recallHandle"))
        self._authorize(call, "RecallMessage", request)
        message_id = await self.processors.recall.recall(request.topic, request.recall_handle)
        return call.request.response(ResponseCode.SUCCESS, ext_fields={"msgId": message_id})

    def _one_message(
        self, topic: str, body: bytes, properties_text: str, flag: int, sys_flag: int, queue_id: int
    ) -> OneMessage:
        properties = mf.decode_properties(properties_text)
        tags = properties.pop(mf.PROPERTY_TAGS, "")
        keys = properties.pop(mf.PROPERTY_KEYS, "")
        delay = properties.pop(mf.PROPERTY_DELAY_TIME_LEVEL, "0")
        if not delay.isdigit():
            raise Refusal(
                ResponseCode.MESSAGE_ILLEGAL, f"property DELAY must be a delay level, not {delay!r}"
            )
        if sys_flag & SYS_FLAG_COMPRESSED:
            body = self._uncompressed(body)
        return OneMessage(topic, body, tags, keys, properties, queue_id, int(delay), flag)

    def _message(
        self, body: bytes, properties_text: str, flag: int, sys_flag: int, queue_id: int
    ) -> rmq_pb2.Message:
        one = self._one_message("", body, properties_text, flag, sys_flag, queue_id)
        message = rmq_pb2.Message(
            body=one.body, tags=one.tags, keys=one.keys, properties=one.properties, flag=flag,
            delay_level=one.delay_level,
        )
        if queue_id >= 0:
            message.queue_id = queue_id
        return message

    def _uncompressed(self, body: bytes) -> bytes:
        """A compressed body (zlib, COMPRESSED_FLAG) inflated to at most max_message_size bytes:
        stored plain, so every reader sees the body the producer gave."""
        inflater = zlib.decompressobj()
        try:
            plain = inflater.decompress(body, self.max_message_size)
        except zlib.error as error:
            raise Refusal(
                ResponseCode.MESSAGE_ILLEGAL, f"the compressed body does not inflate: {error}"
            ) from None
        if inflater.unconsumed_tail:
            raise Refusal(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the compressed body inflates past {self.max_message_size} bytes (max_message_size)",
            )
        return plain

    # -- consuming -----------------------------------------------------------------------
    async def _pull(self, call: Call) -> RemotingCommand:
        request = self._pull_request(call.request)
        self._authorize(call, "PullMessage", request)
        pull = self.processors.pull
        # held in the shared table
        response = await pull.process(request, lease=pull.budget.lease(call.context))
        check_ok(response)
        ext = {
            "nextBeginOffset": str(response.next_begin_offset),
            "minOffset": str(response.min_offset),
            "maxOffset": str(response.max_offset),
            "suggestWhichBrokerId": str(response.suggest_which_broker_id),
        }
        return call.request.response(
            PULL_RESPONSE_CODES[response.pull_status], None, ext, response.messages.records
        )

    def _pull_request(self, command: RemotingCommand) -> rmq_pb2.PullMessageRequest:
        group, topic = headers.text(command, "consumerGroup"), headers.text(command, "topic")
        sys_flag = headers.int_field(command.ext_fields, "sysFlag", 0)
        expression = command.ext_fields.get("subscription", "")
        if not sys_flag & rmq_pb2.FLAG_SUBSCRIPTION or not expression:
            expression = self.consumers.subscription(group, topic) or expression or "*"
        sql = command.ext_fields.get("expressionType", "TAG") == "SQL92"
        return rmq_pb2.PullMessageRequest(
            consumer_group=group,
            topic=topic,
            queue_id=headers.int_field(command.ext_fields, "queueId"),
            queue_offset=headers.int_field(command.ext_fields, "queueOffset"),
            max_messages=headers.int_field(command.ext_fields, "maxMsgNums"),
            sys_flag=sys_flag & ~rmq_pb2.FLAG_SUBSCRIPTION,
            suspend_timeout_ms=headers.int_field(command.ext_fields, "suspendTimeoutMillis", 0),
            commit_offset=headers.int_field(command.ext_fields, "commitOffset", 0),
            sub_expression=expression,
            expression_type=rmq_pb2.SQL92 if sql else rmq_pb2.TAG,
        )

    async def _query_offset(self, call: Call) -> RemotingCommand:
        """The group's committed offset; for a group that has none, 0 when the queue still holds
        its first message (ConsumerManageProcessor#queryConsumerOffset), else QUERY_NOT_FOUND."""
        fields = call.request.ext_fields
        group, topic = headers.text(call.request, "consumerGroup"), headers.text(call.request, "topic")
        queue_id = headers.int_field(fields, "queueId")
        self._authorize(call, "QueryConsumerOffsets",
                        rmq_pb2.QueryConsumerOffsetsRequest(consumer_group=group, topic=topic))
        offset = self.processors.consumer_manage.query_offset(group, topic, queue_id)
        if offset is not None:
            return call.request.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})
        if self._queue_offset(call, topic, queue_id, self.processors.admin.min_offset) == 0:
            return call.request.response(ResponseCode.SUCCESS, ext_fields={"offset": "0"})
        return call.request.response(
            ResponseCode.QUERY_NOT_FOUND, "Not found, maybe this group consumer boot first"
        )

    async def _update_offset(self, call: Call) -> RemotingCommand:
        fields = call.request.ext_fields
        group, topic = headers.text(call.request, "consumerGroup"), headers.text(call.request, "topic")
        queue_id, offset = headers.int_field(fields, "queueId"), headers.int_field(fields, "commitOffset")
        if self.dispatcher.authenticator is not None:
            self._authorize(call, "UpdateConsumerOffsets", rmq_pb2.UpdateConsumerOffsetsRequest(
                consumer_group=group,
                offsets=[rmq_pb2.ConsumerOffset(topic=topic, queue_id=queue_id, offset=offset)],
            ))
        self.processors.consumer_manage.update_offsets(group, {(topic, queue_id): offset})
        return call.request.response(ResponseCode.SUCCESS)

    def _queue_offset(self, call: Call, topic: str, queue_id: int, which: Callable[[str, int], int]) -> int:
        self._authorize(call, "GetTopicOffsets", rmq_pb2.GetTopicOffsetsRequest(topic=topic))
        return which(topic, queue_id)

    async def _offset_answer(self, call: Call, which: Callable[[str, int], int]) -> RemotingCommand:
        topic = headers.text(call.request, "topic")
        queue_id = headers.int_field(call.request.ext_fields, "queueId")
        offset = self._queue_offset(call, topic, queue_id, which)
        return call.request.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    async def _max_offset(self, call: Call) -> RemotingCommand:
        return await self._offset_answer(call, self.processors.admin.max_offset)

    async def _min_offset(self, call: Call) -> RemotingCommand:
        return await self._offset_answer(call, self.processors.admin.min_offset)

    async def _search_offset(self, call: Call) -> RemotingCommand:
        fields = call.request.ext_fields
        request = rmq_pb2.SearchOffsetRequest(
            topic=headers.text(call.request, "topic"),
            queue_id=headers.int_field(fields, "queueId"),
            timestamp=headers.int_field(fields, "timestamp"),
        )
        self._authorize(call, "SearchOffset", request)
        offset = await self.processors.admin.search_offset(request.topic, request.queue_id, request.timestamp)
        return call.request.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    async def _send_back(self, call: Call) -> RemotingCommand:
        fields = call.request.ext_fields
        request = rmq_pb2.ConsumerSendMsgBackRequest(
            consumer_group=headers.text(call.request, "group"),
            commit_log_offset=headers.int_field(fields, "offset"),
            delay_level=headers.int_field(fields, "delayLevel", 0),
            origin_msg_id=fields.get("originMsgId", ""),
            origin_topic=fields.get("originTopic", ""),
        )
        if "maxReconsumeTimes" in fields:
            request.max_reconsume_times = headers.int_field(fields, "maxReconsumeTimes")
        self._authorize(call, "ConsumerSendMsgBack", request)
        check_ok(await self.processors.send_back.process(request))
        return call.request.response(ResponseCode.SUCCESS)

    async def _lock(self, call: Call) -> RemotingCommand:
        group, client_id, queues = headers.lock_body(call.request)
        request = rmq_pb2.LockBatchRequest(consumer_group=group, client_id=client_id, queues=queues)
        self._authorize(call, "LockBatchMQ", request)
        locked = [
            {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}
            for mq in self.processors.admin.lock_batch(group, client_id, to_message_queues(queues))
        ]
        return call.request.response(ResponseCode.SUCCESS, body=json.dumps({"lockOKMQSet": locked}).encode())

    async def _unlock(self, call: Call) -> RemotingCommand:
        group, client_id, queues = headers.lock_body(call.request)
        request = rmq_pb2.UnlockBatchRequest(consumer_group=group, client_id=client_id, queues=queues)
        self._authorize(call, "UnlockBatchMQ", request)
        self.processors.admin.unlock_batch(group, client_id, to_message_queues(queues))
        return call.request.response(ResponseCode.SUCCESS)
