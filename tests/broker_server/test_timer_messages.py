"""Timer messages (docs/internals/timer.md) through one whole broker in this process whose wall
clock the test moves (tests.clocks.ManualClock): TIMER_DELIVER_MS / TIMER_DELAY_SEC /
TIMER_DELAY_MS over the 4.x remoting port (the SDK's single sends), rmq.v1 gRPC batches and the
SDK's deliver_time_ms / delay, held until their second then stored in their real queue with
their properties; bad timer properties refused naming the property with nothing stored; flow
control; recall by handle (its producer only, an altered handle refused); a restart with
timers due while the broker was down. kill -9 and failover: integration_tests/test_timer_messages.py."""

from __future__ import annotations

import base64
import io
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rmq import message_format as mf
from rmq.broker_server.background_tasks import cancel_all
from rmq.broker_server.metrics.collectors import BrokerCollector
from rmq.broker_server.processors.names import TIMER_TOPIC
from rmq.broker_server.processors.timer_message_store import TimerMessageStore
from rmq.cli import main as cli
from rmq.connector import Message, Producer
from rmq.connector.client import OutgoingMessage
from rmq.connector.errors import RmqError
from rmq.remoting.request_code import RequestCode, ResponseCode
from rmq.store.timer_log import EntryState
from rmq.stored_message import StoredMessage, decode_records
from rmq.v1 import rmq_pb2
from tests.broker_server.acl_broker import acl_broker, client
from tests.broker_server.in_process_broker import InProcessBroker, start_remoting_broker
from tests.broker_server.remoting_client import RemotingTestClient
from tests.broker_server.test_remoting_broker import request
from tests.clocks import ManualClock
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(60)


def start(store_dir: Path, clock: ManualClock, **settings: object) -> InProcessBroker:
    return start_remoting_broker(store_dir, clock=clock, flush="sync", **settings)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def broker(tmp_path: Path, clock: ManualClock) -> Iterator[InProcessBroker]:
    server = start(tmp_path / "store", clock)
    yield server
    server.stop()


@pytest.fixture
def producer(broker: InProcessBroker) -> Iterator[Producer]:
    with Producer(broker.address) as client:
        client.client.create_topic("timed", queues=2)
        yield client


def stored(broker: InProcessBroker, topic: str, queue_id: int = 0) -> list[StoredMessage]:
    store = broker.controller.store
    result = store.get_message("test", topic, queue_id, 0, 1000)
    if not result.message_count:
        return []
    return list(decode_records(bytes(result.buffer), result.sizes))


def delivered(broker: InProcessBroker) -> list[StoredMessage]:
    return stored(broker, "timed", 0) + stored(broker, "timed", 1)


def bodies_after(broker: InProcessBroker, clock: ManualClock, seconds: float, count: int) -> set[bytes]:
    clock.advance(seconds)
    wait_until(lambda: len(delivered(broker)) >= count, f"{count} timer messages delivered")
    return {m.body for m in delivered(broker)}


def test_each_timer_property_holds_a_message_until_its_second_on_every_send_path(broker, producer, clock):
    now_ms = int(clock() * 1000)
    due = str(now_ms + 30_000)
    properties = {"TIMER_DELIVER_MS": due, "region": "eu"}
    producer.send(Message("timed", b"remoting-deliver-ms", properties=properties))
    producer.send(Message("timed", b"remoting-delay-sec", properties={"TIMER_DELAY_SEC": "10"}))
    at = datetime.fromtimestamp(clock() + 90, UTC)
    producer.send([Message("timed", b"grpc-delay", delay=timedelta(seconds=60)),
                   Message("timed", b"grpc-datetime", deliver_time_ms=at)])
    wait_until(lambda: len(stored(broker, TIMER_TOPIC)) == 4, "4 messages parked in the timer queue")
    assert delivered(broker) == []
    assert bodies_after(broker, clock, 11, 1) == {b"remoting-delay-sec"}
    assert bodies_after(broker, clock, 20, 2) == {b"remoting-delay-sec", b"remoting-deliver-ms"}
    assert len(delivered(broker)) == 2
    assert bodies_after(broker, clock, 60, 4) == {b"remoting-delay-sec", b"remoting-deliver-ms",
                                                  b"grpc-delay", b"grpc-datetime"}
    by_body = {m.body: m for m in delivered(broker)}
    first = by_body[b"remoting-deliver-ms"]
    assert first.properties["region"] == "eu"
    assert first.properties[mf.PROPERTY_TIMER_DELIVER_MS] == str(now_ms + 30_000)
    assert first.properties[mf.PROPERTY_REAL_TOPIC] == "timed"
    assert "TIMER_DELAY_SEC" not in by_body[b"remoting-delay-sec"].properties   # normalised to DELIVER_MS
    assert len(delivered(broker)) == 4   # each once


