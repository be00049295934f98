"""The client API (RocketMQ's MQClientAPIImpl): every call the SDK makes of brokers and name
servers, over gRPC channels cached per address and, for a single-message send and the
consumers' long-polling pulls, the member's remoting port (remoting_client). Where a call goes
is decided by the route cache (route_cache.RouteCache); the admin calls are RmqClient's
(client.py), which adds them to this.

Business outcomes arrive as a `Status` in each response and become `RmqRefused`; transport
failures (broker down, deadline exceeded) become `RmqUnavailable`, which callers retry with
backoff. Pulled messages are returned packed (`rmq.v1.PackedMessages`); decode them with
`rmq.connector.message.decode_messages`.
"""

from __future__ import annotations

import functools
import threading
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, Self, TypeVar

import grpc
from google.protobuf.message import Message

from rmq.auth import Credentials, TlsSettings, open_channel
from rmq.connector.endpoints import parse_endpoints
from rmq.connector.errors import ConfigError, RmqError, RmqRefused, RmqUnavailable, config_errors
from rmq.connector.pull_result import PullResult, pull_result
from rmq.connector.remoting_client import (
    ConnectionBusy,
    PortUnreachable,
    PullSpec,
    RemotingCall,
    RemotingClient,
    RemotingTarget,
    RequestCancelled,
)
from rmq.connector.route_cache import BrokerMember, RouteCache, TopicRoute, group_members
from rmq.connector.tls_probe import speaks_tls
from rmq.message_queue import MessageQueue
from rmq.request_signing import broker_server_id
from rmq.statuses import SendStatus
from rmq.subscription import MessageSelector
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

MAX_GRPC_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_SEND_REQUEST_BYTES = 4 * 1024 * 1024      # one SendMessage request stays under this
# gRPC waits up to 120 s between reconnect attempts to a server that was down; a broker back
# after a restart is reached again within this (the Spark source retries for 2 min).
MAX_RECONNECT_BACKOFF_MS = 2000
# A send refused so: the route may have changed (a topic moved, a master replaced by the
# controller that now refuses writes as a slave): the next send asks the name servers again.
ROUTE_CHANGED = (rmq_pb2.TOPIC_NOT_EXIST, rmq_pb2.SERVICE_NOT_AVAILABLE)
_MESSAGE_FRAMING_BYTES = 6                    # field tag + length prefix of one repeated Message
_COLUMN_FRAMING_BYTES = 16                    # a body length, tag and key prefixes in MessageColumns


_UNAVAILABLE_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
# SYNC_MASTER: stored on the master, no slave confirmed it (docs/replication.md); the send succeeded
TLS_ONLY_HINT = "Socket closed"   # what grpc reports when a TLS-only server drops a plaintext connection
STORED_ON_MASTER_ONLY = (rmq_pb2.FLUSH_SLAVE_TIMEOUT, rmq_pb2.SLAVE_NOT_AVAILABLE)


# ---------------------------------------------------------------- records


@dataclass(slots=True)
class OutgoingMessage:
    body: bytes
    tags: str = ""
    keys: str = ""                            # space-separated, as RocketMQ KEYS
    properties: Mapping[str, str] = field(default_factory=dict)
    queue_id: int | None = None               # None: the broker picks a queue round-robin
    delay_level: int = 0
    flag: int = 0                             # RocketMQ Message.flag, the application's

    def is_plain(self) -> bool:
        """Only a body, tags and keys: such messages travel as MessageColumns."""
        return not self.properties and self.queue_id is None and not self.delay_level and not self.flag

    def to_proto(self) -> rmq_pb2.Message:
        message = rmq_pb2.Message(body=self.body, tags=self.tags, keys=self.keys,
                                  properties=self.properties, delay_level=self.delay_level, flag=self.flag)
        if self.queue_id is not None:
            message.queue_id = self.queue_id
        return message

    @classmethod
    def from_proto(cls, message: rmq_pb2.Message) -> OutgoingMessage:
        return cls(message.body, message.tags, message.keys, dict(message.properties),
                   message.queue_id if message.HasField("queue_id") else None, message.delay_level,
                   message.flag)


@dataclass(slots=True)   # not frozen: a frozen init costs a setattr call per field
class OneMessage:
    """A single message on the latency path: it goes over the remoting port as it is, and
    becomes a SendMessageRequest only when gRPC carries it (building the protobuf is a fifth of
    the send's Python: bench/NOTES.md, issue 29 items 1 and 2, fourth pass)."""

    topic: str
    message: OutgoingMessage

    @classmethod
    def of(cls, request: rmq_pb2.SendMessageRequest) -> OneMessage | None:
        """The request's message when it holds exactly one (not as columns), else None."""
        if len(request.messages) != 1:
            return None
        return cls(request.topic, OutgoingMessage.from_proto(request.messages[0]))

    def to_request(self) -> rmq_pb2.SendMessageRequest:
        return rmq_pb2.SendMessageRequest(topic=self.topic, messages=[self.message.to_proto()])


@dataclass(frozen=True)
class SendResult:
    msg_ids: list[str]
    queue_ids: list[int]
    queue_offsets: list[int]
    broker_name: str
    status: SendStatus = SendStatus.SEND_OK   # FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE: on the master only
    recall_handles: list[str] = field(default_factory=list)   # per message: a timer message's, else ""


@dataclass(frozen=True)
class QueueOffsets:
    min_offset: int
    max_offset: int
    last_store_timestamp: int                 # epoch ms of the newest message, 0 when empty


# ---------------------------------------------------------------- client


@dataclass
class _Connection:
    channel: grpc.Channel
    messaging: rmq_pb2_grpc.MessagingServiceStub
    admin: rmq_pb2_grpc.AdminServiceStub
    route: rmq_pb2_grpc.RouteServiceStub


ResponseT = TypeVar("ResponseT", bound=Message)
AnswerT = TypeVar("AnswerT")


