"""ConsumeMessageConcurrentlyService (spec consumer-pull-rebalance §16, TV-12, TV-13;
consumption-longpolling-offsets §12, TV-8-TV-10).

Pulled messages are cut into batches of `consume_message_batch_max_size` and handed to the
listener on a thread pool. The outcome is classified (SUCCESS, FAILED, EXCEPTION,
RETURNNULL, TIME_OUT); everything but CONSUME_SUCCESS (up to `ack_index`) fails the rest of
the batch. Clustering: failed messages are sent back to the broker (a delayed copy in the
retry topic); a message whose send-back fails is consumed again locally after 5 s.
Broadcasting: failed messages are logged and dropped. Then the batch leaves the ProcessQueue
and the queue's offset moves to the smallest offset still held (increase-only), unless the
queue was dropped meanwhile. A periodic clean-up sends back messages whose listener has run
longer than the consume timeout.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from rmq.connector.client import MessageQueue
from rmq.connector.consume_thread_pool import ConsumeThreadPool
from rmq.connector.consumer_config import ConsumerConfig
from rmq.connector.message import MessageExt
from rmq.connector.message_listener import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    MessageListenerConcurrently,
)
from rmq.connector.offset_store import OffsetStore
from rmq.connector.process_queue import CLEAN_EXPIRED_MAX_LOOPS, ProcessQueue
from rmq.connector.scheduled_executor import ScheduledExecutor

logger = logging.getLogger(__name__)

CONSUME_LATER_DELAY_S = 5.0        # submitConsumeRequestLater
EXPIRED_SEND_BACK_LEVEL = 3        # cleanExpiredMsg sends back with delay level 3
MS_PER_MINUTE = 60 * 1000


class ConsumeReturnType(enum.Enum):
    SUCCESS = "SUCCESS"
    TIME_OUT = "TIME_OUT"
    EXCEPTION = "EXCEPTION"
    RETURNNULL = "RETURNNULL"
    FAILED = "FAILED"


def classify(status: ConsumeConcurrentlyStatus | None, has_exception: bool, consume_rt_ms: float,
             consume_timeout_minutes: float) -> ConsumeReturnType:
    """ConsumeRequest#run's returnType (TV-13)."""
    if status is None:
        return ConsumeReturnType.EXCEPTION if has_exception else ConsumeReturnType.RETURNNULL
    if consume_rt_ms >= consume_timeout_minutes * MS_PER_MINUTE:
        return ConsumeReturnType.TIME_OUT
    if status is ConsumeConcurrentlyStatus.RECONSUME_LATER:
        return ConsumeReturnType.FAILED
    return ConsumeReturnType.SUCCESS


def split_batches(messages: Sequence[MessageExt], batch_size: int) -> list[tuple[MessageExt, ...]]:
    """submitConsumeRequest (longpolling TV-9): one request when the pull fits a batch."""
    return [tuple(messages[i:i + batch_size]) for i in range(0, len(messages), batch_size)]


def failed_from(status: ConsumeConcurrentlyStatus, ack_index: int, count: int) -> int:
    """The index of the first failed message (processConsumeResult's ackIndex + 1)."""
    if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
        return min(ack_index, count - 1) + 1
    return 0


@dataclass(slots=True)
class ConsumeRequest:
    messages: Sequence[MessageExt]   # a tuple from the pull (the listener gets it as it is)
    process_queue: ProcessQueue
    message_queue: MessageQueue


SendBack = Callable[[MessageExt, int], bool]


