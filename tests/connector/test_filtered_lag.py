"""A filtered group's lag clears (issue 32 item 1, RocketMQ correctTagsOffset): messages its
filter leaves out after the last one it consumed are committed past at once, not when the
next held pull times out (15 s) or the next matching message arrives."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.message_listener import ConsumeConcurrentlyStatus
from rmq.connector.message_listener_orderly import ConsumeOrderlyStatus
from rmq.connector.offset_store import ReadOffsetType
from rmq.connector.pull_consumer import PullConsumer
from rmq.connector.push_consumer import PushConsumer
from rmq.rocketmq_v2 import MessagingServiceStub
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2 as pb
from tests.broker_server.in_process_broker import InProcessBroker
from tests.waiting import wait_until

TAGS = ["a", "b", "b"]   # one message for the group's filter, then two it leaves out


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    # held pulls are looked at again every 100 ms (not 5 s): a pull held for tag "a" wakes only
    # for an "a", so the left-out tails are answered (NO_MATCHED_MSG) by that check
    broker = InProcessBroker(tmp_path_factory.mktemp("filtered-lag") / "store",
                             hold_check_interval_ms=100).start()
    yield broker
    broker.stop()


def filtered_topic(broker: InProcessBroker, topic: str) -> MessageQueue:
    with RmqClient(broker.address) as client:
        client.create_topic(topic, queues=1)
        client.send(topic, [OutgoingMessage(tag.encode(), tags=tag) for tag in TAGS])
    return MessageQueue(topic, "broker-a", 0)


def send_left_out(broker: InProcessBroker, mq: MessageQueue) -> None:
    """Two more messages the group's filter ("a") leaves out."""
    with RmqClient(broker.address) as client:
        client.send(mq.topic, [OutgoingMessage(b"b", tags="b")] * 2)


def committed(broker: InProcessBroker, group: str, mq: MessageQueue) -> int:
    with RmqClient(broker.address) as client:
        return client.query_consumer_offsets(group, mq.topic).get(mq, -1)


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrently", "orderly"])
def test_push_consumer_commits_past_the_messages_its_filter_left_out(broker: InProcessBroker,
                                                                     orderly: bool) -> None:
    mq = filtered_topic(broker, f"FilteredPush{orderly}")
    group = f"filtered-push-{orderly}"
    consumed = threading.Event()
    success = ConsumeOrderlyStatus.SUCCESS if orderly else ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def listener(messages: object, context: object) -> ConsumeOrderlyStatus | ConsumeConcurrentlyStatus:
        consumed.set()
        return success

    consumer = PushConsumer(group, broker.address, consume_from="first",
                            persist_consumer_offset_interval_s=0.2)
    consumer.subscribe(mq.topic, "a")
    consumer.register_message_listener(listener, orderly=orderly)
    with consumer:
        assert consumed.wait(30)
        wait_until(lambda: consumer.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY) > 0,
                   "the commit after the listener")
        # the one commit after the listener: past both left-out messages, not 1 (the next held
        # pull would only correct it 15 s later)
        assert consumer.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY) == len(TAGS)
        wait_until(lambda: committed(broker, group, mq) == len(TAGS), "lag 0 on the broker")
        # nothing held, then only messages the filter leaves out: committed past them at once
        # (correctTagsOffset on the NO_MATCHED_MSG answer)
        send_left_out(broker, mq)
        wait_until(lambda: committed(broker, group, mq) == len(TAGS) + 2,
                   lambda: f"the offset past the left-out tail (committed {committed(broker, group, mq)})",
                   timeout=10)


def test_pull_consumer_commits_past_the_messages_its_filter_left_out(broker: InProcessBroker) -> None:
    mq = filtered_topic(broker, "FilteredPull")
    consumer = PullConsumer("filtered-pull", broker.address, consume_from="first", auto_commit=False)
    consumer.subscribe(mq.topic, "a")
    with consumer:
        batch: list = []
        wait_until(lambda: bool(batch.extend(consumer.poll(0.1)) or batch), "a polled batch")
        assert [m.tags for m in batch] == ["a"]
        consumer.commit()
        assert committed(broker, "filtered-pull", mq) == len(TAGS)
        send_left_out(broker, mq)

        def commit_past_the_tail() -> bool:
            assert consumer.poll(0.1) == []
            consumer.commit()
            return committed(broker, "filtered-pull", mq) == len(TAGS) + 2

        wait_until(commit_past_the_tail, "poll and commit move past the left-out tail", timeout=10)


def test_rocketmq5_pop_consumer_offset_moves_past_the_messages_its_filter_left_out(
        broker: InProcessBroker) -> None:
    """The RocketMQ 5 path (ReceiveMessage / AckMessage, the broker's pop state) already commits
    past filtered messages, with a match before them and without one (NO_MATCHED_MESSAGE)."""
    mq = filtered_topic(broker, "FilteredPop")
    group = v2.Resource(name="filtered-pop")
    with grpc.insecure_channel(broker.address) as channel:
        stub = MessagingServiceStub(channel)

        def receive() -> list[v2.Message]:
            request = pb.ReceiveMessageRequest(
                group=group, message_queue=v2.MessageQueue(topic=v2.Resource(name=mq.topic), id=-1),
                filter_expression=v2.FilterExpression(type=v2.TAG, expression="a"), batch_size=32,
                invisible_duration=Duration(seconds=30), long_polling_timeout=Duration(seconds=0))
            return [r.message for r in stub.ReceiveMessage(request, timeout=30) if r.HasField("message")]

        [message] = receive()
        entry = pb.AckMessageEntry(message_id=message.system_properties.message_id,
                                   receipt_handle=message.system_properties.receipt_handle)
        ack = stub.AckMessage(pb.AckMessageRequest(group=group, topic=v2.Resource(name=mq.topic),
                                                   entries=[entry]), timeout=30)
        assert ack.status.code == v2.OK
        assert committed(broker, group.name, mq) == len(TAGS)

        send_left_out(broker, mq)
        assert receive() == []
        assert committed(broker, group.name, mq) == len(TAGS) + 2
