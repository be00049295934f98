"""ConsumerImpl: the pull half of RocketMQ's DefaultMQPushConsumerImpl, written once for every
consumer of a ClientInstance (docs/internals/pull.md §6, §10, §15, §20).

PushConsumer and PullConsumer both inherit it and differ only in where pulled messages go
(`_deliver`: the consume service, or the poll buffer) and in a few policy points named below.
Shared here:

- `pull_message`, run by the ClientInstance's one PullMessageService: a dropped queue is left
  alone; a paused queue waits 1 s; flow control (messages, MiB, and in concurrent push mode the
  offset span held by the ProcessQueue) waits 50 ms; an orderly queue not locked waits 3 s and
  its first pull after locking starts at the stored offset; then one asynchronous long-polling
  pull (or another read path: the PullConsumer's Flight backlog read), with the commit offset
  riding on it where the consumer commits that way;
- `_on_pull`, the PullCallback: a refusal for good stops the queue (`failure`); an error (an
  unreachable broker: one warning per outage, BrokerOutages) pulls again in 3 s;
- `take_pull_result`: FOUND (client-side tag filter, ProcessQueue put, delivery),
  NO_NEW_MSG / NO_MATCHED_MSG (correctTagsOffset), OFFSET_ILLEGAL (`_offset_illegal`), and
  `process_pull_result` schedules the next pull (at once, or after `pull_interval_ms`).
"""

from __future__ import annotations

import logging
import time

from rmq import __version__, retry
from rmq.connector.broker_outages import BrokerOutages
from rmq.connector.client import MessageQueue, PullResult, PullStatus, RmqClient, RmqError
from rmq.connector.client_instance import ClientInstance
from rmq.connector.consumer_checks import is_permanent_refusal
from rmq.connector.consumer_config import (
    BROKER_SUSPEND_MAX_TIME_MILLIS,
    PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION,
    PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL,
    ConsumerConfig,
)
from rmq.connector.message import MessageExt, decode_messages
from rmq.connector.offset_store import OffsetStore, ReadOffsetType
from rmq.connector.process_queue import ProcessQueue
from rmq.connector.pull_message_service import PullMessageService
from rmq.connector.rebalance_impl import PullRequest, RebalanceImpl, SubscriptionData
from rmq.connector.scheduled_executor import ScheduledExecutor
from rmq.v1 import rmq_pb2

logger = logging.getLogger(__name__)

PULL_TIME_DELAY_MILLS_WHEN_SUSPEND = 1000   # a paused queue
OFFSET_ILLEGAL_FIX_DELAY_S = 10.0