def test_a_time_in_the_past_is_delivered_now(broker, producer, clock):
    producer.send(Message("timed", b"past", deliver_time_ms=int(clock() * 1000) - 60_000))
    assert [m.body for m in delivered(broker)] == [b"past"]
    assert stored(broker, TIMER_TOPIC) == []


@pytest.mark.parametrize(("properties", "named"), [
    ({"TIMER_DELIVER_MS": "soon"}, "TIMER_DELIVER_MS"),
    ({"TIMER_DELIVER_MS": "-5"}, "TIMER_DELIVER_MS"),
    ({"TIMER_DELAY_SEC": str(10 * 365 * 86_400)}, "timer_max_delay_s"),
    ({"TIMER_DELAY_MS": "1", "TIMER_DELAY_SEC": "1", "TIMER_DELIVER_MS": "1"},
     "TIMER_DELIVER_MS, TIMER_DELAY_SEC"),
    ({"TIMER_DELAY_MS": "9" * 64}, "TIMER_DELAY_MS"),
])
def test_bad_timer_properties_are_refused_naming_the_property_and_nothing_is_stored(
        broker, producer, properties, named):
    batch = [Message("timed", b"good", properties={"TIMER_DELAY_SEC": "5"}),
             Message("timed", b"bad", properties=properties)]
    with pytest.raises(RmqError) as refused:
        producer.send(batch)
    assert refused.value.code == rmq_pb2.WHEEL_TIMER_MSG_ILLEGAL
    assert named in str(refused.value)
    with pytest.raises(RmqError) as alone:   # one message: over the remoting port
        producer.send(batch[1])
    assert named in str(alone.value)
    assert stored(broker, TIMER_TOPIC) == [] and delivered(broker) == []


def test_flow_control_refuses_timers_past_the_pending_bound(tmp_path, clock):
    broker = start(tmp_path / "store", clock, timer_max_pending=3, timer_max_pending_per_account=3)
    try:
        with Producer(broker.address) as producer:
            producer.client.create_topic("timed", queues=2)
            for index in range(3):
                producer.send(Message("timed", b"%d" % index, delay=timedelta(seconds=30)))
            with pytest.raises(RmqError) as refused:
                producer.send(Message("timed", b"one too many", delay=timedelta(seconds=30)))
            assert refused.value.code == rmq_pb2.WHEEL_TIMER_FLOW_CONTROL
            assert "timer_max_pending=3:" in str(refused.value)   # the total bound, not the per-account one
            producer.send(Message("timed", b"due now", deliver_time_ms=0))   # not a pending timer
    finally:
        broker.stop()


def test_recall_cancels_a_pending_timer_by_its_handle_and_refuses_an_altered_one(broker, producer, clock):
    kept = producer.send(Message("timed", b"kept", delay=timedelta(seconds=30)))
    recalled = producer.send(Message("timed", b"recalled", delay=timedelta(seconds=30)))
    assert kept.recall_handle and recalled.recall_handle and kept.queue_offset == -1
    wait_until(lambda: broker.controller.timer.pending == 2, "both timers on the wheel")
    topic, broker_name, _offset, *rest = base64.urlsafe_b64decode(recalled.recall_handle).split(b"\n")
    altered = base64.urlsafe_b64encode(b"\n".join([topic, broker_name, b"0", *rest])).decode()
    with pytest.raises(RmqError) as refused:
        producer.recall(altered)
    assert refused.value.code == rmq_pb2.ILLEGAL_ARGUMENT
    assert "recall handle is not valid" in str(refused.value)
    producer.recall(recalled.recall_handle)
    with pytest.raises(RmqError) as again:
        producer.recall(recalled.recall_handle)
    assert again.value.code == rmq_pb2.QUERY_NOT_FOUND and "recalled" in str(again.value)
    assert broker.controller.timer.pending == 1
    assert bodies_after(broker, clock, 31, 1) == {b"kept"}
    time.sleep(0.2)
    assert [m.body for m in delivered(broker)] == [b"kept"]


