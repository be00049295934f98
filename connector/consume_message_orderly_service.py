"""ConsumeMessageOrderlyService (spec consumer-pull-rebalance §17; consumer-startup-allocation-
ordering §5, §6).

In clustering mode it renews the consumer's queue locks every `lock_interval_s` (20 s,
rocketmq.client.rebalance.lockInterval; first after 1 s): a queue whose listener runs longer
than the broker's lock lifetime stays locked, so its next owner waits for the batch
(docs/client-behaviour.md "Orderly hand-off"). A consume request stands for one queue: it
runs under that queue's MessageQueueLock (one thread per queue), only while the ProcessQueue
is locked and its lock is not older than REBALANCE_LOCK_MAX_LIVE_TIME_S, and hands the listener the queue's
smallest offsets, `consume_message_batch_max_size` at a time, until the queue is empty, a
batch is suspended, or MAX_TIME_CONSUME_CONTINUOUSLY_S passed (then it re-submits itself, so
other queues get threads). SUCCESS commits max offset + 1 (TV-20, not increase-only);
SUSPEND_CURRENT_QUEUE_A_MOMENT rolls the batch back and consumes it again after the suspend
time, until `max_reconsume_times` (None: forever) is reached: then the message goes to the
group's DLQ and the queue moves on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rmq.connector.client import MessageQueue
from rmq.connector.consume_message_concurrently_service import MS_PER_MINUTE, ConsumeReturnType
from rmq.connector.consume_thread_pool import ConsumeThreadPool
from rmq.connector.consumer_config import ConsumerConfig
from rmq.connector.message import MessageExt
from rmq.connector.message_listener_orderly import (
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    MessageListenerOrderly,
)
from rmq.connector.message_queue_lock import MessageQueueLock
from rmq.connector.offset_store import OffsetStore
from rmq.connector.process_queue import ProcessQueue
from rmq.connector.rebalance_impl import RebalanceImpl
from rmq.connector.scheduled_executor import ScheduledExecutor

logger = logging.getLogger(__name__)

MAX_TIME_CONSUME_CONTINUOUSLY_S = 60.0
LOCK_FIRST_DELAY_S = 1.0
DLQ_DELAY_LEVEL = -1                   # send-back straight to %DLQ%<group>
TRY_LOCK_LATER_OK_MS = 10              # tryLockLaterAndReconsume: locked -> consume in 10 ms
TRY_LOCK_LATER_FAILED_MS = 3000        # not locked -> try again in 3 s
SUSPEND_MIN_MS, SUSPEND_MAX_MS = 10, 30000


@dataclass
class OrderlyConsumeRequest:
    process_queue: ProcessQueue
    message_queue: MessageQueue


def classify_orderly(status: ConsumeOrderlyStatus | None, has_exception: bool, consume_rt_ms: float,
                     consume_timeout_minutes: float) -> ConsumeReturnType:
    """ConsumeRequest#run's returnType for orderly listeners (spec pull §17.3)."""
    if status is None:
        return ConsumeReturnType.EXCEPTION if has_exception else ConsumeReturnType.RETURNNULL
    if consume_rt_ms >= consume_timeout_minutes * MS_PER_MINUTE:
        return ConsumeReturnType.TIME_OUT
    if status is ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT:
        return ConsumeReturnType.FAILED
    return ConsumeReturnType.SUCCESS


