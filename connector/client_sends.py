"""Sending (MQClientAPIImpl#sendMessage): what a send carries (OutgoingMessage, OneMessage on the
latency path, MessageColumns for plain batches split under the request size limit) and
SendAPI's sync and async sends to one broker, over the member's remoting port for a single
message where it serves one, else gRPC.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from rmq.connector.client_core import (
    ClientCore,
    Rpc,
    checked,
    when_answered,
)
from rmq.connector.errors import RmqError, RmqRefused, RmqUnavailable
from rmq.statuses import SendStatus
from rmq.v1 import rmq_pb2

# A send refused so: the route may have changed (a topic moved, a master replaced by the
# controller that now refuses writes as a slave): the next send asks the name servers again.
ROUTE_CHANGED = (rmq_pb2.TOPIC_NOT_EXIST, rmq_pb2.SERVICE_NOT_AVAILABLE)
# SYNC_MASTER: stored on the master, no slave confirmed it (docs/replication.md); the send succeeded
STORED_ON_MASTER_ONLY = (rmq_pb2.FLUSH_SLAVE_TIMEOUT, rmq_pb2.SLAVE_NOT_AVAILABLE)
_MESSAGE_FRAMING_BYTES = 6                    # field tag + length prefix of one repeated Message
_COLUMN_FRAMING_BYTES = 16                    # a body length, tag and key prefixes in MessageColumns


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


_SEND_MESSAGE = Rpc("SendMessage", lambda c: c.messaging.SendMessage, rmq_pb2.SendMessageResponse)


class SendAPI(ClientCore):
    """The client API's sends (see ClientCore for the connection, deadline and error rules)."""

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
                    self.routes.doubt(topic)
                raise
            result.msg_ids.extend(response.msg_ids)
            result.queue_ids.extend(response.queue_ids)
            result.queue_offsets.extend(response.queue_offsets)
            result.recall_handles.extend(response.recall_handles or [""] * len(response.msg_ids))
            status = status or response.status.code
        if status in STORED_ON_MASTER_ONLY:   # perhaps a deposed master: the next send asks for the route
            self.routes.doubt(topic)
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
                return checked(response, "SendMessage", f"{name} at {address}", None, STORED_ON_MASTER_ONLY)
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
                    response = checked(response, "SendMessage", label, None, STORED_ON_MASTER_ONLY)
                except RmqRefused as error:
                    failure = error
            if failure is not None:
                if isinstance(failure, RmqUnavailable) or failure.code in ROUTE_CHANGED:
                    self.routes.doubt(topic)
                done(None, failure)
                return
            assert response is not None
            if response.status.code in STORED_ON_MASTER_ONLY:   # as for send_requests
                self.routes.doubt(topic)
            done(SendResult(list(response.msg_ids), list(response.queue_ids), list(response.queue_offsets),
                            broker_name, SendStatus(response.status.code)), None)

        remoting = functools.partial(self._remoting.send_async, topic=topic, message=message,
                                     timeout=self.timeout, done=answered)
        if self._over_remoting(broker_name, address, remoting):
            return
        call = self._connection(address).messaging.SendMessage.future(
            OneMessage(topic, message).to_request(), timeout=self.timeout)
        when_answered(call, "SendMessage", label, None, answered)

    def _pick_broker(self, topic: str) -> str:
        writable = self._route(topic).writable_brokers()
        if not writable:
            raise RmqRefused(rmq_pb2.NO_PERMISSION, f"topic {topic} has no writable queue")
        return self.routes.next_broker(writable)


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