def test_timers_due_while_the_broker_was_down_are_delivered_after_restart_in_time_order(tmp_path, clock):
    broker = start(tmp_path / "store", clock)
    with Producer(broker.address) as producer:
        producer.client.create_topic("timed", queues=1)
        for seconds in (50, 20, 40, 10, 30, 3600):
            producer.send(Message("timed", b"%d" % seconds, delay=timedelta(seconds=seconds)))
    wait_until(lambda: broker.controller.timer.pending == 6, "6 timers on the wheel")
    clock.advance(12)
    wait_until(lambda: len(delivered(broker)) == 1, "the 10 s timer delivered")
    broker.stop()
    clock.advance(60)   # 20..50 s come due while it is down
    broker = start(tmp_path / "store", clock)
    try:
        wait_until(lambda: broker.controller.timer.pending == 1, "the timers due meanwhile delivered")
        assert [m.body for m in delivered(broker)] == [b"10", b"20", b"30", b"40", b"50"]
        figures = BrokerCollector(broker.controller.metrics_figures()).collect()
        samples = {s.name: s.value for family in figures for s in family.samples}
        assert samples["rocketmq_timing_messages"] == 1
        assert samples["rocketmq_timer_dequeue_total"] == 4   # since this start
    finally:
        broker.stop()


def test_cli_produces_timer_messages_and_recalls_one_by_its_printed_handle(broker, producer, clock, capsys,
                                                                           monkeypatch):
    at = datetime.fromtimestamp(clock() + 20, UTC).isoformat()
    for flags, body in ((["--delay", "30s"], "recalled"), (["--deliver-at", at], "kept")):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(body.encode() + b"\n")))
        assert cli.main(["produce", "timed", *flags, "--endpoints", broker.address]) == 0
    handles = [line.split()[1] for line in capsys.readouterr().out.splitlines()
               if line.startswith("recall-handle ")]
    assert len(handles) == 2
    assert cli.main(["message", "recall", handles[0], "--endpoints", broker.address]) == 0
    assert "recalled" in capsys.readouterr().out
    assert bodies_after(broker, clock, 31, 1) == {b"kept"}
    time.sleep(0.2)
    assert [m.body for m in delivered(broker)] == [b"kept"]


def test_a_delivery_cut_off_before_it_was_marked_is_found_in_the_index_not_made_twice(tmp_path, clock):
    """A kill -9 between storing a delivery and marking it DELIVERED leaves the entry DELIVERING
    and the read time before its slot: after the restart its copy is found, not stored again, and
    the slot's entry marked DELIVERED is skipped."""
    broker = start(tmp_path / "store", clock)
    with Producer(broker.address) as producer:
        producer.client.create_topic("timed", queues=1)
        producer.send([Message("timed", b"cut-off", delay=timedelta(seconds=10)),
                       Message("timed", b"marked", delay=timedelta(seconds=10))])
        producer.send(Message("timed", b"sentinel", delay=timedelta(seconds=40)))
    timer = broker.controller.timer
    wait_until(lambda: timer.pending == 3, "3 timers on the wheel")
    clock.advance(12)
    wait_until(lambda: timer.pending == 1, "the first two timers delivered")
    entry = timer.timer_log.read(0)
    assert entry is not None and entry.state is EntryState.DELIVERED
    broker.run(_as_if_cut_off(timer, entry.deliver_ms))
    broker.stop()
    clock.advance(60)
    broker = start(tmp_path / "store", clock)
    try:
        wait_until(lambda: b"sentinel" in {m.body for m in delivered(broker)}, "the later timer delivered")
        assert [m.body for m in delivered(broker)] == [b"cut-off", b"marked", b"sentinel"]
    finally:
        broker.stop()


async def _as_if_cut_off(timer: TimerMessageStore, deliver_ms: int) -> None:
    await cancel_all(timer._tasks)   # the task stopped: nothing moves the state back meanwhile
    timer.timer_log.set_state(0, EntryState.DELIVERING)
    timer.checkpoint.read_time_ms = deliver_ms // 1000 * 1000
    timer.pending += 1   # as the count on a start would find it