@dataclass(frozen=True)
class _Rpc(Generic[ResponseT]):
    """One unary method of the rmq.v1 contract as the client calls it: its name (for error
    messages), its stub method on a connection and the response it answers with."""

    name: str
    method: Callable[[_Connection], Callable[..., Any]]
    response: type[ResponseT]

    def invoke(self, connection: _Connection, request: Message, timeout: float) -> ResponseT:
        response: ResponseT = self.method(connection)(request, timeout=timeout)
        return response


_CONSUMER_SEND_MSG_BACK = _Rpc("ConsumerSendMsgBack", lambda c: c.messaging.ConsumerSendMsgBack,
                               rmq_pb2.ConsumerSendMsgBackResponse)
_GET_CONSUMER_LIST = _Rpc("GetConsumerList", lambda c: c.messaging.GetConsumerList,
                          rmq_pb2.GetConsumerListResponse)
_GET_TOPIC_OFFSETS = _Rpc("GetTopicOffsets", lambda c: c.messaging.GetTopicOffsets,
                          rmq_pb2.GetTopicOffsetsResponse)
_HEARTBEAT = _Rpc("Heartbeat", lambda c: c.messaging.Heartbeat, rmq_pb2.HeartbeatResponse)
_LIST_BROKERS = _Rpc("ListBrokers", lambda c: c.route.ListBrokers, rmq_pb2.ListBrokersResponse)
_LOCK_BATCH_MQ = _Rpc("LockBatchMQ", lambda c: c.messaging.LockBatchMQ, rmq_pb2.LockBatchResponse)
_PULL_MESSAGE = _Rpc("PullMessage", lambda c: c.messaging.PullMessage, rmq_pb2.PullMessageResponse)
_QUERY_CONSUMER_OFFSETS = _Rpc("QueryConsumerOffsets", lambda c: c.messaging.QueryConsumerOffsets,
                               rmq_pb2.QueryConsumerOffsetsResponse)
_QUERY_ROUTE = _Rpc("QueryRoute", lambda c: c.route.QueryRoute, rmq_pb2.QueryRouteResponse)
_REMOVE_CONSUMER_OFFSETS = _Rpc("RemoveConsumerOffsets", lambda c: c.messaging.RemoveConsumerOffsets,
                                rmq_pb2.RemoveConsumerOffsetsResponse)
_SEARCH_OFFSET = _Rpc("SearchOffset", lambda c: c.messaging.SearchOffset, rmq_pb2.SearchOffsetResponse)
_SEND_MESSAGE = _Rpc("SendMessage", lambda c: c.messaging.SendMessage, rmq_pb2.SendMessageResponse)
_UNLOCK_BATCH_MQ = _Rpc("UnlockBatchMQ", lambda c: c.messaging.UnlockBatchMQ, rmq_pb2.UnlockBatchResponse)
_UNREGISTER_CLIENT = _Rpc("UnregisterClient", lambda c: c.messaging.UnregisterClient,
                          rmq_pb2.UnregisterClientResponse)
_UPDATE_CONSUMER_OFFSETS = _Rpc("UpdateConsumerOffsets", lambda c: c.messaging.UpdateConsumerOffsets,
                                rmq_pb2.UpdateConsumerOffsetsResponse)


