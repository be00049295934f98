"""HAService: a slave store copies the master's CommitLog byte for byte at the same offsets and
builds its own ConsumeQueues; diverged slaves are refused; SYNC_MASTER puts wait for a slave
(docs/replication.md; spec store §2 handleHA)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rmq.broker_server.processors.pull_message_processor import pull_status
from rmq.statuses import GetMessageStatus, PullStatus
from rmq.store import BrokerRole, FlushDiskType, MessageStore, PutMessageStatus, StoreError, reput
from tests.store.conftest import message, small_config, wait_dispatched
from tests.waiting import wait_until


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Callable[..., MessageStore]]:
    opened: list[MessageStore] = []

    def open_(name: str, role: BrokerRole, **overrides) -> MessageStore:
        store = MessageStore(small_config(tmp_path / name, broker_role=role, **overrides))
        store.start()
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.shutdown()


def replicate(master: MessageStore, slave: MessageStore, chunk: int) -> None:
    """What the broker's transfer stream does: from the slave's end, `chunk` bytes at a time."""
    offset = master.ha_service.transfer_start(slave.get_commit_log_max_offset())
    while data := master.ha_service.read(offset, chunk):
        slave.append_replicated(offset, data)
        offset += len(data)


def commit_log_bytes(store: MessageStore) -> bytes:
    end = store.get_commit_log_max_offset()
    return b"".join(store.commit_log.read_bytes(offset, 1 << 20)
                    for offset in range(0, end, store.commit_log.mapped_file_queue.mapped_file_size))


def test_slave_holds_the_same_bytes_and_queue_offsets(stores) -> None:
    master = stores("master", BrokerRole.ASYNC_MASTER)
    slave = stores("slave", BrokerRole.SLAVE)
    for index in range(120):   # 8 KiB files: several file ends with blank records
        assert master.put_message(message(queue_id=index % 3, body=b"m%03d" % index, KEYS=f"k{index}")).ok
    replicate(master, slave, chunk=333)   # chunks end inside records
    wait_dispatched(slave)
    assert slave.get_commit_log_max_offset() == master.get_commit_log_max_offset()
    assert commit_log_bytes(slave) == commit_log_bytes(master)
    for queue_id in range(3):
        ours = master.get_message("g", "TopicTest", queue_id, 0, 100)
        theirs = slave.get_message("g", "TopicTest", queue_id, 0, 100)
        assert theirs.message_count == ours.message_count == 40
        assert theirs.buffer == ours.buffer
        assert slave.get_max_offset_in_queue("TopicTest", queue_id) == 40
    assert slave.query_message_by_key("TopicTest", "k7", 4, 0, 2**62).message_count == 1


def test_a_record_cut_by_a_chunk_is_dispatched_only_once_whole(stores) -> None:
    master = stores("master", BrokerRole.ASYNC_MASTER)
    slave = stores("slave", BrokerRole.SLAVE)
    assert master.put_message(message(body=b"x" * 200, KEYS="key")).ok
    data = master.ha_service.read(0, 1 << 20)
    cut = len(data) - 2   # inside the properties: the record's fields up to there all look right
    slave.append_replicated(0, data[:cut])
    slave.reput.do_reput()
    assert slave.get_max_offset_in_queue("TopicTest", 0) == 0
    slave.append_replicated(cut, data[cut:])
    wait_dispatched(slave)
    assert slave.get_message("g", "TopicTest", 0, 0, 10).buffer == data


def test_slave_refuses_puts_and_misplaced_bytes(stores) -> None:
    master = stores("master", BrokerRole.ASYNC_MASTER)
    slave = stores("slave", BrokerRole.SLAVE)
    assert slave.put_message(message()).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    master.put_message(message())
    data = master.ha_service.read(0, 1 << 20)
    with pytest.raises(StoreError, match="not at a CommitLog file start"):
        slave.append_replicated(10, data)
    slave.append_replicated(0, data)
    with pytest.raises(StoreError, match=f"this CommitLog ends at {len(data)}"):
        slave.append_replicated(0, data)
    with pytest.raises(StoreError, match="only a running slave"):
        master.append_replicated(len(data), data)


def test_diverged_slaves_are_refused(stores) -> None:
    master = stores("master", BrokerRole.ASYNC_MASTER)
    in_step = stores("in_step", BrokerRole.SLAVE)
    longer = stores("longer", BrokerRole.SLAVE)
    different = stores("different", BrokerRole.SLAVE)
    assert master.put_message(message(body=b"same")).ok
    replicate(master, in_step, chunk=1 << 20)
    data = master.ha_service.read(0, 1 << 20)
    longer.append_replicated(0, data + data)
    different.append_replicated(0, data.replace(b"same", b"diff"))

    def check(slave: MessageStore) -> str | None:
        check_offset, crc = slave.ha_service.tail_check()
        return master.ha_service.check_slave(slave.get_commit_log_max_offset(), check_offset, crc)

    assert check(in_step) is None
    assert "longer than the master's" in check(longer)
    assert f"differs from the master's in offsets [0, {len(data)})" in check(different)
    assert master.ha_service.check_slave(0, 0, 0) is None   # an empty slave starts from the beginning


def test_sync_master_acknowledges_once_a_slave_holds_the_batch(stores) -> None:
    master = stores("master", BrokerRole.SYNC_MASTER, flush_disk_type=FlushDiskType.ASYNC,
                    sync_flush_timeout_ms=200)
    assert master.put_message(message()).status is PutMessageStatus.SLAVE_NOT_AVAILABLE
    connection = master.ha_service.connect_slave("127.0.0.1:1", master.get_commit_log_max_offset())
    late = master.put_message(message())
    assert late.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    assert late.queue_offset == 1      # stored on the master all the same
    end = master.get_commit_log_max_offset()
    acker = threading.Timer(0.05, lambda: master.ha_service.slave_acked(connection, end + 1000))
    acker.start()
    assert master.put_message(message()).status is PutMessageStatus.PUT_OK
    acker.join()
    master.ha_service.disconnect_slave(connection)
    assert master.put_message(message()).status is PutMessageStatus.SLAVE_NOT_AVAILABLE


def test_async_master_does_not_wait(stores) -> None:
    master = stores("master", BrokerRole.ASYNC_MASTER, flush_disk_type=FlushDiskType.ASYNC)
    assert master.put_message(message()).status is PutMessageStatus.PUT_OK


@pytest.mark.parametrize("shift", [-1, 1, 4096], ids=["before_its_end", "one_byte_gap", "gap_of_a_page"])
def test_a_slave_refuses_bytes_that_do_not_continue_its_commit_log(stores, shift: int) -> None:
    """Bytes at any offset but the slave's end (below it: a rewrite; beyond it: a gap) are
    refused, and the slave's CommitLog keeps exactly what it had."""
    master = stores("master", BrokerRole.ASYNC_MASTER)
    slave = stores("slave", BrokerRole.SLAVE)
    for index in range(3):
        assert master.put_message(message(body=b"m%d" % index)).ok
    replicate(master, slave, chunk=1 << 20)
    end = slave.get_commit_log_max_offset()
    held = commit_log_bytes(slave)
    assert master.put_message(message(body=b"next")).ok
    data = master.ha_service.read(end, 1 << 20)
    with pytest.raises(StoreError, match=f"start at offset {end + shift} but this CommitLog ends at {end}"):
        slave.append_replicated(end + shift, data)
    assert slave.get_commit_log_max_offset() == end
    assert commit_log_bytes(slave) == held
    slave.append_replicated(end, data)   # the same bytes where they belong are taken
    assert commit_log_bytes(slave) == commit_log_bytes(master)


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC, FlushDiskType.SYNC])
def test_a_put_in_flight_when_the_master_is_fenced_is_never_acknowledged_ok(stores, flush: FlushDiskType
                                                                              ) -> None:
    """Controller mode: the heartbeat answer naming a newer master fences the store while a put
    waits for its slave; the slave's acknowledgement arriving after the fence does not make it
    OK (the new master never held those bytes; this member drops them when it rejoins)."""
    master = stores("master", BrokerRole.SYNC_MASTER, flush_disk_type=flush, sync_flush_timeout_ms=5000)
    connection = master.ha_service.connect_slave("127.0.0.1:1", master.get_commit_log_max_offset())

    def fence_then_ack() -> None:
        master.fence()
        master.ha_service.slave_acked(connection, 1 << 40)

    fencer = threading.Timer(0.05, fence_then_ack)
    fencer.start()
    in_flight = master.put_message(message())
    fencer.join()
    assert in_flight.status is not PutMessageStatus.PUT_OK
    assert master.put_message(message()).status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_a_sync_master_whose_controller_lease_lapsed_acknowledges_nothing_ok(stores) -> None:
    """The master lease (controller mode): past it a newer master may have been elected, so a put
    its slave holds is still stored but answered SLAVE_NOT_AVAILABLE until the lease is renewed."""
    master = stores("master", BrokerRole.SYNC_MASTER, sync_flush_timeout_ms=5000)
    connection = master.ha_service.connect_slave("127.0.0.1:1", master.get_commit_log_max_offset())
    master.ha_service.slave_acked(connection, 1 << 40)   # the slave holds whatever comes
    master.renew_lease(time.monotonic() + 60)
    assert master.put_message(message()).status is PutMessageStatus.PUT_OK
    master.renew_lease(time.monotonic() - 0.001)
    lapsed = master.put_message(message())
    assert lapsed.status is PutMessageStatus.SLAVE_NOT_AVAILABLE and lapsed.queue_offset == 1   # stored
    master.renew_lease(time.monotonic() + 60)
    assert master.put_message(message()).status is PutMessageStatus.PUT_OK