class ConsumerImpl:
    """The shared pull loop of a consumer; subclasses set the attributes below and `_deliver`."""

    config: ConsumerConfig                      # the consumer's settings, read from here only
    group: str
    client_id: str
    consume_type: rmq_pb2.ConsumeType            # push: CONSUME_PASSIVELY, pull: CONSUME_ACTIVELY
    client: RmqClient
    outages: BrokerOutages
    failure: RmqError | None
    offset_store: OffsetStore
    rebalance_impl: RebalanceImpl
    orderly: bool
    piggyback_commit: bool                      # the commit offset rides on the pulls
    _instance: ClientInstance
    _pull_service: PullMessageService
    _scheduler: ScheduledExecutor
    _flow_control_times: int

    @property
    def running(self) -> bool:
        raise NotImplementedError

    @property
    def broadcasting(self) -> bool:
        return self.config.broadcasting

    @property
    def rebalance_interval_s(self) -> float:
        return self.config.rebalance_interval_s

    def running_info(self) -> rmq_pb2.ConsumerRunningInfo:
        """RocketMQ's ConsumerRunningInfo (`consumerStatus`): how it consumes, its subscriptions and,
        per owned queue, its process queue (cached messages, last pull and consume, in-memory offset)."""
        now_ms = time.time() * 1000
        queues = []
        for mq, pq in sorted(self.rebalance_impl.process_queue_table.items()):
            held = pq.held_offsets()

            def epoch_ms(at: float, pq: ProcessQueue = pq) -> int:
                return int(now_ms - (pq.clock() - at) * 1000)

            queues.append(rmq_pb2.ProcessQueueInfo(
                queue=rmq_pb2.MessageQueue(topic=mq.topic, broker_name=mq.broker_name, queue_id=mq.queue_id),
                committed_offset=self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY),
                cached_messages=pq.msg_count, cached_bytes=pq.msg_size,
                cached_min_offset=held[0] if held else -1, cached_max_offset=held[-1] if held else -1,
                last_pull_ms=epoch_ms(pq.last_pull_timestamp),
                last_consume_ms=epoch_ms(pq.last_consume_timestamp), locked=pq.locked))
        return rmq_pb2.ConsumerRunningInfo(
            client_id=self.client_id, consume_type=self.consume_type, orderly=self.orderly,
            message_model=rmq_pb2.BROADCASTING if self.broadcasting else rmq_pb2.CLUSTERING,
            subscriptions=[rmq_pb2.Subscription(topic=topic, sub_expression=data.sub_string)
                           for topic, data in sorted(self.rebalance_impl.subscription_inner.items())],
            queues=queues, sdk_version=__version__)

    # ------------------------------------------------------------ where each consumer differs

    def _deliver(self, request: PullRequest, messages: list[MessageExt], dispatch_to_consume: bool) -> None:
        """Hand messages just put into the request's ProcessQueue on (consume service, poll buffer)."""
        raise NotImplementedError

    def _consumed_through(self, mq: MessageQueue, offset: int) -> None:
        """Nothing is held below `offset` any more (filtered out, or nothing new): progress passes it."""
        raise NotImplementedError

    def _start_queue(self, request: PullRequest) -> None:
        """A newly assigned queue's first pull request, before it is sent."""

    def _is_paused(self, mq: MessageQueue) -> bool:
        return False

    def _read_elsewhere(self, request: PullRequest, subscription: SubscriptionData) -> bool:
        """True when another read path took the request (it then schedules the next pull itself)."""
        return False

    def _pulled(self, mq: MessageQueue, result: PullResult) -> None:
        """A pull's answer arrived (before it is taken)."""

    def _offset_illegal(self, request: PullRequest) -> int | None:
        """OFFSET_ILLEGAL (next_offset already moved): drop the ProcessQueue and, 10 s later, store
        and persist the corrected offset and remove the queue, so the next rebalance recreates it
        from there; no next pull (None)."""
        request.process_queue.dropped = True
        self._scheduler.schedule(OFFSET_ILLEGAL_FIX_DELAY_S, lambda: self._fix_offset(request))
        return None

    # ------------------------------------------------------------ the pull service

    def _pull_now(self, request: PullRequest) -> None:
        self._pull_service.execute_pull_request_immediately(self, request)

    def _pull_later(self, request: PullRequest, delay_ms: int) -> None:
        self._pull_service.execute_pull_request_later(self, request, delay_ms)

    def _dispatch_pull_requests(self, requests: list[PullRequest]) -> None:
        """RebalanceImpl's dispatchPullRequest: the first pull of each newly assigned queue."""
        for request in requests:
            self._start_queue(request)
            self._pull_now(request)

    # ------------------------------------------------------------ pullMessage (§10)

    def pull_message(self, request: PullRequest) -> None:
        """DefaultMQPushConsumerImpl#pullMessage: pause, flow control, orderly gating, then an
        asynchronous pull."""
        pq, mq = request.process_queue, request.message_queue
        if pq.dropped:
            logger.info("the pull request[%s] is dropped.", mq)
            return
        if not self.running:
            return
        pq.last_pull_timestamp = time.monotonic()
        if self._is_paused(mq):
            self._pull_later(request, PULL_TIME_DELAY_MILLS_WHEN_SUSPEND)
            return
        delay_ms = self.flow_control_delay_ms(pq)
        if delay_ms:
            self._flow_control_times += 1
            if (self._flow_control_times - 1) % 1000 == 0:   # queueFlowControlTimes++ % 1000 == 0
                logger.warning("the cached message count/size/span of %s exceeds the threshold, so do flow "
                               "control: count=%d size=%d MiB span=%d", mq, pq.msg_count,
                               pq.msg_size // (1024 * 1024), pq.max_span())
            self._pull_later(request, delay_ms)
            return
        lock_delay_ms = self.orderly_pull_delay_ms(request)
        if lock_delay_ms:
            self._pull_later(request, lock_delay_ms)
            return
        subscription = self.rebalance_impl.subscription_inner.get(mq.topic)
        if subscription is None:
            logger.warning("find the consumer's subscription failed, %s", mq)
            self._pull_later(request, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION)
            return
        try:
            if self._read_elsewhere(request, subscription):
                return
            pull = self.client.pull_async(
                mq, request.next_offset, self.config.pull_batch_size, group=self.group,
                sub_expression=subscription.selector, suspend_timeout_ms=BROKER_SUSPEND_MAX_TIME_MILLIS,
                commit_offset=self._commit_offset(mq),
                callback=lambda result, error: self._on_pull(request, subscription, result, error))
            pq.pull_started(pull.cancel)
        except RmqError as error:
            self._retry_later(request, error)

    def _commit_offset(self, mq: MessageQueue) -> int | None:
        """The commit offset riding on the pull (§10.2): clustering, when one is held in memory."""
        if not self.piggyback_commit or self.broadcasting:
            return None
        in_memory = self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY)
        return in_memory if in_memory > 0 else None

    def flow_control_delay_ms(self, pq: ProcessQueue) -> int:
        """TV-7: 50 ms when the ProcessQueue holds too many messages, too many MiB, or (in
        concurrent push mode) too wide an offset span; else 0."""
        if pq.msg_count > self.config.pull_threshold_for_queue:
            return PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL
        if pq.msg_size // (1024 * 1024) > self.config.pull_threshold_size_for_queue:
            return PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL
        span = None if self.orderly else self.config.consume_concurrently_max_span
        if span is not None and pq.max_span() > span:
            return PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL
        return 0

    def orderly_pull_delay_ms(self, request: PullRequest) -> int:
        """Orderly pull gating (§10.1 step 6, §17.5): an unlocked queue is pulled again in 3 s;
        the first pull after locking starts at the offset the store holds."""
        if not self.orderly or self.broadcasting:
            return 0
        if not request.process_queue.locked:
            logger.info("pull message later because not locked in broker, %s", request.message_queue)
            return PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION
        if not request.locked_first:
            offset = self.rebalance_impl.compute_pull_from_where(request.message_queue)
            if offset < 0:
                return PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION
            if offset < request.next_offset:
                logger.info("[NOTIFYME]the first time to pull message, but pull request offset larger than "
                            "broker consume offset, %s %d > %d", request.message_queue, request.next_offset,
                            offset)
            request.locked_first = True
            request.next_offset = offset
        return 0

    # ------------------------------------------------------------ PullCallback (§15)

    def _on_pull(self, request: PullRequest, subscription: SubscriptionData, result: PullResult | None,
                 error: RmqError | None) -> None:
        """PullCallback (TV-11), on a transport thread. A dropped queue's answer is ignored (its
        pull may have been cancelled by the drop)."""
        if not self.running or request.process_queue.dropped:
            return
        mq = request.message_queue
        if is_permanent_refusal(error):
            self._stop_pulling(mq, error)
            return
        if error is not None or result is None:
            self._retry_later(request, error)
            return
        self.outages.answered(mq.broker_name)
        self._pulled(mq, result)
        try:
            self.process_pull_result(request, subscription, result)
        except Exception:
            logger.exception("processing the pull result of %s failed", mq)
            self._pull_later(request, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION)

    def _stop_pulling(self, mq: MessageQueue, error: RmqError | None) -> None:
        """A refusal for good (consumer_checks): the queue's pulls stop, `failure` tells why."""
        if self.failure is None:
            logger.error("consumer group %s stops pulling %s: %s", self.group, mq, error)
            self.failure = error

    def _retry_later(self, request: PullRequest, error: RmqError | None) -> None:
        """A failed pull: again in 3 s (an unreachable broker: one warning per outage)."""
        mq = request.message_queue
        if not self.outages.report(mq.broker_name, error) and not retry.is_retry_topic(mq.topic):
            logger.warning("execute the pull request of %s exception: %s", mq, error)
        self._pull_later(request, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION)

    def process_pull_result(self, request: PullRequest, subscription: SubscriptionData,
                            result: PullResult) -> None:
        """Take the answer, then the next pull: at once, after the pull interval, or none."""
        delay_ms = self.take_pull_result(request, subscription, result)
        if delay_ms is None:
            return
        if delay_ms > 0:
            self._pull_later(request, delay_ms)
        else:
            self._pull_now(request)

    def take_pull_result(self, request: PullRequest, subscription: SubscriptionData,
                         result: PullResult) -> int | None:
        """One read's answer (a pull's, or a Flight batch's) by status; returns the delay before
        the queue's next pull in ms (0: at once; None: no next pull)."""
        mq, pq = request.message_queue, request.process_queue
        if result.pull_status == PullStatus.OFFSET_ILLEGAL:
            logger.warning("the pull request offset illegal, %s %d -> %d", mq, request.next_offset,
                           result.next_begin_offset)
            request.next_offset = result.next_begin_offset
            return self._offset_illegal(request)
        request.next_offset = result.next_begin_offset
        messages: list[MessageExt] = []
        if result.pull_status == PullStatus.FOUND:
            messages = decode_messages(result.messages, mq)
            if subscription.tags is not None:   # "*" and SQL92 take every message the broker sent
                messages = [m for m in messages if subscription.matches(m.tags)]
        if not messages:   # NO_NEW_MSG, NO_MATCHED_MSG, or everything filtered out
            self.correct_tags_offset(request)
            return 0
        dispatch_to_consume = pq.put_message(messages, pulled_until=request.next_offset)
        self._deliver(request, messages, dispatch_to_consume)
        return self.config.pull_interval_ms

    def correct_tags_offset(self, request: PullRequest) -> None:
        """correctTagsOffset: past the messages the pull filtered out, at once when nothing is
        held, else when what is held is consumed (ProcessQueue.mark_pulled_until)."""
        pq = request.process_queue
        pq.mark_pulled_until(request.next_offset)
        if pq.msg_count == 0:
            self._consumed_through(request.message_queue, request.next_offset)

    def _fix_offset(self, request: PullRequest) -> None:
        mq = request.message_queue
        self.offset_store.update_offset(mq, request.next_offset, increase_only=False)
        try:
            self.offset_store.persist_all([mq])
        except RmqError as error:
            logger.warning("executeTaskLater Exception: %s", error)
        self.rebalance_impl.remove_process_queue(mq)
        logger.warning("fix the pull request offset, %s -> %d", mq, request.next_offset)