class ClientAPI:
    """Client for the brokers and name servers named by `endpoints` ("host:port[,host:port]").

    Every call carries a deadline (`timeout` seconds, plus the hold time for long polling).
    Thread-safe: channels are cached per address and shared. With `access_key`/`secret_key`
    every call is signed; with `tls` (or a `tls_ca_file`) channels use TLS (ARCHITECTURE §5).
    """

    def __init__(self, endpoints: str | Sequence[str], timeout: float = 10.0,
                 max_request_bytes: int = MAX_SEND_REQUEST_BYTES, *, access_key: str | None = None,
                 secret_key: str | None = None, tls: bool = False, tls_ca_file: str | None = None,
                 tls_cert_file: str | None = None, tls_key_file: str | None = None) -> None:
        text = endpoints if isinstance(endpoints, str) else ",".join(endpoints)
        self.endpoints = parse_endpoints(text)
        if timeout <= 0:
            raise ConfigError(f"timeout must be positive, got {timeout}")
        self.timeout = timeout
        self.max_request_bytes = max_request_bytes
        tls_files = (tls_ca_file, tls_cert_file, tls_key_file)   # a client certificate for mutual TLS
        use_tls = tls or any(tls_files)
        with config_errors():   # ConfigError naming the missing key or the unreadable file
            self._credentials = Credentials.optional(access_key, secret_key)
            self._tls = TlsSettings(*(Path(f) if f else None for f in tls_files)) if use_tls else None
            if self._tls is not None:
                self._tls.channel_credentials()
        self._lock = threading.Lock()
        self._connections: dict[str, _Connection] = {}
        self.routes = RouteCache()
        self._remoting = RemotingClient(self._credentials, self._tls, timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, {}
        for connection in connections.values():
            connection.channel.close()
        self._remoting.close()

    # ------------------------------------------------------------ routes and topics

    def query_route(self, topic: str) -> TopicRoute:
        """The topic's route from the first endpoint that knows it (name server or broker)."""
        response = self._ask_endpoints(_QUERY_ROUTE, rmq_pb2.QueryRouteRequest(topic=topic),
                                       try_next_on=(rmq_pb2.TOPIC_NOT_EXIST,))
        route = TopicRoute.from_proto(topic, response)
        self.routes.store(route)
        return route

    def route(self, topic: str) -> TopicRoute:
        """The topic's route, cached for ROUTE_CACHE_SECONDS (dropped when a send to it fails)."""
        return self._route(topic)

    def list_brokers(self) -> dict[str, str]:
        """Every broker known to the endpoints: name -> address, sorted by name."""
        brokers: dict[str, str] = {}
        members: dict[str, tuple[BrokerMember, ...]] = {}
        for response in self._ask_all_endpoints(_LIST_BROKERS, rmq_pb2.ListBrokersRequest()):
            brokers.update((b.broker_name, b.address) for b in response.brokers)
            members.update((b.broker_name, group_members(b)) for b in response.brokers)
        self.routes.learn(brokers, members)
        return dict(sorted(brokers.items()))

    def list_broker_groups(self) -> dict[str, tuple[BrokerMember, ...]]:
        """Every broker group the endpoints know: name -> its live members by id, sorted by name."""
        return self.routes.groups(list(self.list_brokers()))

    # ------------------------------------------------------------ sending

    def send(self, topic: str, messages: Sequence[OutgoingMessage],
             broker_name: str | None = None) -> SendResult:
        """Send to one broker (round-robin over the topic's writable brokers unless named),
        in as many requests as the size limit needs. A failing request raises RmqError whose
        `acknowledged` counts the messages of earlier requests that were stored. A SYNC_MASTER
        that stored a request without a slave confirming it answers FLUSH_SLAVE_TIMEOUT or
        SLAVE_NOT_AVAILABLE: the send succeeds and `status` says "stored on the master only", and the
        next send asks the name servers for the route again (the group may have a new master)."""
        requests: Iterable[rmq_pb2.SendMessageRequest | OneMessage]
        if len(messages) == 1:    # the latency path: over the remoting port where the broker serves it
            requests = [OneMessage(topic, messages[0])]
        elif all(map(OutgoingMessage.is_plain, messages)):
            requests = self.column_requests(
                topic, [m.body for m in messages], [m.tags for m in messages], [m.keys for m in messages])
        else:
            requests = (rmq_pb2.SendMessageRequest(topic=topic, messages=chunk)
                        for chunk in _chunks([m.to_proto() for m in messages], self.max_request_bytes))
        return self.send_requests(topic, requests, broker_name)

    def column_requests(self, topic: str, bodies: list[bytes], tags: list[str], keys: list[str]
                        ) -> list[rmq_pb2.SendMessageRequest]:
        """Plain messages (a body, tags and keys each) encoded as MessageColumns requests, as
        many as the request size limit needs: to send (again) with send_requests."""
        return list(_column_requests(topic, bodies, tags, keys, self.max_request_bytes))

    def send_requests(self, topic: str, requests: Iterable[rmq_pb2.SendMessageRequest | OneMessage],
                      broker_name: str | None = None) -> SendResult:
        """`send` of messages already encoded (column_requests): the same answers and errors."""
        name = broker_name or self._pick_broker(topic)
        address = self._broker_address(name)
        result = SendResult([], [], [], name)
        status = rmq_pb2.OK
        for request in requests:
            try:
                response = self._send_request(name, address, request)
            except RmqError as error:
                error.acknowledged = len(result.msg_ids)
                if isinstance(error, RmqUnavailable) or error.code in ROUTE_CHANGED:
                    self.routes.forget(topic)
                raise
            result.msg_ids.extend(response.msg_ids)
            result.queue_ids.extend(response.queue_ids)
            result.queue_offsets.extend(response.queue_offsets)
            result.recall_handles.extend(response.recall_handles or [""] * len(response.msg_ids))
            status = status or response.status.code
        if status in STORED_ON_MASTER_ONLY:   # perhaps a deposed master: the next send asks for the route
            self.routes.forget(topic)
        return replace(result, status=SendStatus(status)) if status else result

    def _send_request(self, name: str, address: str, request: rmq_pb2.SendMessageRequest | OneMessage
                      ) -> rmq_pb2.SendMessageResponse:
        """One SendMessage: a single message over the member's remoting port when it has one."""
        one = request if isinstance(request, OneMessage) else OneMessage.of(request)
        if one is not None:
            remoting = functools.partial(self._remoting.send, topic=one.topic, message=one.message,
                                         timeout=self.timeout)
            response = self._over_remoting(name, address, remoting)
            if response is not None:
                return _checked(response, "SendMessage", f"{name} at {address}", None, STORED_ON_MASTER_ONLY)
        if isinstance(request, OneMessage):
            request = request.to_request()
        return self._call(address, _SEND_MESSAGE, request, name, ok_codes=STORED_ON_MASTER_ONLY)

    def send_async(self, topic: str, message: OutgoingMessage, broker_name: str,
                   done: Callable[[SendResult | None, RmqError | None], None]) -> None:
        """`send` of one message to `broker_name` without blocking (RocketMQ's sendAsync):
        `done(result, None)` or `done(None, error)` runs once on a client thread when the answer
        arrives. Over the member's remoting port when it serves one, else a gRPC future. An
        unknown broker raises RmqUnavailable at once."""
        address = self._broker_address(broker_name)
        label = f"{broker_name} at {address}"

        def answered(response: rmq_pb2.SendMessageResponse | None, failure: RmqError | None) -> None:
            if response is not None:
                try:
                    response = _checked(response, "SendMessage", label, None, STORED_ON_MASTER_ONLY)
                except RmqRefused as error:
                    failure = error
            if failure is not None:
                if isinstance(failure, RmqUnavailable) or failure.code in ROUTE_CHANGED:
                    self.routes.forget(topic)
                done(None, failure)
                return
            assert response is not None
            if response.status.code in STORED_ON_MASTER_ONLY:   # as for send_requests
                self.routes.forget(topic)
            done(SendResult(list(response.msg_ids), list(response.queue_ids), list(response.queue_offsets),
                            broker_name, SendStatus(response.status.code)), None)

        remoting = functools.partial(self._remoting.send_async, topic=topic, message=message,
                                     timeout=self.timeout, done=answered)
        if self._over_remoting(broker_name, address, remoting):
            return
        call = self._connection(address).messaging.SendMessage.future(
            OneMessage(topic, message).to_request(), timeout=self.timeout)
        _when_answered(call, "SendMessage", label, None, answered)

    def _over_remoting(self, broker_name: str, address: str, call: Callable[[RemotingTarget], AnswerT]
                       ) -> AnswerT | None:
        """`call` on the remoting port of the member at `address` (docs/client-behaviour.md
        "Transport"); None when the member serves none or it cannot be reached (then gRPC is
        used for it for REMOTING_DOWN_SECONDS)."""
        member = self.routes.remoting_member(broker_name, address)
        if member is None:
            return None
        target = RemotingTarget(member.remoting_address, broker_server_id(broker_name, member.broker_id),
                                f"{broker_name} at {member.remoting_address}")
        try:
            return call(target)
        except ConnectionBusy:
            return None
        except PortUnreachable:
            self.routes.mark_remoting_down(member.remoting_address)
            return None

    def _pick_broker(self, topic: str) -> str:
        writable = self._route(topic).writable_brokers()
        if not writable:
            raise RmqRefused(rmq_pb2.NO_PERMISSION, f"topic {topic} has no writable queue")
        return self.routes.next_broker(writable)

    # ------------------------------------------------------------ pulling and offsets

    def pull(self, mq: MessageQueue, offset: int, max_messages: int, *, group: str,
             sub_expression: str | MessageSelector = "*", suspend_timeout_ms: int = 0,
             commit_offset: int | None = None, max_bytes: int = 0, timeout: float | None = None
             ) -> PullResult:
        """One PullMessage. With `suspend_timeout_ms` > 0 the broker holds the request until a
        message arrives or the time runs out (long polling); the deadline adds that hold time
        to `timeout`. `sub_expression`: tags (`TagA || TagB`) or a MessageSelector (by_sql: the
        broker filters on properties). The messages stay packed: decode them with
        message_decoder.decode."""
        request, deadline = self._pull_request(mq, offset, max_messages, group, sub_expression,
                                                suspend_timeout_ms, commit_offset, max_bytes, timeout)
        response = self._read_call(mq.broker_name, _PULL_MESSAGE, request, queue=mq, timeout=deadline)
        self.routes.record_suggestion(mq, response.suggest_which_broker_id)
        return pull_result(response)

    def pull_async(self, mq: MessageQueue, offset: int, max_messages: int, *, group: str,
                   callback: Callable[[PullResult | None, RmqError | None], None],
                   sub_expression: str | MessageSelector = "*", suspend_timeout_ms: int = 0,
                   commit_offset: int | None = None
                   ) -> grpc.Future[rmq_pb2.PullMessageResponse] | RemotingCall:
        """`pull` without blocking (RocketMQ's async pull): `callback(result, None)` or
        `callback(None, error)` runs on a client thread when the answer arrives. An unknown
        broker raises RmqUnavailable at once. The returned call's `cancel()` ends the pull
        (the broker lets a held one go; the callback gets RmqUnavailable "... cancelled").
        Over the member's remoting port when it serves one (docs/client-behaviour.md "Transport")."""
        pull = PullSpec.of(mq, offset, max_messages, group, sub_expression, suspend_timeout_ms, commit_offset)
        deadline = self._pull_deadline(None, suspend_timeout_ms)
        address = self._read_address(mq.broker_name, mq)
        label = f"{mq.broker_name} at {address}"

        def answered(result: PullResult | rmq_pb2.Status | None, failure: RmqError | None) -> None:
            if isinstance(failure, RequestCancelled):
                callback(None, RmqUnavailable("PullMessage cancelled", broker=label, queue=mq))
                return
            if isinstance(failure, RmqUnavailable):
                self.routes.mark_down(address)    # the next pull goes to another member of the group
                located = failure.broker is not None
                callback(None, failure if located else RmqUnavailable(f"PullMessage: {failure.message}",
                                                                       broker=label, queue=mq))
                return
            if failure is not None:
                callback(None, failure)
                return
            assert result is not None
            if isinstance(result, rmq_pb2.Status):
                callback(None, RmqRefused(result.code, result.message or "PullMessage refused", broker=label,
                                          queue=mq))
                return
            self.routes.record_suggestion(mq, result.suggest_which_broker_id)
            callback(result, None)

        remoting = functools.partial(self._remoting.pull_async, pull=pull, timeout=deadline, done=answered)
        pulling = self._over_remoting(mq.broker_name, address, remoting)
        if pulling is not None:
            return pulling
        future = self._connection(address).messaging.PullMessage.future(pull.to_request(), timeout=deadline)

        def grpc_answered(response: rmq_pb2.PullMessageResponse | None, failure: RmqError | None) -> None:
            if response is None:
                answered(None, failure)
            elif response.status.code != rmq_pb2.OK:
                answered(response.status, None)
            else:
                answered(pull_result(response), None)

        _when_answered(future, "PullMessage", label, mq, grpc_answered)
        return future

    # ------------------------------------------------------------ the Flight data plane (docs/data-plane.md)

    def read_member(self, mq: MessageQueue, refresh: bool = False) -> BrokerMember | None:
        """The member a pull of `mq` would go to (its flight_address: its data plane), None when
        the route lists no members. `refresh`: ask the endpoints for the members first (a
        restarted broker serves Flight on a new port)."""
        if refresh:
            self.list_brokers()
        address = self._read_address(mq.broker_name, mq)
        return next((m for m in self.routes.members(mq.broker_name) if m.address == address), None)

    def mark_down(self, member: BrokerMember) -> None:
        """Pass `member` over for reads for a while: it did not answer (a slave serves meanwhile)."""
        self.routes.mark_down(member.address)

    def flight_ticket(self, mq: MessageQueue, start: int, end: int, *, group: str, max_rows: int,
                      batch_rows: int, batch_bytes: int = 0, sub_expression: str | MessageSelector = "*",
                      packed: bool = False, columns: Sequence[str] = ()) -> rmq_pb2.FlightReadTicket:
        """A read of `mq`'s offsets [start, end), at most `max_rows` rows, in batches of at most
        `batch_rows` rows and `batch_bytes` record bytes (0: the broker's default) of the source
        schema's `columns` (empty: all); `packed`: the stored records in each batch's metadata
        instead of rows (docs/data-plane.md)."""
        pull, _ = self._pull_request(mq, start, batch_rows, group, sub_expression, 0, None, batch_bytes, None)
        return rmq_pb2.FlightReadTicket(pull=pull, end_offset=end, max_rows=max_rows, packed=packed,
                                        columns=columns)

    @property
    def credentials(self) -> Credentials | None:
        return self._credentials

    @property
    def tls(self) -> TlsSettings | None:
        return self._tls

    def _pull_request(self, mq: MessageQueue, offset: int, max_messages: int, group: str,
                      sub_expression: str | MessageSelector,
                      suspend_timeout_ms: int, commit_offset: int | None, max_bytes: int,
                      timeout: float | None) -> tuple[rmq_pb2.PullMessageRequest, float]:
        """The request (PullSysFlag.buildSysFlag, spec pull §10.3) and its deadline."""
        pull = PullSpec.of(mq, offset, max_messages, group, sub_expression, suspend_timeout_ms, commit_offset)
        return pull.to_request(max_bytes), self._pull_deadline(timeout, suspend_timeout_ms)

    def _pull_deadline(self, timeout: float | None, suspend_timeout_ms: int) -> float:
        """A pull's deadline: the call's timeout plus the time the broker may hold it."""
        return (timeout or self.timeout) + max(suspend_timeout_ms, 0) / 1000.0

    def topic_offsets(self, topic: str, unreachable: dict[str, RmqUnavailable] | None = None,
                      brokers: Collection[str] | None = None) -> dict[MessageQueue, QueueOffsets]:
        """Min/max offset and last store time of every queue of the topic (on `brokers` only,
        when given), sorted by queue. With `unreachable`, a broker that cannot be reached (killed,
        not yet evicted by the name server) is recorded there by name and skipped: the live
        brokers' queues are answered."""
        offsets: dict[MessageQueue, QueueOffsets] = {}
        for name in self._route(topic).brokers:
            if brokers is not None and name not in brokers:
                continue
            read = functools.partial(self._broker_topic_offsets, topic, name)
            offsets.update(unless_unreachable(read, name, unreachable) or {})
        return dict(sorted(offsets.items()))

    def queue_offsets(self, mq: MessageQueue) -> QueueOffsets:
        """Min/max offset and last store time of one queue, from its broker only (the topic's
        other brokers may be down)."""
        offsets = self._broker_topic_offsets(mq.topic, mq.broker_name).get(mq)
        if offsets is None:
            raise RmqRefused(rmq_pb2.TOPIC_NOT_EXIST, f"broker {mq.broker_name} holds no queue {mq.queue_id} "
                             f"of topic {mq.topic}", broker=mq.broker_name, queue=mq)
        return offsets

    def _broker_topic_offsets(self, topic: str, broker_name: str) -> dict[MessageQueue, QueueOffsets]:
        request = rmq_pb2.GetTopicOffsetsRequest(topic=topic)
        response = self._topic_call(topic, broker_name, _GET_TOPIC_OFFSETS, request)
        return {MessageQueue(topic, broker_name, q.queue_id): QueueOffsets(q.min_offset, q.max_offset,
                                                                            q.last_store_timestamp)
                for q in response.queues}

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """Earliest offset stored at or after `timestamp_ms` (max offset when all are older)."""
        request = rmq_pb2.SearchOffsetRequest(topic=mq.topic, queue_id=mq.queue_id, timestamp=timestamp_ms)
        return self._read_call(mq.broker_name, _SEARCH_OFFSET, request, queue=mq).offset

    def query_consumer_offsets(self, group: str, topic: str = "",
                               unreachable: dict[str, RmqUnavailable] | None = None,
                               broker_name: str | None = None) -> dict[MessageQueue, int]:
        """The group's committed offsets (of one topic, or of all), sorted by queue; `unreachable`
        as for topic_offsets. With `broker_name`, only that broker is asked (fetchConsumeOffsetFromBroker)."""
        if broker_name:
            brokers: Iterable[str] = [broker_name]
        else:
            brokers = self._route(topic).brokers if topic else self.list_brokers()
        request = rmq_pb2.QueryConsumerOffsetsRequest(consumer_group=group, topic=topic)
        offsets: dict[MessageQueue, int] = {}
        for name in brokers:
            read = functools.partial(self._read_call, name, _QUERY_CONSUMER_OFFSETS, request,
                                     ok_codes=(rmq_pb2.QUERY_NOT_FOUND,))
            response = unless_unreachable(read, name, unreachable)
            if response is None:
                continue
            offsets.update((MessageQueue(o.topic, name, o.queue_id), o.offset) for o in response.offsets)
        return dict(sorted(offsets.items()))

    def update_consumer_offsets(self, group: str, offsets: Mapping[MessageQueue, int],
                                increase_only: bool = False,
                                unreachable: dict[str, RmqUnavailable] | None = None) -> None:
        """Write the offsets to their brokers, each broker even when another fails (then the
        first failure is raised); with `unreachable`, an unreachable broker is recorded there
        instead (its offsets not written), as for topic_offsets."""
        grouped = _by_broker(offsets)

        def update(name: str) -> None:
            request = rmq_pb2.UpdateConsumerOffsetsRequest(
                consumer_group=group, increase_only=increase_only,
                offsets=[rmq_pb2.ConsumerOffset(topic=mq.topic, queue_id=mq.queue_id, offset=offsets[mq])
                         for mq in grouped[name]])
            # to the member the group reads from
            write = functools.partial(self._read_call, name, _UPDATE_CONSUMER_OFFSETS, request)
            unless_unreachable(write, name, unreachable)

        _call_each(grouped, update)

    def remove_consumer_offsets(self, group: str, mqs: Iterable[MessageQueue]) -> None:
        for name, queues in _by_broker(mqs).items():
            request = rmq_pb2.RemoveConsumerOffsetsRequest(
                consumer_group=group,
                offsets=[rmq_pb2.ConsumerOffset(topic=mq.topic, queue_id=mq.queue_id) for mq in queues])
            self._call(self._broker_address(name), _REMOVE_CONSUMER_OFFSETS, request, name)

    # ------------------------------------------------------------ membership and locks

    def heartbeat(self, client_id: str, group: str, subscriptions: Mapping[str, str],
                  broadcasting: bool = False, unreachable: dict[str, RmqUnavailable] | None = None) -> None:
        """Heartbeat to every member of every broker group (RocketMQ sendHeartbeatToAllBroker);
        `unreachable` as for topic_offsets."""
        request = rmq_pb2.HeartbeatRequest(
            client_id=client_id, consumer_group=group,
            message_model=rmq_pb2.BROADCASTING if broadcasting else rmq_pb2.CLUSTERING,
            subscriptions=[rmq_pb2.Subscription(topic=t, sub_expression=s) for t, s in subscriptions.items()])
        self._on_each_member(lambda name, address: self._call(address, _HEARTBEAT, request, name),
                             unreachable)

    def unregister(self, client_id: str, group: str) -> None:
        request = rmq_pb2.UnregisterClientRequest(client_id=client_id, consumer_group=group)
        self._on_each_member(lambda name, address: self._call(address, _UNREGISTER_CLIENT, request, name))

    def consumer_list(self, group: str, topic: str) -> list[str]:
        """The group's live client ids, sorted, from the first reachable broker holding the topic."""
        request = rmq_pb2.GetConsumerListRequest(consumer_group=group)
        unavailable: RmqUnavailable | None = None
        for name in self._route(topic).brokers:
            try:
                return sorted(self._read_call(name, _GET_CONSUMER_LIST, request).client_ids)
            except RmqUnavailable as error:
                unavailable = error
        raise unavailable or RmqRefused(rmq_pb2.TOPIC_NOT_EXIST, f"no broker holds topic {topic}")

    def lock_batch(self, group: str, client_id: str, mqs: Iterable[MessageQueue],
                   unreachable: set[str] | None = None) -> set[MessageQueue]:
        """Lock the queues on their brokers; returns those locked for `client_id`. Queues of
        an unreachable broker are simply not locked (RocketMQ lockAll carries on); that
        broker's name is added to `unreachable` when given, so a caller can tell "refused"
        from "not asked"."""
        locked: set[MessageQueue] = set()
        for name, queues in _by_broker(mqs).items():
            request = rmq_pb2.LockBatchRequest(consumer_group=group, client_id=client_id,
                                               queues=[_mq_proto(mq) for mq in queues])
            try:
                response = self._call(self._broker_address(name), _LOCK_BATCH_MQ, request, name)
            except RmqUnavailable:
                if unreachable is not None:
                    unreachable.add(name)
                continue
            locked.update(MessageQueue(q.topic, q.broker_name, q.queue_id) for q in response.locked_queues)
        return locked

    def unlock_batch(self, group: str, client_id: str, mqs: Iterable[MessageQueue]) -> None:
        grouped = _by_broker(mqs)
        self._on_each_broker(
            {name: self._broker_address(name) for name in grouped},
            lambda name, address: self._call(
                address, _UNLOCK_BATCH_MQ,
                rmq_pb2.UnlockBatchRequest(consumer_group=group, client_id=client_id,
                                           queues=[_mq_proto(mq) for mq in grouped[name]]),
                name))

    # ------------------------------------------------------------ retry and dead letters

    def send_message_back(self, group: str, broker_name: str, commit_log_offset: int, *, delay_level: int = 0,
                          origin_msg_id: str = "", origin_topic: str = "",
                          max_reconsume_times: int | None = None) -> rmq_pb2.ConsumerSendMsgBackResponse:
        """CONSUMER_SEND_MSG_BACK to the broker that stores the message (spec pull §18)."""
        request = rmq_pb2.ConsumerSendMsgBackRequest(
            consumer_group=group, commit_log_offset=commit_log_offset, delay_level=delay_level,
            origin_msg_id=origin_msg_id, origin_topic=origin_topic, max_reconsume_times=max_reconsume_times)
        return self._call(self._broker_address(broker_name), _CONSUMER_SEND_MSG_BACK, request,
                          broker_name)

    def watch_consumer_ids(self, broker_name: str, group: str, client_id: str
                           ) -> Iterator[rmq_pb2.ConsumerIdsChanged]:
        """The broker's membership push: the group's client ids now and after each change.
        The returned stream is also a grpc.Call: `cancel()` ends it (and, on the broker,
        unregisters the client). Iteration raises grpc.RpcError when the stream breaks."""
        request = rmq_pb2.WatchConsumerIdsRequest(consumer_group=group, client_id=client_id)
        stream: Iterator[rmq_pb2.ConsumerIdsChanged] = self._connection(
            self._read_address(broker_name)).messaging.WatchConsumerIds(request)
        return stream

    # ------------------------------------------------------------ plumbing

    def _connection(self, address: str) -> _Connection:
        with self._lock:
            connection = self._connections.get(address)
            if connection is None:
                channel = open_channel(address, credentials=self._credentials, tls=self._tls, options=[
                    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_BYTES),
                    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_BYTES),
                    ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
                    # this client's own connection state: gRPC otherwise shares a subchannel per
                    # address across the process, and a new client's first call failed at once
                    # while another client's connection to a restarted broker waited out its backoff
                    ("grpc.use_local_subchannel_pool", 1),
                ])
                connection = _Connection(channel, rmq_pb2_grpc.MessagingServiceStub(channel),
                                         rmq_pb2_grpc.AdminServiceStub(channel),
                                         rmq_pb2_grpc.RouteServiceStub(channel))
                self._connections[address] = connection
            return connection

    def _call(self, address: str, rpc: _Rpc[ResponseT], request: Message, broker_name: str | None = None,
              *, queue: MessageQueue | None = None, timeout: float | None = None,
              ok_codes: tuple[int, ...] = ()) -> ResponseT:
        """One unary call; non-OK Status -> RmqError, transport failure -> RmqUnavailable."""
        label = f"{broker_name} at {address}" if broker_name else address
        try:
            response = rpc.invoke(self._connection(address), request, timeout or self.timeout)
        except grpc.RpcError as error:
            raise self._explained(_transport_error(error, rpc.name, label, queue), address) from None
        return _checked(response, rpc.name, label, queue, ok_codes)

    def _explained(self, failure: RmqError, address: str) -> RmqError:
        """A plaintext connection the server closed at once: say so when the server speaks TLS."""
        plaintext_refused = isinstance(failure, RmqUnavailable) and TLS_ONLY_HINT in failure.message
        if self._tls is not None or not plaintext_refused or not speaks_tls(address):
            return failure
        method = failure.message.split(":")[0]
        return RmqUnavailable(f"{method}: the server requires TLS and this client connected without it "
                              f"(give --tls or $RMQ_TLS=1, or RmqClient(tls=True) with tls_ca_file)",
                              broker=failure.broker, queue=failure.queue)

    def _topic_call(self, topic: str, broker_name: str, rpc: _Rpc[ResponseT], request: Message) -> ResponseT:
        """A read-side call located through a cached route: a stale route is dropped when it fails."""
        try:
            return self._read_call(broker_name, rpc, request)
        except RmqError as error:
            if isinstance(error, RmqUnavailable) or error.code == rmq_pb2.TOPIC_NOT_EXIST:
                self.routes.forget(topic)
            raise

    def _ask_endpoints(self, rpc: _Rpc[ResponseT], request: Message,
                       try_next_on: tuple[int, ...]) -> ResponseT:
        """The first OK answer among the endpoints, in order. An unreachable endpoint, or one
        answering a `try_next_on` code, passes the question on to the next."""
        refusal: RmqError | None = None
        failures: list[RmqUnavailable] = []
        for address in self.endpoints:
            try:
                return self._call(address, rpc, request)
            except RmqUnavailable as error:
                failures.append(error)
            except RmqError as error:
                if error.code not in try_next_on:
                    raise
                refusal = refusal or error
        if refusal is not None:
            raise refusal
        raise _all_unreachable(failures)

    def _ask_all_endpoints(self, rpc: _Rpc[ResponseT], request: Message) -> list[ResponseT]:
        """The answers of every reachable endpoint (brokers named directly each know only
        themselves); RmqUnavailable when none answers."""
        answers: list[ResponseT] = []
        failures: list[RmqUnavailable] = []
        for address in self.endpoints:
            try:
                answers.append(self._call(address, rpc, request))
            except RmqUnavailable as error:
                failures.append(error)
        if not answers:
            raise _all_unreachable(failures)
        return answers

    def _on_each_broker(self, brokers: Mapping[str, str], call: Callable[[str, str], object]) -> None:
        """Call every broker even when one fails; then raise the first failure."""
        _call_each(brokers, lambda name: call(name, brokers[name]))

    def _on_each_member(self, call: Callable[[str, str], object],
                        unreachable: dict[str, RmqUnavailable] | None = None) -> None:
        """Call every member of every broker group; then raise the first failure of a group
        none of whose members answered (a dead master's slave still counts). With
        `unreachable`, such a group that could not be reached is recorded there instead."""
        groups = self.list_broker_groups()

        def on_group(name: str) -> None:
            failures: list[RmqError] = []
            for member in groups[name]:
                try:
                    call(name, member.address)
                except RmqError as error:
                    failures.append(error)
            if failures and len(failures) == len(groups[name]):
                raise failures[0]

        _call_each(groups, lambda name: unless_unreachable(functools.partial(on_group, name), name,
                                                            unreachable))

    def _route(self, topic: str) -> TopicRoute:
        """The topic's route, cached for ROUTE_CACHE_SECONDS (like RocketMQ's periodic refresh)."""
        return self.routes.cached(topic) or self.query_route(topic)

    # ------------------------------------------------------------ broker groups (docs/replication.md)

    def _read_call(self, broker_name: str, rpc: _Rpc[ResponseT], request: Message, *,
                   queue: MessageQueue | None = None, timeout: float | None = None,
                   ok_codes: tuple[int, ...] = ()) -> ResponseT:
        """A read-side call (pull, offsets) to the member `_read_address` picks; a member that
        does not answer is passed over for a while and the call goes once to the next one (a
        slave while the master is down)."""
        address = self._read_address(broker_name, queue)
        try:
            return self._call(address, rpc, request, broker_name, queue=queue, timeout=timeout,
                              ok_codes=ok_codes)
        except RmqUnavailable:
            self.routes.mark_down(address)
            other = self._read_address(broker_name, queue)
            if other == address:
                raise
        return self._call(other, rpc, request, broker_name, queue=queue, timeout=timeout, ok_codes=ok_codes)

    def _read_address(self, broker_name: str, mq: MessageQueue | None = None) -> str:
        """findBrokerAddressInSubscribe: the member the broker suggested for `mq` (spec pull
        §12.4), else the master, else a slave, passing over members that did not answer lately."""
        fallback = self._broker_address(broker_name)     # learns the members when they are unknown
        return self.routes.read_address(broker_name, mq) or fallback

    def _broker_address(self, broker_name: str) -> str:
        address = self.routes.address(broker_name)
        if address is None:
            address = self.list_brokers().get(broker_name)
        if address is None:
            # RocketMQ "The broker[...] not exist": handled like an unreachable broker.
            raise RmqUnavailable(f"broker {broker_name} is not known to endpoints {','.join(self.endpoints)}",
                                 broker=broker_name)
        return address