def readable(store: MessageStore) -> int:
    """How many messages of queue 0 a consumer can read (what the ConsumeQueue serves)."""
    return store.get_message("g", "TopicTest", 0, 0, 100).message_count


def test_a_controller_mode_sync_master_serves_only_what_its_sync_state_set_acknowledged(
        stores, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads end at the confirm offset (issue 47): a put no slave of the SyncStateSet holds (the
    master stored it alone: a deposed master's sends) is not readable, its queue's max offset does
    not count it; every member's acknowledgement makes it readable at once (the reput thread is
    woken: its idle wait is a minute here); a member not connected, or behind, holds reads; with
    no slave in the set, the master's own end counts."""
    monkeypatch.setattr(reput, "IDLE_WAIT_S", 60.0)
    master = stores("master", BrokerRole.SYNC_MASTER, flush_disk_type=FlushDiskType.ASYNC,
                    sync_flush_timeout_ms=100)
    assert master.put_message(message(body=b"before")).status is PutMessageStatus.SLAVE_NOT_AVAILABLE
    wait_dispatched(master)
    first = master.ha_service.connect_slave("127.0.0.1:1", master.get_commit_log_max_offset())
    master.bound_reads(frozenset({"127.0.0.1:1", "127.0.0.1:2"}))
    alone = master.put_message(message(body=b"alone"))
    assert alone.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT and alone.queue_offset == 1
    end = master.get_commit_log_max_offset()
    master.ha_service.slave_acked(first, end)
    master.reput.do_reput()
    assert readable(master) == 1 and master.get_max_offset_in_queue("TopicTest", 0) == 1
    second = master.ha_service.connect_slave("127.0.0.1:2", end - 1)
    master.reput.do_reput()
    assert readable(master) == 1   # the second member is one byte short of the record
    master.ha_service.slave_acked(second, end)
    wait_until(lambda: readable(master) == 2, "the acknowledged record is readable")   # the reput thread woke
    master.bound_reads(frozenset())   # the set is the master alone: its own end
    assert master.put_message(message(body=b"own")).queue_offset == 2   # no slave holds it
    wait_until(lambda: readable(master) == 3, "the master-only set confirms on append")


def test_a_slave_behind_for_longer_than_the_catch_up_time_leaves_the_in_sync_set(stores) -> None:
    """haMaxTimeSlaveNotCatchup: a slave whose acknowledgements stay behind what the master held
    (cut off silently: its stream stays open) leaves the in-sync set the master reports, so the
    SyncStateSet shrinks and reads go on; a slave holding everything stays in it however long
    the master is idle."""
    master = stores("master", BrokerRole.ASYNC_MASTER, flush_disk_type=FlushDiskType.ASYNC)
    master.ha_service.max_time_not_caught_up_s = 0.3
    assert master.put_message(message()).ok
    end = master.get_commit_log_max_offset()
    behind = master.ha_service.connect_slave("127.0.0.1:1", 0)
    master.ha_service.connect_slave("127.0.0.1:2", end)
    master.ha_service.slave_acked(behind, 1)
    master.ha_service.slave_acked(behind, 2)   # behind what the master held at its previous ack
    assert master.ha_service.in_sync_addresses(end) == ["127.0.0.1:1", "127.0.0.1:2"]
    wait_until(lambda: master.ha_service.in_sync_addresses(end) == ["127.0.0.1:2"],
               "the slave behind left the in-sync set")
    master.ha_service.slave_acked(behind, end)   # caught up: back in it
    assert master.ha_service.in_sync_addresses(end) == ["127.0.0.1:1", "127.0.0.1:2"]


def test_with_min_in_sync_1_a_master_acknowledges_alone_only_once_the_controller_set_is_itself(
        stores, monkeypatch: pytest.MonkeyPatch) -> None:
    """min_in_sync_replicas 1 (RocketMQ 5 minInSyncReplicas): never alone outside controller mode
    nor while the controller lists a slave, not even once the master reported the slave gone
    (unconfirmed); alone, readable at once, when the controller answered a set of the master
    alone. A returning slave is reported only once it holds what the master acknowledged alone,
    and from that report on puts and reads wait for it again."""
    monkeypatch.setattr(reput, "IDLE_WAIT_S", 60.0)
    master = stores("master", BrokerRole.SYNC_MASTER, flush_disk_type=FlushDiskType.ASYNC,
                    sync_flush_timeout_ms=100, min_in_sync_replicas=1, ha_max_time_not_caught_up_ms=200)
    ha = master.ha_service
    assert master.put_message(message()).status is PutMessageStatus.SLAVE_NOT_AVAILABLE   # no controller
    slave = ha.connect_slave("127.0.0.1:1", master.get_commit_log_max_offset())
    master.bound_reads(frozenset({"127.0.0.1:1"}))
    assert master.put_message(message()).status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    wait_until(lambda: ha.report_in_sync(master.get_commit_log_max_offset()) == [], "the slave fell behind")
    assert master.put_message(message()).status is PutMessageStatus.SLAVE_NOT_AVAILABLE   # not confirmed
    held = master.get_commit_log_max_offset()
    master.bound_reads(frozenset())   # the controller took the report: the master alone
    alone = master.put_message(message(body=b"alone"))
    assert alone.status is PutMessageStatus.PUT_OK and alone.queue_offset == 3
    wait_until(lambda: readable(master) == 4, "what the master acknowledged alone is readable")
    ha.slave_acked(slave, held)
    assert ha.in_sync_addresses(held) == ["127.0.0.1:1"] and ha.report_in_sync(held) == []   # lacks it
    ha.slave_acked(slave, master.get_commit_log_max_offset())
    assert ha.report_in_sync(master.get_commit_log_max_offset()) == ["127.0.0.1:1"]
    after = master.put_message(message(body=b"after"))   # the controller may count the slave already
    assert after.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    master.reput.do_reput()
    assert readable(master) == 4
    master.bound_reads(frozenset({"127.0.0.1:1"}))
    ha.slave_acked(slave, master.get_commit_log_max_offset())
    wait_until(lambda: readable(master) == 5, "the slave's acknowledgement makes the put readable")


def test_with_the_default_min_in_sync_a_master_never_acknowledges_alone_and_3_needs_two_slaves(
        stores) -> None:
    """min_in_sync_replicas 2 (the default) keeps "acknowledged means on a slave" with the
    controller's set the master alone; 3 waits for two slaves."""
    master = stores("master", BrokerRole.SYNC_MASTER, flush_disk_type=FlushDiskType.ASYNC,
                    sync_flush_timeout_ms=100)
    master.bound_reads(frozenset())
    assert master.put_message(message()).status is PutMessageStatus.SLAVE_NOT_AVAILABLE
    three = stores("three", BrokerRole.SYNC_MASTER, flush_disk_type=FlushDiskType.ASYNC,
                   sync_flush_timeout_ms=100, min_in_sync_replicas=3)
    end = three.get_commit_log_max_offset()
    first = three.ha_service.connect_slave("127.0.0.1:1", end)
    three.ha_service.slave_acked(first, 1 << 40)
    assert three.put_message(message()).status is PutMessageStatus.SLAVE_NOT_AVAILABLE   # one in sync
    second = three.ha_service.connect_slave("127.0.0.1:2", end)
    assert three.put_message(message()).status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT   # one holds it
    three.ha_service.slave_acked(second, 1 << 40)
    assert three.put_message(message()).status is PutMessageStatus.PUT_OK


def test_an_offset_a_slave_served_but_its_master_has_not_confirmed_waits_there_on_the_master(
        stores, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 47 (a chaos run's 22,259 duplicates): a slave dispatches every byte it holds, its
    controller-mode SYNC_MASTER only what its SyncStateSet acknowledged, so a consumer that read a
    queue to offset N on the slave may ask the master for N while the master serves less. The
    master answers "not there yet" at N (a held pull), never OFFSET_OVERFLOW_BADLY moving the
    consumer to the queue's start (min offset 0: next_begin_offset 0, and the client commits 0
    and reads the queue again); once acknowledged, N is read there."""
    monkeypatch.setattr(reput, "IDLE_WAIT_S", 60.0)
    master = stores("master", BrokerRole.SYNC_MASTER, flush_disk_type=FlushDiskType.ASYNC,
                    sync_flush_timeout_ms=100)
    slave = stores("slave", BrokerRole.SLAVE)
    for index in range(3):
        master.put_message(message(body=b"old%d" % index))
    wait_dispatched(master)
    ha = master.ha_service
    live = ha.connect_slave("127.0.0.1:1", master.get_commit_log_max_offset())
    ha.slave_acked(live, master.get_commit_log_max_offset())
    master.bound_reads(frozenset({"127.0.0.1:1", "127.0.0.1:2"}))   # a member of the set is down
    for index in range(3):
        master.put_message(message(body=b"new%d" % index))
    replicate(master, slave, chunk=1 << 20)
    wait_dispatched(slave)
    on_slave = slave.get_message("g", "TopicTest", 0, 0, 100)
    assert on_slave.message_count == 6 and on_slave.next_begin_offset == 6
    assert readable(master) == 3
    answer = master.get_message("g", "TopicTest", 0, 6, 32)
    assert (answer.status, answer.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_ONE, 6)
    assert pull_status(answer.status, 6) is PullStatus.NO_NEW_MSG
    ha.slave_acked(live, master.get_commit_log_max_offset())
    master.bound_reads(frozenset({"127.0.0.1:1"}))   # the controller dropped the member that is down
    wait_until(lambda: readable(master) == 6, "the acknowledged messages are readable")
    master.put_message(message(body=b"next"))
    ha.slave_acked(live, master.get_commit_log_max_offset())
    wait_until(lambda: master.get_message("g", "TopicTest", 0, 6, 32).message_count == 1,
               "the consumer reads on from where the slave left it")
    gone = master.get_message("g", "TopicTest", 0, 50, 32)   # past everything the master holds
    assert (gone.status, gone.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 0)
