"""The read path of the store (RocketMQ DefaultMessageStore#getMessage and its helpers): a queue's
offsets and store times, getMessage over ConsumeQueue entries read as one numpy array with the
records gathered from the CommitLog (spec consumer-pull-rebalance §12), the Flight data plane's
queue ranges, and the index's query by key. MessageStore delegates its reads here."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection

import numpy as np

from rmq import message_format as mf
from rmq.record_columns import RecordParts
from rmq.statuses import GetMessageStatus
from rmq.store.commit_log import CommitLog, parse_record
from rmq.store.config import CQ_STORE_UNIT_SIZE, BrokerRole, MessageStoreConfig
from rmq.store.consume_queue import PRE_BLANK_SIZE, ConsumeQueue
from rmq.store.index_file import IndexService
from rmq.store.message_filter import RecordFilter, match_tags
from rmq.store.results import GetMessageResult

MIN_FILTER_SCAN_BYTES = 16000   # maxFilterMessageCount = max(16000, maxMsgNums * 20)


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


class MessageReader:
    def __init__(self, config: MessageStoreConfig, commit_log: CommitLog, index_service: IndexService,
                 find_consume_queue: Callable[[str, int], ConsumeQueue | None],
                 undispatched: Callable[[], int]) -> None:
        """`undispatched`: how many CommitLog bytes the ConsumeQueues do not cover yet
        (ReputMessageService.behind)."""
        self.config = config
        self.commit_log = commit_log
        self.index_service = index_service
        self.find_consume_queue = find_consume_queue
        self.undispatched = undispatched
        self._memory_threshold = memory_threshold(_total_physical_memory(),
                                                  config.access_message_in_memory_max_ratio)

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

    # -- get -------------------------------------------------------------------------------------

    def _next_offset_correction(self, old_offset: int, new_offset: int) -> int:
        """nextOffsetCorrection (spec consumer-pull-rebalance §12.1)."""
        if self.config.broker_role is not BrokerRole.SLAVE or self.config.offset_check_in_slave:
            return new_offset
        return old_offset

    def _dispatch_pending(self) -> bool:
        """Whether an offset past a queue's end may lie in CommitLog bytes not dispatched yet: a
        controller-mode SYNC_MASTER's unconfirmed tail (its reads end at the confirm offset), or
        dispatch running behind. A slave's reads are not bounded so, so a consumer that read the
        queue there may ask its master for an offset the master holds but does not serve yet: it
        is told to wait (OFFSET_OVERFLOW_ONE), never moved back to the queue's start (issue 47).
        Asked only for an offset past the end (no call on a pull's usual path)."""
        return self.undispatched() > 0

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    max_total_bytes: int | None = None, tag_codes: Collection[int] | None = None,
                    record_filter: RecordFilter | None = None,
                    max_filter_evaluations: int | None = None, through_file: bool = False
                    ) -> GetMessageResult:
        """DefaultMessageStore#getMessage (spec consumer-pull-rebalance §12.2, TV17). `record_filter`
        is MessageFilter#isMatchedByCommitLog (spec consumption-longpolling-offsets §9): called with
        each candidate record that passed the tag filter; rejected ones are skipped like tag misses.
        `max_filter_evaluations` (None: no bound) ends the scan before the candidate that would be
        evaluated one past it, so a caller bounds the CPU one read spends in its filter; the answer's
        next_begin_offset is that candidate's (docs/filtering-and-bounds.md). `through_file`: the
        records are read by pread, not through the CommitLog's mapping (CommitLog.gather)."""
        return self._get_message(topic, queue_id, offset, None, max_msg_nums, max_total_bytes, tag_codes,
                                 record_filter, max_filter_evaluations, through_file=through_file)

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
        if len(entries) == 1:   # a pull of one message: no column is built
            first, size, _code = entries[0].tolist()
            read = 0 if size == PRE_BLANK_SIZE else size
        else:
            sizes = entries["size"]
            first, read = int(entries["offset"][0]), int(sizes[sizes != PRE_BLANK_SIZE].sum())
        if read > max_bytes:
            return False
        return not suggest_pulling_from_slave(self.commit_log.get_max_offset(), first, self._memory_threshold)

    def get_queue_range(self, topic: str, queue_id: int, offset: int, end_offset: int, max_msg_nums: int,
                        max_total_bytes: int | None = None, tag_codes: Collection[int] | None = None,
                        record_filter: RecordFilter | None = None,
                        max_filter_evaluations: int | None = None, parts: RecordParts | None = None
                        ) -> GetMessageResult:
        """get_message that never scans a ConsumeQueue entry at or past `end_offset` (one read
        of the Flight data plane, docs/data-plane.md): the same statuses, next_begin_offset
        corrections and filter bound, the records gathered across CommitLog file ends; a scan that
        stops at `end_offset` answers next_begin_offset == end_offset. ValueError unless
        offset < end_offset. `parts`: the read answers those parts of the records
        (GetMessageResult.columns, gathered column-wise) instead of the records (`buffer`), with
        the same selection and sizes — except a read of one entry or of one message, which
        answers the record (the caller decodes whichever it got)."""
        if offset >= end_offset:
            raise ValueError(f"empty queue range [{offset}, {end_offset})")
        return self._get_message(topic, queue_id, offset, end_offset, max_msg_nums, max_total_bytes,
                                 tag_codes, record_filter, max_filter_evaluations, parts)

    def _get_message(self, topic: str, queue_id: int, offset: int, end_offset: int | None, max_msg_nums: int,
                     max_total_bytes: int | None, tag_codes: Collection[int] | None,
                     record_filter: RecordFilter | None, max_filter_evaluations: int | None = None,
                     parts: RecordParts | None = None, through_file: bool = False) -> GetMessageResult:
        correct = self._next_offset_correction
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None:
            if offset > 0 and self._dispatch_pending():
                return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, 0, 0)
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, correct(offset, 0), 0, 0)
        min_offset, max_offset = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()

        def result(status: GetMessageStatus, next_begin_offset: int) -> GetMessageResult:
            return GetMessageResult(status, next_begin_offset, min_offset, max_offset)

        if offset > max_offset and self._dispatch_pending():
            return result(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset)
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
                                  tag_codes, record_filter, max_filter_evaluations, parts, through_file)
        read.next_begin_offset = offset + read.next_begin_offset
        read.min_offset, read.max_offset = min_offset, max_offset
        return read

    def _read_entries(self, entries: np.ndarray, max_msg_nums: int, max_bytes: int,
                      tag_codes: Collection[int] | None, record_filter: RecordFilter | None = None,
                      max_filter_evaluations: int | None = None, parts: RecordParts | None = None,
                      through_file: bool = False) -> GetMessageResult:
        """The read loop of getMessage, vectorised. Returns next_begin_offset relative to the
        first entry (= entries scanned). Entries whose record is gone end the scan (a run of
        them alone is answered MESSAGE_WAS_REMOVING). Per entry, in order: pre-blank entries are
        skipped; the batch is full (break before the entry) once it holds max_msg_nums messages
        or the entry would pass max_bytes; filtered-out entries are skipped; the rest are taken."""
        if record_filter is None:
            if len(entries) == 1:   # a woken held pull's read (the latency path)
                offset, size, code = entries[0].tolist()
                return self._read_one(offset, size, code, tag_codes, through_file)
            if max_msg_nums == 1:   # a pull of one message: no column is built
                taken_first = self._read_first(entries, tag_codes, through_file)
                if taken_first is not None:
                    return taken_first
            if tag_codes is None:   # a Flight range read, a pull without tags: a prefix is taken
                prefix = self._read_prefix(entries, max_msg_nums, max_bytes, parts, through_file)
                if prefix is not None:
                    return prefix
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
        return self._gather(scanned, physical[selected], sizes[selected], suggest, parts, through_file)

    def _read_prefix(self, entries: np.ndarray, max_msg_nums: int, max_bytes: int, parts: RecordParts | None,
                     through_file: bool) -> GetMessageResult | None:
        """_read_entries without a tag or record filter, when its first max_msg_nums entries are
        stored records not removed and the entry the scan stops at (if any) is neither a pre-blank
        entry nor removed: the loop then takes the entries from the first on until the batch is
        full, so the answer is that prefix, found with one cumulative sum, without the loop's masks
        and index gathers (a Flight range read is one such read per batch). None, nothing read, in
        any other case (the loop decides)."""
        candidates = entries[:max_msg_nums]
        sizes = candidates["size"].astype(np.int64)
        physical = candidates["offset"].astype(np.int64)
        min_offset = self.commit_log.get_min_offset()
        if int(sizes.max()) == PRE_BLANK_SIZE or int(physical.min()) < min_offset:
            return None
        # the first entry is always taken; the batch is full before the entry that would pass max_bytes
        scanned = max(int(np.searchsorted(np.cumsum(sizes), max_bytes, side="right")), 1)
        if scanned < len(entries):   # where the loop stops: a taken-able entry makes the batch full
            stop_offset, stop_size, _code = entries[scanned].tolist()
            if stop_size == PRE_BLANK_SIZE or stop_offset < min_offset:
                return None
        max_phy_pulling = int(entries["offset"][min(scanned, len(entries) - 1)])
        suggest = suggest_pulling_from_slave(self.commit_log.get_max_offset(), max_phy_pulling,
                                             self._memory_threshold)
        return self._gather(scanned, physical[:scanned], sizes[:scanned], suggest, parts, through_file)

    def _gather(self, scanned: int, physical: np.ndarray, sizes: np.ndarray, suggest: bool,
                parts: RecordParts | None, through_file: bool) -> GetMessageResult:
        """The FOUND answer of the selected records at `physical` of `sizes` (int64), `scanned`
        entries on: their `parts` column-wise or the records themselves."""
        found = GetMessageResult(GetMessageStatus.FOUND, scanned, 0, 0, len(sizes), sizes.astype(np.int32),
                                 suggest_pulling_from_slave=suggest)
        if parts is not None:
            found.columns = self.commit_log.gather_columns(physical, sizes, parts)
            gathered = found.columns is not None
        else:
            buffer = self.commit_log.gather(physical, sizes, through_file)
            gathered = buffer is not None
            found.buffer = buffer or b""
        if not gathered:   # deleted while we read: let the client retry
            return GetMessageResult(GetMessageStatus.MESSAGE_WAS_REMOVING, 0, 0, 0)
        return found

    def _read_first(self, entries: np.ndarray, tag_codes: Collection[int] | None, through_file: bool
                    ) -> GetMessageResult | None:
        """_read_entries of a pull of one message whose first entry is taken (a stored record, not
        removed, matching the tags) and whose second, if any, is no pre-blank entry: that record,
        next_begin_offset 1, as the vectorised loop answers; None, nothing read, for any other case
        (the loop decides)."""
        (offset, size, code), *following = entries[:2].tolist()
        if (size == PRE_BLANK_SIZE or (tag_codes is not None and code not in tag_codes)
                or (following and following[0][1] == PRE_BLANK_SIZE)
                or offset < self.commit_log.get_min_offset()):
            return None
        record = self.commit_log.get_message(offset, size, through_file)
        if record is None:   # deleted while we read: let the client retry
            return GetMessageResult(GetMessageStatus.MESSAGE_WAS_REMOVING, 0, 0, 0)
        max_phy_pulling = following[0][0] if following else offset   # where the loop stopped
        suggest = suggest_pulling_from_slave(self.commit_log.get_max_offset(), max_phy_pulling,
                                             self._memory_threshold)
        return GetMessageResult(GetMessageStatus.FOUND, 1, 0, 0, 1, np.array([size], dtype=np.int32),
                                record, suggest)

    def _read_one(self, physical: int, size: int, code: int, tag_codes: Collection[int] | None,
                  through_file: bool) -> GetMessageResult:
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
        record = self.commit_log.get_message(physical, size, through_file)
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
        if not self.commit_log.get_min_offset() <= commit_log_offset < self.commit_log.get_max_offset():
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
