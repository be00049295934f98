"""Driver side of `spark.readStream.format("rmq")` (DataSourceStreamReader).

Each stream offset is `{"@clientId": id, "@group": group, "topic": {"broker": {"queueId":
nextOffset}}}` over the queues this query owns. The initial offset names only the identity
(`"@initial": true`, no broker call); the first micro-batch goes from the start offsets
startingOffsets designates to what the read limit admits, as Kafka's source plans its first
batch, and its end offset also records those start offsets (`"@from"`). So the query's group,
client id and start offsets are in Spark's offset log before any message is read, and a query
stopped or killed at any moment replays exactly what it planned: Spark re-asks a restarted
reader for the initial offset when batch 0 did not complete, and `partitions` then starts
batch 0 at the recorded `"@from"`, not at a re-resolved startingOffsets (which would move
with "latest"). (Before the fourth release batch 0 read nothing and ended at the start
offsets; such a checkpoint's batch 0 still reads nothing.)
At every later micro-batch `latestOffset` rebalances (route lookup, the group's consumer
list, allocation), keeps the positions of queues still owned, drops queues lost to another
consumer and adopts newly owned queues
(handed over by a rebalance, or added to a topic whose queue count grew) at the group's
committed offset, else at their earliest offset, with an empty range: they are read from
the next micro-batch on. So `partitions(start, end)` depends on the two offsets alone and
a replayed batch reads the same messages; startingOffsets applies to the queues of the
query's first offset only.

The client id and the group travel in the offsets, so a restarted driver rejoins the same
group under the same identity. The group is option consumerGroup, else one of the
query's own, `spark-rmq-<uuid>`, chosen at its first start. Offsets are written to the
group's OffsetStore only for queues of the query's topics, and only by the group that read
them: a checkpoint restarted under another consumerGroup commits nothing of the old one's.

With topicPattern the topics are the broker's topics matching it, listed again at each
micro-batch: a topic created later is read from its earliest offset, a deleted one dropped.

Brokers that cannot be reached are retried with backoff for brokerOutageWindowMs (one log
line per round naming the broker); refusals (ACL, a deleted topic) fail at once. Once the
query runs, one unreachable broker of several is isolated instead (issue 18, scenario 15):
its queues keep their positions (nothing planned from them, no queue of it adopted) and the
other brokers' queues are planned as usual, with one warning per outage; when it answers
again its queues are planned from where they stopped. Planning still waits (the retries
above) when no broker answers, and for the first micro-batch, whose start offsets need
every queue.

The reader object is also pickled to executors for `read()`: everything that talks to
the broker is created lazily on the driver and never pickled.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from rmq.connector.broker_outages import BrokerOutages
from rmq.connector.client import RmqClient
from rmq.connector.errors import RmqDataLossError, RmqError, RmqUnavailable
from rmq.connector.offset_store import OffsetStore, create_offset_store
from rmq.connector.offsets import Positions
from rmq.connector.spark.admission import admit
from rmq.connector.spark.backoff import retry_unavailable
from rmq.connector.spark.broker_offsets import BrokerOffsetLookup
from rmq.connector.spark.membership import ConsumerMembership, new_client_id
from rmq.connector.spark.options import OUTAGE_OPTION, SourceOptions, legacy_group_name
from rmq.connector.spark.ranges import QueueRangePartition, split_ranges
from rmq.connector.spark.source_offsets import StreamOffset, resolve_acquired_offset
from rmq.connector.spark.start_offsets import check_named_queues, resolve_start
from rmq.connector.spark.topics import matching_topics
from rmq.message_queue import MessageQueue
from rmq.statuses import PullStatus

RECORD_SAMPLE = 16   # messages a queue's record size is estimated from (maxBytesPerTrigger)

# a Spark offset of this source as Spark hands it over: the JSON of a StreamOffset
OffsetJson = dict[str, Any]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class RmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._reset_driver_state()

    def _reset_driver_state(self) -> None:
        self._client: RmqClient | None = None
        self._store: OffsetStore | None = None
        self._lookup: BrokerOffsetLookup | None = None
        self._membership: ConsumerMembership | None = None
        self._target: Positions | None = None   # Trigger.AvailableNow: max offsets at query start
        self._saved: Positions = {}              # offsets last written to the OffsetStore
        self._group: str | None = None           # the query's consumer group, once known
        self._initial: StreamOffset | None = None
        self._topics: tuple[str, ...] = self._options.topics   # with topicPattern: the last listing
        self._last_trigger = time.monotonic()    # minMessagesPerTrigger waits from here
        self._outages: BrokerOutages | None = None   # brokers isolated now, once the group is known

    def __getstate__(self) -> dict[str, Any]:
        return {"_options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._options = state["_options"]
        self._reset_driver_state()

    # ------------------------------------------------------------ Spark API

    def initialOffset(self) -> OffsetJson:
        # No broker call: the first micro-batch resolves startingOffsets (see the module doc).
        # Spark may ask more than once; keep the identity chosen the first time.
        if self._initial is None:
            self._initial = StreamOffset(new_client_id(), self._options.pull.consumer_group, {}, initial=True)
        return self._initial.to_json()

    def latestOffset(self, start: OffsetJson, limit: ReadLimit) -> OffsetJson:
        return self._retrying("planning the next micro-batch", lambda: self._latest_offset(start, limit))

    def _latest_offset(self, start: OffsetJson, limit: ReadLimit) -> OffsetJson:
        current = StreamOffset.from_json(start)
        self._enter_group(self._group_of(current))
        membership = self._join(current.client_id)
        isolated: dict[str, RmqUnavailable] | None = None if current.initial else {}
        lookup = self._broker(isolated)
        owned = self._rebalance(membership, lookup)
        if current.initial:
            return self._first_batch(current.client_id, self._start_positions(owned, lookup), limit).to_json()
        positions: Positions = {}
        ceilings: Positions = {}
        kept: Positions = {}
        for mq in owned:
            if mq in current.positions:
                kept[mq] = current.positions[mq]
                if isolated and mq.broker_name in isolated:   # nothing planned from it meanwhile
                    positions[mq] = ceilings[mq] = kept[mq]
                    continue
                positions[mq] = self._check_not_reset(mq, kept[mq], lookup.max_offset(mq))
                ceilings[mq] = self._ceiling(mq, positions[mq])
            elif isolated and mq.broker_name in isolated:
                continue                                      # adopted once its broker answers
            else:
                adopted = resolve_acquired_offset(mq, lookup)
                if adopted < 0:
                    logger.warning("doRebalance, %s, add new mq failed, %s", self._group, mq)
                    continue
                positions[mq] = ceilings[mq] = adopted
        # Spark asks for the next offset only after the batch ending at `start` completed,
        # but calls commit(start) only once a further batch is planned: saving it here
        # makes the group's progress show lag 0 as soon as the query has caught up.
        self._save_progress(kept)
        end = admit(positions, ceilings, limit, self._options.max_bytes_per_trigger,
                    self._record_bytes(positions, ceilings))
        # Nothing new: the same offset (the first batch's FROM_KEY kept), so Spark plans no empty
        # batch; an offset checkpointed without GROUP_KEY is answered anew, to record the group.
        unchanged = end == current.positions and current.group is not None
        if end is None or unchanged or not self._enough_to_trigger(positions, ceilings):
            return start
        self._last_trigger = time.monotonic()
        return StreamOffset(current.client_id, self._group, end).to_json()

    def _first_batch(self, client_id: str, start: Positions, limit: ReadLimit) -> StreamOffset:
        """The end of the query's first micro-batch: from the start offsets startingOffsets designates,
        admitted like any batch, with those start offsets recorded in it (FROM_KEY) so that a replay
        reads the same range. When the read limit admits nothing yet (minMessagesPerTrigger), the
        batch ends at the start offsets and reads nothing."""
        ceilings = {mq: self._ceiling(mq, position) for mq, position in start.items()}
        end = admit(start, ceilings, limit, self._options.max_bytes_per_trigger,
                    self._record_bytes(start, ceilings))
        if end is None or not self._enough_to_trigger(start, ceilings):
            end = start
        else:
            self._last_trigger = time.monotonic()
        return StreamOffset(client_id, self._group, end, start=start)

    def getDefaultReadLimit(self) -> ReadLimit:
        rows, size = self._options.max_messages_per_trigger, self._options.max_bytes_per_trigger
        if rows:
            return ReadMaxRows(rows)   # and maxBytesPerTrigger within it (admission.admit)
        return ReadMaxBytes(size) if size else ReadAllAvailable()

    def reportLatestOffset(self) -> OffsetJson | None:
        if self._membership is None:
            return None
        lookup = self._lookup or self._broker()    # fetched by the latestOffset just before
        latest = {mq: lookup.max_offset(mq) for mq in self._membership.owned_queues()}
        return StreamOffset(self._membership.client_id, self._group, latest).to_json()

    def prepareForTriggerAvailableNow(self) -> None:
        # Called before the first offset, so before the query's group is known: no OffsetStore.
        self._target = self._retrying("reading the latest offsets", self._max_offsets)
        logger.info("Trigger.AvailableNow: reading up to %s", {str(mq): o for mq, o in self._target.items()})

    def partitions(self, start: OffsetJson, end: OffsetJson) -> list[QueueRangePartition]:
        last_offset = StreamOffset.from_json(end)
        first = StreamOffset.from_json(start).batch_start(last_offset)
        last = last_offset.positions
        pull = replace(self._options.pull, consumer_group=self._group_of(last_offset))
        ranges = [
            QueueRangePartition(mq, first[mq], last[mq], pull)
            for mq in sorted(last)
            if mq in first and last[mq] > first[mq]
        ]
        return split_ranges(ranges, self._options.min_partitions, self._options.max_records_per_partition)

    def read(self, partition: QueueRangePartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        # Imported here, on the executors: the driver's per-query runner process never reads, and
        # the reader's Flight and Arrow compute modules cost it start-up (bench/NOTES.md).
        from rmq.connector.spark.partition_reader import read_queue_range
        return read_queue_range(partition)

    def commit(self, end: OffsetJson) -> None:
        # A restarted driver may first re-run and commit the last planned batch.
        offset = StreamOffset.from_json(end)
        self._enter_group(self._group_of(offset))
        if offset.group not in (None, self._group):
            logger.info("offsets read by consumer group %s are not committed for group %s "
                        "(consumerGroup changed)", offset.group, self._group)
            return
        self._save_progress(offset.positions)

    def stop(self) -> None:
        if self._membership is not None:
            self._membership.close()
        if self._client is not None:
            self._client.close()
        self._reset_driver_state()

    # ------------------------------------------------------------ driver state

    def _group_of(self, offset: StreamOffset) -> str:
        """The query's group: option consumerGroup, else the group kept in its offsets."""
        return self._options.consumer_group or offset.group or legacy_group_name(self._options.topics)

    def _enter_group(self, group: str) -> None:
        """Consume as `group` from now on: the first offset the reader sees decides."""
        if self._group is None:
            self._group = group
        elif group != self._group:
            raise ValueError(f"offset of consumer group {group} given to the reader of group {self._group}")

    def _retrying(self, action: str, call: Callable[[], T]) -> T:
        """Ride out a broker restart: retry while unreachable, for up to brokerOutageWindowMs."""
        return retry_unavailable(call, self._options.pull.outage_window_ms, action, OUTAGE_OPTION)

    def _start_positions(self, owned: list[MessageQueue], lookup: BrokerOffsetLookup) -> Positions:
        """Where the query starts: startingOffsets (checked against the real queues)."""
        policy = self._options.starting_offsets
        check_named_queues(policy, lookup.known_queues(), starting=True)
        return {mq: resolve_start(policy, mq, lookup) for mq in owned}

    def _enough_to_trigger(self, positions: Positions, ceilings: Positions) -> bool:
        """minMessagesPerTrigger: wait for that many new messages, but at most maxTriggerDelay
        since the last micro-batch; never under Trigger.AvailableNow."""
        wanted = self._options.min_messages_per_trigger
        if wanted is None or self._target is not None:
            return True
        pending = sum(ceilings[mq] - positions[mq] for mq in positions)
        waited_ms = (time.monotonic() - self._last_trigger) * 1000
        return pending >= wanted or (pending > 0 and waited_ms >= self._options.max_trigger_delay_ms)

    def _save_progress(self, positions: Positions) -> None:
        """Write processed offsets of owned queues of the query's topics through the
        OffsetStore (broker or local file); queues no longer owned are forgotten (spec
        consumer-pull-rebalance §8.6 removeUnnecessaryMessageQueue)."""
        positions = {mq: offset for mq, offset in positions.items() if self._options.subscribes(mq.topic)}
        if positions == self._saved:
            return
        store = self._offset_store()
        for mq, offset in positions.items():
            store.update_offset(mq, offset, increase_only=True)
        try:
            store.persist_all(positions)
        except RmqUnavailable:   # the other brokers' offsets are written; the store reported the outage
            return
        except (RmqError, OSError) as error:   # the checkpoint stays the source of truth
            logger.warning("persisting consumer offsets of group %s failed: %s", self._group, error)
            return
        self._saved = dict(positions)
        for mq in store.tracked() - positions.keys():
            store.remove_offset(mq)

    def _rmq_client(self) -> RmqClient:
        if self._client is None:
            self._client = self._options.pull.connect()
        return self._client

    def _offset_store(self) -> OffsetStore:
        if self._store is None:
            assert self._group is not None, "the OffsetStore is used once the group is known"
            self._store = create_offset_store(
                self._rmq_client(), self._group,
                broadcasting=self._options.broadcasting, directory=self._options.offset_store_dir,
                outages=self._broker_outages(),
            )
        return self._store

    def _broker(self, isolated: dict[str, RmqUnavailable] | None = None) -> BrokerOffsetLookup:
        """The offset lookup, with the topics listed (topicPattern) and min/max offsets fetched now;
        with `isolated`, the brokers that did not answer are recorded there (and reported)."""
        if self._lookup is None:
            self._lookup = BrokerOffsetLookup(self._rmq_client(), self._offset_store())
        self._topics = self._current_topics()
        self._lookup.refresh(self._topics, isolated)
        outages = self._broker_outages()
        outages.unreachable_all(isolated or {})
        for broker_name in {mq.broker_name for mq in self._lookup.known_queues()}:
            outages.answered(broker_name)
        return self._lookup

    def _broker_outages(self) -> BrokerOutages:
        if self._outages is None:
            self._outages = BrokerOutages(f"streaming query of consumer group {self._group}")
        return self._outages

    def _current_topics(self) -> tuple[str, ...]:
        if self._options.topic_pattern is None:
            return self._options.topics
        topics = matching_topics(self._rmq_client(), self._options)
        for topic in sorted(set(self._topics) - set(topics)):
            logger.warning("topic %s matching topicPattern is gone (deleted): its queues are dropped", topic)
        for topic in sorted(set(topics) - set(self._topics)):
            logger.info("topic %s matches topicPattern: reading it from its earliest offset", topic)
        if self._membership is not None:
            self._membership.subscribe(dict.fromkeys(topics, self._options.pull.sub_expression))
        return topics

    def _max_offsets(self) -> Positions:
        client = self._rmq_client()
        return {mq: bounds.max_offset for topic in self._current_topics()
                for mq, bounds in client.topic_offsets(topic).items()}

    def _join(self, client_id: str) -> ConsumerMembership:
        """Be a live member of the group as `client_id` (the id stored in the offsets)."""
        if self._membership is not None and self._membership.client_id != client_id:
            self._membership.close()
            self._membership = None
        if self._membership is None:
            assert self._group is not None, "a query joins its group once the group is known"
            options = self._options
            self._membership = ConsumerMembership(
                self._rmq_client(), self._group, client_id,
                dict.fromkeys(self._topics, options.pull.sub_expression),
                broadcasting=options.broadcasting, strategy=options.allocate_strategy,
                outages=self._broker_outages(),
            )
            self._membership.start()
        return self._membership

    def _rebalance(self, membership: ConsumerMembership, lookup: BrokerOffsetLookup) -> list[MessageQueue]:
        owned: list[MessageQueue] = []
        for topic in self._topics:
            owned += membership.rebalance(topic, lookup.message_queues(topic))
        return owned

    def _record_bytes(self, positions: Positions, ceilings: Positions) -> dict[MessageQueue, int]:
        """maxBytesPerTrigger: the mean stored size of the next messages of each queue with a backlog,
        from one pull of at most RECORD_SAMPLE of them; a queue whose pull found none gets the mean of
        the others (none without the option)."""
        if self._options.max_bytes_per_trigger is None:
            return {}
        client, sizes = self._rmq_client(), {}
        backlogged = [mq for mq, position in positions.items() if ceilings[mq] > position]
        for mq in backlogged:
            sample = client.pull(mq, positions[mq], RECORD_SAMPLE, group=self._group or "")
            records = np.frombuffer(sample.messages.sizes, dtype="<i4")
            if sample.pull_status is PullStatus.FOUND and len(records):
                sizes[mq] = int(records.mean())
        typical = sum(sizes.values()) // len(sizes) if sizes else 1
        return {mq: sizes.get(mq, typical) for mq in backlogged}

    def _check_not_reset(self, mq: MessageQueue, position: int, max_offset: int) -> int:
        """A queue that now ends before what the query already read lost messages (store
        wiped, unflushed tail lost in a crash): fail, or go on from its new end. The new
        end is below `start`, so that queue gets no partition in this batch."""
        if position <= max_offset:
            return position
        problem = (f"topic {mq.topic} broker {mq.broker_name} queue {mq.queue_id} now ends at offset "
                   f"{max_offset} but the query has already read up to {position}: messages were lost")
        if self._options.pull.fail_on_data_loss:
            raise RmqDataLossError(f"{problem}; set failOnDataLoss=false to continue from {max_offset}")
        logger.warning("%s; continuing from offset %d (failOnDataLoss=false)", problem, max_offset)
        return max_offset

    def _ceiling(self, mq: MessageQueue, position: int) -> int:
        """How far `mq` may be read now: its max offset, capped by the AvailableNow target."""
        assert self._lookup is not None
        latest = self._lookup.max_offset(mq)
        if self._target is not None:
            latest = min(latest, self._target.get(mq, position))
        return latest