class ConsumeMessageOrderlyService:
    def __init__(
        self,
        listener: MessageListenerOrderly,
        config: ConsumerConfig,
        *,
        offset_store: OffsetStore,
        rebalance_impl: RebalanceImpl,
        send_message_back: Callable[[MessageExt, int], bool],
        scheduler: ScheduledExecutor,
    ) -> None:
        """`config`: the consumer's (group, message model, consume threads, batch size, consume
        timeout, max_reconsume_times, suspend_current_queue_time_millis, lock_interval_s)."""
        self.listener = listener
        self.config = config
        self.offset_store = offset_store
        self.rebalance_impl = rebalance_impl
        self.send_message_back = send_message_back
        self.scheduler = scheduler
        self.message_queue_lock = MessageQueueLock()
        self._pool = ConsumeThreadPool[OrderlyConsumeRequest](f"rmq-consume-orderly-{config.group}",
                                                              config.consume_thread_max, self.run)

    def start(self, process_queues: object = None) -> None:
        """Start the consume threads and, in clustering, the periodic lockAll (§5.1)."""
        self._pool.start()
        if not self.config.broadcasting:
            self.scheduler.schedule_at_fixed_rate(LOCK_FIRST_DELAY_S, self.config.lock_interval_s,
                                                  self.lock_mq_periodically)

    def lock_mq_periodically(self) -> None:
        if not self._pool.stopped:
            self.rebalance_impl.lock_all()

    def shutdown(self, await_termination_s: float) -> None:
        """Stop taking requests and wait (bounded) for running listeners. The locks are
        released by the consumer after it persisted the offsets (PushConsumer.shutdown), so
        the queue's next owner starts where this one stopped."""
        self._pool.shutdown(await_termination_s)

    # ------------------------------------------------------------ submitting

    def submit_consume_request(self, messages: Sequence[MessageExt], pq: ProcessQueue, mq: MessageQueue,
                               dispatch_to_consume: bool = True) -> None:
        """One request per queue: only when the ProcessQueue was idle (dispatchToConsume)."""
        if dispatch_to_consume:
            self._submit(OrderlyConsumeRequest(pq, mq))

    def _submit(self, request: OrderlyConsumeRequest) -> None:
        self._pool.submit(request)

    def submit_consume_request_later(self, pq: ProcessQueue, mq: MessageQueue, suspend_ms: int) -> None:
        delay_ms = min(max(suspend_ms, SUSPEND_MIN_MS), SUSPEND_MAX_MS)
        self.scheduler.schedule(delay_ms / 1000, lambda: self._submit(OrderlyConsumeRequest(pq, mq)))

    def try_lock_later_and_reconsume(self, mq: MessageQueue, pq: ProcessQueue, delay_ms: int) -> None:
        def attempt() -> None:
            locked = self.rebalance_impl.lock(mq, pq)   # not once the queue is let go of
            delay = TRY_LOCK_LATER_OK_MS if locked else TRY_LOCK_LATER_FAILED_MS
            self.submit_consume_request_later(pq, mq, delay)

        self.scheduler.schedule(delay_ms / 1000, attempt)

    # ------------------------------------------------------------ consuming

    def _lock_valid(self, pq: ProcessQueue) -> bool:
        return self.config.broadcasting or (pq.locked and not pq.is_lock_expired())

    def run(self, request: OrderlyConsumeRequest) -> None:
        """ConsumeRequest#run (spec pull §17.3)."""
        pq, mq = request.process_queue, request.message_queue
        if pq.dropped:
            logger.warning("run, the message queue not be able to consume, because it's dropped. %s", mq)
            return
        with self.message_queue_lock.fetch_lock_object(mq):
            if not self._lock_valid(pq):
                if not pq.dropped:
                    self.try_lock_later_and_reconsume(mq, pq, 100)
                return
            begin = time.monotonic()
            while not self._pool.stopped:
                if pq.dropped:
                    logger.warning("the message queue not be able to consume, because it's dropped. %s", mq)
                    return
                if not self._lock_valid(pq):
                    logger.warning("the message queue not locked (or its lock expired), so consume later, %s",
                                   mq)
                    self.try_lock_later_and_reconsume(mq, pq, 10)
                    return
                if time.monotonic() - begin > MAX_TIME_CONSUME_CONTINUOUSLY_S:
                    self.submit_consume_request_later(pq, mq, 10)   # let other queues have the thread
                    return
                messages = pq.take_messages(self.config.consume_message_batch_max_size)
                if not messages:
                    return
                if not self._consume(messages, pq, mq):
                    return

    def _consume(self, messages: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> bool:
        """Call the listener once; whether this thread goes on with the queue."""
        context = ConsumeOrderlyContext(mq)
        status: ConsumeOrderlyStatus | None = None
        has_exception = False
        begin = time.monotonic()
        # The result is processed under the consume lock too: a rebalance that drops the queue
        # persists its offset only after taking this lock, so it includes this batch's commit.
        with pq.lock_consume:
            if pq.dropped:
                logger.warning("consumeMessage, the message queue not be able to consume, because it's "
                               "dropped. %s", mq)
                pq.make_message_to_consume_again(messages)
                return False
            try:
                returned = self.listener(tuple(messages), context)
                status = returned if isinstance(returned, ConsumeOrderlyStatus) else None
            except Exception:
                logger.warning("consumeMessage exception: Group: %s MQ: %s", self.config.group, mq,
                               exc_info=True)
                has_exception = True
            return_type = classify_orderly(status, has_exception, (time.monotonic() - begin) * 1000,
                                           self.config.consume_timeout_minutes)
            if status is None:
                status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            if return_type is not ConsumeReturnType.SUCCESS:
                logger.info("consume %s: %s, %d messages of %s from offset %d", return_type.value,
                            status.value, len(messages), mq, messages[0].queue_offset)
            return self.process_consume_result(messages, status, context, pq, mq)

    def process_consume_result(self, messages: list[MessageExt], status: ConsumeOrderlyStatus,
                               context: ConsumeOrderlyContext, pq: ProcessQueue, mq: MessageQueue) -> bool:
        """Spec pull §17.4 / TV-20: commit or consume again; True to go on with the queue."""
        commit_offset = -1
        continue_consume = True
        if status is ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT or (
                not context.auto_commit and status is ConsumeOrderlyStatus.ROLLBACK):
            if status is ConsumeOrderlyStatus.ROLLBACK or self.check_reconsume_times(messages):
                pq.make_message_to_consume_again(messages)
                suspend_ms = context.suspend_current_queue_time_millis
                self.submit_consume_request_later(
                    pq, mq, suspend_ms if suspend_ms >= 0 else self.config.suspend_current_queue_time_millis)
                continue_consume = False
            else:
                commit_offset = pq.commit()
        elif context.auto_commit or status is ConsumeOrderlyStatus.COMMIT:
            if context.auto_commit and status is not ConsumeOrderlyStatus.SUCCESS:
                logger.warning("the message queue consume result is illegal, we think you want to ack these "
                               "message %s", mq)
            commit_offset = pq.commit()
        if commit_offset >= 0:   # (held under the consume lock: see _consume)
            self.offset_store.update_offset(mq, commit_offset, increase_only=False)
        return continue_consume

    def check_reconsume_times(self, messages: list[MessageExt]) -> bool:
        """True to suspend (consume the batch again): below max_reconsume_times, or a message
        at the limit could not be moved to the DLQ."""
        suspend = False
        limit = self.config.max_reconsume_times
        for message in messages:
            if limit is not None and message.reconsume_times >= limit:
                if self.send_message_back(message, DLQ_DELAY_LEVEL):
                    logger.warning("orderly: message %s of %s offset %d reached %d reconsume times, moved to "
                                   "the DLQ", message.msg_id, message.message_queue, message.queue_offset,
                                   limit)
                    continue
            suspend = True
            message.reconsume_times += 1
        return suspend
