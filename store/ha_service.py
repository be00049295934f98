"""HAService: the store's side of master/slave replication (RocketMQ HAService, HAConnection's
reads, HAClient's appends, GroupTransferService), byte-level and transport-free: the broker
carries the bytes (ARCHITECTURE.md §2, docs/replication.md).

Master: `read` gives CommitLog bytes from a slave's offset, `check_slave` refuses a slave
whose CommitLog is longer than ours or holds different bytes, `slave_acked` records what a
slave holds and `wait_for_slave` is the SYNC_MASTER wait (GroupTransferService). Slave:
`MessageStore.append_replicated` writes the bytes at the same offsets and `tail_check` says
what the first report covers.

Controller mode, SYNC_MASTER: reads are bounded by the *confirm offset* (RocketMQ
CommitLog#getConfirmOffset with allAckInSyncStateSet): the CommitLog offset every slave of the
group's SyncStateSet acknowledged, as the controller last accepted that set; with no slave in it,
the master's own end. Dispatch to the ConsumeQueues stops there (`MessageStore`), so no read
door (pull, pop, Flight, query by key) serves what a master stored alone: a deposed master
cannot hand a consumer queue offsets the new master fills with other messages.

The set that counts is the controller's: the slaves of the last heartbeat it answered OK
(`bound_reads`) together with every slave reported since (`report_in_sync`), which the
controller may have taken already. Acknowledgements follow the same set (allAckInSyncStateSet):
a SYNC_MASTER answers PUT_OK only once every slave of it holds the put, besides
`min_in_sync_replicas - 1` slaves, since the controller may elect any member of the set. With
`min_in_sync_replicas` 1 (RocketMQ 5 minInSyncReplicas) a SYNC_MASTER whose set is the master
alone acknowledges a put without a slave: the controller elects only from that set, so no member
lacking the put can become master. A slave joins the report only once it holds everything
acknowledged.
"""

from __future__ import annotations

import itertools
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from rmq.statuses import PutMessageStatus
from rmq.store.commit_log import CommitLog

TAIL_CHECK_BYTES = 4096                       # bytes before a slave's end compared with the master's
HA_MAX_GAP_NOT_IN_SYNC = 256 * 1024 * 1024    # haMaxGapNotInSync: a slave further behind is not "OK"
HA_TRANSFER_BATCH_SIZE = 1024 * 1024          # haTransferBatchSize (RocketMQ: 32 KiB), bytes per chunk
# haMaxTimeSlaveNotCatchup (RocketMQ 5: 15 s): a slave behind the master's end for longer is not in
# sync (a slave cut off silently keeps its stream open until the gRPC keepalive ends it, ~80 s)
HA_MAX_TIME_NOT_CAUGHT_UP_S = 15.0
# minInSyncReplicas, master included (RocketMQ's default is 1): 2 keeps SYNC_MASTER's
# "acknowledged means on a slave too"; 1 lets a controller-mode master whose in-sync set the
# controller shrank to itself acknowledge alone
MIN_IN_SYNC_REPLICAS = 2


@dataclass
class SlaveProgress:
    """One connected slave (RocketMQ HAConnection): its address and acknowledged offset, when it
    last held everything the master had at its previous acknowledgement, and what that was."""

    address: str
    ack_offset: int
    caught_up_at: float = field(default_factory=time.monotonic)
    master_end: int = 0