@pytest.mark.parametrize("sync_interval_ms", [600_000, 100])   # synced once (at start), or often
def test_a_slave_that_becomes_master_delivers_the_pending_timers_exactly_once(tmp_path, clock,
                                                                              sync_interval_ms):
    """Synced once, the new master looks every delivery the old one made up in the index; synced
    often, the slave has settled them itself (its pending count follows the master's)."""
    master = start(tmp_path / "master", clock, broker_name="group", broker_role="SYNC_MASTER")
    with Producer(master.address) as producer:
        producer.client.create_topic("timed", queues=1)
        slave = start(tmp_path / "slave", clock, broker_name="group", broker_role="SLAVE", broker_id=1,
                      master=master.address, slave_synchronize_interval_ms=sync_interval_ms)
        try:
            for seconds in (10, 20, 30, 40, 50):
                producer.send(Message("timed", b"%d" % seconds, delay=timedelta(seconds=seconds)))
            wait_until(lambda: slave.controller.timer.pending == 5, "the slave's wheel holds 5 timers")
            clock.advance(32)
            wait_until(lambda: len(delivered(master)) == 3, "the master delivered 3")
            wait_until(lambda: len(delivered(slave)) == 3, "the slave holds the 3 deliveries")
            if sync_interval_ms < 1000:
                wait_until(lambda: slave.controller.timer.pending == 2, "the slave settled the 3 deliveries")
        finally:
            slave.stop()
    master.stop()
    promoted = start(tmp_path / "slave", clock, broker_name="group", broker_role="SYNC_MASTER")
    try:
        clock.advance(30)
        wait_until(lambda: promoted.controller.timer.pending == 0, "the new master delivered the other 2")
        assert [m.body for m in delivered(promoted)] == [b"10", b"20", b"30", b"40", b"50"]
    finally:
        promoted.stop()


def test_timer_records_met_again_after_a_crash_are_chained_once(tmp_path, clock):
    """A kill -9 before the checkpoint moved: the enqueue meets the timer queue's records again
    from the checkpoint's offset, and an entry already in its slot's chain is not chained twice."""
    broker = start(tmp_path / "store", clock)
    with Producer(broker.address) as producer:
        producer.client.create_topic("timed", queues=1)
        producer.send([Message("timed", b"%d" % n, delay=timedelta(seconds=10)) for n in range(3)])
        producer.send(Message("timed", b"later", delay=timedelta(seconds=20)))
    timer = broker.controller.timer
    wait_until(lambda: timer.pending == 4, "4 timers on the wheel")
    broker.run(_as_if_checkpointed_before(timer))
    broker.stop()
    clock.advance(30)
    broker = start(tmp_path / "store", clock)
    try:
        wait_until(lambda: broker.controller.timer.pending == 0, "the 4 timers delivered")
        assert [m.body for m in delivered(broker)] == [b"0", b"1", b"2", b"later"]
    finally:
        broker.stop()


async def _as_if_checkpointed_before(timer: TimerMessageStore) -> None:
    await cancel_all(timer._tasks)
    timer.checkpoint.enqueue_offset = 0


def test_accounts_have_a_share_of_pending_timers_and_recall_only_their_own(tmp_path):
    """Under --acl: one account's timers stop at timer_max_pending_per_account while another's
    are still parked — a batch is counted whole, so it cannot pass the share (it did by all but
    one message while each was checked against the chained count alone); a recall handle works
    for its producer's account and an admin only."""
    broker = acl_broker(tmp_path, timer_max_pending=10, timer_max_pending_per_account=2)
    timer = [OutgoingMessage(b"later", properties={mf.PROPERTY_TIMER_DELAY_SEC: "600"})]
    try:
        with client(broker, "admin1") as admin, client(broker, "producer") as producer, \
                client(broker, "prying") as prying:
            admin.create_topic("orders", queues=1)
            with pytest.raises(RmqError) as overshoot:
                producer.send("orders", timer * 3)
            assert overshoot.value.code == rmq_pb2.WHEEL_TIMER_FLOW_CONTROL
            assert "0 timer messages pending and 3 more" in str(overshoot.value)
            handles = [producer.send("orders", timer).recall_handles[0] for _ in range(2)]
            wait_until(lambda: broker.controller.timer.pending == 2, "the 2 timers on the wheel")
            with pytest.raises(RmqError) as refused:
                producer.send("orders", timer)
            assert refused.value.code == rmq_pb2.WHEEL_TIMER_FLOW_CONTROL
            assert "account 'producer'" in str(refused.value)
            assert "timer_max_pending_per_account=2" in str(refused.value)
            prying.send("orders", timer)   # another account's share
            with pytest.raises(RmqError) as foreign:
                prying.recall_message(handles[0])
            assert foreign.value.code == rmq_pb2.NO_PERMISSION
            assert "belongs to another account" in str(foreign.value)
            producer.recall_message(handles[0])
            admin.recall_message(handles[1])
            assert broker.controller.timer.pending == 1
    finally:
        broker.stop()