# ---------------------------------------------------------------- helpers


def _checked(response: ResponseT, method: str, label: str, queue: MessageQueue | None,
             ok_codes: tuple[int, ...]) -> ResponseT:
    """The response, or RmqRefused for a non-OK Status (other than `ok_codes`)."""
    status = response.status  # type: ignore[attr-defined]  # every rmq.v1 unary response has one
    if status.code != rmq_pb2.OK and status.code not in ok_codes:
        raise RmqRefused(status.code, status.message or f"{method} refused", broker=label, queue=queue)
    return response


def _transport_error(error: grpc.RpcError, method: str, label: str, queue: MessageQueue | None) -> RmqError:
    code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = error.details() if isinstance(error, grpc.Call) else str(error)
    if code in _UNAVAILABLE_CODES:
        return RmqUnavailable(f"{method} failed: {code.name}: {details}", broker=label, queue=queue)
    rmq_code = rmq_pb2.NO_PERMISSION if code == grpc.StatusCode.PERMISSION_DENIED else rmq_pb2.SYSTEM_ERROR
    return RmqRefused(rmq_code, f"{method} failed: gRPC {code.name}: {details}", broker=label, queue=queue)


def _when_answered(call: grpc.Future[ResponseT], method: str, label: str, queue: MessageQueue | None,
                   answered: Callable[[ResponseT | None, RmqError | None], None]) -> None:
    """`answered(response, None)`, or `answered(None, error)` (RequestCancelled when the call was
    cancelled), once the gRPC call completes, on grpc's thread."""
    def done(future: grpc.Future[ResponseT]) -> None:
        try:
            response = future.result()
        except grpc.RpcError as error:
            answered(None, _transport_error(error, method, label, queue))
            return
        except grpc.FutureCancelledError:
            answered(None, RequestCancelled(f"{method} cancelled", broker=label, queue=queue))
            return
        answered(response, None)

    call.add_done_callback(done)


