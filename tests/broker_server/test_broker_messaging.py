"""One whole broker (in this process, served over gRPC on a loopback port) shared by the module
(each test uses its own topic): produce/pull round trips, every reachable pull status with its
nextBeginOffset correction, consumer offsets, topic offsets, and hostile requests."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from rmq import message_format as mf
from rmq.v1 import rmq_pb2
from tests.broker_server.in_process_broker import InProcessBroker, running_broker
from tests.rmq_stubs import Stubs, decode


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    with running_broker(tmp_path_factory.mktemp("messaging"), flush="sync") as server:
        yield server


@pytest.fixture(scope="module")
def rmq(broker: InProcessBroker) -> Iterator[Stubs]:
    stubs = Stubs.connect(broker.address)
    yield stubs
    stubs.close()


def wait_for_max_offset(rmq: Stubs, topic: str, queue_id: int, expected: int) -> None:
    """Messages become pullable once dispatched (ReputMessageService), just after the ack."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        queues = rmq.messaging.GetTopicOffsets(rmq_pb2.GetTopicOffsetsRequest(topic=topic)).queues
        if queues[queue_id].max_offset >= expected:
            return
        time.sleep(0.01)
    raise AssertionError(f"{topic} queue {queue_id} never reached max offset {expected}")


def test_round_trip_of_bodies_tags_keys_and_properties(rmq: Stubs) -> None:
    assert rmq.create_topic("round-trip", queues=2).code == rmq_pb2.OK
    sent = rmq.send(
        "round-trip",
        rmq_pb2.Message(body=b"first", tags="TagA", keys="order-1 order-2", properties={"color": "red"}),
        rmq_pb2.Message(body=bytes(range(256)), queue_id=1, flag=7, born_timestamp=1234),
        rmq_pb2.Message(body="über".encode(), tags="TagB", properties={"ключ": "значение"}),
    )
    assert sent.status.code == rmq_pb2.OK
    assert list(sent.queue_ids) == [0, 1, 1]  # round-robin for the first, named queue for the rest
    assert list(sent.queue_offsets) == [0, 0, 1]
    assert len(set(sent.msg_ids)) == 3 and all(len(msg_id) == 32 for msg_id in sent.msg_ids)
    wait_for_max_offset(rmq, "round-trip", 1, 2)

    first = rmq.pull("round-trip", 0, 0)
    assert (first.status.code, first.pull_status, first.next_begin_offset) == (rmq_pb2.OK, rmq_pb2.FOUND, 1)
    [message] = decode(first)
    assert (message.body, message.topic, message.queue_id, message.queue_offset) == (
        b"first",
        "round-trip",
        0,
        0,
    )
    assert message.properties[mf.PROPERTY_TAGS] == "TagA"
    assert message.properties[mf.PROPERTY_KEYS] == "order-1 order-2"
    assert message.properties["color"] == "red"
    assert message.born_host[:4] == bytes([127, 0, 0, 1])
    assert (
        mf.message_id(
            bytes([127, 0, 0, 1]) + int(rmq_address_port(rmq)).to_bytes(4, "big"), message.physical_offset
        )
        == sent.msg_ids[0]
    )

    second = rmq.pull("round-trip", 1, 0)
    assert second.messages.count == 2 and second.next_begin_offset == 2
    binary, text = decode(second)
    assert (binary.body, binary.flag, binary.born_timestamp) == (bytes(range(256)), 7, 1234)
    assert mf.PROPERTY_TAGS not in binary.properties
    assert text.body.decode() == "über" and text.properties["ключ"] == "значение"
    assert text.store_timestamp >= binary.store_timestamp > 0


def rmq_address_port(rmq: Stubs) -> str:
    [broker] = rmq.route.ListBrokers(rmq_pb2.ListBrokersRequest()).brokers
    return broker.address.rpartition(":")[2]


