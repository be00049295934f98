"""CONSUMER_SEND_MSG_BACK over a real store (spec consumer-pull-rebalance §18, TV-14;
consumption-longpolling-offsets §13.2, TV-11) and the membership watch streams."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq import message_format as mf
from rmq import retry
from rmq.broker_server.errors import BrokerError
from rmq.broker_server.offsets.consumer_ids_watch import ConsumerIdsWatchService
from rmq.broker_server.offsets.consumer_manager import ConsumerManager
from rmq.broker_server.offsets.producer_manager import ProducerManager
from rmq.broker_server.processors.consumer_send_msg_back import ConsumerSendMsgBackProcessor, choose_target
from rmq.broker_server.processors.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_delay_levels
from rmq.broker_server.processors.names import SCHEDULE_TOPIC
from rmq.broker_server.processors.topic_config_manager import PERM_READ, PERM_WRITE, TopicConfig
from rmq.store import MessageToStore
from rmq.stored_message import decode_record, offset_msg_id
from rmq.v1 import rmq_pb2
from tests.broker_server.store_fixture import running_store
from tests.broker_server.test_processors import Broker
from tests.waiting import wait_until

LEVELS = parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL)


@pytest.mark.parametrize(
    ("reconsume_times", "client_level", "expected_topic", "expected_level"),
    [
        (0, 0, "%RETRY%G", 3),  # 10 s
        (1, 0, "%RETRY%G", 4),  # 30 s
        (2, 0, "%RETRY%G", 5),  # 1 m
        (13, 0, "%RETRY%G", 16),  # 30 m
        (15, 0, "%RETRY%G", 18),  # 2 h
        (16, 0, "%DLQ%G", 0),
        (0, -1, "%DLQ%G", 0),
        (0, 5, "%RETRY%G", 5),  # client-controlled
    ],
)
def test_tv14_retry_delay_levels(
    reconsume_times: int, client_level: int, expected_topic: str, expected_level: int
) -> None:
    target = choose_target("G", client_level, reconsume_times, 16, max(LEVELS))
    assert (target.topic, target.delay_level) == (expected_topic, expected_level)
    if expected_level:
        assert (
            LEVELS[expected_level] == {3: 10000, 4: 30000, 5: 60000, 16: 1800000, 18: 7200000}[expected_level]
        )


def test_level_is_capped_at_the_brokers_highest() -> None:
    assert choose_target("G", 0, 5, 16, max_delay_level=2).delay_level == 2


class SendBackBroker(Broker):
    def __init__(self, store, path: Path) -> None:
        super().__init__(store, path, DEFAULT_MESSAGE_DELAY_LEVEL)
        self.known_groups = {"G"}
        self.announced = 0
        self.send_back = ConsumerSendMsgBackProcessor(
            store, self.topics, self.executor, max(LEVELS), self.known_groups.__contains__, self._announce
        )

    def _announce(self) -> None:
        self.announced += 1

    def put(self, reconsume_times: int = 0, properties: dict[str, str] | None = None, topic: str = "T",
            queue_id: int = 1) -> int:
        props = {mf.PROPERTY_TAGS: "TagA", mf.PROPERTY_KEYS: "k1 k2", "user": "v"} | (properties or {})
        result = self.store.put_message(
            MessageToStore(
                topic=topic,
                queue_id=queue_id,
                body=b"payload",
                properties=props,
                flag=7,
                born_timestamp=1234,
                reconsume_times=reconsume_times,
            )
        )
        return result.physical_offset

    def back(
        self, offset: int, delay_level: int = 0, max_times: int | None = None
    ) -> rmq_pb2.ConsumerSendMsgBackResponse:
        request = rmq_pb2.ConsumerSendMsgBackRequest(
            consumer_group="G", commit_log_offset=offset, delay_level=delay_level
        )
        if max_times is not None:
            request.max_reconsume_times = max_times
        return asyncio.run(self.send_back.process(request))

    def last_record(self, topic: str, queue_id: int):
        max_offset = self.store.get_max_offset_in_queue(topic, queue_id)
        result = self.store.get_message("x", topic, queue_id, max_offset - 1, 1)
        return decode_record(result.buffer), result


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[SendBackBroker]:
    with running_store(tmp_path / "store") as store:
        broker = SendBackBroker(store, tmp_path)
        broker.topics.create(TopicConfig("T", 4, 4))
        yield broker
        broker.executor.shutdown()


def wait_for_queue(broker: SendBackBroker, topic: str, queue_id: int, count: int) -> None:
    wait_until(lambda: broker.store.get_max_offset_in_queue(topic, queue_id) >= count,
               f"{topic}/{queue_id} reaching {count} entries")


def test_first_send_back_parks_a_copy_for_the_retry_topic_at_level_3(broker: SendBackBroker) -> None:
    offset = broker.put()
    original = decode_record(broker.store.look_message_by_offset(offset))
    response = broker.back(offset)
    assert response.status.code == rmq_pb2.OK
    assert (response.topic, response.delay_level) == ("%RETRY%G", 3)
    retry_config = broker.topics.get("%RETRY%G")
    assert (retry_config.read_queue_nums, retry_config.write_queue_nums, retry_config.perm) == (
        1,
        1,
        PERM_READ | PERM_WRITE,
    )
    assert broker.announced == 1
    wait_for_queue(broker, SCHEDULE_TOPIC, 2, 1)  # level 3 waits in queue 2
    copy, _ = broker.last_record(SCHEDULE_TOPIC, 2)
    assert copy.reconsume_times == 1
    assert copy.body == b"payload" and copy.flag == 7 and copy.born_timestamp == 1234
    assert copy.properties[mf.PROPERTY_REAL_TOPIC] == "%RETRY%G"
    assert copy.properties[mf.PROPERTY_REAL_QUEUE_ID] == "0"
    assert copy.properties[mf.PROPERTY_DELAY_TIME_LEVEL] == "3"
    assert copy.properties[retry.PROPERTY_RETRY_TOPIC] == "T"
    assert copy.properties[retry.PROPERTY_ORIGIN_MESSAGE_ID] == offset_msg_id(original)
    assert copy.properties[mf.PROPERTY_TAGS] == "TagA" and copy.properties[mf.PROPERTY_KEYS] == "k1 k2"
    assert copy.properties["user"] == "v"
    # the original is untouched
    assert decode_record(broker.store.look_message_by_offset(offset)) == original


def test_a_copy_sent_back_again_keeps_the_first_origin_and_topic(broker: SendBackBroker) -> None:
    first = broker.put(
        reconsume_times=1,
        properties={retry.PROPERTY_RETRY_TOPIC: "T", retry.PROPERTY_ORIGIN_MESSAGE_ID: "M1"},
        topic="%RETRY%G", queue_id=0,
    )
    assert broker.back(first).delay_level == 4
    wait_for_queue(broker, SCHEDULE_TOPIC, 3, 1)
    copy, _ = broker.last_record(SCHEDULE_TOPIC, 3)
    assert copy.reconsume_times == 2
    assert copy.properties[retry.PROPERTY_ORIGIN_MESSAGE_ID] == "M1"
    assert copy.properties[retry.PROPERTY_RETRY_TOPIC] == "T"


def test_origin_properties_a_producer_set_are_replaced_by_where_the_message_really_is(
        broker: SendBackBroker) -> None:
    """#25 item 5: `rmq dlq resend` publishes to RETRY_TOPIC, so only the broker may set it."""
    offset = broker.put(properties={retry.PROPERTY_RETRY_TOPIC: "payments",
                                    retry.PROPERTY_ORIGIN_MESSAGE_ID: "M9"})
    original = decode_record(broker.store.look_message_by_offset(offset))
    assert broker.back(offset, delay_level=-1).topic == "%DLQ%G"
    wait_for_queue(broker, "%DLQ%G", 0, 1)
    dead, _ = broker.last_record("%DLQ%G", 0)
    assert dead.properties[retry.PROPERTY_RETRY_TOPIC] == "T"
    assert dead.properties[retry.PROPERTY_ORIGIN_MESSAGE_ID] == offset_msg_id(original)