def unless_unreachable(call: Callable[[], AnswerT], broker_name: str,
                        unreachable: dict[str, RmqUnavailable] | None) -> AnswerT | None:
    """call(); None when the broker is unreachable and the caller collects those in `unreachable`."""
    try:
        return call()
    except RmqUnavailable as error:
        if unreachable is None:
            raise
        unreachable[broker_name] = error
        return None


def _call_each(names: Iterable[str], call: Callable[[str], object]) -> None:
    """call(name) for every name even when one fails; then raise the first failure."""
    first: RmqError | None = None
    for name in names:
        try:
            call(name)
        except RmqError as error:
            first = first or error
    if first is not None:
        raise first


def _all_unreachable(failures: list[RmqUnavailable]) -> RmqUnavailable:
    if len(failures) == 1:
        return failures[0]
    return RmqUnavailable("no endpoint answered: " + "; ".join(f"{f.broker}: {f.message}" for f in failures),
                          broker=",".join(str(f.broker) for f in failures))


def _chunks(messages: list[rmq_pb2.Message], max_bytes: int) -> Iterator[list[rmq_pb2.Message]]:
    """Consecutive runs of messages whose encoded size stays under max_bytes (a single larger
    message travels alone and the broker judges it)."""
    chunk: list[rmq_pb2.Message] = []
    size = 0
    for message in messages:
        message_size = message.ByteSize() + _MESSAGE_FRAMING_BYTES
        if chunk and size + message_size > max_bytes:
            yield chunk
            chunk, size = [], 0
        chunk.append(message)
        size += message_size
    if chunk:
        yield chunk