def test_pull_statuses_and_next_begin_offset_corrections(rmq: Stubs) -> None:
    assert rmq.create_topic("statuses", queues=2).code == rmq_pb2.OK
    sent = rmq.send(
        "statuses",
        *[rmq_pb2.Message(body=b"m%d" % i, queue_id=0, tags="TagA" if i < 3 else "TagB") for i in range(5)],
    )
    assert sent.status.code == rmq_pb2.OK
    wait_for_max_offset(rmq, "statuses", 0, 5)

    def outcome(queue_id: int, offset: int, **fields) -> tuple:
        response = rmq.pull("statuses", queue_id, offset, **fields)
        assert response.status.code == rmq_pb2.OK
        return (
            rmq_pb2.PullStatus.Name(response.pull_status),
            rmq_pb2.GetMessageStatus.Name(response.store_status),
            response.next_begin_offset,
            response.min_offset,
            response.max_offset,
        )

    # Spec TV-4 rows reachable on a live broker, with the PullStatus of longpolling §7.
    assert outcome(0, 1, max_messages=2) == ("FOUND", "GMS_FOUND", 3, 0, 5)
    assert outcome(0, 5) == ("NO_NEW_MSG", "GMS_OFFSET_OVERFLOW_ONE", 5, 0, 5)
    assert outcome(0, 9) == ("OFFSET_ILLEGAL", "GMS_OFFSET_OVERFLOW_BADLY", 0, 0, 5)  # min == 0
    assert outcome(0, 3, sub_expression="TagA") == ("NO_MATCHED_MSG", "GMS_NO_MATCHED_MESSAGE", 5, 0, 5)
    assert outcome(0, 0, sub_expression="TagB || TagC")[:3] == ("FOUND", "GMS_FOUND", 5)
    assert outcome(1, 0) == ("NO_NEW_MSG", "GMS_NO_MATCHED_LOGIC_QUEUE", 0, 0, 0)  # never written
    assert outcome(1, 7) == ("OFFSET_ILLEGAL", "GMS_NO_MATCHED_LOGIC_QUEUE", 0, 0, 0)

    tag_b = rmq.pull("statuses", 0, 0, sub_expression="TagB")
    assert [m.queue_offset for m in decode(tag_b)] == [3, 4]


def test_max_messages_and_max_bytes_bound_the_batch(rmq: Stubs) -> None:
    rmq.create_topic("batching", queues=1)
    assert (
        rmq.send("batching", *[rmq_pb2.Message(body=b"x" * 100) for _ in range(50)]).status.code == rmq_pb2.OK
    )
    wait_for_max_offset(rmq, "batching", 0, 50)
    assert rmq.pull("batching", 0, 0, max_messages=10).messages.count == 10
    huge = rmq.pull("batching", 0, 0, max_messages=2**31 - 1)  # clamped, not refused
    assert huge.messages.count == 50 and huge.next_begin_offset == 50
    record_size = len(huge.messages.records) // 50
    limited = rmq.pull("batching", 0, 0, max_messages=50, max_bytes=record_size * 3)
    assert limited.messages.count == 3 and limited.next_begin_offset == 3


def test_send_refusals_write_nothing(rmq: Stubs) -> None:
    rmq.create_topic("refusals", queues=1)

    def refused(*messages: rmq_pb2.Message, topic: str = "refusals") -> tuple[str, str]:
        response = rmq.send(topic, *messages)
        assert not response.msg_ids
        return rmq_pb2.Code.Name(response.status.code), response.status.message

    good = rmq_pb2.Message(body=b"ok")
    assert refused(good, rmq_pb2.Message(body=b"")) == ("MESSAGE_ILLEGAL", "message 1: message body is empty")
    code, message = refused(rmq_pb2.Message(body=b"x" * (4 * 1024 * 1024)))
    assert code == "MESSAGE_SIZE_EXCEEDED" and "the maximum is 4194304" in message
    code, message = refused(good, rmq_pb2.Message(body=b"x", properties={"big": "v" * 40000}))
    assert code == "PROPERTIES_SIZE_EXCEEDED" and message.startswith("message 1: properties take")
    code, message = refused(rmq_pb2.Message(body=b"x", queue_id=1))
    assert code == "ILLEGAL_ARGUMENT" and "queue_id 1 is out of range" in message
    assert refused(rmq_pb2.Message(body=b"x", properties={"a\x01b": "c"}))[0] == "MESSAGE_ILLEGAL"
    assert refused(good, topic="no-such-topic")[0] == "TOPIC_NOT_EXIST"
    assert refused(good, topic="bad topic!")[0] == "TOPIC_ILLEGAL"
    assert refused()[0] == "ILLEGAL_ARGUMENT"
    offsets = rmq.messaging.GetTopicOffsets(rmq_pb2.GetTopicOffsetsRequest(topic="refusals"))
    assert offsets.queues[0].max_offset == 0