class ConsumeMessageConcurrentlyService:
    def __init__(
        self,
        listener: MessageListenerConcurrently,
        config: ConsumerConfig,
        *,
        offset_store: OffsetStore,
        send_message_back: SendBack,
        scheduler: ScheduledExecutor,
    ) -> None:
        """`config`: the consumer's (group, message model, consume threads, batch size, consume
        timeout)."""
        self.listener = listener
        self.config = config
        self.offset_store = offset_store
        self.send_message_back = send_message_back
        self.scheduler = scheduler
        self._pool = ConsumeThreadPool[ConsumeRequest](f"rmq-consume-{config.group}",
                                                       config.consume_thread_max, self.run)

    def start(self, process_queues: Callable[[], Iterable[ProcessQueue]]) -> None:
        """Start the consume threads; schedule the consume-timeout clean-up (every consume
        timeout, like RocketMQ)."""
        self._pool.start()
        period_s = self.config.consume_timeout_minutes * 60
        self.scheduler.schedule_at_fixed_rate(period_s, period_s,
                                              lambda: self.clean_expire_msg(process_queues()))

    def shutdown(self, await_termination_s: float) -> None:
        """Stop taking requests (queued ones are dropped: their offsets were not committed, so
        the queue's next owner consumes them); wait up to `await_termination_s` for running
        listeners."""
        self._pool.shutdown(await_termination_s)

    def submit_consume_request(self, messages: Sequence[MessageExt], pq: ProcessQueue,
                               mq: MessageQueue, dispatch_to_consume: bool = True) -> None:
        """Every batch goes to the pool (`dispatch_to_consume` is for orderly consumers only)."""
        submit, size = self._pool.submit, self.config.consume_message_batch_max_size
        if size == 1:   # RocketMQ's default: one request per message
            for message in messages:
                submit(ConsumeRequest((message,), pq, mq))
            return
        for batch in split_batches(messages, size):
            submit(ConsumeRequest(batch, pq, mq))

    def _submit(self, request: ConsumeRequest) -> None:
        self._pool.submit(request)   # after shutdown the messages stay unacknowledged, consumed again later

    def submit_consume_request_later(self, request: ConsumeRequest) -> None:
        self.scheduler.schedule(CONSUME_LATER_DELAY_S, lambda: self._submit(request))

    def run(self, request: ConsumeRequest) -> None:
        """ConsumeRequest#run."""
        pq, messages = request.process_queue, request.messages
        if pq.dropped:
            logger.info("the message queue not be able to consume, because it's dropped. group=%s %s",
                        self.config.group, request.message_queue)
            return
        context = ConsumeConcurrentlyContext(request.message_queue)
        pq.mark_consume_started(messages)
        begin = time.monotonic()
        status: ConsumeConcurrentlyStatus | None = None
        has_exception = False
        try:
            returned = self.listener(tuple(messages), context)   # a tuple is passed as it is
            status = returned if isinstance(returned, ConsumeConcurrentlyStatus) else None
        except Exception:
            logger.warning("consumeMessage exception: Group: %s MQ: %s", self.config.group,
                           request.message_queue, exc_info=True)
            has_exception = True
        consume_rt_ms = (time.monotonic() - begin) * 1000
        return_type = classify(status, has_exception, consume_rt_ms, self.config.consume_timeout_minutes)
        if status is None:   # an exception, None or anything but a status: consume it again later
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        if return_type is not ConsumeReturnType.SUCCESS:
            logger.info("consume %s: %s, %d messages of %s", return_type.value, status.value,
                        len(messages), request.message_queue)
        if pq.dropped:
            logger.warning("processQueue is dropped without process consume result. messageQueue=%s",
                           request.message_queue)
            return
        self.process_consume_result(status, context, request)

    def process_consume_result(self, status: ConsumeConcurrentlyStatus, context: ConsumeConcurrentlyContext,
                               request: ConsumeRequest) -> None:
        """Spec consumer-pull-rebalance §16.3: send back (or drop) the failed part, then commit
        the smallest offset."""
        first_failed = failed_from(status, context.ack_index, len(request.messages))
        if first_failed < len(request.messages):
            self._handle_failed(request.messages[first_failed:], context, request)
        self._commit(request)

    def _commit(self, request: ConsumeRequest) -> None:
        """The batch leaves the ProcessQueue; the queue's offset moves to the smallest offset
        still held (increase-only), unless the queue was dropped meanwhile."""
        pq = request.process_queue
        offset = pq.remove_message(request.messages)
        if offset >= 0:
            self.offset_store.update_offset(request.message_queue, offset, increase_only=True,
                                            unless_dropped=pq)

    def _handle_failed(self, failed: Sequence[MessageExt], context: ConsumeConcurrentlyContext,
                       request: ConsumeRequest) -> None:
        """Broadcasting drops the failed messages; clustering sends them back, and those whose
        send-back failed leave the request (they stay held) to be consumed again in 5 s."""
        if self.config.broadcasting:
            for message in failed:
                logger.warning("BROADCASTING, the message consume failed, drop it, %s", message.msg_id)
        else:
            level = context.delay_level_when_next_consume
            back_failed = [m for m in failed if not self.send_message_back(m, level)]
            if back_failed:
                for message in back_failed:
                    message.reconsume_times += 1
                failed_ids = {id(m) for m in back_failed}
                request.messages = [m for m in request.messages if id(m) not in failed_ids]
                self.submit_consume_request_later(ConsumeRequest(back_failed, request.process_queue,
                                                                 request.message_queue))

    def clean_expire_msg(self, process_queues: Iterable[ProcessQueue]) -> None:
        """cleanExpireMsg: send back (level 3) and remove the messages whose listener started
        longer than the consume timeout ago, looking at each queue's smallest offsets."""
        timeout_s = self.config.consume_timeout_minutes * 60
        for pq in process_queues:
            for _ in range(CLEAN_EXPIRED_MAX_LOOPS):
                message = pq.expired_message(timeout_s)
                if message is None or self.config.broadcasting:
                    break
                if not self.send_message_back(message, EXPIRED_SEND_BACK_LEVEL):
                    logger.error("send expired msg failed: %s", message.msg_id)
                    break
                logger.info("send expire msg back. topic=%s, msgId=%s, queueOffset=%d", message.topic,
                            message.msg_id, message.queue_offset)
                pq.remove_message([message])