@pytest.mark.parametrize(("reconsume_times", "level", "max_times"), [(16, 0, None), (0, -1, None), (3, 0, 3)])
def test_dead_letters_go_to_the_write_only_dlq(
    broker: SendBackBroker, reconsume_times: int, level: int, max_times: int | None
) -> None:
    offset = broker.put(reconsume_times=reconsume_times)
    response = broker.back(offset, delay_level=level, max_times=max_times)
    assert (response.topic, response.delay_level) == ("%DLQ%G", 0)
    dlq = broker.topics.get("%DLQ%G")
    assert (dlq.read_queue_nums, dlq.perm) == (1, PERM_WRITE)
    wait_for_queue(broker, "%DLQ%G", 0, 1)
    copy, _ = broker.last_record("%DLQ%G", 0)
    assert copy.reconsume_times == reconsume_times + 1
    assert copy.properties[retry.PROPERTY_RETRY_TOPIC] == "T"
    assert mf.PROPERTY_DELAY_TIME_LEVEL not in copy.properties
    assert broker.topics.get("%RETRY%G") is None


@pytest.mark.parametrize(
    ("group", "offset", "code", "words"),
    [
        ("unknown", None, rmq_pb2.SUBSCRIPTION_GROUP_NOT_EXIST, "subscription group not exist, unknown"),
        ("G", 123456789, rmq_pb2.SYSTEM_ERROR, "look message by offset failed, 123456789"),
        ("G", 1, rmq_pb2.SYSTEM_ERROR, "look message by offset failed, 1"),  # not a record's start
    ],
)
def test_refusals_write_nothing(
    broker: SendBackBroker, group: str, offset: int | None, code: int, words: str
) -> None:
    real = broker.put()
    request = rmq_pb2.ConsumerSendMsgBackRequest(
        consumer_group=group, commit_log_offset=real if offset is None else offset
    )
    with pytest.raises(BrokerError) as refused:
        asyncio.run(broker.send_back.process(request))
    assert refused.value.code == code and words in refused.value.message
    assert broker.store.get_max_offset_in_queue(SCHEDULE_TOPIC, 2) == 0
    assert broker.topics.get("%RETRY%G") is None and broker.topics.get("%DLQ%G") is None


