"""The official RocketMQ 4.x C++ client (PyPI `rocketmq` 0.4.4, librocketmq.so) against a broker's
remoting port, with nothing in between: it finds the route on the broker itself, produces (sync,
orderly, batch) and push-consumes (concurrently with a failing message retried, and orderly); what
it sends is read by the rmq SDK with tags, keys, properties and ids intact and the other way
round; the offsets it commits show in `rmq group progress`; the ACL applies to it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.broker_server.processors.topic_config_manager import TopicConfig
from rmq.broker_server.security.acl_file import AclFile
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.connector.admin import MQAdmin, ResetTarget, ResetTo
from rmq.connector.client import OutgoingMessage, RmqClient
from tests.acl_files import write_acl
from tests.broker_server.cpp_client_runner import client_result, cpp_client_problem, run_client, start_client
from tests.broker_server.in_process_broker import InProcessBroker, start_remoting_broker
from tests.broker_server.remoting_interop import (
    FAST_RETRY_LEVELS,
    QUEUES,
    group_progress,
    sdk_messages,
)
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(cpp_client_problem() is not None, reason=str(cpp_client_problem()))


def start_broker(store: Path, topic: str, **settings: object) -> InProcessBroker:
    broker = start_remoting_broker(store, message_delay_level=FAST_RETRY_LEVELS, **settings)
    broker.controller.topics.create(TopicConfig(topic, QUEUES, QUEUES))
    return broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    broker = start_broker(tmp_path / "store", "cpp")
    yield broker
    broker.stop()


def as_cpp_prints_it(offset_msg_id: str) -> str:
    """The C++ client's rendering of an offset message id: it writes the IPv4 address's bytes in
    reverse on little-endian machines (docs/remoting-protocol.md), the port and offset as they are."""
    return bytes.fromhex(offset_msg_id[:8])[::-1].hex().upper() + offset_msg_id[8:]


def test_cpp_producer_and_push_consumer_interoperate_with_the_sdk(broker: InProcessBroker) -> None:
    address = broker.config.remoting_listen
    specs = [
        {"body": f"cpp-{n}", "tags": f"tag{n}", "keys": f"key{n}", "properties": {"color": f"c{n}"}}
        for n in range(3)
    ]
    produced = run_client(do="produce", address=address, topic="cpp", group="cpp-pg", messages=specs)
    assert produced["ok"], produced
    by_body = {row["body"].decode(): row for row in sdk_messages(broker, "cpp")}
    for spec, sent in zip(specs, produced["sent"], strict=True):
        row = by_body[spec["body"]]
        assert (row["tags"], row["keys"], dict(row["properties"])["color"]) == (
            spec["tags"],
            spec["keys"],
            spec["properties"]["color"],
        )
        assert dict(row["properties"])["UNIQ_KEY"] == sent["msg_id"]  # the id the 4.x producer reported
    sdk = RmqClient(broker.address)
    try:
        sdk_sent = sdk.send(
            "cpp", [OutgoingMessage(b"from-sdk", tags="sdk", keys="sdk-key", properties={"color": "sdk"})]
        )
    finally:
        sdk.close()

    consumed = run_client(
        do="consume", address=address, topic="cpp", group="cpp-cg", expect=4, fail_once_key="key1"
    )["received"]
    by_body = {message["body"]: message for message in consumed}
    assert set(by_body) == {"cpp-0", "cpp-1", "cpp-2", "from-sdk"}
    assert by_body["cpp-1"]["reconsume_times"] == 1 and by_body["cpp-1"]["topic"] == "cpp"  # retried
    assert (
        by_body["from-sdk"]["tags"],
        by_body["from-sdk"]["keys"],
        by_body["from-sdk"]["color"],
        by_body["from-sdk"]["id"],
    ) == ("sdk", "sdk-key", "sdk", as_cpp_prints_it(sdk_sent.msg_ids[0]))
    progress = group_progress(broker, "cpp-cg")
    queues = [row for row in progress["queues"] if row["topic"] == "cpp"]
    assert len(queues) == QUEUES and all(row["consumer_offset"] == row["max_offset"] for row in queues)
    assert sum(row["max_offset"] for row in queues) == 4 and progress["total_lag"] == 0


def test_cpp_orderly_and_batch_sends_reach_an_orderly_consumer_in_order(broker: InProcessBroker) -> None:
    address = broker.config.remoting_listen
    ordered = [
        {"body": f"{key}-{n}", "keys": key, "order_key": ord(key)} for n in range(4) for key in ("a", "b")
    ]
    assert run_client(do="produce", address=address, topic="cpp", group="cpp-pg", messages=ordered)["ok"]
    batch = [{"body": f"batch-{n}", "tags": "batch"} for n in range(3)]
    assert run_client(do="produce", address=address, topic="cpp", group="cpp-pg", messages=batch, batch=True)[
        "ok"
    ]
    consumed = run_client(
        do="consume",
        address=address,
        topic="cpp",
        group="cpp-orderly",
        orderly=True,
        expect=len(ordered) + len(batch),
        fail_once_key="a",  # a-0 fails once: the queue waits and consumes it again before a-1
    )["received"]
    for key in ("a", "b"):
        assert [m["body"] for m in consumed if m["keys"] == key] == [f"{key}-{n}" for n in range(4)]
    assert sorted(m["body"] for m in consumed if m["tags"] == "batch") == [s["body"] for s in batch]
    assert broker.controller.locks.size() == 0  # the consumer unlocked its queues on shutdown


ACL = """accounts:
  - {accessKey: cpp-user, secretKey: 'cpp-secret', topicPerms: ['cpp=PUB|SUB'], groupPerms: ['cpp-cg=SUB']}
