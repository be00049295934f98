"""MessageStore: RocketMQ DefaultMessageStore, the store's public face (ARCHITECTURE.md §2).

Puts append to the CommitLog; the ReputMessageService dispatches records to ConsumeQueues, the
index and the dispatch listeners; getMessage reads ConsumeQueue entries as one numpy array and
gathers the records from the CommitLog (spec consumer-pull-rebalance §12).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

import numpy as np

from rmq import message_format as mf
from rmq.statuses import GetMessageStatus, PutMessageStatus
from rmq.store.checkpoint import StoreCheckpoint
from rmq.store.commit_log import (
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    CommitLog,
    appended_dispatch,
    parse_record,
    transaction_type,
)
from rmq.store.config import CQ_STORE_UNIT_SIZE, BrokerRole, FlushDiskType, MessageStoreConfig
from rmq.store.consume_queue import CQ_DTYPE, PRE_BLANK_SIZE, ConsumeQueue
from rmq.store.dispatch_batch import DispatchBatch
from rmq.store.errors import StoreError
from rmq.store.flush import FlushConsumeQueueService, FlushRealTimeService, GroupCommitService
from rmq.store.ha_service import HAService
from rmq.store.index_file import IndexService
from rmq.store.mapped_file_lru import MappedFileLru
from rmq.store.message_batch import MessageBatch
from rmq.store.message_filter import RecordFilter, match_tags
from rmq.store.private_files import FILE_MODE
from rmq.store.reput import ReputMessageService
from rmq.store.results import (
    DispatchRequest,
    GetMessageResult,
    MessageToStore,
    PutBatchResult,
    PutMessageResult,
)
from rmq.store.retention import (
    CleanFilesService,
    decide_disk_space,
    disk_used_ratio,
    expired_time_ms,
    is_time_to_delete,
)
from rmq.store.service_thread import ServiceThread
from rmq.store.store_directory import StoreDirectory

log = logging.getLogger(__name__)

MIN_FILTER_SCAN_BYTES = 16000   # maxFilterMessageCount = max(16000, maxMsgNums * 20)
DispatchListener = Callable[[DispatchRequest], None]


def _total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 * 1024**3


def memory_threshold(total_physical_memory: int, access_message_in_memory_max_ratio: int) -> int:
    """The CommitLog bytes behind its end still read from memory (spec consumer-pull-rebalance TV-6)."""
    return total_physical_memory * access_message_in_memory_max_ratio // 100


def suggest_pulling_from_slave(max_offset_py: int, max_phy_offset_pulling: int, memory: int) -> bool:
    """TV-6: the data left to read exceeds what stays in memory (strict >): read from a slave."""
    return max_offset_py - max_phy_offset_pulling > memory


class MessageStore:
    def __init__(self, config: MessageStoreConfig) -> None:
        self.config = config
        self.directory = StoreDirectory(config)
        root = Path(config.store_dir)
        self.commit_log = CommitLog(config)
        self.consume_queue_table: dict[str, dict[int, ConsumeQueue]] = {}
        self.consume_queue_mappings = MappedFileLru(config.max_mapped_consume_queue_files,
                                                    config.consume_queue_unmap_idle_ms)
        self._cq_lock = threading.Lock()
        self.index_service = IndexService(root / "index", config.max_hash_slot_num, config.max_index_num)
        self.checkpoint = StoreCheckpoint(self.directory.checkpoint_file)
        self.reput = ReputMessageService(self.commit_log, self._dispatch,
                                         wait_for_record_tails=config.broker_role is BrokerRole.SLAVE)
        self.ha_service = HAService(self.commit_log)
        self._listeners: list[DispatchListener] = []
        self._memory_threshold = memory_threshold(_total_physical_memory(),
                                                  config.access_message_in_memory_max_ratio)
        self._running = False
        self._fenced = False
        self._lease_until: float | None = None   # controller mode: SYNC_MASTER answers OK only before this
        self._disk_full = False
        self._write_error: str | None = None
        self._last_dispatched_timestamp = 0
        self._last_physical_min_offset = 0
        self._clean_lock = threading.Lock()
        self._group_commit: GroupCommitService | None = None
        self._services: list[ServiceThread] = []

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, truncate_to: int | None = None) -> None:
        """Load, recover (normal or abnormal, spec store §9), dispatch what the ConsumeQueues
        miss, then start the reput, flush and clean services. `truncate_to`: the CommitLog
        bytes from this offset on are dropped first (a member rejoining a broker group whose new
        master never held them), with the ConsumeQueue entries and index of their records."""
        try:
            self._load_and_recover(truncate_to)
            self.directory.abort_file.touch(mode=FILE_MODE)
        except OSError as error:
            self._close_files()
            self.directory.unlock()
            raise StoreError(f"{error.filename or self.config.store_dir}: cannot load the store: "
                             f"{error.strerror or error}") from error
        except BaseException:
            self._close_files()
            self.directory.unlock()
            raise
        self._start_services()
        self._running = True

    def _load_and_recover(self, truncate_to: int | None) -> None:
        last_exit_ok = not self.directory.abort_file.exists()
        self.commit_log.load()
        self._load_consume_queues()
        self.index_service.load(last_exit_ok, self.checkpoint.index_msg_timestamp)
        max_phy_offset_of_cq = -1
        for cq in self._all_consume_queues():
            cq.recover()
            max_phy_offset_of_cq = max(max_phy_offset_of_cq, cq.max_physic_offset)
        process_offset, scan_start = self.commit_log.recover(last_exit_ok, self.checkpoint)
        if truncate_to is not None and truncate_to < process_offset:
            log.warning("dropping CommitLog bytes [%d, %d): the broker group's master does not hold them",
                        truncate_to, process_offset)
            self.commit_log.truncate(truncate_to)
            process_offset, scan_start = truncate_to, min(scan_start, truncate_to)
        if not self.commit_log.mapped_file_queue.files:
            self._destroy_logics()
        elif max_phy_offset_of_cq > process_offset:   # an entry's record runs past the valid end
            log.warning("truncating consume queues to CommitLog offset %d", process_offset)
            for cq in self._all_consume_queues():
                cq.truncate_dirty_logic_files(process_offset)
            self.index_service.delete_files_from(process_offset)
        self.reput.reput_from_offset = self._reput_start(last_exit_ok, scan_start)
        self.reput.do_reput()
        self._recover_topic_queue_table()

    def _reput_start(self, last_exit_ok: bool, scan_start: int) -> int:
        """Where dispatch resumes: after the last record the ConsumeQueues hold (normal exit);
        after an abnormal exit no later than the first CommitLog file the checkpoint vouches
        for (spec store §9.4), nor than the ConsumeQueues' end (e.g. lost ConsumeQueue files)."""
        min_offset = max(self.commit_log.get_min_offset(), 0)
        dispatched = max((cq.max_physic_offset for cq in self._all_consume_queues()), default=0)
        start = dispatched if last_exit_ok else min(scan_start, max(dispatched, 0))
        return max(start, min_offset)

    def _recover_topic_queue_table(self) -> None:
        min_phy = self.commit_log.get_min_offset()
        table: dict[str, int] = {}
        for cq in self._all_consume_queues():
            table[f"{cq.topic}-{cq.queue_id}"] = cq.get_max_offset_in_queue()
            cq.correct_min_offset(min_phy)
        self.commit_log.reset_topic_queue_table(table)
        self._last_physical_min_offset = min_phy

    def _load_consume_queues(self) -> None:
        root = Path(self.config.store_dir) / "consumequeue"
        if not root.is_dir():
            return
        for topic_dir in sorted(root.iterdir()):
            if not topic_dir.is_dir():
                raise StoreError(f"{topic_dir}: unexpected file in the consumequeue directory")
            for queue_dir in sorted(topic_dir.iterdir()):
                if not queue_dir.name.isdigit():
                    log.warning("skipping %s: not a queue id", queue_dir)
                    continue
                cq = self._new_consume_queue(topic_dir.name, int(queue_dir.name))
                cq.load()
                self.consume_queue_table.setdefault(cq.topic, {})[cq.queue_id] = cq

    def _start_services(self) -> None:
        config = self.config
        queue = self.commit_log.mapped_file_queue
        flush_service: ServiceThread
        if config.flush_disk_type is FlushDiskType.SYNC:
            self._group_commit = GroupCommitService(queue, self.checkpoint)
            flush_service = self._group_commit
        else:
            flush_service = FlushRealTimeService(queue, self.checkpoint, config.flush_interval_commit_log_ms,
                                                 config.flush_commit_log_least_pages,
                                                 config.flush_commit_log_thorough_interval_ms)
        self._services = [
            self.reput,
            flush_service,
            FlushConsumeQueueService(self._flush_logics, config.flush_interval_consume_queue_ms,
                                     config.flush_consume_queue_least_pages,
                                     config.flush_consume_queue_thorough_interval_ms),
            CleanFilesService(lambda: self._clean(manual=False, force=False),
                              config.clean_resource_interval_ms),
        ]
        for service in self._services:
            service.start()

    def shutdown(self) -> None:
        """Stop services, dispatch and flush everything, persist the checkpoint, remove the abort file."""
        if not self._running:
            return
        self._running = False
        for service in reversed(self._services):
            service.shutdown()
        self.reput.do_reput()
        self.commit_log.mapped_file_queue.flush(0)
        if self._group_commit is not None:
            self._group_commit.do_commit()
        self.checkpoint.physic_msg_timestamp = max(self.checkpoint.physic_msg_timestamp,
                                                   self.commit_log.mapped_file_queue.store_timestamp)
        self._flush_logics(0)
        self._close_files()
        self.directory.abort_file.unlink(missing_ok=True)
        self.directory.unlock()

    def _close_files(self) -> None:
        self.commit_log.close()
        for cq in self._all_consume_queues():
            cq.close()
        self.index_service.close()

    # -- put -------------------------------------------------------------------------------------

    def put_message(self, message: MessageToStore) -> PutMessageResult:
        return self.put_messages([message])[0]

    def put_messages(self, messages: Sequence[MessageToStore]) -> list[PutMessageResult]:
        """put_batch for MessageToStore objects, one PutMessageResult per message."""
        if not messages:
            return []
        batch = MessageBatch.from_messages(messages)
        result = self.put_batch(batch) if isinstance(batch, MessageBatch) else PutBatchResult(batch)
        if len(result.queue_offsets) == 0:
            return _failed(messages, result.status)
        return [PutMessageResult(result.status, msg_id, m.queue_id, queue_offset, physical_offset,
                                 result.store_timestamp)
                for m, msg_id, queue_offset, physical_offset in zip(
                    messages, result.msg_ids(), result.queue_offsets.tolist(),
                    result.physical_offsets.tolist(), strict=True)]

    def put_batch(self, batch: MessageBatch) -> PutBatchResult:
        """Validate the whole batch (a refused batch writes nothing; the status is the first
        failing message's), append it under one lock, dispatch it, and under SYNC flush return
        only after it is flushed (group commit)."""
        result = self._put_batch(batch, wait=True)
        assert result is not None, "a waiting put always answers"
        return result

    def try_put_batch(self, batch: MessageBatch) -> PutBatchResult | None:
        """put_batch for a caller that must not wait (the broker's event loop): None, nothing
        written, when the put would wait — for another putter's lock, a new CommitLog file, the
        disk (SYNC flush) or a slave (SYNC_MASTER)."""
        if self._group_commit is not None or self.config.broker_role is BrokerRole.SYNC_MASTER:
            return None
        return self._put_batch(batch, wait=False)

    def _put_batch(self, batch: MessageBatch, wait: bool) -> PutBatchResult | None:
        role = self.config.broker_role   # the role it is appended under (fence() may change it meanwhile)
        if not self._running or role is BrokerRole.SLAVE or not self.is_writeable():
            return PutBatchResult(PutMessageStatus.SERVICE_NOT_AVAILABLE)
        if not len(batch):
            return PutBatchResult(PutMessageStatus.PUT_OK, store_host=self.commit_log.store_host)
        encoded = self.commit_log.encode(batch)
        if isinstance(encoded, PutMessageStatus):
            return PutBatchResult(encoded)
        try:
            appended = self.commit_log.append(encoded) if wait else self.commit_log.try_append(encoded)
        except OSError as error:
            self._mark_write_error(error)
            return PutBatchResult(PutMessageStatus.SERVICE_NOT_AVAILABLE)
        if appended is None:
            return None
        store_timestamp = appended.store_timestamp
        if self._group_commit is not None:
            self._group_commit.wakeup()       # the flush runs while this thread dispatches
        self.ha_service.notify_new_data()
        try:
            dispatched = self.reput.try_dispatch_appended(
                appended.start_offset, appended.end_offset,
                lambda: appended_dispatch(encoded, appended, store_timestamp))
        except Exception:   # the records are stored: the reput thread retries the dispatch
            log.exception("dispatch after append failed")
            dispatched = False
        if not dispatched:
            self.reput.wakeup()
        status = PutMessageStatus.PUT_OK
        if self._group_commit is not None:
            if not self._group_commit.wait_for_flush(appended.end_offset, self.config.sync_flush_timeout_ms):
                status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        if status is PutMessageStatus.PUT_OK and role is BrokerRole.SYNC_MASTER:
            status = self.ha_service.wait_for_slave(appended.end_offset, self.config.sync_flush_timeout_ms)
        if status is PutMessageStatus.PUT_OK and (self._fenced or (
                role is BrokerRole.SYNC_MASTER and not self._leased())):
            # a newer master started (fenced), or may have (the controller's lease lapsed), without
            # these bytes: this member drops them when it rejoins (docs/controller.md), so they are
            # stored here only and never acknowledged OK
            status = PutMessageStatus.SLAVE_NOT_AVAILABLE
        return PutBatchResult(status, appended.queue_offsets, appended.physical_offsets, store_timestamp,
                              self.commit_log.store_host)

    def append_replicated(self, offset: int, data: bytes) -> None:
        """A slave stores the master's CommitLog bytes at `offset` (HAService); its own
        ConsumeQueues and index follow by dispatch. StoreError when `offset` is not where the
        CommitLog ends (or the store is not a running slave); OSError marks it not writeable."""
        if not self._running or self.config.broker_role is not BrokerRole.SLAVE:
            raise StoreError("only a running slave store appends replicated CommitLog bytes")
        try:
            self.commit_log.append_replicated(offset, data)
        except OSError as error:
            self._mark_write_error(error)
            raise
        if self._group_commit is not None:
            self._group_commit.wakeup()
        self.reput.wakeup()

    def fence(self) -> None:
        """The broker group has a newer master (controller mode): refuse every put from now on,
        and answer none still in flight PUT_OK (the new master never held them)."""
        self._fenced = True
        self.config.broker_role = BrokerRole.SLAVE

    def renew_lease(self, until: float) -> None:
        """Controller mode: a SYNC_MASTER acknowledges OK only until `until` (time.monotonic()) unless
        renewed; past it a put is stored but answered SLAVE_NOT_AVAILABLE, since a newer master may
        have been elected meanwhile (docs/controller.md, the master lease)."""
        self._lease_until = until

    def _leased(self) -> bool:
        return self._lease_until is None or time.monotonic() < self._lease_until

    def is_writeable(self) -> bool:
        return not self._disk_full and self._write_error is None

    # -- dispatch --------------------------------------------------------------------------------

    def add_dispatch_listener(self, listener: DispatchListener) -> None:
        """listener(DispatchRequest) runs after the ConsumeQueue entry is visible, in CommitLog
        order, never concurrently: on the reput thread or on a putting thread that dispatched
        its own records. Per dispatched chunk it sees, for each queue and tags code, only the
        newest entry (what long polling and delivery wake-ups need)."""
        self._listeners.append(listener)

    def _dispatch(self, batch: DispatchBatch) -> None:
        try:
            self._dispatch_chunk(batch)
        except OSError as error:   # no room for a ConsumeQueue / index file: refuse puts until there is
            self._mark_write_error(error)
            raise

    def _mark_write_error(self, error: OSError) -> None:
        self._write_error = f"{error.strerror or error} ({error.filename or self.config.store_dir})"
        log.error("store write failed, store marked not writeable: %s", self._write_error)

    def _dispatch_chunk(self, batch: DispatchBatch) -> None:
        """doDispatch for a chunk of records: ConsumeQueue entries (NOT/COMMIT messages, one
        array per queue), the index (all but ROLLBACK), then the listeners."""
        if len(batch) == 1:   # the latency path: one entry, no column work
            all_visible = int(batch.sys_flags[0]) & TRANSACTION_PREPARED_TYPE == 0   # NOT / COMMIT
            if all_visible:
                topic, queue_id = batch.queues.queues[0]
                self._consume_queue(topic, queue_id).put_message_position_info(
                    int(batch.commit_log_offsets[0]), int(batch.msg_sizes[0]), int(batch.tags_codes[0]),
                    int(batch.consume_queue_offsets[0]))
            visible = np.array([all_visible])
        else:
            visible, all_visible = self._put_entries(batch)
        if self.config.message_index_enable:
            self._build_index(batch)
        self._last_dispatched_timestamp = int(batch.store_timestamps[-1])
        if self._listeners:
            self._notify_listeners(batch, visible, all_visible)

    def _put_entries(self, batch: DispatchBatch) -> tuple[np.ndarray, bool]:
        """The chunk's ConsumeQueue entries, one array per queue; which records are visible
        (NOT / COMMIT, spec store §8) and whether all are."""
        visible = (batch.sys_flags & TRANSACTION_PREPARED_TYPE) == 0
        all_visible = bool(visible.all())
        groups = batch.queues
        order = groups.order     # the entries queue by queue: each queue's run is one slice

        def queue_by_queue(column: np.ndarray) -> np.ndarray:
            return column if order is None else column[order]

        entries = np.empty(len(batch), dtype=CQ_DTYPE)
        entries["offset"] = queue_by_queue(batch.commit_log_offsets)
        entries["size"] = queue_by_queue(batch.msg_sizes)
        entries["tags_code"] = queue_by_queue(batch.tags_codes)
        cq_offsets = queue_by_queue(batch.consume_queue_offsets)
        shown = queue_by_queue(visible)
        bounds = groups.bounds.tolist()
        for number, (topic, queue_id) in enumerate(groups.queues):
            start, end = bounds[number], bounds[number + 1]
            run, first_offsets = entries[start:end], cq_offsets[start:end]
            if not all_visible:
                run, first_offsets = run[shown[start:end]], first_offsets[shown[start:end]]
            if len(run):
                self._consume_queue(topic, queue_id).put_entries(run, int(first_offsets[0]))
        return visible, all_visible

    def _build_index(self, batch: DispatchBatch) -> None:
        if not (any(batch.keys) or any(batch.uniq_keys)):
            return
        sys_flags = batch.sys_flags.tolist()
        for index, (keys, uniq_key) in enumerate(zip(batch.keys, batch.uniq_keys, strict=True)):
            if (keys or uniq_key) and transaction_type(sys_flags[index]) != TRANSACTION_ROLLBACK_TYPE:
                self.index_service.build_index(batch.request(index))

    def _notify_listeners(self, batch: DispatchBatch, visible: np.ndarray, all_visible: bool) -> None:
        """One call per queue and tags code: the newest entry of the chunk with that tags code
        (a held pull waits for any entry at or past its offset that its filter matches)."""
        groups = batch.queues
        if len(batch) == 1:   # the latency path: no numpy for one record
            newest = np.array([0] if all_visible else [], dtype=np.int64)
        elif all_visible and (batch.tags_codes == batch.tags_codes[0]).all():   # each queue's last entry
            newest = np.array([len(batch) - 1]) if groups.order is None else np.sort(
                groups.order[groups.bounds[1:] - 1])
        else:
            positions = np.flatnonzero(visible)
            keys = groups.index[positions] << 32 | (batch.tags_codes[positions] & 0xFFFFFFFF)
            if len(keys) and (keys == keys[0]).all():
                newest = positions[-1:]
            else:
                newest = np.sort(positions[len(keys) - 1 - np.unique(keys[::-1], return_index=True)[1]])
        for position in newest.tolist():
            request = batch.request(position)
            for listener in self._listeners:
                try:
                    listener(request)
                except Exception:
                    log.exception("dispatch listener failed")

    def disk_used_ratio(self) -> float:
        """Used fraction of the disk holding the store directory."""
        return disk_used_ratio(Path(self.config.store_dir))

    def dispatch_behind_bytes(self) -> int:
        """CommitLog bytes not yet dispatched (0 when ConsumeQueues are up to date)."""
        return self.reput.behind()

    # -- consume queues --------------------------------------------------------------------------

    def _new_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        return ConsumeQueue(topic, queue_id, Path(self.config.store_dir) / "consumequeue",
                            self.config.mapped_file_size_consume_queue, self.consume_queue_mappings)

    def find_consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None:
        queues = self.consume_queue_table.get(topic)
        cq = queues.get(queue_id) if queues is not None else None
        return self._consume_queue(topic, queue_id) if cq is None and create else cq

    def _consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue's ConsumeQueue, created on first use."""
        with self._cq_lock:
            queues = self.consume_queue_table.setdefault(topic, {})
            cq = queues.get(queue_id)
            if cq is None:
                cq = queues[queue_id] = self._new_consume_queue(topic, queue_id)
            return cq

    def _all_consume_queues(self) -> list[ConsumeQueue]:
        return [cq for queues in list(self.consume_queue_table.values()) for cq in list(queues.values())]

    def _flush_logics(self, least_pages: int) -> None:
        timestamp = self._last_dispatched_timestamp
        for cq in self._all_consume_queues():
            cq.flush(least_pages)
        self.consume_queue_mappings.unmap_idle()
        self.index_service.flush()
        if timestamp:
            self.checkpoint.logics_msg_timestamp = timestamp
            self.checkpoint.index_msg_timestamp = timestamp
        self.checkpoint.flush()

    def _destroy_logics(self) -> None:
        for cq in self._all_consume_queues():
            cq.destroy()
        self.consume_queue_table.clear()
        self.index_service.destroy()

    def delete_topic(self, topic: str) -> None:
        """Remove the topic's consume queues (its CommitLog records age out with retention)."""
        with self._cq_lock:
            queues = self.consume_queue_table.pop(topic, {})
        for cq in queues.values():
            cq.destroy()
        shutil.rmtree(Path(self.config.store_dir) / "consumequeue" / topic, ignore_errors=True)
        self.commit_log.forget_queues(topic, queues)

    # -- offsets ---------------------------------------------------------------------------------

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.get_min_offset_in_queue() if cq is not None else 0

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.get_max_offset_in_queue() if cq is not None else 0

    def get_last_store_timestamp(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None or cq.get_max_offset_in_queue() <= cq.get_min_offset_in_queue():
            return 0
        entry = cq.get_entry(cq.get_max_offset_in_queue() - 1)
        timestamp = self.commit_log.read_store_timestamp(entry[0]) if entry is not None else None
        return timestamp or 0

    def get_store_timestamp_at(self, topic: str, queue_id: int, offset: int) -> int:
        """The store time of the message at a queue offset; 0 when the queue has none there."""
        cq = self.find_consume_queue(topic, queue_id)
        entry = cq.get_entry(offset) if cq is not None else None
        timestamp = self.commit_log.read_store_timestamp(entry[0]) if entry is not None else None
        return timestamp or 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose store timestamp is >= timestamp_ms (binary search over
        the ConsumeQueue); the max offset when every message is older."""
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None:
            return 0
        low, high = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        while low < high:
            middle = (low + high) // 2
            entry = cq.get_entry(middle)
            stored = self.commit_log.read_store_timestamp(entry[0]) if entry is not None else None
            if stored is not None and stored >= timestamp_ms:
                high = middle
            else:
                low = middle + 1
        return low

    def get_commit_log_min_offset(self) -> int:
        return self.commit_log.get_min_offset()

    def get_commit_log_max_offset(self) -> int:
        return self.commit_log.get_max_offset()

    # -- get -------------------------------------------------------------------------------------

    def _next_offset_correction(self, old_offset: int, new_offset: int) -> int:
        """nextOffsetCorrection (spec consumer-pull-rebalance §12.1)."""
        if self.config.broker_role is not BrokerRole.SLAVE or self.config.offset_check_in_slave:
            return new_offset
        return old_offset

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    max_total_bytes: int | None = None, tag_codes: Collection[int] | None = None,
                    record_filter: RecordFilter | None = None,
                    max_filter_evaluations: int | None = None) -> GetMessageResult:
        """DefaultMessageStore#getMessage (spec consumer-pull-rebalance §12.2, TV17). `record_filter`
        is MessageFilter#isMatchedByCommitLog (spec consumption-longpolling-offsets §9): called with
        each candidate record that passed the tag filter; rejected ones are skipped like tag misses.
        `max_filter_evaluations` (None: no bound) ends the scan before the candidate that would be
        evaluated one past it, so a caller bounds the CPU one read spends in its filter; the answer's
        next_begin_offset is that candidate's (docs/filtering-and-bounds.md)."""
        return self._get_message(topic, queue_id, offset, None, max_msg_nums, max_total_bytes, tag_codes,
                                 record_filter, max_filter_evaluations)

    def is_small_read_in_memory(self, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                                max_bytes: int) -> bool:
        """Whether an unfiltered read of at most `max_msg_nums` messages of the queue from `offset`
        copies at most `max_bytes` of records that lie within the memory threshold behind the
        CommitLog's end (what getMessage counts as in memory, TV-6): a read cheap enough for the
        caller's own thread. A read that finds no entry there (the queue's end, a removed
        file) copies nothing."""
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None:
            return True
        entries = cq.get_entries(offset, max_msg_nums)
        if entries is None:
            return True
        sizes = entries["size"]
        if int(sizes[sizes != PRE_BLANK_SIZE].sum()) > max_bytes:
            return False
        return not suggest_pulling_from_slave(self.commit_log.get_max_offset(), int(entries["offset"][0]),
                                              self._memory_threshold)

    def get_queue_range(self, topic: str, queue_id: int, offset: int, end_offset: int, max_msg_nums: int,
                        max_total_bytes: int | None = None, tag_codes: Collection[int] | None = None,
                        record_filter: RecordFilter | None = None,
                        max_filter_evaluations: int | None = None) -> GetMessageResult:
        """get_message that never scans a ConsumeQueue entry at or past `end_offset` (one read
        of the Flight data plane, docs/data-plane.md): the same statuses, next_begin_offset
        corrections and filter bound, the records gathered across CommitLog file ends; a scan that
        stops at `end_offset` answers next_begin_offset == end_offset. ValueError unless
        offset < end_offset."""
        if offset >= end_offset:
            raise ValueError(f"empty queue range [{offset}, {end_offset})")
        return self._get_message(topic, queue_id, offset, end_offset, max_msg_nums, max_total_bytes,
                                 tag_codes, record_filter, max_filter_evaluations)

    def _get_message(self, topic: str, queue_id: int, offset: int, end_offset: int | None, max_msg_nums: int,
                     max_total_bytes: int | None, tag_codes: Collection[int] | None,
                     record_filter: RecordFilter | None, max_filter_evaluations: int | None = None
                     ) -> GetMessageResult:
        correct = self._next_offset_correction
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, correct(offset, 0), 0, 0)
        min_offset, max_offset = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()

        def result(status: GetMessageStatus, next_begin_offset: int) -> GetMessageResult:
            return GetMessageResult(status, next_begin_offset, min_offset, max_offset)

        if max_offset == 0:
            return result(GetMessageStatus.NO_MESSAGE_IN_QUEUE, correct(offset, 0))
        if offset < min_offset:
            return result(GetMessageStatus.OFFSET_TOO_SMALL, correct(offset, min_offset))
        if offset == max_offset:
            return result(GetMessageStatus.OFFSET_OVERFLOW_ONE, correct(offset, offset))
        if offset > max_offset:
            return result(GetMessageStatus.OFFSET_OVERFLOW_BADLY,
                          correct(offset, min_offset if min_offset == 0 else max_offset))
        max_scan = max(MIN_FILTER_SCAN_BYTES, max_msg_nums * CQ_STORE_UNIT_SIZE) // CQ_STORE_UNIT_SIZE
        if end_offset is not None:
            max_scan = min(max_scan, end_offset - offset)
        entries = cq.get_entries(offset, max_scan)
        if entries is None:
            return result(GetMessageStatus.OFFSET_FOUND_NULL, correct(offset, cq.roll_next_file(offset)))
        read = self._read_entries(entries, max_msg_nums, max_total_bytes or self.config.max_transfer_bytes,
                                  tag_codes, record_filter, max_filter_evaluations)
        read.next_begin_offset = offset + read.next_begin_offset
        read.min_offset, read.max_offset = min_offset, max_offset
        return read

    def _read_entries(self, entries: np.ndarray, max_msg_nums: int, max_bytes: int,
                      tag_codes: Collection[int] | None, record_filter: RecordFilter | None = None,
                      max_filter_evaluations: int | None = None) -> GetMessageResult:
        """The read loop of getMessage, vectorised. Returns next_begin_offset relative to the
        first entry (= entries scanned). Entries whose record is gone end the scan (a run of
        them alone is answered MESSAGE_WAS_REMOVING). Per entry, in order: pre-blank entries are
        skipped; the batch is full (break before the entry) once it holds max_msg_nums messages
        or the entry would pass max_bytes; filtered-out entries are skipped; the rest are taken."""
        if len(entries) == 1 and record_filter is None:   # a woken held pull's read (the latency path)
            offset, size, code = entries[0].tolist()
            return self._read_one(offset, size, code, tag_codes)
        physical = entries["offset"].astype(np.int64)
        deleted = physical < self.commit_log.get_min_offset()
        if deleted.any():
            # Their CommitLog file was deleted (retention) before the ConsumeQueue was cleaned.
            # Unlike RocketMQ, never skip them inside a FOUND answer: a run of them is answered
            # MESSAGE_WAS_REMOVING on its own, so a reader sees every offset it lost.
            first = int(np.argmax(deleted))
            if first == 0:
                gone = len(entries) if deleted.all() else int(np.argmin(deleted))
                return GetMessageResult(GetMessageStatus.MESSAGE_WAS_REMOVING, gone, 0, 0)
            entries, physical = entries[:first], physical[:first]
        sizes = entries["size"].astype(np.int64)
        available = sizes != PRE_BLANK_SIZE
        matched = match_tags(entries["tags_code"], tag_codes)
        taken = available if matched is None else available & matched
        evaluated_up_to = len(entries)
        if record_filter is not None:
            taken, evaluated_up_to = self._filter_records(physical, sizes, taken, max_msg_nums, max_bytes,
                                                          record_filter, max_filter_evaluations)
        taken_count = taken.astype(np.int64)
        taken_sizes = sizes * taken_count
        count_before = np.cumsum(taken_count) - taken_count
        bytes_before = np.cumsum(taken_sizes) - taken_sizes
        full = available & (count_before > 0) & (
            (count_before >= max_msg_nums) | (bytes_before + sizes > max_bytes))
        scanned = min(int(np.argmax(full)) if full.any() else len(entries), evaluated_up_to)
        selected = np.flatnonzero(taken[:scanned])
        max_phy_pulling = int(physical[min(scanned, len(entries) - 1)])
        suggest = suggest_pulling_from_slave(self.commit_log.get_max_offset(), max_phy_pulling,
                                             self._memory_threshold)
        if len(selected) == 0:
            removed = scanned > 0 and not available[scanned - 1]
            status = GetMessageStatus.MESSAGE_WAS_REMOVING if removed else GetMessageStatus.NO_MATCHED_MESSAGE
            return GetMessageResult(status, scanned, 0, 0, suggest_pulling_from_slave=suggest)
        buffer = self.commit_log.gather(physical[selected], sizes[selected])
        if buffer is None:   # deleted while we read: let the client retry
            return GetMessageResult(GetMessageStatus.MESSAGE_WAS_REMOVING, 0, 0, 0)
        return GetMessageResult(GetMessageStatus.FOUND, scanned, 0, 0, len(selected),
                                sizes[selected].astype(np.int32), buffer, suggest)

    def _read_one(self, physical: int, size: int, code: int, tag_codes: Collection[int] | None
                  ) -> GetMessageResult:
        """_read_entries of one entry without a record filter, answered alike without arrays:
        one entry never makes the batch full."""
        if physical < self.commit_log.get_min_offset():
            return GetMessageResult(GetMessageStatus.MESSAGE_WAS_REMOVING, 1, 0, 0)
        suggest = suggest_pulling_from_slave(self.commit_log.get_max_offset(), physical,
                                             self._memory_threshold)
        if size == PRE_BLANK_SIZE or (tag_codes is not None and code not in tag_codes):
            status = GetMessageStatus.MESSAGE_WAS_REMOVING if size == PRE_BLANK_SIZE \
                else GetMessageStatus.NO_MATCHED_MESSAGE
            return GetMessageResult(status, 1, 0, 0, suggest_pulling_from_slave=suggest)
        record = self.commit_log.get_message(physical, size)
        if record is None:   # deleted while we read: let the client retry
            return GetMessageResult(GetMessageStatus.MESSAGE_WAS_REMOVING, 0, 0, 0)
        return GetMessageResult(GetMessageStatus.FOUND, 1, 0, 0, 1, np.array([size], dtype=np.int32),
                                record, suggest)

    def _filter_records(self, physical: np.ndarray, sizes: np.ndarray, taken: np.ndarray, max_msg_nums: int,
                        max_bytes: int, record_filter: RecordFilter, max_evaluations: int | None
                        ) -> tuple[np.ndarray, int]:
        """`taken` less the candidates `record_filter` rejects, evaluated in queue order only until the
        batch is full (the entries after that are past the scan and never read), and the index the
        scan must end at: the candidate that would be evaluated past `max_evaluations` (else the end)."""
        taken = taken.copy()
        count = total = 0
        candidates = np.flatnonzero(taken).tolist()
        for evaluations, index in enumerate(candidates):
            size = int(sizes[index])
            if count and (count >= max_msg_nums or total + size > max_bytes):
                break
            if evaluations == max_evaluations:
                taken[index:] = False
                return taken, index
            record = self.commit_log.get_message(int(physical[index]), size)
            if record is None or not record_filter(record):
                taken[index] = False
                continue
            count, total = count + 1, total + size
        return taken, len(taken)

    # -- query by key ----------------------------------------------------------------------------

    def query_message_by_key(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int
                             ) -> GetMessageResult:
        """Messages of `topic` whose KEYS or UNIQ_KEY equal `key`, stored in [begin_ts, end_ts],
        oldest first, at most max_num (IndexService#queryOffset; hash collisions are re-checked)."""
        try:
            offsets = self.index_service.query_offsets(topic, key, max_num, begin_ts, end_ts)
        except ValueError:   # an index file was deleted while we read it
            offsets = []
        records: list[bytes] = []
        for offset in sorted(set(offsets)):
            record = self._read_record(offset)
            if record is None:
                continue
            size, request = parse_record(record, 0, len(record), offset, False)
            if (size > 0 and request is not None and request.topic == topic
                    and begin_ts <= request.store_timestamp <= end_ts
                    and (request.uniq_key == key or key in request.keys.split(mf.KEY_SEPARATOR))):
                records.append(record)
        status = GetMessageStatus.FOUND if records else GetMessageStatus.NO_MATCHED_MESSAGE
        return GetMessageResult(status, 0, 0, 0, len(records),
                                np.array([len(r) for r in records], dtype=np.int32), b"".join(records))

    def look_message_by_offset(self, commit_log_offset: int) -> bytes | None:
        """The whole record stored at `commit_log_offset` (lookMessageByOffset), or None when
        no record starts there (outside the CommitLog, deleted, or not a record's start)."""
        if not self.get_commit_log_min_offset() <= commit_log_offset < self.get_commit_log_max_offset():
            return None
        record = self._read_record(commit_log_offset)
        if record is None or len(record) < mf.BODY_POS:
            return None
        magic = int.from_bytes(record[mf.MAGIC_CODE_POS:mf.MAGIC_CODE_POS + 4], "big", signed=True)
        stored_at = int.from_bytes(record[mf.PHYSICAL_OFFSET_POS:mf.PHYSICAL_OFFSET_POS + 8], "big")
        if magic != mf.MESSAGE_MAGIC_CODE or stored_at != commit_log_offset:
            return None
        return record

    def _read_record(self, offset: int) -> bytes | None:
        head = self.commit_log.get_message(offset, 4)
        if head is None:
            return None
        return self.commit_log.get_message(offset, int.from_bytes(head, "big"))

    # -- retention -------------------------------------------------------------------------------

    def clean_expired_files(self, force: bool = False) -> int:
        """Run the clean-up now (manual trigger): delete CommitLog files older than
        file_reserved_time_hours (force: regardless of age), at most 10, never the file being
        written; then the ConsumeQueue and index files that only point below the new minimum.
        Also re-evaluates disk usage (disk-full mark). Returns the CommitLog files deleted."""
        return self._clean(manual=True, force=force)

    def _clean(self, manual: bool, force: bool) -> int:
        config = self.config
        with self._clean_lock:
            decision = decide_disk_space(disk_used_ratio(Path(config.store_dir)), config)
            if decision.disk_full and not self._disk_full:
                log.error("disk usage above %.2f: store marked not writeable",
                          config.disk_space_warning_level_ratio)
            self._disk_full = decision.disk_full
            if self._write_error and not decision.disk_full and os.access(config.store_dir, os.W_OK):
                self._write_error = None
            deleted = 0
            if manual or decision.space_to_delete or is_time_to_delete(config.delete_when):
                deleted = self.commit_log.mapped_file_queue.delete_expired_file_by_time(
                    expired_time_ms(config), config.delete_commit_log_files_interval_ms,
                    config.destroy_mapped_file_interval_forcibly_ms, force or decision.clean_immediately)
            self._clean_consume_queues()
            return deleted

    def _clean_consume_queues(self) -> None:
        """CleanConsumeQueueService: runs when the CommitLog minimum moved."""
        min_phy = self.commit_log.get_min_offset()
        if min_phy <= self._last_physical_min_offset:
            return
        for cq in self._all_consume_queues():
            cq.delete_expired_files(min_phy, self.config.destroy_mapped_file_interval_forcibly_ms)
        self.index_service.delete_expired_files(min_phy)
        self._last_physical_min_offset = min_phy


def _failed(messages: Sequence[MessageToStore], status: PutMessageStatus) -> list[PutMessageResult]:
    return [PutMessageResult(status, queue_id=m.queue_id) for m in messages]
