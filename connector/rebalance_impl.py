"""RebalanceImpl for push consumers (RebalancePushImpl; spec consumer-pull-rebalance §8, §9,
TV-9, TV-10, TV-24; consumer-startup-allocation-ordering §3, §4.3).

It keeps the consumer's subscriptions (with the group's retry topic in clustering) and the
ProcessQueue table. A rebalance computes, per subscribed topic, the queues this consumer
owns (all of them when broadcasting; the allocation strategy over the sorted queues and
client ids when clustering), drops the queues it no longer owns (their offsets persisted
and forgotten, so the new owner resumes there), and starts a pull loop, at the offset
computePullFromWhere gives, for each queue it gained.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from rmq import retry
from rmq.connector.allocation import AllocateStrategy, allocate_topic
from rmq.connector.client import MASTER_ID, MessageQueue, PullStatus, RmqClient, RmqError
from rmq.connector.consumer_config import ConsumeFromWhere
from rmq.connector.offset_store import OffsetStore, ReadOffsetType
from rmq.connector.offsets import NO_OFFSET
from rmq.connector.process_queue import ProcessQueue
from rmq.connector.subscription import MessageSelector as SdkSelector
from rmq.subscription import MessageSelector, parse_sub_expression

logger = logging.getLogger(__name__)

UNLOCK_TRY_TIMEOUT_S = 1.0   # removeUnnecessaryMessageQueue's tryLock of the consume lock
RESET_WAIT_S = 10.0          # resetOffset's wait for an orderly batch being consumed (RocketMQ sleeps 10 s)


@dataclass(frozen=True)
class SubscriptionData:
    """FilterAPI.buildSubscriptionData: the topic and its selector (tags, or an SQL92 condition
    the broker evaluates), with the tag set the client re-checks (None: every message)."""

    topic: str
    selector: MessageSelector
    tags: frozenset[str] | None

    @classmethod
    def build(cls, topic: str, expression: str | MessageSelector) -> SubscriptionData:
        selector = (expression if isinstance(expression, MessageSelector)
                    else SdkSelector.by_tag(expression))   # ConfigError naming a bad expression
        tags = None if selector.is_sql else parse_sub_expression(selector.expression)[1]
        return cls(topic, selector, tags)

    @property
    def sub_string(self) -> str:
        return self.selector.expression

    def matches(self, tags: str) -> bool:
        """The client's re-check of the broker's tag hash filter (SQL92 is the broker's alone)."""
        return self.tags is None or tags in self.tags


@dataclass
class PullRequest:
    """One queue's pull loop (spec pull §2.3): re-queued after each pull while the queue is ours."""

    consumer_group: str
    message_queue: MessageQueue
    process_queue: ProcessQueue
    next_offset: int
    locked_first: bool = False   # orderly: the first pull after locking re-reads the offset (§10.1)


class QueueAdmin(Protocol):
    """What rebalancing asks the brokers (MQAdminImpl / MQClientInstance)."""

    def message_queues(self, topic: str) -> Sequence[MessageQueue]: ...
    def consumer_ids(self, topic: str) -> list[str]: ...
    def max_offset(self, mq: MessageQueue) -> int: ...
    def first_message_in_memory(self, mq: MessageQueue) -> bool: ...
    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int: ...
    def lock_batch(self, mqs: Sequence[MessageQueue], unreachable: set[str] | None = None
                   ) -> set[MessageQueue]: ...
    def unlock_batch(self, mqs: Sequence[MessageQueue]) -> None: ...


class BrokerQueueAdmin:
    """QueueAdmin over an RmqClient (what rebalancing asks the brokers)."""

    def __init__(self, client: RmqClient, group: str, client_id: str) -> None:
        self._client = client
        self._group = group
        self._client_id = client_id

    def message_queues(self, topic: str) -> Sequence[MessageQueue]:
        return self._client.query_route(topic).message_queues

    def consumer_ids(self, topic: str) -> list[str]:
        return self._client.consumer_list(self._group, topic)

    def max_offset(self, mq: MessageQueue) -> int:
        return self._client.queue_offsets(mq).max_offset

    def first_message_in_memory(self, mq: MessageQueue) -> bool:
        """Whether the queue still holds offset 0 and its master reads it from memory (RocketMQ's
        queryConsumerOffset: minOffset <= 0 and not checkInDiskByConsumeOffset): one pull of one
        message at 0, answered without a suggestion to read from a slave."""
        result = self._client.pull(mq, 0, 1, group=self._group)
        return (result.pull_status is PullStatus.FOUND and result.min_offset == 0
                and result.suggest_which_broker_id == MASTER_ID)

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._client.search_offset(mq, timestamp_ms)

    def lock_batch(self, mqs: Sequence[MessageQueue], unreachable: set[str] | None = None
                   ) -> set[MessageQueue]:
        return self._client.lock_batch(self._group, self._client_id, mqs, unreachable)

    def unlock_batch(self, mqs: Sequence[MessageQueue]) -> None:
        self._client.unlock_batch(self._group, self._client_id, mqs)


def copy_subscription(group: str, subscriptions: dict[str, str | MessageSelector], broadcasting: bool
                      ) -> dict[str, SubscriptionData]:
    """copySubscription (TV-24): clustering consumers also subscribe to `%RETRY%<group>`."""
    inner = {topic: SubscriptionData.build(topic, expression) for topic, expression in subscriptions.items()}
    if not broadcasting:
        topic = retry.retry_topic(group)
        inner[topic] = SubscriptionData.build(topic, "*")
    return inner


class RebalanceImpl:
    def __init__(
        self,
        group: str,
        client_id: str,
        subscriptions: dict[str, SubscriptionData],
        *,
        broadcasting: bool,
        strategy: AllocateStrategy | str,
        offset_store: OffsetStore,
        admin: QueueAdmin,
        consume_from: ConsumeFromWhere,
        consume_timestamp_ms: int,
        dispatch_pull_requests: Callable[[list[PullRequest]], None],
        orderly: bool = False,
    ) -> None:
        self.group = group
        self.client_id = client_id
        self.subscription_inner = subscriptions
        self.broadcasting = broadcasting
        self.strategy = strategy
        self.offset_store = offset_store
        self.admin = admin
        self.consume_from = consume_from
        self.consume_timestamp_ms = consume_timestamp_ms
        self.dispatch_pull_requests = dispatch_pull_requests
        self.orderly = orderly and not broadcasting   # queue locks are a clustering matter (§5.1)
        self.process_queue_table: dict[MessageQueue, ProcessQueue] = {}
        self._lock = threading.Lock()   # one rebalance at a time
        # The broker locks asked for (lockAll, lock) and given back with the queue forgotten (a
        # removal) go one at a time, each with the table as it is then: a lockAll whose request
        # reached the broker after a removal's unlock would lock the dropped queue again, and its
        # next owner would wait for that lock to lapse (60 s) or this consumer to leave.
        self._lock_requests = threading.Lock()
        self._balanced = True           # the current rebalance got and let go of every queue it should

    def do_rebalance(self) -> bool:
        """RebalanceImpl#doRebalance: every subscribed topic, then drop unsubscribed topics.
        False (not balanced) when an orderly queue could not be locked (its previous owner still
        holds it) or let go of (its listener is running): RebalanceService then tries again
        after its min interval, not the full wait (RocketMQ 5's `balanced`, rebalanceLater), so
        a queue changes hands as soon as its previous owner's batch is done."""
        with self._lock:
            self._balanced = True
            for topic in list(self.subscription_inner):
                try:
                    self.rebalance_by_topic(topic)
                except (RmqError, ValueError) as error:
                    if not retry.is_retry_topic(topic):   # retry topics fail quietly (§8.3)
                        logger.warning("rebalanceByTopic Exception, group %s topic %s: %s", self.group, topic,
                                       error)
            self.truncate_message_queue_not_my_topic()
            return self._balanced

    def rebalance_by_topic(self, topic: str) -> bool:
        mq_set = list(self.admin.message_queues(topic))
        cid_all = [] if self.broadcasting else self.admin.consumer_ids(topic)
        allocated = allocate_topic(self.strategy, self.client_id, mq_set, cid_all, self.broadcasting)
        if allocated is None:
            logger.warning("doRebalance, %s, %s: no queues (%d) or no consumers (%d)", self.group, topic,
                           len(mq_set), len(cid_all))
            return False
        changed = self.update_process_queue_table_in_rebalance(topic, set(allocated))
        if self.broadcasting:
            return changed
        if changed:
            logger.info("rebalanced, group=%s, topic=%s, clientId=%s, mqAllSize=%d, cidAllSize=%d, "
                        "rebalanceResultSize=%d", self.group, topic, self.client_id, len(mq_set),
                        len(cid_all), len(allocated))
        return changed

    def update_process_queue_table_in_rebalance(self, topic: str, mq_set: set[MessageQueue]) -> bool:
        """Spec consumer-pull-rebalance §8.6 / TV-10: drop queues not in `mq_set` (or whose pulls
        went idle), add new ones at computePullFromWhere, and start a pull loop only for the
        added ones."""
        changed = False
        for mq, pq in list(self.process_queue_table.items()):
            if mq.topic != topic:
                continue
            # a queue whose removal waited for its listener is removed even if it is ours again:
            # its dropped ProcessQueue pulls no more, and a fresh one is added below
            if mq not in mq_set or pq.removal_pending or pq.is_pull_expired():
                if self._let_go(mq, pq):
                    changed = True
                    logger.info("doRebalance, %s, remove unnecessary mq, %s", self.group, mq)
                else:
                    self._balanced = False
        pull_requests = []
        added = [mq for mq in sorted(mq_set - set(self.process_queue_table)) if self._may_add(mq)]
        # their committed offsets in one query per broker and topic, read after the locks (orderly)
        stored = self.offset_store.read_offsets_from_store(added) if added else {}
        for mq in added:
            next_offset = self.compute_pull_from_where(mq, stored[mq])
            if next_offset < 0:   # its cause is warned where it happened (once per outage for a down broker)
                logger.info("doRebalance, %s, add new mq failed, %s", self.group, mq)
                continue
            pq = ProcessQueue()
            pq.locked = self.orderly
            self.process_queue_table[mq] = pq
            pull_requests.append(PullRequest(self.group, mq, pq, next_offset))
            changed = True
            logger.info("doRebalance, %s, add a new mq, %s at %d", self.group, mq, next_offset)
        self.dispatch_pull_requests(pull_requests)
        return changed

    def _may_add(self, mq: MessageQueue) -> bool:
        """Orderly: only a queue whose broker lock this consumer got."""
        if not self.orderly or self.lock(mq):
            return True
        logger.info(
            "doRebalance, %s, add a new mq failed, %s, because lock failed: another consumer holds "
            "it until it lets go (or its lock expires, 60 s after its last renewal), or the broker's "
            "master is down (consumer-startup-allocation-ordering §6); retried in a moment",
            self.group, mq)
        self._balanced = False
        return False

    def _let_go(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """Drop `pq` and remove it. An orderly one whose listener is running stays in the table,
        `removal_pending`, with its broker lock (renewed by lockAll): so no other consumer takes
        the queue while the batch runs, and a rebalance removes it (and unlocks it) once the
        batch is done (False: the caller's rebalance is not balanced, so it runs again in a
        moment)."""
        pq.dropped = True
        if self.remove_unnecessary_message_queue(mq, pq):
            return True
        pq.removal_pending = True
        return False

    def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """Persist the queue's offset for its next owner, then forget it (`pq` leaves the table).
        Orderly: only once no listener runs on the queue (else False: the rebalance tries again
        in a moment), and then its broker lock is released at once, in the same step as the
        queue leaves the table, so no lockAll takes it again (RebalancePushImpl#
        removeUnnecessaryMessageQueue, without RocketMQ's 20 s unlockDelay for a queue still
        holding pulled messages: the queue is dropped and its consume lock held here, so nothing
        more of it is consumed or committed by this consumer; docs/client-behaviour.md
        "Orderly hand-off")."""
        if self.orderly and not pq.lock_consume.acquire(timeout=UNLOCK_TRY_TIMEOUT_S):
            logger.warning("[WRONG]mq is consuming, so can not unlock it, %s. maybe hanged for a while", mq)
            return False
        try:
            try:
                self.offset_store.persist_all([mq])
            except RmqError as error:
                logger.warning("persisting the offset of %s failed: %s", mq, error)
            self.offset_store.remove_offset(mq)
            with self._lock_requests:
                if self.orderly:
                    self.unlock(mq)
                if self.process_queue_table.get(mq) is pq:
                    del self.process_queue_table[mq]
        finally:
            if self.orderly:
                pq.lock_consume.release()
        return True

    # ------------------------------------------------------------ queue locks (orderly)

    def lock(self, mq: MessageQueue, pq: ProcessQueue | None = None) -> bool:
        """Lock one queue on its broker's master (marking its ProcessQueue, if any). With `pq`
        (the consume service's retry, lockOneMQ), only while `pq` is the queue's and not
        dropped: a queue let go of meanwhile is not locked again."""
        with self._lock_requests:
            if pq is not None and (pq.dropped or self.process_queue_table.get(mq) is not pq):
                return False
            try:
                locked = mq in self.admin.lock_batch([mq])
            except RmqError as error:
                logger.warning("lockBatchMQ of %s failed: %s", mq, error)
                return False
            owned = self.process_queue_table.get(mq)
            if owned is not None and locked:
                owned.locked = True
                owned.last_lock_timestamp = owned.clock()
        logger.info("the message queue lock %s, %s %s", "OK" if locked else "Failed", self.group, mq)
        return locked

    def lock_all(self) -> None:
        """lockAll (spec consumer-startup-allocation-ordering §5.2): renew the lock of every
        owned queue; a queue whose lock is refused stops being consumed, with a log line
        naming the two causes of §6, until a later lockAll or rebalance gets it. A queue of
        an unreachable broker keeps its state, as RocketMQ's lockAll leaves it on an
        exception: its lock still lapses REBALANCE_LOCK_MAX_LIVE_TIME after the last renewal,
        and a lost connection unlocks it at once (`connection_lost`). A queue a rebalance lets
        go of meanwhile is either unlocked after this request or not in it."""
        with self._lock_requests:
            self._lock_all()

    def _lock_all(self) -> None:
        table = dict(self.process_queue_table)
        if not table:
            return
        unreachable: set[str] = set()
        try:
            locked = self.admin.lock_batch(sorted(table), unreachable)
        except RmqError as error:
            logger.warning("lockBatchMQ of group %s failed: %s", self.group, error)
            locked = set()
        for mq, pq in table.items():
            if mq.broker_name in unreachable:
                continue
            if mq in locked:
                if not pq.locked:
                    logger.info("the message queue locked OK, Group: %s %s", self.group, mq)
                pq.locked = True
                pq.last_lock_timestamp = pq.clock()
            elif pq.locked:
                pq.locked = False
                logger.warning(
                    "the message queue locked Failed, Group: %s %s: its ordered consumption pauses until "
                    "the lock is granted again (another consumer holds it until it expires, or the broker's "
                    "master is down; consumer-startup-allocation-ordering §6)", self.group, mq)

    def connection_lost(self, broker_name: str) -> None:
        """This client's connection to `broker_name` ended: the broker released its locks at
        once (the client left the group), so another consumer may take them now. Its queues
        stop being consumed after the batch in hand, until a lockAll gets them back."""
        for mq, pq in list(self.process_queue_table.items()):
            if mq.broker_name == broker_name and pq.locked:
                pq.locked = False
                logger.warning("the connection to %s ended, so its lock on %s is gone; ordered consumption "
                               "of it pauses until the lock is granted again", broker_name, mq)

    def unlock(self, mq: MessageQueue) -> None:
        try:
            self.admin.unlock_batch([mq])
            logger.info("unlock messageQueue. group:%s, clientId:%s, mq:%s", self.group, self.client_id, mq)
        except RmqError as error:
            logger.warning("unlockBatchMQ of %s failed: %s", mq, error)

    def unlock_all(self) -> None:
        """unlockAll(false): release every owned queue's lock (shutdown)."""
        with self._lock_requests:
            table = dict(self.process_queue_table)
            if not table:
                return
            try:
                self.admin.unlock_batch(sorted(table))
            except RmqError as error:
                logger.warning("unlockBatchMQ of group %s failed: %s", self.group, error)
            for pq in table.values():
                pq.locked = False

    def compute_pull_from_where(self, mq: MessageQueue, last_offset: int | None = None) -> int:
        """Spec consumer-pull-rebalance §9 / TV-9: the committed offset (`last_offset` when read
        already), else by consume_from; -1 skips the queue."""
        if last_offset is None:
            last_offset = self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
        if last_offset >= 0:
            return last_offset
        if last_offset != NO_OFFSET:
            return -1
        if self.consume_from is ConsumeFromWhere.FIRST:
            return 0
        try:
            if self.consume_from is ConsumeFromWhere.LAST:
                # a queue still holding its first message in the broker's memory (a young topic)
                # is read from 0, as RocketMQ's broker answers the query (docs/client-behaviour.md
                # "Consuming from the last offset")
                young = retry.is_retry_topic(mq.topic) or self.admin.first_message_in_memory(mq)
                return 0 if young else self.admin.max_offset(mq)
            if retry.is_retry_topic(mq.topic):
                return self.admin.max_offset(mq)
            return self.admin.search_offset(mq, self.consume_timestamp_ms)
        except RmqError as error:
            logger.warning("computing the start offset of %s failed: %s", mq, error)
            return -1

    def assign(self, mqs: Iterable[MessageQueue]) -> None:
        """Own exactly `mqs` (a PullConsumer's assign: no group membership, no allocation)."""
        wanted = set(mqs)
        with self._lock:
            for topic in sorted({mq.topic for mq in wanted}):
                queues = {mq for mq in wanted if mq.topic == topic}
                self.update_process_queue_table_in_rebalance(topic, queues)

    def replace_process_queue(self, mq: MessageQueue) -> ProcessQueue | None:
        """A fresh ProcessQueue for an owned `mq`, the old one dropped (a seek: what it holds is
        never handed out); None when `mq` is not owned."""
        with self._lock:
            old = self.process_queue_table.get(mq)
            if old is None:
                return None
            old.dropped = True
            pq = self.process_queue_table[mq] = ProcessQueue()
        return pq

    def reset_offsets(self, offsets: Mapping[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET (RocketMQ's resetOffset): each owned queue of `offsets` gets
        a fresh ProcessQueue, the old one dropped in the same step as its in-memory offset is set to
        the reset one, so neither its cached messages nor a batch being consumed from it commit over
        the reset; its pulls start again from there. Orderly: after the batch being consumed, if
        any (it commits under the consume lock). A queue not owned here is read from the committed
        (reset) offset whenever it is added. The reset offsets are persisted at once."""
        requests = []
        with self._lock:
            for mq, offset in sorted(offsets.items()):
                old = self.process_queue_table.get(mq)
                if old is None:
                    continue
                pq = ProcessQueue()
                pq.locked, pq.last_lock_timestamp = old.locked, old.last_lock_timestamp
                self._drop_for_reset(mq, old, offset)
                self.process_queue_table[mq] = pq
                requests.append(PullRequest(self.group, mq, pq, offset))
                logger.info("resetOffset, %s, %s to %d", self.group, mq, offset)
        self.dispatch_pull_requests(requests)
        try:   # at once: a periodic persist may have written the old position after the reset
            self.offset_store.persist_all([request.message_queue for request in requests])
        except RmqError as error:
            logger.warning("persisting the reset offsets of group %s failed: %s", self.group, error)

    def _drop_for_reset(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        held = self.orderly and pq.lock_consume.acquire(timeout=RESET_WAIT_S)
        if self.orderly and not held:
            logger.warning("resetOffset, %s: the batch being consumed from %s did not finish in %.0f s; "
                           "its commit may land after the reset", self.group, mq, RESET_WAIT_S)
        try:
            self.offset_store.reset_offset(mq, offset, pq)
        finally:
            if held:
                pq.lock_consume.release()

    def remove_process_queue(self, mq: MessageQueue) -> None:
        """Drop one queue now (after OFFSET_ILLEGAL); the next rebalance adds it back. Orderly,
        with its listener still running, the queue keeps its lock and the rebalance removes it
        once the batch is done (`_let_go`): taken out of the table at once, its lock would be
        neither renewed nor released, and a rebalance adding the queue back meanwhile would
        let the new ProcessQueue go (and unlock it) while the old batch still runs."""
        with self._lock:
            pq = self.process_queue_table.get(mq)
            if pq is not None and not self._let_go(mq, pq):
                logger.info("the removal of %s waits for the batch being consumed", mq)

    def truncate_message_queue_not_my_topic(self) -> None:
        for mq in [mq for mq in self.process_queue_table if mq.topic not in self.subscription_inner]:
            self.process_queue_table.pop(mq).dropped = True

    def drop_all(self) -> list[MessageQueue]:
        """Shutdown: every ProcessQueue dropped; returns their queues."""
        with self._lock:
            for pq in self.process_queue_table.values():
                pq.dropped = True
            mqs = list(self.process_queue_table)
            self.process_queue_table.clear()
        return mqs
