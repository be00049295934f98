"""Raw rmq.v1 stubs for broker and name server tests (no dependency on rmq.connector.client), and
small helpers that build the common requests."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
import numpy as np

from rmq.stored_message import StoredMessage, decode_records
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

MAX_MESSAGE_BYTES = 64 * 1024 * 1024


@dataclass
class Stubs:
    channel: grpc.Channel
    messaging: rmq_pb2_grpc.MessagingServiceStub
    admin: rmq_pb2_grpc.AdminServiceStub
    route: rmq_pb2_grpc.RouteServiceStub
    namesrv: rmq_pb2_grpc.NameServerServiceStub
    address: str

    @classmethod
    def connect(cls, address: str, own_connection: bool = False) -> Stubs:
        """Stubs on a channel to `address`; `own_connection`: a TCP connection of its own (gRPC
        shares one between channels to the same address, and the broker admits at most 1,024 calls on one)."""
        options = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ]
        if own_connection:
            options.append(("grpc.use_local_subchannel_pool", 1))
        channel = grpc.insecure_channel(address, options=options)
        return cls(
            channel,
            rmq_pb2_grpc.MessagingServiceStub(channel),
            rmq_pb2_grpc.AdminServiceStub(channel),
            rmq_pb2_grpc.RouteServiceStub(channel),
            rmq_pb2_grpc.NameServerServiceStub(channel),
            address,
        )

    def close(self) -> None:
        self.channel.close()

    def create_topic(self, topic: str, queues: int = 4, perm: int = 6) -> rmq_pb2.Status:
        config = rmq_pb2.TopicConfig(
            topic_name=topic, read_queue_nums=queues, write_queue_nums=queues, perm=perm
        )
        return self.admin.CreateTopic(rmq_pb2.CreateTopicRequest(config=config), timeout=10).status

    def send(self, topic: str, *messages: rmq_pb2.Message) -> rmq_pb2.SendMessageResponse:
        return self.messaging.SendMessage(
            rmq_pb2.SendMessageRequest(topic=topic, messages=messages), timeout=10
        )

    def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int = 32,
        group: str = "test-group",
        timeout: float = 10,
        **fields,
    ) -> rmq_pb2.PullMessageResponse:
        request = rmq_pb2.PullMessageRequest(
            consumer_group=group,
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_messages=max_messages,
            **fields,
        )
        return self.messaging.PullMessage(request, timeout=timeout)


def suspend_fields(suspend_timeout_ms: int, sub_expression: str = "*") -> dict:
    return {
        "sys_flag": rmq_pb2.FLAG_SUSPEND,
        "suspend_timeout_ms": suspend_timeout_ms,
        "sub_expression": sub_expression,
    }


def decode(response: rmq_pb2.PullMessageResponse) -> list[StoredMessage]:
    packed = response.messages
    sizes = np.frombuffer(packed.sizes, dtype="<i4")
    assert len(sizes) == packed.count and int(sizes.sum()) == len(packed.records)
    return decode_records(packed.records, sizes)
