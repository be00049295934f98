"""PushConsumer's pull side without a broker: flow control (spec consumer-pull-rebalance
TV-7, consumption-longpolling-offsets TV-7), the pull callback's transitions (TV-11),
registerConsumer (TV-23) and bad configuration."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest

from rmq import message_format as mf
from rmq import retry
from rmq.connector.client import (
    GetMessageStatus,
    MessageQueue,
    PullResult,
    PullStatus,
    RmqClient,
    RmqUnavailable,
)
from rmq.connector.client_instance import ClientInstance
from rmq.connector.consumer_config import ServiceState
from rmq.connector.errors import StateError
from rmq.connector.message import decode_messages
from rmq.connector.message_listener import ConsumeConcurrentlyStatus
from rmq.connector.offset_store import LocalFileOffsetStore, ReadOffsetType
from rmq.connector.process_queue import ProcessQueue
from rmq.connector.pull_consumer import PullConsumer
from rmq.connector.pull_message_service import PullingConsumer, PullMessageService
from rmq.connector.push_consumer import PushConsumer
from rmq.connector.rebalance_impl import PullRequest, SubscriptionData
from rmq.v1 import rmq_pb2
from tests.connector.sdk_support import MQ, RecordingScheduler, message

MiB = 1024 * 1024


class RecordingPullService(PullMessageService):
    def __init__(self) -> None:
        super().__init__(scheduler=RecordingScheduler())
        self.immediate: list[int] = []
        self.later: list[tuple[int, int]] = []

    def execute_pull_request_immediately(self, consumer: PullingConsumer, request: PullRequest) -> None:
        self.immediate.append(request.next_offset)

    def execute_pull_request_later(self, consumer: PullingConsumer, request: PullRequest,
                                   delay_ms: int) -> None:
        self.later.append((request.next_offset, delay_ms))


@pytest.fixture
def consumer(tmp_path: Path):
    # broadcasting: the offsets live in a local file, so persisting needs no broker
    consumer = PushConsumer(
        "G",
        "127.0.0.1:1",
        client=RmqClient("127.0.0.1:1"),
        offset_store_dir=tmp_path,
        message_model="broadcasting",
    )
    consumer.subscribe("TopicTest", "TagA")
    submitted: list[list[int]] = []
    consumer.register_message_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    consumer._build()
    consumer._state = ServiceState.RUNNING
    consumer._pull_service = RecordingPullService()
    consumer._scheduler = RecordingScheduler()
    consumer.consume_service.submit_consume_request = lambda msgs, pq, mq, dispatch=True: submitted.append(
        [m.queue_offset for m in msgs]
    )
    consumer.submitted = submitted
    yield consumer
    consumer._state = ServiceState.SHUTDOWN_ALREADY
    consumer.client.close()


@pytest.mark.parametrize(
    ("count", "size", "span", "expected"),
    [
        (1001, 0, 0, 50),
        (1000, 0, 0, 0),
        (1, 101 * MiB, 0, 50),
        (1, 100 * MiB + 1048575, 0, 0),
        (2, 0, 2001, 50),
        (2, 0, 2000, 0),
    ],
)
def test_tv7_flow_control(consumer: PushConsumer, count: int, size: int, span: int, expected: int) -> None:
    pq = ProcessQueue()
    pq.msg_count, pq.msg_size = count, size
    if span:
        pq.put_message([message(0), message(span)])
        pq.msg_count, pq.msg_size = count, size
    assert consumer.flow_control_delay_ms(pq) == expected
    if expected:
        request = PullRequest("G", MQ, pq, 5)
        consumer.pull_message(request)
        assert consumer._pull_service.later == [(5, 50)]


def test_tv7_dropped_queue_is_not_requeued_and_missing_subscription_waits_3_s(consumer: PushConsumer) -> None:
    pq = ProcessQueue()
    pq.dropped = True
    consumer.pull_message(PullRequest("G", MQ, pq, 0))
    assert consumer._pull_service.later == [] and consumer._pull_service.immediate == []
    consumer.pull_message(PullRequest("G", MessageQueue("Unsubscribed", "broker-a", 0), ProcessQueue(), 0))
    assert consumer._pull_service.later == [(0, 3000)]


def test_tv7_pull_exception_waits_3_s(consumer: PushConsumer) -> None:
    # the broker is not known to the endpoints: pullKernelImpl raises before sending
    consumer.pull_message(PullRequest("G", MessageQueue("TopicTest", "nowhere", 0), ProcessQueue(), 0))
    assert consumer._pull_service.later == [(0, 3000)]


def test_flow_control_is_logged_every_1000_times(
    consumer: PushConsumer, caplog: pytest.LogCaptureFixture
) -> None:
    pq = ProcessQueue()
    pq.msg_count = 1001
    for _ in range(1001):
        consumer.pull_message(PullRequest("G", MQ, pq, 0))
    assert caplog.text.count("do flow control") == 2  # times 0 and 1000


def packed(offsets: list[int], tags: str, topic_name: str = MQ.topic,
           extra: dict[str, str] | None = None) -> rmq_pb2.PackedMessages:
    """Records as the store writes them (rmq.message_format), for the decoder."""
    records = []
    for offset in offsets:
        properties = mf.encode_properties({mf.PROPERTY_TAGS: tags, **(extra or {})}).encode()
        topic, body = topic_name.encode(), b"body"
        size = mf.calc_msg_length(len(body), len(topic), len(properties))
        header = struct.pack(
            ">iiiiiqqiq8sq8siq",
            size,
            mf.MESSAGE_MAGIC_CODE,
            0,
            0,
            0,
            offset,
            5000 + offset,
            0,
            1,
            bytes(8),
            2,
            bytes(8),
            0,
            0,
        )
        records.append(
            header
            + struct.pack(">i", len(body))
            + body
            + bytes([len(topic)])
            + topic
            + struct.pack(">h", len(properties))
            + properties
        )
    return rmq_pb2.PackedMessages(
        count=len(records),
        sizes=struct.pack(f"<{len(records)}i", *map(len, records)),
        records=b"".join(records),
    )


def result(status: PullStatus, next_offset: int, offsets: list[int] = (), tags: str = "TagA") -> PullResult:
    return PullResult(status, GetMessageStatus.FOUND, next_offset, 0, 100, packed(list(offsets), tags))


def test_one_pull_decodes_retry_copies_to_their_topic_and_gives_each_message_its_own_properties() -> None:
    normal, retried = packed([7, 8], "TagA"), packed([9], "TagA", f"{retry.RETRY_GROUP_TOPIC_PREFIX}G",
                                                     {retry.PROPERTY_RETRY_TOPIC: "Orders"})
    both = rmq_pb2.PackedMessages(count=3, sizes=normal.sizes + retried.sizes,
                                  records=normal.records + retried.records)
    messages = decode_messages(both, MQ)
    assert [(m.topic, m.queue_offset, m.body) for m in messages] == [
        (MQ.topic, 7, b"body"), (MQ.topic, 8, b"body"), ("Orders", 9, b"body")]
    messages[0].properties["mine"] = "1"   # equal properties are decoded once, handed out as copies
    assert "mine" not in messages[1].properties and messages[1].tags == "TagA"


def test_flow_control_counts_what_the_pull_callback_put(consumer: PushConsumer) -> None:
    request = PullRequest("G", MQ, ProcessQueue(), 0)
    consumer.process_pull_result(request, SubscriptionData.build(MQ.topic, "TagA"),
                                 result(PullStatus.FOUND, 1001, list(range(1001))))
    pq = request.process_queue
    assert (pq.msg_count, pq.msg_size, pq.queue_offset_max) == (1001, 1001 * len(b"body"), 1000)
    consumer._pull_service.immediate.clear()
    consumer.pull_message(request)   # the next pull of the queue waits: 1,001 held > 1,000
    assert consumer._pull_service.later == [(1001, 50)] and consumer._pull_service.immediate == []
    pq.remove_message([message(offset) for offset in range(1001)])
    assert (pq.msg_count, pq.msg_size) == (0, 0) and consumer.flow_control_delay_ms(pq) == 0


def test_tv11_found_puts_submits_and_pulls_again(consumer: PushConsumer) -> None:
    request = PullRequest("G", MQ, ProcessQueue(), 39)
    consumer.process_pull_result(
        request, SubscriptionData.build(MQ.topic, "TagA"), result(PullStatus.FOUND, 42, [39, 40, 41])
    )
    assert request.next_offset == 42 and request.process_queue.msg_count == 3
    assert consumer.submitted == [[39, 40, 41]] and consumer._pull_service.immediate == [42]


def test_tv11_found_with_pull_interval_waits(consumer: PushConsumer) -> None:
    consumer.config = dataclasses.replace(consumer.config, pull_interval_ms=60000)
    request = PullRequest("G", MQ, ProcessQueue(), 39)
    consumer.process_pull_result(
        request, SubscriptionData.build(MQ.topic, "TagA"), result(PullStatus.FOUND, 42, [39, 40, 41])
    )
    assert consumer._pull_service.later == [(42, 60000)]


def test_tv11_found_but_filtered_out_pulls_again_without_submitting(consumer: PushConsumer) -> None:
    request = PullRequest("G", MQ, ProcessQueue(), 39)
    consumer.process_pull_result(
        request,
        SubscriptionData.build(MQ.topic, "TagA"),
        result(PullStatus.FOUND, 42, [39, 40, 41], tags="TagB"),
    )
    assert consumer.submitted == [] and consumer._pull_service.immediate == [42]


@pytest.mark.parametrize(
    ("status", "next_offset"), [(PullStatus.NO_NEW_MSG, 40), (PullStatus.NO_MATCHED_MSG, 45)]
)
def test_tv11_nothing_new_moves_on_and_corrects_the_offset(
    consumer: PushConsumer, status: PullStatus, next_offset: int
) -> None:
    request = PullRequest("G", MQ, ProcessQueue(), 30)
    consumer.process_pull_result(request, SubscriptionData.build(MQ.topic, "*"), result(status, next_offset))
    assert request.next_offset == next_offset and consumer._pull_service.immediate == [next_offset]
    assert consumer.offset_store.read_offset(MQ, ReadOffsetType.READ_FROM_MEMORY) == next_offset


def test_tv11_offset_illegal_drops_and_fixes_the_offset_after_10_s(consumer: PushConsumer) -> None:
    pq = ProcessQueue()
    consumer.rebalance_impl.process_queue_table[MQ] = pq
    consumer.offset_store.update_offset(MQ, 500, increase_only=False)
    request = PullRequest("G", MQ, pq, 30)
    consumer.process_pull_result(
        request, SubscriptionData.build(MQ.topic, "*"), result(PullStatus.OFFSET_ILLEGAL, 100)
    )
    assert request.next_offset == 100 and pq.dropped
    assert consumer._pull_service.immediate == [] and consumer._pull_service.later == []
    assert [delay for delay, _ in consumer._scheduler.scheduled] == [10.0]
    consumer._scheduler.run_all()
    assert MQ not in consumer.rebalance_impl.process_queue_table
    assert (
        consumer.offset_store.read_offset(MQ, ReadOffsetType.READ_FROM_STORE) == 100
    )  # moved back (not increase-only), persisted


def test_tv23_a_group_registers_once_per_client_id() -> None:
    client = RmqClient("127.0.0.1:1")
    first = ClientInstance.acquire("cid-tv23", client=client)
    second = ClientInstance.acquire("cid-tv23", client=client)
    c1, c2 = PushConsumer("G", "127.0.0.1:1", client=client), PushConsumer("G", "127.0.0.1:1", client=client)
    try:
        assert first is second   # one runtime per client id and client
        first.register_consumer(c1)
        with pytest.raises(StateError, match=r"The consumer group\[G\] has been created before"):
            second.register_consumer(c2)
        first.unregister_consumer(c1, leave_group=False)
        second.register_consumer(c2)   # free again once the first one left
        second.unregister_consumer(c2, leave_group=False)
    finally:
        for instance in (first, second):
            instance.release()
        for consumer in (c1, c2):
            consumer.shutdown()
        client.close()


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"message_model": "fanout"}, "message_model"),
        ({"allocate_strategy": "hash"}, "allocate_strategy"),
        ({"consume_from": "middle"}, "consume_from"),
        ({"pull_batch_size": 0}, "pull_batch_size"),
        ({"consume_timeout_minutes": -1}, "consume_timeout_minutes"),
    ],
)
def test_bad_configuration_is_one_clear_error(kwargs: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        PushConsumer("G", "127.0.0.1:1", **kwargs)


def test_start_needs_a_listener_and_a_subscription() -> None:
    consumer = PushConsumer("G", "127.0.0.1:1")
    with pytest.raises(ValueError, match="listener"):
        consumer.start()
    consumer.register_message_listener(lambda msgs, ctx: None)
    with pytest.raises(ValueError, match="subscri"):
        consumer.start()
    with pytest.raises(ValueError, match="subscription expression"):
        consumer.subscribe("T", "TagA || ")


def test_longpolling_tv15_timers() -> None:
    from rmq.connector import consume_message_concurrently_service as consume
    from rmq.connector import consumer_config, consumer_impl, rebalance_service

    assert rebalance_service.WAIT_INTERVAL_S == 20.0
    assert consumer_config.PERSIST_CONSUMER_OFFSET_INTERVAL_S == 5.0
    assert consumer_config.BROKER_SUSPEND_MAX_TIME_MILLIS == 15000
    assert consumer_config.PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL == 50
    assert consumer_config.PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION == 3000
    assert consumer_impl.OFFSET_ILLEGAL_FIX_DELAY_S == 10.0
    assert consume.CONSUME_LATER_DELAY_S == 5.0


def test_tv11_a_failed_pull_is_requeued_after_3_s(consumer: PushConsumer) -> None:
    request = PullRequest("G", MQ, ProcessQueue(), 12)
    consumer._on_pull(request, SubscriptionData.build(MQ.topic, "*"), None, RmqUnavailable("broker down"))
    assert consumer._pull_service.later == [(12, 3000)] and consumer._pull_service.immediate == []


def test_a_broadcasting_consumer_still_reads_offsets_saved_in_the_old_default_directory(tmp_path: Path,
                                                                                        monkeypatch) -> None:
    """The default offset directory is ~/.rmq/offsets (as the Spark source's offsetStoreDir); a
    consumer upgraded from ~/.rmq_offsets resumes from what it saved there and saves anew."""
    monkeypatch.setenv("HOME", str(tmp_path))
    consumer = PushConsumer("G", "127.0.0.1:1", client=RmqClient("127.0.0.1:1"), message_model="broadcasting")
    instance_dir = consumer.client_id.replace("@", "_")
    old = LocalFileOffsetStore(tmp_path / ".rmq_offsets" / instance_dir, "G")
    old.update_offset(MQ, 41, increase_only=False)
    old.persist_all([MQ])
    consumer.subscribe(MQ.topic)
    consumer.register_message_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    consumer._build()
    try:
        assert consumer.offset_store.read_offset(MQ, ReadOffsetType.READ_FROM_STORE) == 41
        consumer.offset_store.update_offset(MQ, 42, increase_only=True)
        consumer.offset_store.persist_all([MQ])
        new = LocalFileOffsetStore(tmp_path / ".rmq" / "offsets" / instance_dir, "G")
        assert new.read_offset(MQ, ReadOffsetType.READ_FROM_STORE) == 42
    finally:
        consumer._scheduler.shutdown()
        consumer.shutdown()


def test_consumers_of_one_client_id_share_one_runtime_until_the_last_one_leaves() -> None:
    """MQClientManager: one ClientInstance (one heartbeat loop, one rebalance service) per client
    id and endpoints; PushConsumer and PullConsumer alike, stopped with the last of them."""
    push = PushConsumer("orders", "127.0.0.1:1", instance_name="shared")
    pull = PullConsumer("reports", "127.0.0.1:1", instance_name="shared")
    other_cluster = PushConsumer("orders", "127.0.0.1:2", instance_name="shared")
    assert push._instance is pull._instance and push.client is pull.client
    assert other_cluster._instance is not push._instance
    push.shutdown()
    assert ClientInstance.acquire(pull.client_id, endpoints="127.0.0.1:1") is pull._instance
    pull._instance.release()
    pull.shutdown()
    other_cluster.shutdown()
    fresh = ClientInstance.acquire(pull.client_id, endpoints="127.0.0.1:1")
    assert fresh is not pull._instance
    fresh.release()
