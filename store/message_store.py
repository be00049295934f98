"""MessageStore: RocketMQ DefaultMessageStore, the store's public face (ARCHITECTURE.md §2).

Puts append to the CommitLog; the ReputMessageService dispatches records to ConsumeQueues, the
index and the dispatch listeners; getMessage reads ConsumeQueue entries as one numpy array and
gathers the records from the CommitLog (spec consumer-pull-rebalance §12).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from rmq import message_format as mf
from rmq.record_columns import RecordParts
from rmq.statuses import PutMessageStatus
from rmq.store.checkpoint import StoreCheckpoint
from rmq.store.commit_log import (
    CommitLog,
    OneRecord,
    appended_dispatch,
    encode_record,
    record_dispatch,
)
from rmq.store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from rmq.store.consume_queue import ConsumeQueue
from rmq.store.dispatcher import CommitLogDispatcher, DispatchListener
from rmq.store.errors import StoreError
from rmq.store.flush import FlushConsumeQueueService, FlushRealTimeService, GroupCommitService
from rmq.store.ha_service import HAService
from rmq.store.index_file import IndexService
from rmq.store.mapped_file_lru import MappedFileLru
from rmq.store.mapped_file_queue import KEEP_NOTHING
from rmq.store.message_batch import MessageBatch
from rmq.store.message_filter import RecordFilter
from rmq.store.message_reader import MessageReader
from rmq.store.private_files import FILE_MODE
from rmq.store.reput import ReputMessageService
from rmq.store.results import (
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
        self.dispatcher = CommitLogDispatcher(config, self._consume_queue, self.index_service,
                                              self._mark_write_error)
        self.ha_service = HAService(self.commit_log, min_in_sync_replicas=config.min_in_sync_replicas,
                                    max_time_not_caught_up_s=config.ha_max_time_not_caught_up_ms / 1000)
        self.reput = ReputMessageService(self.commit_log, self.dispatcher.dispatch,
                                         self.dispatcher.dispatch_one,
                                         wait_for_record_tails=config.broker_role is BrokerRole.SLAVE)
        self.reader = MessageReader(config, self.commit_log, self.index_service, self.find_consume_queue,
                                    self.reput.behind)
        self.ha_service.add_confirm_listener(self.reput.wakeup)
        self._running = False
        self._fenced = False
        self._lease_until: float | None = None   # controller mode: SYNC_MASTER answers OK only before this
        self._disk_full = False
        self._write_error: str | None = None
        self._last_physical_min_offset = 0
        self._clean_lock = threading.Lock()
        # the lowest CommitLog offset still needed by a reader outside the store (the broker's
        # pending timer messages): age never deletes it, only a full disk does
        self.retention_floor: Callable[[], int] = lambda: KEEP_NOTHING
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
        if not self.puts_now():
            return None
        return self._put_batch(batch, wait=False)

    def puts_now(self) -> bool:
        """Whether a put can answer without waiting (try_put_batch / try_put_one may store): not
        under SYNC flush, whose answer waits for the disk, nor on a SYNC_MASTER, which waits for
        its slave."""
        return self._group_commit is None and self.config.broker_role is not BrokerRole.SYNC_MASTER

    def put_one(self, record: OneRecord) -> PutMessageResult:
        """put_batch for one message on the single-message path (no numpy column is built); a
        record that needs a new CommitLog file takes the batch path, which rolls files."""
        result = self._put_one(record, wait=True)
        if result is None:
            return self.put_messages([record.to_store()])[0]
        return result

    def try_put_one(self, record: OneRecord) -> PutMessageResult | None:
        """put_one for a caller that must not wait (the broker's event loop): None, nothing
        written, when the put would wait (as try_put_batch) or needs a new CommitLog file."""
        if not self.puts_now():
            return None
        return self._put_one(record, wait=False)

    def _put_one(self, record: OneRecord, wait: bool) -> PutMessageResult | None:
        role = self.config.broker_role
        if not self._running or role is BrokerRole.SLAVE or not self.is_writeable():
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, queue_id=record.queue_id)
        encoded = encode_record(record, self.config.max_message_size, self.commit_log.max_record_in_file)
        if isinstance(encoded, PutMessageStatus):
            return PutMessageResult(encoded, queue_id=record.queue_id)
        try:
            appended = self.commit_log.append_record(encoded, wait)
        except OSError as error:
            self._mark_write_error(error)
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, queue_id=record.queue_id)
        if appended is None:
            return None
        start, end = appended.physical_offset, appended.physical_offset + encoded.length
        dispatch = functools.partial(   # no lambda frame per put
            self.reput.try_dispatch_record, start, end, record_dispatch(encoded, appended))
        self._after_append(dispatch)
        status = self._acknowledged(end, role, dispatch)
        return PutMessageResult(status, mf.message_id(self.commit_log.store_host, start), record.queue_id,
                                appended.queue_offset, start, appended.store_timestamp)

    def _after_append(self, dispatch: Callable[[], bool]) -> None:
        """What follows every append: the flush and the slaves woken, the records dispatched on
        this thread (`dispatch`) unless a dispatch is running (the reput thread then takes them)."""
        if self._group_commit is not None:
            self._group_commit.wakeup()       # the flush runs while this thread dispatches
        for listener in self.ha_service.new_data_listeners:
            listener()
        try:
            dispatched = dispatch()
        except Exception:   # the records are stored: the reput thread retries the dispatch
            log.exception("dispatch after append failed")
            dispatched = False
        if not dispatched:
            self.reput.wakeup()

    def _acknowledged(self, end_offset: int, role: BrokerRole, dispatch: Callable[[], bool]
                      ) -> PutMessageStatus:
        """The status of a put appended up to end_offset: PUT_OK once SYNC flush has it on disk
        and a SYNC_MASTER's slave holds it; never OK on a fenced member, nor on a SYNC_MASTER whose
        controller lease lapsed. A SYNC_MASTER dispatches its records again once its slave
        answered (`dispatch`): bounded by the confirm offset, the dispatch after the append left
        them (the reput thread takes them otherwise, woken when the confirm offset moves)."""
        status = PutMessageStatus.PUT_OK
        if self._group_commit is not None:
            if not self._group_commit.wait_for_flush(end_offset, self.config.sync_flush_timeout_ms):
                status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        if status is PutMessageStatus.PUT_OK and role is BrokerRole.SYNC_MASTER:
            status = self.ha_service.wait_for_slave(end_offset, self.config.sync_flush_timeout_ms)
            if status is PutMessageStatus.PUT_OK and self.reput.reput_from_offset < end_offset:
                dispatch()
        if status is PutMessageStatus.PUT_OK and (self._fenced or (
                role is BrokerRole.SYNC_MASTER and not self._leased())):
            # a newer master started (fenced), or may have (the controller's lease lapsed), without
            # these bytes: this member drops them when it rejoins (docs/controller.md), so they are
            # stored here only and never acknowledged OK
            status = PutMessageStatus.SLAVE_NOT_AVAILABLE
        return status

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

        def dispatch() -> bool:
            return self.reput.try_dispatch_appended(
                appended.start_offset, appended.end_offset,
                lambda: appended_dispatch(encoded, appended, store_timestamp))

        self._after_append(dispatch)
        status = self._acknowledged(appended.end_offset, role, dispatch)
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

    def bound_reads(self, sync_state_set: frozenset[str]) -> None:
        """Controller mode, SYNC_MASTER: reads end at the confirm offset of `sync_state_set` (the
        in-sync slaves' addresses the controller accepted, HAService.bound_reads) from now on;
        until this call dispatch follows the CommitLog's end at no cost."""
        self.reput.end = self.ha_service.confirm_offset
        self.ha_service.bound_reads(sync_state_set)

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
        self.dispatcher.listeners.append(listener)

    def _mark_write_error(self, error: OSError) -> None:
        self._write_error = f"{error.strerror or error} ({error.filename or self.config.store_dir})"
        log.error("store write failed, store marked not writeable: %s", self._write_error)

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
        timestamp = self.dispatcher.last_dispatched_timestamp
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

    # -- read path (MessageReader) -----------------------------------------------------------------

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reader.get_min_offset_in_queue(topic, queue_id)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reader.get_max_offset_in_queue(topic, queue_id)

    def get_last_store_timestamp(self, topic: str, queue_id: int) -> int:
        return self.reader.get_last_store_timestamp(topic, queue_id)

    def get_store_timestamp_at(self, topic: str, queue_id: int, offset: int) -> int:
        return self.reader.get_store_timestamp_at(topic, queue_id, offset)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self.reader.get_offset_in_queue_by_time(topic, queue_id, timestamp_ms)

    def get_commit_log_min_offset(self) -> int:
        return self.commit_log.get_min_offset()

    def get_commit_log_max_offset(self) -> int:
        return self.commit_log.get_max_offset()

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    max_total_bytes: int | None = None, tag_codes: Collection[int] | None = None,
                    record_filter: RecordFilter | None = None,
                    max_filter_evaluations: int | None = None, through_file: bool = False
                    ) -> GetMessageResult:
        return self.reader.get_message(group, topic, queue_id, offset, max_msg_nums, max_total_bytes,
                                       tag_codes, record_filter, max_filter_evaluations, through_file)

    def is_small_read_in_memory(self, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                                max_bytes: int) -> bool:
        return self.reader.is_small_read_in_memory(topic, queue_id, offset, max_msg_nums, max_bytes)

    def get_queue_range(self, topic: str, queue_id: int, offset: int, end_offset: int, max_msg_nums: int,
                        max_total_bytes: int | None = None, tag_codes: Collection[int] | None = None,
                        record_filter: RecordFilter | None = None,
                        max_filter_evaluations: int | None = None, parts: RecordParts | None = None
                        ) -> GetMessageResult:
        return self.reader.get_queue_range(topic, queue_id, offset, end_offset, max_msg_nums, max_total_bytes,
                                           tag_codes, record_filter, max_filter_evaluations, parts)

    def query_message_by_key(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int
                             ) -> GetMessageResult:
        return self.reader.query_message_by_key(topic, key, max_num, begin_ts, end_ts)

    def look_message_by_offset(self, commit_log_offset: int) -> bytes | None:
        return self.reader.look_message_by_offset(commit_log_offset)

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
                floor = KEEP_NOTHING if decision.clean_immediately else self.retention_floor()
                deleted = self.commit_log.mapped_file_queue.delete_expired_file_by_time(
                    expired_time_ms(config), config.delete_commit_log_files_interval_ms,
                    config.destroy_mapped_file_interval_forcibly_ms, force or decision.clean_immediately,
                    floor)
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
