"""CommitLogDispatcher: doDispatch (spec store §8) for the records the ReputMessageService (or a
putter that just appended) hands it, in CommitLog order, never concurrently: ConsumeQueue entries
(NOT / COMMIT messages), the index (all but ROLLBACK), then the dispatch listeners (long polling,
the schedule service). One record takes a path of its own, without numpy columns."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from rmq.store.commit_log import TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, transaction_type
from rmq.store.config import MessageStoreConfig
from rmq.store.consume_queue import CQ_DTYPE, ConsumeQueue
from rmq.store.dispatch_batch import DispatchBatch
from rmq.store.index_file import IndexService
from rmq.store.results import DispatchRequest

log = logging.getLogger(__name__)

DispatchListener = Callable[[DispatchRequest], None]


class CommitLogDispatcher:
    def __init__(self, config: MessageStoreConfig, consume_queue: Callable[[str, int], ConsumeQueue],
                 index_service: IndexService, on_write_error: Callable[[OSError], None]) -> None:
        self.config = config
        self.consume_queue = consume_queue   # the queue's ConsumeQueue, created on first use
        self.index_service = index_service
        self.on_write_error = on_write_error   # no room for a ConsumeQueue / index file
        self.listeners: list[DispatchListener] = []
        self.last_dispatched_timestamp = 0

    def dispatch(self, batch: DispatchBatch) -> None:
        if len(batch) == 1:   # the latency path: one entry, no column work
            self.dispatch_one(batch.request(0))
            return
        try:
            self._dispatch_chunk(batch)
        except OSError as error:   # no room for a ConsumeQueue / index file: refuse puts until there is
            self.on_write_error(error)
            raise

    def dispatch_one(self, request: DispatchRequest) -> None:
        """doDispatch for one record: its ConsumeQueue entry (NOT / COMMIT), the index (all but
        ROLLBACK), then the listeners (for a visible record)."""
        visible = request.sys_flag & TRANSACTION_PREPARED_TYPE == 0
        try:
            if visible:
                self.consume_queue(request.topic, request.queue_id).put_message_position_info(
                    request.commit_log_offset, request.msg_size, request.tags_code,
                    request.consume_queue_offset)
            if (self.config.message_index_enable and (request.keys or request.uniq_key)
                    and transaction_type(request.sys_flag) != TRANSACTION_ROLLBACK_TYPE):
                self.index_service.build_index(request)
        except OSError as error:   # as dispatch's
            self.on_write_error(error)
            raise
        self.last_dispatched_timestamp = request.store_timestamp
        if visible:
            for listener in self.listeners:
                try:
                    listener(request)
                except Exception:
                    log.exception("dispatch listener failed")

    def _dispatch_chunk(self, batch: DispatchBatch) -> None:
        """doDispatch for a chunk of records: ConsumeQueue entries (NOT/COMMIT messages, one
        array per queue), the index (all but ROLLBACK), then the listeners."""
        visible, all_visible = self._put_entries(batch)
        if self.config.message_index_enable:
            self._build_index(batch)
        self.last_dispatched_timestamp = int(batch.store_timestamps[-1])
        if self.listeners:
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
                self.consume_queue(topic, queue_id).put_entries(run, int(first_offsets[0]))
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
        if all_visible and (batch.tags_codes == batch.tags_codes[0]).all():   # each queue's last entry
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
            for listener in self.listeners:
                try:
                    listener(request)
                except Exception:
                    log.exception("dispatch listener failed")
