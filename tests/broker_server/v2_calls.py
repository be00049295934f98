"""RocketMQ 5 calls as one client makes them (its client id, and its account's MQv2 signature
on an `--acl` broker: tests/broker_server/acl_broker.py), for tests of the pop and transaction
paths without the official clients."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

import grpc
from google.protobuf.duration_pb2 import Duration

from rmq.rocketmq_v2 import MessagingServiceStub
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2 as pb
from tests.broker_server.acl_broker import v2_metadata

TIMEOUT_S = 10


def duration_ms(ms: int) -> Duration:
    duration = Duration()
    duration.FromMilliseconds(ms)
    return duration


@dataclass
class V2Client:
    channel: grpc.Channel
    client_id: str
    account: str | None = None     # None: an unsigned call (a broker without --acl)

    @property
    def stub(self) -> MessagingServiceStub:
        return MessagingServiceStub(self.channel)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        if self.account is None:
            return (("x-mq-client-id", self.client_id),)
        return v2_metadata(self.account, self.client_id)

    def receive(self, group: str, topic: str, auto_renew: bool = False, batch: int = 32,
                wait_ms: int = 0) -> list[v2.Message]:
        """Up to `batch` messages, invisible for 10 s; held up to `wait_ms` for one."""
        request = pb.ReceiveMessageRequest(
            group=v2.Resource(name=group), batch_size=batch, auto_renew=auto_renew,
            message_queue=v2.MessageQueue(topic=v2.Resource(name=topic), id=-1),
            long_polling_timeout=duration_ms(wait_ms), invisible_duration=duration_ms(10_000))
        responses = list(self.stub.ReceiveMessage(request, metadata=self.metadata,
                                                  timeout=TIMEOUT_S + wait_ms / 1000))
        codes = [r.status.code for r in responses if r.HasField("status")]
        assert codes and codes[0] in (v2.OK, v2.MESSAGE_NOT_FOUND), codes
        return [r.message for r in responses if r.HasField("message")]

    def ack(self, group: str, message: v2.Message, handle: str | None = None) -> int:
        """The entry's status code of acknowledging `message` (with `handle`, else its own)."""
        entry = pb.AckMessageEntry(message_id=message.system_properties.message_id,
                                   receipt_handle=handle or message.system_properties.receipt_handle)
        response = self.stub.AckMessage(pb.AckMessageRequest(
            group=v2.Resource(name=group), topic=message.topic, entries=[entry]),
            metadata=self.metadata, timeout=TIMEOUT_S)
        return response.entries[0].status.code if response.entries else response.status.code

    def change_invisible(self, group: str, message: v2.Message, ms: int,
                         handle: str | None = None) -> pb.ChangeInvisibleDurationResponse:
        return self.stub.ChangeInvisibleDuration(pb.ChangeInvisibleDurationRequest(
            group=v2.Resource(name=group), topic=message.topic,
            receipt_handle=handle or message.system_properties.receipt_handle,
            invisible_duration=duration_ms(ms), message_id=message.system_properties.message_id),
            metadata=self.metadata, timeout=TIMEOUT_S)

    def forward_to_dlq(self, group: str, message: v2.Message) -> int:
        return self.stub.ForwardMessageToDeadLetterQueue(pb.ForwardMessageToDeadLetterQueueRequest(
            group=v2.Resource(name=group), topic=message.topic,
            receipt_handle=message.system_properties.receipt_handle,
            message_id=message.system_properties.message_id, delivery_attempt=1, max_delivery_attempts=16),
            metadata=self.metadata, timeout=TIMEOUT_S).status.code

    def update_offset(self, group: str, message: v2.Message, offset: int) -> int:
        queue = v2.MessageQueue(topic=message.topic, id=message.system_properties.queue_id)
        return self.stub.UpdateOffset(pb.UpdateOffsetRequest(
            group=v2.Resource(name=group), message_queue=queue, offset=offset),
            metadata=self.metadata, timeout=TIMEOUT_S).status.code

    def heartbeat(self, group: str) -> int:
        return self.stub.Heartbeat(pb.HeartbeatRequest(group=v2.Resource(name=group),
                                                       client_type=v2.SIMPLE_CONSUMER),
                                   metadata=self.metadata, timeout=TIMEOUT_S).status.code

    def notify_termination(self, group: str) -> int:
        request = pb.NotifyClientTerminationRequest(group=v2.Resource(name=group))
        response = self.stub.NotifyClientTermination(request, metadata=self.metadata, timeout=TIMEOUT_S)
        return response.status.code

    def send_transaction(self, topic: str, body: bytes, message_id: str) -> pb.SendMessageResponse:
        """A TRANSACTION message (a half message until its transaction ends)."""
        message = v2.Message(topic=v2.Resource(name=topic), body=body)
        message.system_properties.message_id = message_id
        message.system_properties.message_type = v2.TRANSACTION
        return self.stub.SendMessage(pb.SendMessageRequest(messages=[message]), metadata=self.metadata,
                                     timeout=TIMEOUT_S)

    def end_transaction(self, topic: str, message_id: str, transaction_id: str,
                        resolution: v2.TransactionResolution = v2.COMMIT) -> int:
        request = pb.EndTransactionRequest(topic=v2.Resource(name=topic), message_id=message_id,
                                           transaction_id=transaction_id, resolution=resolution)
        return self.stub.EndTransaction(request, metadata=self.metadata, timeout=TIMEOUT_S).status.code


def publishing(*topics: str) -> v2.Settings:
    return v2.Settings(client_type=v2.PRODUCER,
                       publishing=v2.Publishing(topics=[v2.Resource(name=t) for t in topics]))


class TelemetryStream:
    """A client's open Telemetry stream: it sends `settings`, then reads what the broker writes
    (on a thread, into `commands`) until closed."""

    def __init__(self, client: V2Client, settings: v2.Settings) -> None:
        self.commands: queue.Queue[pb.TelemetryCommand] = queue.Queue()
        self._closed = threading.Event()

        def requests():
            yield pb.TelemetryCommand(settings=settings)
            self._closed.wait(60)

        self._call = client.stub.Telemetry(requests(), metadata=client.metadata)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for command in self._call:
                self.commands.put(command)
        except grpc.RpcError:
            pass   # closed

    def next(self, timeout_s: float = TIMEOUT_S) -> pb.TelemetryCommand:
        return self.commands.get(timeout=timeout_s)

    def close(self) -> None:
        self._closed.set()
        self._call.cancel()
        self._reader.join(TIMEOUT_S)