"""


def test_the_cpp_client_signs_and_the_acl_decides(tmp_path: Path) -> None:
    security = ServerSecurity(acl_file=AclFile(write_acl(tmp_path / "acl.yml", ACL)))
    broker = start_broker(tmp_path / "store", "cpp", security=security)
    try:
        scenario = {
            "address": broker.config.remoting_listen,
            "topic": "cpp",
            "group": "cpp-pg",
            "messages": [{"body": "signed", "tags": "t"}],
        }
        refused = run_client(do="produce", access_key="cpp-user", secret_key="wrong", **scenario)
        assert not refused["ok"] and "error" in refused["sent"][0]
        assert run_client(do="produce", access_key="cpp-user", secret_key="cpp-secret", **scenario)["ok"]
        consumed = run_client(
            do="consume",
            address=broker.config.remoting_listen,
            topic="cpp",
            group="cpp-cg",
            expect=1,
            access_key="cpp-user",
            secret_key="cpp-secret",
        )["received"]
        assert [m["body"] for m in consumed] == ["signed"]
    finally:
        broker.stop()


def test_cpp_broadcasting_consumers_each_read_every_message(broker: InProcessBroker, tmp_path: Path) -> None:
    address = broker.config.remoting_listen
    consumers = [
        start_client(
            tmp_path / f"home-{n}",
            do="consume",
            address=address,
            topic="cpp",
            group="cpp-bc",
            broadcast=True,
            expect=3,
            timeout_s=100,
        )
        for n in range(2)
    ]
    # a new broadcasting consumer starts at the end of each queue: send once both hold their pulls
    wait_until(
        lambda: broker.controller.hold_service.held_count() >= 2 * QUEUES, "both consumers pulling", 90
    )
    messages = [{"body": f"bc-{n}", "tags": "bc"} for n in range(3)]
    assert run_client(do="produce", address=address, topic="cpp", group="cpp-pg", messages=messages)["ok"]
    for consumer in consumers:
        assert sorted(m["body"] for m in client_result(consumer)["received"]) == ["bc-0", "bc-1", "bc-2"]


def test_cpp_pull_consumer_reads_every_queue(broker: InProcessBroker) -> None:
    address = broker.config.remoting_listen
    messages = [{"body": f"pulled-{n}", "tags": "p", "keys": f"k{n}"} for n in range(4)]
    assert run_client(do="produce", address=address, topic="cpp", group="cpp-pg", messages=messages)["ok"]
    received = run_client(do="pull", address=address, topic="cpp", group="cpp-pull")["received"]
    assert sorted((m["body"], m["tags"], m["keys"]) for m in received) == [
        (f"pulled-{n}", "p", f"k{n}") for n in range(4)
    ]
    assert {m["queue_id"] for m in received} == set(range(QUEUES))


def test_a_cpp_producer_creates_a_topic_where_auto_creation_is_on(tmp_path: Path) -> None:
    broker = start_broker(
        tmp_path / "store", "cpp", auto_create_topic_enable=True, default_topic_queue_nums=QUEUES
    )
    try:
        messages = [{"body": "first", "tags": "new"}]
        sent = run_client(
            do="produce",
            address=broker.config.remoting_listen,
            topic="created-by-send",
            group="cpp-pg",
            messages=messages,
        )
        assert sent["ok"], sent
        assert [row["body"] for row in sdk_messages(broker, "created-by-send")] == [b"first"]
    finally:
        broker.stop()


def test_cpp_timer_properties_hold_messages_until_their_time_and_bad_ones_are_refused(
        broker: InProcessBroker) -> None:
    """What the 4.x clients' setDeliverTimeMs / setDelayTimeSec / setDelayTimeMs set: each held
    until its time (not readable at once), then delivered with its properties; a malformed one
    is refused with nothing stored (docs/internals/timer.md)."""
    address = broker.config.remoting_listen
    due_ms = int(time.time() * 1000) + 2_000
    specs = [{"body": "deliver-ms", "properties": {"TIMER_DELIVER_MS": str(due_ms), "color": "red"}},
             {"body": "delay-sec", "properties": {"TIMER_DELAY_SEC": "2"}},
             {"body": "delay-ms", "properties": {"TIMER_DELAY_MS": "2000"}}]
    produced = run_client(do="produce", address=address, topic="cpp", group="cpp-pg", messages=specs)
    assert produced["ok"], produced
    assert sdk_messages(broker, "cpp") == []   # held, not readable at once
    wait_until(lambda: len(sdk_messages(broker, "cpp")) == 3, "the 3 timer messages delivered")
    assert time.time() * 1000 >= due_ms
    by_body = {row["body"].decode(): dict(row["properties"]) for row in sdk_messages(broker, "cpp")}
    assert by_body["deliver-ms"]["color"] == "red"
    refused = run_client(do="produce", address=address, topic="cpp", group="cpp-pg",
                         messages=[{"body": "bad", "properties": {"TIMER_DELIVER_MS": "soon"}}])
    assert not refused["ok"] and "error" in refused["sent"][0]   # the C++ client keeps the remark to itself
    assert len(sdk_messages(broker, "cpp")) == 3 and broker.controller.timer.pending == 0   # nothing stored


def test_a_live_cpp_push_consumer_adopts_an_offset_reset(broker: InProcessBroker, tmp_path: Path) -> None:
    """RocketMQ's resetOffset reaches a 4.x client: the live C++ push consumer counts as told
    (RESET_CONSUMER_CLIENT_OFFSET over its remoting connection), drops its position and consumes
    the topic again from the reset offsets."""
    group = "cpp-reset"

    def committed() -> int:
        offsets = [broker.controller.offsets.query_offset(group, "cpp", q) for q in range(QUEUES)]
        return sum(max(offset or 0, 0) for offset in offsets)

    with RmqClient(broker.address) as sdk:
        sdk.send("cpp", [OutgoingMessage(f"m{n}".encode()) for n in range(3)])
        consumer = start_client(tmp_path, do="consume", address=broker.config.remoting_listen, topic="cpp",
                                group=group, expect=6, timeout_s=60)
        try:
            wait_until(lambda: committed() == 3, "the C++ consumer's first pass committed", timeout=30)
            report = MQAdmin(sdk).reset_offsets(group, "cpp", ResetTarget(ResetTo.EARLIEST))
            assert len(report.notified) == 1 and report.untold == []
        finally:
            received = client_result(consumer)["received"]
    assert sorted(message["body"] for message in received) == ["m0", "m0", "m1", "m1", "m2", "m2"]