# ---------------------------------------------------------------- membership watch


async def _next(stream) -> list[str]:
    event = await asyncio.wait_for(stream.__anext__(), 2)
    assert event.status.code == rmq_pb2.OK
    return list(event.client_ids)


def test_watchers_hear_joins_and_leaves_and_a_closed_stream_unregisters() -> None:
    async def scenario() -> None:
        consumers = ConsumerManager()
        watches = ConsumerIdsWatchService(consumers, max_watchers=10)
        consumers.heartbeat("a", "G", rmq_pb2.CLUSTERING, {})
        consumers.heartbeat("b", "G", rmq_pb2.CLUSTERING, {})
        stream_a = watches.watch("G", "a")
        stream_b = watches.watch("G", "b")
        assert await _next(stream_a) == ["a", "b"]
        assert await _next(stream_b) == ["a", "b"]
        consumers.heartbeat("c", "G", rmq_pb2.CLUSTERING, {})
        assert await _next(stream_a) == ["a", "b", "c"]
        await stream_b.aclose()  # b's connection dropped
        assert consumers.consumer_list("G") == ["a", "c"]
        assert await _next(stream_a) == ["a", "c"]
        consumers.heartbeat("x", "other", rmq_pb2.CLUSTERING, {})  # another group: no event
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(stream_a.__anext__(), 0.2)

    asyncio.run(scenario())


def test_watches_are_bounded_and_one_per_client() -> None:
    async def scenario() -> None:
        consumers = ConsumerManager()
        watches = ConsumerIdsWatchService(consumers, max_watchers=2)
        stranger = await watches.watch("G", "a").__anext__()  # no heartbeat yet
        assert stranger.status.code == rmq_pb2.ILLEGAL_ARGUMENT and watches.watcher_count() == 0
        for client_id in ("a", "b", "c"):
            consumers.heartbeat(client_id, "G", rmq_pb2.CLUSTERING, {})
        first = watches.watch("G", "a")
        await _next(first)
        replacement = watches.watch("G", "a")
        await _next(replacement)
        with pytest.raises(StopAsyncIteration):  # the old stream ends, without unregistering
            await first.__anext__()
        await _next(watches.watch("G", "b"))
        assert watches.watcher_count() == 2
        refused = await watches.watch("G", "c").__anext__()
        assert refused.status.code == rmq_pb2.TOO_MANY_WATCHERS
        assert watches.watcher_count() == 2

    asyncio.run(scenario())


def test_a_group_too_long_for_a_retry_topic_still_heartbeats(tmp_path: Path) -> None:
    from rmq.broker_server.processors.client_manage_processor import ClientManageProcessor

    with running_store(tmp_path / "store") as store:
        broker = SendBackBroker(store, tmp_path)
        clients = ClientManageProcessor(broker.topics, ConsumerManager(), broker.send_back.on_topics_changed,
                                        ProducerManager(120_000, 8, 8))
        clients.heartbeat("c", "g" * 200, rmq_pb2.CLUSTERING, {}, rmq_pb2.CLIENT_PROTOCOL_RMQ, "")
        clients.heartbeat("c", "G", rmq_pb2.CLUSTERING, {}, rmq_pb2.CLIENT_PROTOCOL_RMQ, "")
        assert broker.topics.get("%RETRY%G") is not None and broker.announced == 1
        broker.executor.shutdown()