class HAService:
    def __init__(self, commit_log: CommitLog, max_gap_not_in_sync: int = HA_MAX_GAP_NOT_IN_SYNC,
                 min_in_sync_replicas: int = MIN_IN_SYNC_REPLICAS,
                 max_time_not_caught_up_s: float = HA_MAX_TIME_NOT_CAUGHT_UP_S) -> None:
        self.commit_log = commit_log
        self.max_gap_not_in_sync = max_gap_not_in_sync
        self.max_time_not_caught_up_s = max_time_not_caught_up_s
        # members (master included) that hold a put before a SYNC_MASTER acknowledges it
        self.min_in_sync_replicas = min_in_sync_replicas
        self._slaves: dict[int, SlaveProgress] = {}
        self._ids = itertools.count(1)
        self._acked = threading.Condition()
        self.new_data_listeners: list[Callable[[], None]] = []   # each run by the store after an append
        # controller-mode SYNC_MASTER: the slaves (addresses) of the SyncStateSet; None: reads unbounded
        self._sync_state_set: frozenset[str] | None = None
        # slaves reported in sync since the controller last answered: it may count them already
        self._unconfirmed: frozenset[str] = frozenset()
        # the slaves that count: both sets together (replaced whole, so read without the lock)
        self._members: frozenset[str] = frozenset()
        self._acked_end = 0   # the end of what this master acknowledged (PUT_OK)
        self._confirm_offset = 0
        self._confirm_listeners: list[Callable[[], None]] = []

    # -- master: connections and acknowledgements -------------------------------------------------

    def connect_slave(self, address: str, offset: int) -> int:
        """Register a slave that holds CommitLog bytes up to `offset`; returns its connection id."""
        with self._acked:
            connection = next(self._ids)
            self._slaves[connection] = SlaveProgress(address, offset)
            self._acked.notify_all()
        return connection

    def disconnect_slave(self, connection: int) -> None:
        with self._acked:
            self._slaves.pop(connection, None)
            self._acked.notify_all()

    def slave_acked(self, connection: int, offset: int) -> None:
        """The slave holds every byte below `offset` (push2SlaveMaxOffset)."""
        with self._acked:
            progress = self._slaves.get(connection)
            if progress is None:
                return
            if offset >= progress.master_end:   # it holds what the master had at its previous ack
                progress.caught_up_at = time.monotonic()
            progress.master_end = self.commit_log.get_max_offset()
            if offset <= progress.ack_offset:
                return
            progress.ack_offset = offset
            self._acked.notify_all()
            confirmed = self._advance_confirm()
        if confirmed:
            self._confirmed()

    # -- master: the confirm offset (controller mode) -----------------------------------------------

    def bound_reads(self, sync_state_set: frozenset[str]) -> None:
        """Controller mode, SYNC_MASTER: from now on reads end at the confirm offset, what every
        slave in `sync_state_set` (their addresses: the in-sync slaves this master reported in a
        heartbeat the controller answered OK) acknowledged. What was readable stays readable: the
        confirm offset never goes back (a slave joining behind it holds reads until it caught up)."""
        with self._acked:
            confirmed = self._set_members(sync_state_set, frozenset())
        if confirmed:
            self._confirmed()

    def report_in_sync(self, master_put_where: int) -> list[str]:
        """The in-sync slaves a controller-mode master reports in a heartbeat: from now until the
        controller answers, they count as members of the set (acknowledgements and reads wait
        for them). A slave that lacks something this master acknowledged (RocketMQ: an ack offset
        below the confirm offset) is left out: it must never become electable without those bytes."""
        addresses = self.in_sync_addresses(master_put_where)
        with self._acked:
            acked = {p.address: p.ack_offset for p in self._slaves.values()}
            reported = [a for a in addresses if acked.get(a, 0) >= self._acked_end]
            confirmed = self._sync_state_set is not None and self._set_members(
                self._sync_state_set, self._unconfirmed | frozenset(reported))
        if confirmed:
            self._confirmed()
        return reported

    def _set_members(self, sync_state_set: frozenset[str], unconfirmed: frozenset[str]) -> bool:
        """Under the lock: the SyncStateSet's slaves as confirmed and as reported since (puts
        waiting for a member that left are woken); True when the confirm offset moved."""
        if not self._members:   # until now every byte stored was confirmed on append
            self._confirm_offset = max(self._confirm_offset, self.commit_log.get_max_offset())
        self._sync_state_set, self._unconfirmed = sync_state_set, unconfirmed
        self._members = sync_state_set | unconfirmed
        self._acked.notify_all()
        return self._advance_confirm()

    def confirm_offset(self) -> int:
        """Where reads end (on every dispatch: no lock): the CommitLog's end unless bounded by a
        SyncStateSet with a slave in it."""
        if not self._members:
            return self.commit_log.get_max_offset()
        return self._confirm_offset

    def add_confirm_listener(self, listener: Callable[[], None]) -> None:
        """listener() whenever the confirm offset moved up (the store dispatches up to it); any thread."""
        self._confirm_listeners.append(listener)

    def _advance_confirm(self) -> bool:
        """Under the lock: raise the confirm offset to the lowest acknowledgement of the
        SyncStateSet's slaves, each connected (a member not connected confirms nothing). True
        when it moved."""
        members = self._members
        if not members:
            return False
        acked: dict[str, int] = {}
        for progress in self._slaves.values():
            if progress.address in members:
                acked[progress.address] = max(acked.get(progress.address, 0), progress.ack_offset)
        if len(acked) < len(members):
            return False
        confirmed = min(min(acked.values()), self.commit_log.get_max_offset())
        if confirmed <= self._confirm_offset:
            return False
        self._confirm_offset = confirmed
        return True

    def _confirmed(self) -> None:
        for listener in self._confirm_listeners:
            listener()

    def slaves(self) -> list[SlaveProgress]:
        with self._acked:
            return [SlaveProgress(p.address, p.ack_offset) for p in self._slaves.values()]

    def push_to_slave_max_offset(self) -> int:
        with self._acked:
            return max((p.ack_offset for p in self._slaves.values()), default=0)

    def in_sync_addresses(self, master_put_where: int) -> list[str]:
        """The connected slaves less than max_gap_not_in_sync behind and, unless they hold
        everything, caught up within max_time_not_caught_up_s (the in-sync set)."""
        since = time.monotonic() - self.max_time_not_caught_up_s
        with self._acked:
            return [p.address for p in self._slaves.values()
                    if master_put_where - p.ack_offset < self.max_gap_not_in_sync
                    and (p.ack_offset >= master_put_where or p.caught_up_at >= since)]

    def wait_for_slave(self, next_offset: int, timeout_ms: int) -> PutMessageStatus:
        """handleHA for SYNC_MASTER: PUT_OK once min_in_sync_replicas - 1 slaves (at least one)
        and, in controller mode, every slave of the in-sync set (`_members`, as it stands when
        they answer: a set the controller shrank wakes the wait) hold every byte below
        `next_offset`, or at once when this master may acknowledge alone (`acknowledges_alone`);
        SLAVE_NOT_AVAILABLE when fewer slaves are connected and in sync; FLUSH_SLAVE_TIMEOUT
        when they did not confirm within the timeout (the batch stays stored on the master)."""
        with self._acked:
            if self._acknowledges_alone():
                return self._acknowledge(next_offset)
        needed = max(self.min_in_sync_replicas - 1, 1)
        if len(set(self.in_sync_addresses(next_offset))) < needed:
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        with self._acked:
            if self._acked.wait_for(lambda: self._held_by_enough(next_offset, needed),
                                    max(timeout_ms, 0) / 1000):
                return self._acknowledge(next_offset)
        return PutMessageStatus.FLUSH_SLAVE_TIMEOUT

    def _acknowledge(self, next_offset: int) -> PutMessageStatus:
        """Under the lock (a report never sees the put unacknowledged and then a slave lacking
        it counted): PUT_OK, and a slave is reported in sync only once it holds `next_offset`."""
        self._acked_end = max(self._acked_end, next_offset)
        return PutMessageStatus.PUT_OK

    def _held_by_enough(self, offset: int, needed: int) -> bool:
        """Under the lock: `needed` slaves, and every slave of the in-sync set (RocketMQ
        allAckInSyncStateSet: the controller may elect any of them), hold every byte below
        `offset`."""
        holding = {p.address for p in self._slaves.values() if p.ack_offset >= offset}
        return len(holding) >= needed and self._members <= holding

    def _acknowledges_alone(self) -> bool:
        """Under the lock: min_in_sync_replicas is 1 and the controller's in-sync set is this
        master alone (confirmed by its answer, and no slave reported since)."""
        return (self.min_in_sync_replicas == 1 and self._sync_state_set == frozenset()
                and not self._unconfirmed)

    # -- master: what to send ---------------------------------------------------------------------

    def add_new_data_listener(self, listener: Callable[[], None]) -> None:
        """listener() after each append (the broker wakes its transfer streams); any thread."""
        self.new_data_listeners.append(listener)

    def check_slave(self, slave_max_offset: int, check_offset: int, check_crc: int) -> str | None:
        """Why a slave reporting `slave_max_offset` (and crc32 `check_crc` of its bytes from
        `check_offset`) must not replicate from this master, or None when it may."""
        master_max = self.commit_log.get_max_offset()
        master_min = max(self.commit_log.get_min_offset(), 0)
        if slave_max_offset > master_max:
            return (f"the slave's CommitLog is longer than the master's (slave holds bytes up to offset "
                    f"{slave_max_offset}, the master up to {master_max}): it diverged; refusing to replicate")
        if 0 < slave_max_offset < master_min:
            return (f"the slave's CommitLog ends at offset {slave_max_offset}, before the master's oldest "
                    f"data at {master_min}: the bytes between are gone; refusing to replicate")
        if check_offset < master_min or check_offset >= slave_max_offset:
            return None
        ours = self.commit_log.get_message(check_offset, slave_max_offset - check_offset)
        if ours is not None and zlib.crc32(ours) != check_crc:
            return (f"the slave's CommitLog differs from the master's in offsets [{check_offset}, "
                    f"{slave_max_offset}): it diverged; refusing to replicate")
        return None

    def transfer_start(self, slave_max_offset: int) -> int:
        """Where the transfer to a slave begins: its end, or the master's oldest byte for an
        empty slave (RocketMQ starts an empty slave at the master's last file instead; every
        byte is sent here so that a slave can replace a lost master)."""
        return slave_max_offset if slave_max_offset > 0 else max(self.commit_log.get_min_offset(), 0)

    def read(self, offset: int, max_bytes: int = HA_TRANSFER_BATCH_SIZE) -> bytes:
        """CommitLog bytes from `offset`, within one file, at most `max_bytes` (b"" when none)."""
        return self.commit_log.read_bytes(offset, max_bytes)

    # -- slave ------------------------------------------------------------------------------------

    def tail_check(self) -> tuple[int, int]:
        """(check_offset, crc32) of this store's last CommitLog bytes (at most TAIL_CHECK_BYTES,
        within the last file), for the first report to the master."""
        end = self.commit_log.get_max_offset()
        last = self.commit_log.mapped_file_queue.last_file()
        if last is None or end <= 0:
            return 0, 0
        start = max(last.file_from_offset, end - TAIL_CHECK_BYTES)
        data = self.commit_log.get_message(start, end - start)
        return start, zlib.crc32(data) if data is not None else 0
