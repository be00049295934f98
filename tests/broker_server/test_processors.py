"""SendMessageProcessor, PullMessageProcessor and ScheduleMessageService over a real store."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rmq import message_format as mf
from rmq.broker_server.errors import BrokerError
from rmq.broker_server.long_polling.pull_request_hold_service import PullRequestHoldService
from rmq.broker_server.metrics.broker_stats import BrokerStatsManager
from rmq.broker_server.offsets.consumer_offset_manager import ConsumerOffsetManager
from rmq.broker_server.processors.delay_levels import parse_delay_levels
from rmq.broker_server.processors.filter_executor import FilterExecutor
from rmq.broker_server.processors.names import SCHEDULE_TOPIC
from rmq.broker_server.processors.pull_message_processor import (
    SUB_EXPRESSION_CACHE_SIZE,
    PullLimits,
    PullMessageProcessor,
    pull_status,
    sub_expression_tag_codes,
)
from rmq.broker_server.processors.schedule_message_service import (
    ScheduleMessageService,
    correct_deliver_timestamp,
)
from rmq.broker_server.processors.send_message_processor import (
    OneMessage,
    SendMessageProcessor,
    born_host_from_peer,
)
from rmq.broker_server.processors.store_executor import StoreExecutor
from rmq.broker_server.processors.topic_config_manager import TopicConfig, TopicConfigManager
from rmq.statuses import GetMessageStatus, PullStatus
from rmq.stored_message import decode_records
from rmq.v1 import rmq_pb2
from tests.broker_server.store_fixture import running_store, wait_dispatched
from tests.waiting import wait_until_async

PEER = "ipv4:10.1.2.3:4567"


class Broker:
    """The processors wired as BrokerController wires them, on a real store."""

    def __init__(self, store, path: Path, delay_levels: str = "1s 5s 10s") -> None:
        self.store = store
        self.executor = StoreExecutor(2)
        self.filters = FilterExecutor(1)
        self.topics = TopicConfigManager(path)
        self.offsets = ConsumerOffsetManager(path)
        self.hold = PullRequestHoldService(store.get_max_offset_in_queue, check_interval_ms=60000)
        levels = parse_delay_levels(delay_levels)
        self.stats = BrokerStatsManager()
        self.send = SendMessageProcessor(
            store, self.topics, self.executor, levels, store.config.max_message_size, self.stats
        )
        self.pull = PullMessageProcessor(
            store,
            self.topics,
            self.offsets,
            self.hold,
            self.executor,
            PullLimits(max_messages=100, default_max_bytes=1 << 20, max_bytes=2 << 20),
            self.stats,
            self.filters,
        )
        store.add_dispatch_listener(
            lambda r: self.hold.on_dispatch(r.topic, r.queue_id, r.consume_queue_offset, r.tags_code)
        )


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    with running_store(tmp_path / "store") as store:
        broker = Broker(store, tmp_path)
        broker.topics.create(TopicConfig("T", 4, 4))
        yield broker
        broker.filters.shutdown()
        broker.executor.shutdown()


def send(broker: Broker, *messages: rmq_pb2.Message, topic: str = "T") -> rmq_pb2.SendMessageResponse:
    request = rmq_pb2.SendMessageRequest(topic=topic, messages=messages)
    return asyncio.run(broker.send.process(request, PEER))


def pull(broker: Broker, queue_id: int, offset: int, **fields) -> rmq_pb2.PullMessageResponse:
    request = rmq_pb2.PullMessageRequest(
        consumer_group="G",
        topic="T",
        queue_id=queue_id,
        queue_offset=offset,
        max_messages=fields.pop("max_messages", 32),
        **fields,
    )
    return asyncio.run(broker.pull.process(request))


@pytest.mark.parametrize(
    ("store_status", "offset", "expected"),
    [
        (GetMessageStatus.FOUND, 3, rmq_pb2.FOUND),
        (GetMessageStatus.NO_MATCHED_MESSAGE, 3, rmq_pb2.NO_MATCHED_MSG),
        (GetMessageStatus.MESSAGE_WAS_REMOVING, 3, rmq_pb2.NO_MATCHED_MSG),
        (GetMessageStatus.OFFSET_FOUND_NULL, 3, rmq_pb2.NO_NEW_MSG),
        (GetMessageStatus.OFFSET_OVERFLOW_ONE, 3, rmq_pb2.NO_NEW_MSG),
        (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 3, rmq_pb2.OFFSET_ILLEGAL),
        (GetMessageStatus.OFFSET_TOO_SMALL, 3, rmq_pb2.OFFSET_ILLEGAL),
        (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, rmq_pb2.NO_NEW_MSG),
        (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 7, rmq_pb2.OFFSET_ILLEGAL),
        (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, rmq_pb2.NO_NEW_MSG),
        (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 7, rmq_pb2.OFFSET_ILLEGAL),
    ],
)
def test_status_mapping_longpolling_section_7(store_status: GetMessageStatus, offset: int,
                                             expected: int) -> None:
    assert pull_status(store_status, offset) == expected


@pytest.mark.parametrize("store_status", list(GetMessageStatus))
def test_every_store_status_has_a_pull_status(store_status: GetMessageStatus) -> None:
    for offset in (0, 3):
        assert pull_status(store_status, offset) in set(PullStatus)


def test_sub_expression_parsing() -> None:
    assert sub_expression_tag_codes("*") is None and sub_expression_tag_codes("") is None
    assert sub_expression_tag_codes("TagA || *") is None
    assert sub_expression_tag_codes(" TagA ||TagC||  TagD ") == frozenset(
        mf.tags_hash_code(t) for t in ("TagA", "TagC", "TagD")
    )
    both = frozenset(mf.tags_hash_code(t) for t in ("TagA", "TagB"))
    assert sub_expression_tag_codes("TagA |||| TagB") == both


def test_sub_expression_cache_stays_bounded() -> None:
    """Every distinct expression a client sends is parsed; at most SUB_EXPRESSION_CACHE_SIZE
    of them are kept."""
    sub_expression_tag_codes.cache_clear()
    for n in range(10_000):
        assert sub_expression_tag_codes(f"Tag{n} || Other{n}") is not None
    info = sub_expression_tag_codes.cache_info()
    assert info.maxsize == SUB_EXPRESSION_CACHE_SIZE
    assert info.currsize <= SUB_EXPRESSION_CACHE_SIZE


def test_born_host_from_peer() -> None:
    assert born_host_from_peer(PEER) == bytes([10, 1, 2, 3]) + (4567).to_bytes(4, "big")
    assert born_host_from_peer("ipv6:[::1]:4567") == bytes(8)
    assert born_host_from_peer("unix:/tmp/socket") == bytes(8)


def test_send_round_robin_properties_and_pull(broker: Broker) -> None:
    response = send(
        broker,
        *[
            rmq_pb2.Message(body=f"m{i}".encode(), tags="TagA" if i % 2 else "TagB", keys=f"k{i}")
            for i in range(6)
        ],
    )
    assert response.status.code == rmq_pb2.OK
    assert list(response.queue_ids) == [0, 1, 2, 3, 0, 1]
    assert list(response.queue_offsets) == [0, 0, 0, 0, 1, 1]
    assert list(send(broker, rmq_pb2.Message(body=b"next")).queue_ids) == [2]  # the counter carries on
    wait_dispatched(broker.store, "T", 0, 2)
    found = pull(broker, 0, 0)
    assert (found.pull_status, found.next_begin_offset, found.messages.count) == (rmq_pb2.FOUND, 2, 2)
    sizes = np.frombuffer(found.messages.sizes, dtype="<i4")
    messages = decode_records(found.messages.records, sizes)
    assert [(m.body, m.properties[mf.PROPERTY_TAGS], m.properties[mf.PROPERTY_KEYS]) for m in messages] == [
        (b"m0", "TagB", "k0"),
        (b"m4", "TagB", "k4"),
    ]
    assert messages[0].born_host == born_host_from_peer(PEER)
    assert list(response.msg_ids[:1]) == [
        mf.message_id(broker.store.config.store_host_bytes(), messages[0].physical_offset)
    ]


def test_send_validates_the_whole_batch_first(broker: Broker) -> None:
    def refusal(*messages: rmq_pb2.Message) -> tuple[int, str]:
        response = send(broker, *messages)
        return response.status.code, response.status.message

    ok = rmq_pb2.Message(body=b"fine", queue_id=0)
    assert refusal(ok, rmq_pb2.Message(body=b"")) == (
        rmq_pb2.MESSAGE_ILLEGAL,
        "message 1: message body is empty",
    )
    code, message = refusal(ok, rmq_pb2.Message(body=b"x" * 4000, properties={"p": "v" * 100}))
    assert code == rmq_pb2.MESSAGE_SIZE_EXCEEDED and message.startswith("message 1: message takes")
    assert refusal(ok, rmq_pb2.Message(body=b"x", delay_level=-1))[0] == rmq_pb2.ILLEGAL_ARGUMENT
    assert refusal(ok, rmq_pb2.Message(body=b"x", queue_id=4))[0] == rmq_pb2.ILLEGAL_ARGUMENT
    assert refusal(rmq_pb2.Message(body=b"x", tags="a\x02b"))[0] == rmq_pb2.MESSAGE_ILLEGAL
    assert broker.store.get_max_offset_in_queue("T", 0) == 0


def test_topic_permissions(broker: Broker) -> None:
    broker.topics.create(TopicConfig("read-only", 1, 1, 4))
    broker.topics.create(TopicConfig("write-only", 1, 1, 2))
    assert send(broker, rmq_pb2.Message(body=b"x"), topic="read-only").status.code == rmq_pb2.NO_PERMISSION
    request = rmq_pb2.PullMessageRequest(consumer_group="G", topic="write-only", max_messages=1)
    assert asyncio.run(broker.pull.process(request)).status.code == rmq_pb2.NO_PERMISSION


def test_pull_offset_corrections_tv4(broker: Broker) -> None:
    send(broker, *[rmq_pb2.Message(body=b"x", queue_id=1, tags="TagA") for _ in range(40)])
    wait_dispatched(broker.store, "T", 1, 40)

    def outcome(offset: int, **fields) -> tuple[int, int, int]:
        response = pull(broker, 1, offset, **fields)
        return response.pull_status, response.store_status, response.next_begin_offset

    assert outcome(0) == (rmq_pb2.FOUND, rmq_pb2.GMS_FOUND, 32)  # TV-18 first pull
    assert outcome(32) == (rmq_pb2.FOUND, rmq_pb2.GMS_FOUND, 40)
    assert outcome(40) == (rmq_pb2.NO_NEW_MSG, rmq_pb2.GMS_OFFSET_OVERFLOW_ONE, 40)
    assert outcome(300) == (rmq_pb2.OFFSET_ILLEGAL, rmq_pb2.GMS_OFFSET_OVERFLOW_BADLY, 0)
    assert outcome(10, sub_expression="TagB") == (rmq_pb2.NO_MATCHED_MSG, rmq_pb2.GMS_NO_MATCHED_MESSAGE, 40)
    assert outcome(0, max_messages=10**9)[2] == 40  # clamped to 100
    empty = pull(broker, 2, 7)
    assert (empty.pull_status, empty.store_status, empty.next_begin_offset) == (
        rmq_pb2.OFFSET_ILLEGAL,
        rmq_pb2.GMS_NO_MATCHED_LOGIC_QUEUE,
        0,
    )


def test_commit_offset_flag_and_held_pull(broker: Broker) -> None:
    async def scenario() -> rmq_pb2.PullMessageResponse:
        broker.hold.start()
        request = rmq_pb2.PullMessageRequest(
            consumer_group="G",
            topic="T",
            queue_id=3,
            queue_offset=0,
            max_messages=8,
            suspend_timeout_ms=10000,
            sys_flag=rmq_pb2.FLAG_SUSPEND | rmq_pb2.FLAG_COMMIT_OFFSET,
            commit_offset=0,
        )
        held = asyncio.create_task(broker.pull.process(request))
        await wait_until_async(lambda: broker.hold.held_count() == 1, "the pull held")
        assert not held.done()
        assert broker.offsets.query_offset("G", "T", 3) == 0  # stored even though the pull is held
        await broker.send.process(
            rmq_pb2.SendMessageRequest(topic="T", messages=[rmq_pb2.Message(body=b"wake up", queue_id=3)]),
            PEER,
        )
        response = await held
        broker.hold.shutdown()
        return response

    response = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert response.pull_status == rmq_pb2.FOUND and response.next_begin_offset == 1


def test_delay_rewrite_tv15_and_delivery_tv16(broker: Broker, tmp_path: Path) -> None:
    now = [1_000_000.0]
    schedule = ScheduleMessageService(
        broker.store, broker.topics, broker.executor, tmp_path, {3: 10000}, clock=lambda: now[0]
    )
    sent = send(
        broker,
        rmq_pb2.Message(body=b"later", queue_id=3, delay_level=3, tags="TagA"),
        rmq_pb2.Message(body=b"capped", queue_id=2, delay_level=99),
    )
    assert list(sent.queue_ids) == [3, 2] and list(sent.queue_offsets) == [-1, -1]
    wait_dispatched(broker.store, SCHEDULE_TOPIC, 2, 2)  # level 3 -> queue 2; 99 capped at 3
    parked = broker.store.get_message("G", SCHEDULE_TOPIC, 2, 0, 10)
    message, capped = decode_records(parked.buffer, parked.sizes)
    assert (capped.body, capped.properties[mf.PROPERTY_DELAY_TIME_LEVEL]) == (b"capped", "3")
    assert message.properties[mf.PROPERTY_REAL_TOPIC] == "T"
    assert message.properties[mf.PROPERTY_REAL_QUEUE_ID] == "3"
    assert message.properties[mf.PROPERTY_DELAY_TIME_LEVEL] == "3"

    store_ms = message.store_timestamp
    now[0] = (store_ms + 4000) / 1000
    assert asyncio.run(schedule.deliver_due(3)) == 6000  # due in 6 s: nothing delivered
    assert schedule.offsets.get(3, 0) == 0
    now[0] = (store_ms + 60_000) / 1000
    assert asyncio.run(schedule.deliver_due(3)) == 0
    assert schedule.offsets[3] == 2
    wait_dispatched(broker.store, "T", 3, 1)
    wait_dispatched(broker.store, "T", 2, 1)
    delivered = pull(broker, 3, 0, sub_expression="TagA")
    [restored] = decode_records(delivered.messages.records, np.frombuffer(delivered.messages.sizes, "<i4"))
    assert (restored.topic, restored.queue_id, restored.body) == ("T", 3, b"later")
    assert mf.PROPERTY_DELAY_TIME_LEVEL not in restored.properties
    assert asyncio.run(schedule.deliver_due(3)) is None  # drained
    schedule.persist()
    reloaded = ScheduleMessageService(broker.store, broker.topics, broker.executor, tmp_path, {3: 10000})
    reloaded.load()
    assert reloaded.offsets == {3: 2}


def test_correct_deliver_timestamp_tv23() -> None:
    assert correct_deliver_timestamp(2_000_000, 2_020_000, 10_000) == 2_000_000
    assert correct_deliver_timestamp(2_000_000, 2_005_000, 10_000) == 2_005_000


def test_send_one_stores_what_a_batch_of_one_stores(broker: Broker) -> None:
    """The single-message path (issue 41): queue round-robin, queue offsets, properties with tags and
    keys, a delayed message parked in the schedule topic and answered with queue offset -1, the
    topic's put counters, and the refusals a batch of one gets."""
    host = born_host_from_peer(PEER)
    plain = [asyncio.run(broker.send.send_one(OneMessage("T", b"b", tags="A", keys="k"), host))
             for _ in range(5)]
    assert [(r.queue_id, r.queue_offset) for r in plain] == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1)]
    delayed = asyncio.run(broker.send.send_one(OneMessage("T", b"d", queue_id=2, delay_level=1), host))
    assert (delayed.queue_id, delayed.queue_offset) == (2, -1)
    wait_dispatched(broker.store, SCHEDULE_TOPIC, 0, 1)
    found = pull(broker, 0, 0, max_messages=1).messages
    [record] = decode_records(found.records, np.frombuffer(found.sizes, "<i4"))
    assert (record.properties, record.born_host) == ({mf.PROPERTY_TAGS: "A", mf.PROPERTY_KEYS: "k"}, host)
    assert broker.store.get_max_offset_in_queue(SCHEDULE_TOPIC, 0) == 1
    assert broker.stats.snapshot()["T"].put_messages == 6
    for bad, code in [(OneMessage("T", b""), rmq_pb2.MESSAGE_ILLEGAL),
                      (OneMessage("T", b"b", queue_id=4), rmq_pb2.ILLEGAL_ARGUMENT),
                      (OneMessage("nope", b"b"), rmq_pb2.TOPIC_NOT_EXIST),
                      (OneMessage("T", b"x" * 5000), rmq_pb2.MESSAGE_SIZE_EXCEEDED)]:
        with pytest.raises(BrokerError) as refused:
            asyncio.run(broker.send.send_one(bad, host))
        assert refused.value.code == code