def _column_requests(topic: str, bodies: list[bytes], tags: list[str], keys: list[str], max_bytes: int
                     ) -> Iterator[rmq_pb2.SendMessageRequest]:
    """Plain messages as MessageColumns requests, split like _chunks: runs whose encoded size
    stays under max_bytes (a single larger message travels alone)."""
    if not bodies:
        return
    # at most 4 UTF-8 bytes per character
    whole = (sum(map(len, bodies)) + 4 * (sum(map(len, tags)) + sum(map(len, keys)))
             + _COLUMN_FRAMING_BYTES * len(bodies))
    if whole <= max_bytes:
        yield _column_request(topic, bodies, tags, keys)
        return
    start, size = 0, 0
    for end, (body, t, k) in enumerate(zip(bodies, tags, keys, strict=True)):
        message_size = len(body) + 4 * (len(t) + len(k)) + _COLUMN_FRAMING_BYTES
        if end > start and size + message_size > max_bytes:
            yield _column_request(topic, bodies[start:end], tags[start:end], keys[start:end])
            start, size = end, 0
        size += message_size
    yield _column_request(topic, bodies[start:], tags[start:], keys[start:])


def _column_request(topic: str, bodies: list[bytes], tags: list[str], keys: list[str]
                    ) -> rmq_pb2.SendMessageRequest:
    columns = rmq_pb2.MessageColumns(bodies=b"".join(bodies), body_lengths=list(map(len, bodies)),
                                     tags=_string_column(tags), keys=_string_column(keys))
    return rmq_pb2.SendMessageRequest(topic=topic, columns=columns)


def _string_column(values: list[str]) -> list[str]:
    """None when every value is empty, one when all are equal, else one per message."""
    if values.count(values[0]) == len(values):
        return [values[0]] if values[0] else []
    return values


def _by_broker(mqs: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
    grouped: dict[str, list[MessageQueue]] = defaultdict(list)
    for mq in sorted(mqs):
        grouped[mq.broker_name].append(mq)
    return dict(grouped)


def _mq_proto(mq: MessageQueue) -> rmq_pb2.MessageQueue:
    return rmq_pb2.MessageQueue(topic=mq.topic, broker_name=mq.broker_name, queue_id=mq.queue_id)