def test_commit_log_retention_keeps_the_files_of_pending_timers(tmp_path, clock):
    broker = start(tmp_path / "store", clock, store={"mapped_file_size_commit_log": 64 * 1024})
    store = broker.controller.store
    try:
        with Producer(broker.address) as producer:
            producer.client.create_topic("timed", queues=1)
            producer.client.create_topic("filler", queues=1)
            producer.send(Message("timed", b"kept", delay=timedelta(seconds=30)))
            wait_until(lambda: broker.controller.timer.pending == 1, "the timer on the wheel")
            for _ in range(4):   # a few CommitLog files past the timer's
                producer.send([Message("filler", b"x" * 1000) for _ in range(64)])
        assert store.clean_expired_files(force=True) == 0   # the timer's file is the first
        clock.advance(31)
        wait_until(lambda: broker.controller.timer.pending == 0, "the timer delivered")
        broker.run(_clean_on_the_loop(broker.controller.timer))
        assert store.clean_expired_files(force=True) > 0
    finally:
        broker.stop()


async def _clean_on_the_loop(timer: TimerMessageStore) -> None:
    timer.clean()


def test_a_store_of_the_former_timer_heap_resumes_where_it_had_delivered(tmp_path, clock):
    """The third release kept DELAY messages in a heap with `timerOffset.json` (the first timer
    queue offset not delivered): the wheel starts there, so nothing it delivered comes again."""
    broker = start(tmp_path / "store", clock)
    with Producer(broker.address) as producer:
        producer.client.create_topic("timed", queues=1)
        for body in (b"delivered-before", b"pending"):
            producer.send(Message("timed", body, delay=timedelta(seconds=10)))
    wait_until(lambda: broker.controller.timer.pending == 2, "2 timers on the wheel")
    broker.stop()
    for name in ("timerlog", "timerwheel", "config/timerCheck.json"):   # as the third release left it
        path = tmp_path / "store" / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    (tmp_path / "store" / "config" / "timerOffset.json").write_text('{"committedOffset": 1}')
    clock.advance(11)
    broker = start(tmp_path / "store", clock)
    try:
        wait_until(lambda: broker.controller.timer.pending == 1, "the timer chained again")
        clock.advance(1)   # the current second, where a timer already due is chained, has passed
        wait_until(lambda: len(delivered(broker)) == 1, "the pending timer delivered")
        assert [m.body for m in delivered(broker)] == [b"pending"]
    finally:
        broker.stop()


def test_recall_over_the_4x_remoting_port_cancels_the_timer_and_names_its_message_id(broker, producer):
    """RocketMQ 5.3's RECALL_MESSAGE (370): topic and recallHandle; the answer's msgId is the
    message's UNIQ_KEY; a second recall is QUERY_NOT_FOUND."""
    sent = producer.send(Message("timed", b"recalled", delay=timedelta(seconds=30)))
    wait_until(lambda: broker.controller.timer.pending == 1, "the timer on the wheel")
    with RemotingTestClient(broker.config.remoting_listen) as remoting:
        answer = remoting.call(request(RequestCode.RECALL_MESSAGE, producerGroup="pg", topic="timed",
                                       recallHandle=sent.recall_handle))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        parked = stored(broker, TIMER_TOPIC)[0]   # then the recall record
        assert answer.ext_fields["msgId"] == parked.properties[mf.PROPERTY_UNIQ_KEY]
        assert broker.controller.timer.pending == 0
        again = remoting.call(request(RequestCode.RECALL_MESSAGE, topic="timed",
                                      recallHandle=sent.recall_handle))
        assert again.code == ResponseCode.QUERY_NOT_FOUND and "recalled" in again.remark