def test_hostile_pull_requests_get_clear_statuses(rmq: Stubs) -> None:
    rmq.create_topic("hostile", queues=2)

    def code(**fields) -> str:
        request = (
            dict(consumer_group="g", topic="hostile", queue_id=0, queue_offset=0, max_messages=1) | fields
        )
        response = rmq.messaging.PullMessage(rmq_pb2.PullMessageRequest(**request), timeout=10)
        return f"{rmq_pb2.Code.Name(response.status.code)}: {response.status.message}"

    assert code(queue_offset=-1) == "ILLEGAL_ARGUMENT: queue_offset must not be negative, not -1"
    assert code(max_messages=0) == "ILLEGAL_ARGUMENT: max_messages must be positive, not 0"
    assert code(max_messages=-5).startswith("ILLEGAL_ARGUMENT")
    assert code(max_bytes=-1).startswith("ILLEGAL_ARGUMENT")
    assert code(queue_id=2).startswith("ILLEGAL_ARGUMENT: queue_id 2 is out of range")
    assert code(queue_id=-1).startswith("ILLEGAL_ARGUMENT")
    assert code(sys_flag=rmq_pb2.FLAG_CLASS_FILTER).startswith("ILLEGAL_ARGUMENT")
    assert code(sys_flag=rmq_pb2.FLAG_SUSPEND, suspend_timeout_ms=-1).startswith("ILLEGAL_ARGUMENT")
    assert code(topic="missing") == "TOPIC_NOT_EXIST: topic 'missing' does not exist on this broker"
    assert code(topic="") == "TOPIC_ILLEGAL: topic name is empty"
    assert code(consumer_group="") == "GROUP_ILLEGAL: consumer group is empty"
    assert code(consumer_group="no spaces").startswith("GROUP_ILLEGAL")


def test_topic_administration(rmq: Stubs) -> None:
    assert rmq.create_topic("admin-topic", queues=3).code == rmq_pb2.OK
    again = rmq.create_topic("admin-topic", queues=3)
    assert again.code == rmq_pb2.TOPIC_ALREADY_EXISTS and "3 read / 3 write queues" in again.message
    for name in ("x" * 128, "SCHEDULE_TOPIC_XXXX", "%RETRY%g", "a.b"):
        assert rmq.create_topic(name).code == rmq_pb2.TOPIC_ILLEGAL
    assert rmq.create_topic("zero", queues=0).code == rmq_pb2.ILLEGAL_ARGUMENT
    topics = rmq.route.ListTopics(rmq_pb2.ListTopicsRequest()).topics
    assert (
        rmq_pb2.TopicConfig(topic_name="admin-topic", read_queue_nums=3, write_queue_nums=3, perm=6) in topics
    )
    route = rmq.route.QueryRoute(rmq_pb2.QueryRouteRequest(topic="admin-topic"))
    assert [(q.broker_name, q.read_queue_nums) for q in route.queue_datas] == [("broker-a", 3)]
    rmq.send("admin-topic", rmq_pb2.Message(body=b"x"))
    rmq.messaging.UpdateConsumerOffsets(
        rmq_pb2.UpdateConsumerOffsetsRequest(
            consumer_group="g", offsets=[rmq_pb2.ConsumerOffset(topic="admin-topic", queue_id=0, offset=1)]
        )
    )
    delete = rmq.admin.DeleteTopic(rmq_pb2.DeleteTopicRequest(topic="admin-topic"))
    assert delete.status.code == rmq_pb2.OK
    assert (
        rmq.route.QueryRoute(rmq_pb2.QueryRouteRequest(topic="admin-topic")).status.code
        == rmq_pb2.TOPIC_NOT_EXIST
    )
    assert (
        rmq.admin.DeleteTopic(rmq_pb2.DeleteTopicRequest(topic="admin-topic")).status.code
        == rmq_pb2.TOPIC_NOT_EXIST
    )
    assert rmq.create_topic("admin-topic", queues=1).code == rmq_pb2.OK  # recreated: empty, no old offsets
    assert rmq.pull("admin-topic", 0, 0).store_status == rmq_pb2.GMS_NO_MATCHED_LOGIC_QUEUE
    query = rmq.messaging.QueryConsumerOffsets(
        rmq_pb2.QueryConsumerOffsetsRequest(consumer_group="g", topic="admin-topic")
    )
    assert list(query.offsets) == []


