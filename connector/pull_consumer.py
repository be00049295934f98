"""PullConsumer: RocketMQ's DefaultLitePullConsumer, the application polls (spec
consumer-pull-rebalance §20, TV-18; consumer-startup-allocation-ordering §3).

    consumer = PullConsumer("reports", "127.0.0.1:9876", consume_from="first")
    consumer.subscribe("Orders", "TagA")          # a group member: queues rebalanced
    consumer.start()
    while running:
        for message in consumer.poll(timeout=1.0):
            handle(message)
        consumer.commit()                         # or leave auto_commit on (every 5 s)

`assign(queues)` instead of `subscribe` reads exactly those queues without joining the
group (the group only names the committed offsets). Behind `poll`, one long-polling pull
loop per owned queue (the shared ConsumerImpl's, on the ClientInstance's one PullMessageService,
as the PushConsumer's; a RebalanceImpl) fills a bounded cache (`pull_threshold_for_queue`
messages, 100 MiB per queue); `poll` hands out one pulled
batch of one queue, in offset order per queue, and counts it consumed. `commit()` writes the
consumed offsets of every owned queue to the broker, `commit(offsets)` the given ones;
with `auto_commit` a poll commits what earlier polls returned once `auto_commit_interval_s`
passed, and shutdown commits too (at-least-once: a crash replays at most the uncommitted
tail). `seek` moves a queue's next pull (its cached messages dropped), `pause`/`resume`
stop and restart handing out and pulling a queue's messages.

A queue's backlog is read through the broker's Arrow Flight data plane where it advertises one
(option `transport`, flight_pull): the same offsets, filters and statuses, in fewer calls.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Unpack

from rmq.connector.broker_outages import BrokerOutages
from rmq.connector.client import MessageQueue, PullResult, RmqClient, RmqError, RmqUnavailable
from rmq.connector.client_instance import ClientInstance, client_id_of
from rmq.connector.consumer_checks import check_client_in_broker, is_permanent_refusal
from rmq.connector.consumer_config import ConsumerConfig, PullConsumerSettings, ServiceState
from rmq.connector.consumer_impl import ConsumerImpl
from rmq.connector.errors import ConfigError, RmqReadError, StateError
from rmq.connector.flight_pull import FlightPullService
from rmq.connector.message import MessageExt
from rmq.connector.offset_store import ReadOffsetType, RemoteBrokerOffsetStore
from rmq.connector.process_queue import ProcessQueue
from rmq.connector.rebalance_impl import BrokerQueueAdmin, PullRequest, RebalanceImpl, SubscriptionData
from rmq.connector.transport import Transport
from rmq.subscription import MessageSelector
from rmq.v1 import rmq_pb2

logger = logging.getLogger(__name__)

@dataclass
class ConsumeRequest:
    """One pulled batch of one queue, waiting for poll()."""

    messages: list[MessageExt]
    message_queue: MessageQueue
    process_queue: ProcessQueue


class PullConsumer(ConsumerImpl):
    """A lite pull consumer (clustering, `avg` allocation, from the last offset by default). The
    keywords are consumer_config.PullConsumerSettings; `config` holds them, checked."""

    consume_type = rmq_pb2.CONSUME_ACTIVELY

    def __init__(self, group: str, endpoints: str | Sequence[str], *, client: RmqClient | None = None,
                 **settings: Unpack[PullConsumerSettings]) -> None:
        """`settings`: PullConsumerSettings (consumer_config), validated once into `config`; a bad
        or unknown keyword is a ConfigError naming it."""
        self.config = ConsumerConfig.create(group, settings, PullConsumerSettings)
        self.group = group
        self.client_id = client_id_of(self.config.instance_name)
        self._instance = ClientInstance.acquire(self.client_id, client=client, endpoints=endpoints)
        self._instance_released = False
        self.client = self._instance.client
        self._subscriptions: dict[str, SubscriptionData] = {}
        self._assigned: list[MessageQueue] | None = None
        self._state = ServiceState.CREATE_JUST
        self._state_lock = threading.Lock()
        self._requests: queue.SimpleQueue[ConsumeRequest] = queue.SimpleQueue()
        self._paused: set[MessageQueue] = set()
        self._held: list[ConsumeRequest] = []          # polled while their queue was paused
        self._consumed: dict[MessageQueue, int] = {}   # next offset after what poll() returned
        self._consumed_lock = threading.Lock()
        self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_s
        self.outages = BrokerOutages(f"consumer group {group}")
        self.failure: RmqError | None = None   # a pull refused for good: poll() raises it
        self.offset_store = RemoteBrokerOffsetStore(self.client, group, self.outages)
        self._pull_service = self._instance.pull_message_service
        self.orderly = False
        self.piggyback_commit = False   # offsets are committed by commit() and auto_commit only
        self._flow_control_times = 0
        self._reads: Counter[Transport] = Counter()   # store reads answered, by transport
        config = self.config
        self._flight = FlightPullService(self.client, group, config.transport, config.pull_batch_size)
        self.rebalance_impl = RebalanceImpl(
            group, self.client_id, self._subscriptions, broadcasting=False, strategy=config.allocate_strategy,
            offset_store=self.offset_store, admin=BrokerQueueAdmin(self.client, group, self.client_id),
            consume_from=config.consume_from, consume_timestamp_ms=config.consume_timestamp_ms,
            dispatch_pull_requests=self._dispatch_pull_requests)

    # ------------------------------------------------------------ set-up

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Read `topic`'s messages whose tag matches `expression` ("*", "TagA || TagB") or that an
        SQL92 `MessageSelector.by_sql(...)` selects, sharing its queues with the group's members."""
        if not topic:
            raise ConfigError("topic is empty")
        if self._assigned is not None:
            raise StateError("subscribe and assign are mutually exclusive")
        self._subscriptions[topic] = SubscriptionData.build(topic, expression)

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Read exactly these queues (every message), outside group membership."""
        if self._subscriptions:
            raise StateError("subscribe and assign are mutually exclusive")
        self._assigned = sorted(set(queues))
        if not self._assigned:
            raise ConfigError("no queue to assign")

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """fetchMessageQueues: every readable queue of the topic."""
        return list(self.client.query_route(topic).message_queues)

    def __enter__(self) -> PullConsumer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def running(self) -> bool:
        return self._state == ServiceState.RUNNING

    def start(self) -> None:
        with self._state_lock:
            if self._state != ServiceState.CREATE_JUST:
                raise StateError(f"The PullConsumer service state not OK, maybe started once, {self._state}")
            if self._assigned is None and not self._subscriptions:
                raise ConfigError("nothing to read: subscribe(topic, expression) or assign(queues) first")
            if self._assigned is not None:
                for topic in {mq.topic for mq in self._assigned}:
                    self._subscriptions[topic] = SubscriptionData.build(topic, "*")
            for topic in self._subscriptions:
                self.client.query_route(topic)   # an unknown topic fails here, naming it
            if self._joins:
                self._instance.register_consumer(self)
                self._check_client_in_broker()
            self._pull_service.register(self)   # before RUNNING: a rebalance may dispatch pulls from then on
            self._state = ServiceState.RUNNING
        if self._assigned is not None:
            self.rebalance_impl.assign(self._assigned)
            return
        self._instance.heartbeat(self)
        self._instance.start()
        self._instance.rebalance_immediately()

    def shutdown(self) -> None:
        """Commit (with auto_commit), leave the group and stop pulling."""
        with self._state_lock:
            if self._state != ServiceState.RUNNING:
                if self._state == ServiceState.CREATE_JUST:
                    self._release_instance()
                self._state = ServiceState.SHUTDOWN_ALREADY
                return
            self._state = ServiceState.SHUTDOWN_ALREADY
        if self._joins:
            self._instance.wait_for_rebalance()   # no rebalance of this consumer runs from here on
        self._pull_service.unregister(self)
        self._flight.shutdown()
        if self.config.auto_commit:
            self._commit_consumed()
        self.rebalance_impl.drop_all()
        if self._joins:
            self._instance.unregister_consumer(self, leave_group=True)
        self._release_instance()

    @property
    def _joins(self) -> bool:
        """A subscribing consumer is a group member; an assigning one reads its queues alone."""
        return self._assigned is None

    def _release_instance(self) -> None:
        if not self._instance_released:
            self._instance_released = True
            self._instance.release()

    # ------------------------------------------------------------ reading

    def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        """The next pulled batch (one queue, ascending offsets), or [] after `timeout` seconds.
        Raises the refusal that stopped a queue's pulls for good (consumer_checks)."""
        if not self.running:
            raise StateError("the PullConsumer is not running")
        if self.failure is not None:
            raise self.failure
        self._maybe_auto_commit()
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                request = self._requests.get(timeout=max(remaining, 0.0)) if remaining > 0 else \
                    self._requests.get_nowait()
            except queue.Empty:
                return []
            if request.process_queue.dropped:
                continue   # the queue went to another member, or was sought
            if request.message_queue in self._paused:
                self._held.append(request)
                continue
            offset = request.process_queue.remove_message(request.messages)
            with self._consumed_lock:   # a reset drops the queue under this lock
                if request.process_queue.dropped:
                    continue
                self._consumed[request.message_queue] = offset
            return request.messages

    @property
    def transport_reads(self) -> dict[Transport, int]:
        """Store reads answered so far by each transport (a pull, or one batch of a Flight ticket)."""
        return dict(self._reads)

    def assignment(self) -> list[MessageQueue]:
        """The queues read now (assigned, or owned after the last rebalance)."""
        return sorted(self.rebalance_impl.process_queue_table)

    # ------------------------------------------------------------ offsets

    def commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """Write to the broker the next offset to read of every queue read now (what poll()
        returned so far), or the given `offsets`."""
        if offsets is None:
            self._commit_consumed()
            return
        for mq, offset in offsets.items():
            self.offset_store.update_offset(mq, offset, increase_only=False)
        self.offset_store.persist_all(offsets)

    def committed(self, mq: MessageQueue) -> int:
        """The group's committed offset of `mq` on the broker (-1: none)."""
        return self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Read `mq` from `offset` next: its cached messages are dropped, the pull loop restarts."""
        self._ensure_owned(mq)
        offsets = self.client.queue_offsets(mq)
        if not offsets.min_offset <= offset <= offsets.max_offset:
            raise ConfigError(f"offset {offset} of {mq} is outside "
                              f"[{offsets.min_offset}, {offsets.max_offset}]")
        pq = self.rebalance_impl.replace_process_queue(mq)
        if pq is None:
            raise ConfigError(f"{mq} is not read by this consumer")
        with self._consumed_lock:
            self._consumed[mq] = offset
        self._pull_now(PullRequest(self.group, mq, pq, offset))

    def seek_to_begin(self, mq: MessageQueue) -> None:
        self.seek(mq, self.client.queue_offsets(mq).min_offset)

    def seek_to_end(self, mq: MessageQueue) -> None:
        self.seek(mq, self.client.queue_offsets(mq).max_offset)

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        """Stop pulling these queues and handing out their messages (until resume)."""
        self._paused.update(queues)

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        resumed = set(queues)
        self._paused -= resumed
        held, self._held = self._held, []
        for request in held:
            if request.message_queue in resumed:
                self._requests.put(request)
            else:
                self._held.append(request)

    # ------------------------------------------------------------ inside

    def _ensure_owned(self, mq: MessageQueue) -> None:
        if mq not in self.rebalance_impl.process_queue_table:
            raise ConfigError(f"{mq} is not read by this consumer (assigned or owned now: "
                             f"{', '.join(map(str, self.assignment())) or 'none'})")

    def _commit_consumed(self) -> None:
        owned = set(self.rebalance_impl.process_queue_table)
        with self._consumed_lock:
            consumed = {mq: offset for mq, offset in self._consumed.items() if mq in owned and offset >= 0}
        for mq, offset in consumed.items():
            self.offset_store.update_offset(mq, offset, increase_only=False)
        try:
            self.offset_store.persist_all(consumed)
        except RmqUnavailable:
            pass   # the other brokers' offsets are written; the offset store reported the unreachable one
        except RmqError as error:
            logger.warning("commit of group %s failed: %s", self.group, error)

    def _maybe_auto_commit(self) -> None:
        if self.config.auto_commit and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_s
            self._commit_consumed()

    def _check_client_in_broker(self) -> None:
        try:
            check_client_in_broker(self.client, self.group, self._subscriptions.values(),
                                   lambda: self._instance.send_heartbeat(self))
        except RmqError:
            self._state = ServiceState.START_FAILED
            self._instance.unregister_consumer(self, leave_group=False)
            self._release_instance()
            raise

    # ------------------------------------------------------------ MQConsumerInner (client_instance)

    @property
    def rebalance_interval_s(self) -> float:
        return self.config.rebalance_interval_s

    def heartbeat_subscriptions(self) -> dict[str, str]:
        return {t: s.sub_string for t, s in self._subscriptions.items()}

    def do_rebalance(self) -> bool:
        return self.rebalance_impl.do_rebalance() if self.running else True

    def connection_lost(self, broker_name: str) -> None:
        """Nothing to do: a lite pull consumer holds no queue locks."""

    def connection_restored(self, broker_name: str) -> None:
        """Nothing to do: a lite pull consumer holds no queue locks."""

    @property
    def adopts_offset_resets(self) -> bool:
        return True

    def offsets_reset(self, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: poll() hands out nothing more of what was cached of these
        queues, and their next messages and commits start from the reset offsets."""
        if not self.running:
            return
        table = self.rebalance_impl.process_queue_table
        owned = {mq: offset for mq, offset in offsets.items() if mq in table}
        with self._consumed_lock:
            for mq, offset in owned.items():
                table[mq].dropped = True
                self._consumed[mq] = offset
        self.rebalance_impl.reset_offsets(owned)

    # ------------------------------------------------------------ where pulled messages go (consumer_impl)

    def _start_queue(self, request: PullRequest) -> None:
        with self._consumed_lock:
            self._consumed.setdefault(request.message_queue, request.next_offset)

    def _is_paused(self, mq: MessageQueue) -> bool:
        return mq in self._paused

    def _read_elsewhere(self, request: PullRequest, subscription: SubscriptionData) -> bool:
        """A backlog goes through the Flight data plane where the broker advertises one."""
        try:
            if not self._flight.wants(request.message_queue, request.next_offset):
                return False
            room = self.config.pull_threshold_for_queue - request.process_queue.msg_count
            self._flight.read(request, subscription.selector, room,
                              lambda request, result: self._take(request, subscription, result),
                              self._on_flight_read)
        except RmqReadError as error:   # transport=flight without a data plane
            self.failure = self.failure or error
        return True

    def _pulled(self, mq: MessageQueue, result: PullResult) -> None:
        self._reads[Transport.GRPC] += 1
        self._flight.saw(mq, result)

    def _offset_illegal(self, request: PullRequest) -> int | None:
        """DefaultLitePullConsumer: read on from the corrected offset (poll() commits nothing
        the application did not get)."""
        self.correct_tags_offset(request)
        return 0

    def _consumed_through(self, mq: MessageQueue, offset: int) -> None:
        with self._consumed_lock:
            self._consumed[mq] = offset

    def _deliver(self, request: PullRequest, messages: list[MessageExt], dispatch_to_consume: bool) -> None:
        """To poll(), in batches of pull_batch_size (a Flight read holds more)."""
        for start in range(0, len(messages), self.config.pull_batch_size):
            self._requests.put(ConsumeRequest(messages[start:start + self.config.pull_batch_size],
                                              request.message_queue, request.process_queue))

    def _on_flight_read(self, request: PullRequest, error: RmqError | None) -> None:
        """A ticket ended: read on (a data plane that failed under AUTO: by PullMessage at once)."""
        if not self.running or request.process_queue.dropped:
            return
        if is_permanent_refusal(error):
            self._stop_pulling(request.message_queue, error)
        elif error is None or (isinstance(error, RmqUnavailable)
                               and self._flight.transport is Transport.AUTO):
            self._pull_now(request)
        else:
            self._retry_later(request, error)

    def _take(self, request: PullRequest, subscription: SubscriptionData, result: PullResult) -> None:
        """One Flight batch's answer: taken like a pull's (the ticket goes on by itself)."""
        self._reads[Transport.FLIGHT] += 1
        self.outages.answered(request.message_queue.broker_name)
        self.take_pull_result(request, subscription, result)