def test_update_topic_grows_queues_at_once_and_never_shrinks(rmq: Stubs) -> None:
    rmq.create_topic("growing", queues=2)

    def update(queues: int, perm: int = 6, topic: str = "growing") -> rmq_pb2.Status:
        config = rmq_pb2.TopicConfig(topic_name=topic, read_queue_nums=queues, write_queue_nums=queues,
                                     perm=perm)
        return rmq.admin.UpdateTopic(rmq_pb2.UpdateTopicRequest(config=config), timeout=10).status

    assert rmq.send("growing", rmq_pb2.Message(body=b"old", queue_id=1)).status.code == rmq_pb2.OK
    assert rmq.send("growing", rmq_pb2.Message(body=b"x", queue_id=3)).status.code == rmq_pb2.ILLEGAL_ARGUMENT
    assert update(4).code == rmq_pb2.OK
    route = rmq.route.QueryRoute(rmq_pb2.QueryRouteRequest(topic="growing"))
    assert [(q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [(4, 4, 6)]
    assert rmq.send("growing", rmq_pb2.Message(body=b"new", queue_id=3)).status.code == rmq_pb2.OK
    wait_for_max_offset(rmq, "growing", 3, 1)
    wait_for_max_offset(rmq, "growing", 1, 1)
    assert [m.body for m in decode(rmq.pull("growing", 3, 0))] == [b"new"]
    assert [m.body for m in decode(rmq.pull("growing", 1, 0))] == [b"old"]     # old queues keep their data

    shrink = update(3)
    assert shrink.code == rmq_pb2.ILLEGAL_ARGUMENT
    assert "cannot shrink from 4 to 3 read_queue_nums" in shrink.message
    assert update(4, topic="missing").code == rmq_pb2.TOPIC_NOT_EXIST
    assert update(4, perm=4).code == rmq_pb2.OK                                # read-only now
    assert rmq.send("growing", rmq_pb2.Message(body=b"x")).status.code == rmq_pb2.NO_PERMISSION


def test_consumer_offsets_update_query_and_commit_on_pull(rmq: Stubs) -> None:
    rmq.create_topic("progress", queues=2)
    rmq.send("progress", *[rmq_pb2.Message(body=b"x", queue_id=0) for _ in range(3)])
    wait_for_max_offset(rmq, "progress", 0, 3)

    def update(offsets: dict[int, int], increase_only: bool = False) -> rmq_pb2.Status:
        return rmq.messaging.UpdateConsumerOffsets(
            rmq_pb2.UpdateConsumerOffsetsRequest(
                consumer_group="progress-group",
                increase_only=increase_only,
                offsets=[
                    rmq_pb2.ConsumerOffset(topic="progress", queue_id=q, offset=o) for q, o in offsets.items()
                ],
            )
        ).status

    def query() -> dict[int, int]:
        response = rmq.messaging.QueryConsumerOffsets(
            rmq_pb2.QueryConsumerOffsetsRequest(consumer_group="progress-group", topic="progress")
        )
        return {entry.queue_id: entry.offset for entry in response.offsets}

    assert query() == {}
    assert update({0: 2, 1: 0}).code == rmq_pb2.OK
    assert query() == {0: 2, 1: 0}
    assert update({0: 1}, increase_only=True).code == rmq_pb2.OK and query()[0] == 2
    assert update({0: 1}).code == rmq_pb2.OK and query()[0] == 1  # commitOffset overwrites
    refused = update({0: 3, 1: -1})
    assert refused.code == rmq_pb2.ILLEGAL_ARGUMENT and query() == {0: 1, 1: 0}  # nothing applied
    assert update({5: 1}).code == rmq_pb2.ILLEGAL_ARGUMENT
    pulled = rmq.pull(
        "progress", 0, 1, group="progress-group", sys_flag=rmq_pb2.FLAG_COMMIT_OFFSET, commit_offset=3
    )
    assert pulled.pull_status == rmq_pb2.FOUND and query()[0] == 3
    removed = rmq.messaging.RemoveConsumerOffsets(
        rmq_pb2.RemoveConsumerOffsetsRequest(
            consumer_group="progress-group", offsets=[rmq_pb2.ConsumerOffset(topic="progress", queue_id=1)]
        )
    )
    assert removed.status.code == rmq_pb2.OK and query() == {0: 3}
    unknown = rmq.messaging.QueryConsumerOffsets(
        rmq_pb2.QueryConsumerOffsetsRequest(consumer_group="progress-group", topic="nope")
    )
    assert unknown.status.code == rmq_pb2.TOPIC_NOT_EXIST


def test_topic_offsets_and_search_by_time(rmq: Stubs) -> None:
    rmq.create_topic("timeline", queues=2)
    rmq.send("timeline", rmq_pb2.Message(body=b"early", queue_id=0))
    time.sleep(0.05)   # not an event: the clock moves on, so "middle" lies strictly between the two
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    rmq.send("timeline", rmq_pb2.Message(body=b"late", queue_id=0))
    wait_for_max_offset(rmq, "timeline", 0, 2)
    queues = rmq.messaging.GetTopicOffsets(rmq_pb2.GetTopicOffsetsRequest(topic="timeline")).queues
    assert [(q.queue_id, q.min_offset, q.max_offset) for q in queues] == [(0, 0, 2), (1, 0, 0)]
    assert queues[0].last_store_timestamp > middle and queues[1].last_store_timestamp == 0

    def search(timestamp: int) -> int:
        return rmq.messaging.SearchOffset(
            rmq_pb2.SearchOffsetRequest(topic="timeline", queue_id=0, timestamp=timestamp)
        ).offset

    assert (search(0), search(middle), search(middle + 10**7)) == (0, 1, 2)
    bad = rmq.messaging.SearchOffset(rmq_pb2.SearchOffsetRequest(topic="timeline", queue_id=9))
    assert bad.status.code == rmq_pb2.ILLEGAL_ARGUMENT


def test_query_message_by_key(rmq: Stubs) -> None:
    rmq.create_topic("keyed", queues=1)
    rmq.send(
        "keyed",
        rmq_pb2.Message(body=b"a", keys="k1"),
        rmq_pb2.Message(body=b"b", keys="k2 k1"),
        rmq_pb2.Message(body=b"c", keys="k3"),
    )
    wait_for_max_offset(rmq, "keyed", 0, 3)
    found = rmq.messaging.QueryMessageByKey(
        rmq_pb2.QueryMessageByKeyRequest(topic="keyed", key="k1", max_messages=10)
    )
    assert found.status.code == rmq_pb2.OK and sorted(m.body for m in decode(found)) == [b"a", b"b"]


def test_membership_calls_validate_their_fields(rmq: Stubs) -> None:
    heartbeat = rmq.messaging.Heartbeat(rmq_pb2.HeartbeatRequest(client_id="", consumer_group="g"))
    assert (
        heartbeat.status.code == rmq_pb2.ILLEGAL_ARGUMENT and heartbeat.status.message == "client_id is empty"
    )
    assert (
        rmq.messaging.Heartbeat(rmq_pb2.HeartbeatRequest(client_id="c", consumer_group="")).status.code
        == rmq_pb2.GROUP_ILLEGAL
    )
    assert (
        rmq.messaging.GetConsumerList(rmq_pb2.GetConsumerListRequest(consumer_group="nobody")).client_ids
        == []
    )
    lock = rmq.messaging.LockBatchMQ(rmq_pb2.LockBatchRequest(consumer_group="g", client_id=""))
    assert lock.status.code == rmq_pb2.ILLEGAL_ARGUMENT
