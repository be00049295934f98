"""PushConsumer: RocketMQ's DefaultMQPushConsumer for Python services (spec
consumer-pull-rebalance §4-§10, §15, §16, §18; consumption-longpolling-offsets;
consumer-startup-allocation-ordering §1, §4).

    consumer = PushConsumer("orders-service", "127.0.0.1:9876")
    consumer.subscribe("Orders", "TagA || TagB")
    consumer.register_message_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    consumer.start()

Inside (one of each per consumer): a RebalanceImpl, a ConsumeMessageConcurrentlyService (thread
pool, send-back of failed messages) and an OffsetStore (the broker's in clustering, a local file
in broadcasting) persisted every 5 s and at shutdown. The pull loop (asynchronous long-polling
pulls, the commit offset piggy-backed on them, flow control per ProcessQueue) is the shared
ConsumerImpl's, run by the ClientInstance's one PullMessageService; the pulled messages go to the
consume service. The process's ClientInstance of the consumer's client id (client_instance)
heartbeats, watches the group's membership and runs the RebalanceService (every 20 s, and at
once when a broker pushes a membership change). `shutdown()` waits for running listeners
(bounded), persists the offsets and unregisters, so the group's other consumers take the queues over at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Unpack, cast

from rmq import retry
from rmq.connector.broker_outages import BrokerOutages
from rmq.connector.client import MessageQueue, RmqClient, RmqError, RmqUnavailable
from rmq.connector.client_instance import ClientInstance, client_id_of
from rmq.connector.consume_message_concurrently_service import ConsumeMessageConcurrentlyService
from rmq.connector.consume_message_orderly_service import ConsumeMessageOrderlyService
from rmq.connector.consumer_checks import check_client_in_broker
from rmq.connector.consumer_config import (
    LEGACY_OFFSET_STORE_DIR,
    ConsumerConfig,
    PushConsumerSettings,
    ServiceState,
)
from rmq.connector.consumer_impl import ConsumerImpl
from rmq.connector.errors import ConfigError, StateError
from rmq.connector.message import MessageExt
from rmq.connector.message_listener import MessageListenerConcurrently
from rmq.connector.message_listener_orderly import MessageListenerOrderly
from rmq.connector.offset_store import (
    DEFAULT_OFFSET_STORE_DIR,
    LocalFileOffsetStore,
    OffsetStore,
    ReadOffsetType,
    RemoteBrokerOffsetStore,
)
from rmq.connector.rebalance_impl import (
    BrokerQueueAdmin,
    PullRequest,
    RebalanceImpl,
    copy_subscription,
)
from rmq.connector.scheduled_executor import ScheduledExecutor, ScheduledTask
from rmq.connector.subscription import MessageSelector as SdkSelector
from rmq.subscription import MessageSelector
from rmq.v1 import rmq_pb2

logger = logging.getLogger(__name__)

class PushConsumer(ConsumerImpl):
    """A consumer group member that pulls on its own and calls the listener (RocketMQ
    defaults: clustering, avg allocation, from the last offset, 16 reconsume attempts, 20
    consume threads, 32 messages per pull, batches of 1, consume timeout 15 minutes). The
    keywords are consumer_config.PushConsumerSettings; `config` holds them, checked."""

    consume_type = rmq_pb2.CONSUME_PASSIVELY

    def __init__(self, group: str, endpoints: str | Sequence[str], *, client: RmqClient | None = None,
                 **settings: Unpack[PushConsumerSettings]) -> None:
        """`settings`: PushConsumerSettings (consumer_config), validated once into `config`; a bad
        or unknown keyword is a ConfigError naming it."""
        self.config = ConsumerConfig.create(group, settings, PushConsumerSettings)
        self.group = group
        self.client_id = client_id_of(self.config.instance_name)
        self._instance = ClientInstance.acquire(self.client_id, client=client, endpoints=endpoints)
        self._instance_released = False
        self.client = self._instance.client
        self._subscriptions: dict[str, str | MessageSelector] = {}
        self._listener: MessageListenerConcurrently | MessageListenerOrderly | None = None
        self.orderly = False
        self._state = ServiceState.CREATE_JUST
        self._state_lock = threading.Lock()
        self._flow_control_times = 0
        self.outages = BrokerOutages(f"consumer group {group}")
        self.failure: RmqError | None = None   # a pull refused for good (see consumer_checks)
        # built by start()
        self.offset_store: OffsetStore
        self.rebalance_impl: RebalanceImpl
        self.consume_service: ConsumeMessageConcurrentlyService | ConsumeMessageOrderlyService
        self._scheduler: ScheduledExecutor
        self._pull_service = self._instance.pull_message_service
        self.piggyback_commit = True
        self._persist_task: ScheduledTask | None = None

    # ------------------------------------------------------------ public API

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Consume `topic`'s messages whose tag matches `expression` ("*" or "TagA || TagB"),
        or those an SQL92 `MessageSelector.by_sql(...)` selects on the broker."""
        if not topic:
            raise ConfigError("topic is empty")
        if isinstance(expression, str):
            expression = SdkSelector.by_tag(expression)   # ConfigError naming the bad expression
        self._subscriptions[topic] = expression

    def register_message_listener(self, listener: MessageListenerConcurrently | MessageListenerOrderly,
                                  orderly: bool = False) -> None:
        """`listener(messages, context)` returns ConsumeConcurrentlyStatus (see message_listener);
        with `orderly` it returns ConsumeOrderlyStatus and gets each queue's messages in offset
        order, one queue per thread, under the queue's broker lock (see
        message_listener_orderly, consume_message_orderly_service)."""
        self._listener = listener
        self.orderly = orderly

    def __enter__(self) -> PushConsumer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def running(self) -> bool:
        return self._state == ServiceState.RUNNING

    def start(self) -> None:
        """DefaultMQPushConsumerImpl#start: check, copy the subscriptions, build the services,
        register with the client instance and heartbeat, then rebalance at once. Raises
        ConfigError for a missing listener or subscription, StateError when started twice or when
        the group runs already under this client id, RmqError when the brokers refuse (e.g. an
        unknown topic, no permission on the group, an SQL92 filter the broker does not support:
        consumer_checks)."""
        with self._state_lock:
            if self._state != ServiceState.CREATE_JUST:
                raise StateError(f"The PushConsumer service state not OK, maybe started once, {self._state}")
            if self._listener is None:
                raise ConfigError("no message listener registered (register_message_listener)")
            if not self._subscriptions:
                raise ConfigError("no subscription (subscribe(topic, expression))")
            for topic in self._subscriptions:
                self.client.query_route(topic)   # an unknown topic fails here, naming it
            self._state = ServiceState.START_FAILED
            self._build()
            try:
                self._instance.register_consumer(self)   # built: the heartbeat loop may beat it now
            except StateError:
                self._scheduler.shutdown()
                self._release_instance()
                raise
            try:
                check_client_in_broker(self.client, self.group,
                                       self.rebalance_impl.subscription_inner.values(),
                                       lambda: self._instance.send_heartbeat(self))
            except RmqError:
                self._scheduler.shutdown()
                self._instance.unregister_consumer(self, leave_group=False)
                self._release_instance()
                raise
            # before RUNNING: the instance's rebalance may dispatch this consumer's pulls from then on
            self.consume_service.start(lambda: list(self.rebalance_impl.process_queue_table.values()))
            self._pull_service.register(self)
            self._state = ServiceState.RUNNING
        self._instance.heartbeat(self)
        self._instance.start()
        self._persist_task = self._instance.schedule_at_fixed_rate(
            self.config.persist_consumer_offset_interval_s, self.persist_consumer_offset)
        self._instance.rebalance_immediately()
        logger.info("the consumer [%s] start OK as %s", self.group, self.client_id)

    def shutdown(self) -> None:
        """Stop pulling, wait for running listeners (up to await_termination_s), persist the
        offsets, unregister from every broker and close the connections."""
        with self._state_lock:
            if self._state != ServiceState.RUNNING:
                if self._state == ServiceState.CREATE_JUST:
                    self._release_instance()
                self._state = ServiceState.SHUTDOWN_ALREADY
                return
            self._state = ServiceState.SHUTDOWN_ALREADY
        self._instance.wait_for_rebalance()   # no rebalance of this consumer runs from here on
        self._pull_service.unregister(self)
        self.consume_service.shutdown(self.config.await_termination_s)
        if self._persist_task is not None:
            self._persist_task.cancel()
        self.persist_consumer_offset()
        if self.orderly:
            self.rebalance_impl.unlock_all()   # after the offsets are persisted: the next owner resumes there
        self.rebalance_impl.drop_all()
        self._scheduler.shutdown()
        self._instance.unregister_consumer(self, leave_group=not self.broadcasting)
        self._release_instance()
        logger.info("the consumer [%s] shutdown OK", self.group)

    def _release_instance(self) -> None:
        if not self._instance_released:
            self._instance_released = True
            self._instance.release()

    def persist_consumer_offset(self) -> None:
        """persistConsumerOffset: write the offsets of every queue owned now."""
        try:
            self.offset_store.persist_all(list(self.rebalance_impl.process_queue_table))
        except RmqUnavailable:
            pass   # the other brokers' offsets are written; the offset store reported the unreachable one
        except RmqError as error:
            logger.warning("persistAllConsumerOffset of group %s failed: %s", self.group, error)

    def process_queues(self) -> dict[MessageQueue, int]:
        """The queues owned now and how many messages each holds (for monitoring)."""
        return {mq: pq.msg_count for mq, pq in sorted(self.rebalance_impl.process_queue_table.items())}

    # ------------------------------------------------------------ start-up

    def _build(self) -> None:
        self._scheduler = ScheduledExecutor(f"rmq-scheduled-{self.group}")
        if self.broadcasting:
            instance_dir = self.client_id.replace("@", "_")
            # offsets a PushConsumer saved before the default moved there are still read
            directory = self.config.offset_store_dir
            legacy = (Path(LEGACY_OFFSET_STORE_DIR).expanduser() / instance_dir
                      if directory == Path(DEFAULT_OFFSET_STORE_DIR).expanduser() else None)
            self.offset_store = LocalFileOffsetStore(directory / instance_dir, self.group,
                                                     legacy_directory=legacy)
        else:
            self.offset_store = RemoteBrokerOffsetStore(self.client, self.group, self.outages)
        self.offset_store.load()
        config = self.config
        self.rebalance_impl = RebalanceImpl(
            self.group, self.client_id, copy_subscription(self.group, self._subscriptions, self.broadcasting),
            broadcasting=self.broadcasting, strategy=config.allocate_strategy, offset_store=self.offset_store,
            admin=BrokerQueueAdmin(self.client, self.group, self.client_id), consume_from=config.consume_from,
            consume_timestamp_ms=config.consume_timestamp_ms,
            dispatch_pull_requests=self._dispatch_pull_requests, orderly=self.orderly)
        assert self._listener is not None
        if self.orderly:
            self.consume_service = ConsumeMessageOrderlyService(
                cast(MessageListenerOrderly, self._listener), config, offset_store=self.offset_store,
                rebalance_impl=self.rebalance_impl, send_message_back=self.send_message_back,
                scheduler=self._scheduler)
        else:
            self.consume_service = ConsumeMessageConcurrentlyService(
                cast(MessageListenerConcurrently, self._listener), config, offset_store=self.offset_store,
                send_message_back=self.send_message_back, scheduler=self._scheduler)

    # ------------------------------------------------------------ MQConsumerInner (client_instance)

    def heartbeat_subscriptions(self) -> dict[str, str]:
        return {t: s.sub_string for t, s in self.rebalance_impl.subscription_inner.items()}

    def do_rebalance(self) -> bool:
        return self.rebalance_impl.do_rebalance() if self.running else True

    def connection_lost(self, broker_name: str) -> None:
        if self.orderly:
            self.rebalance_impl.connection_lost(broker_name)

    def connection_restored(self, broker_name: str) -> None:
        """Orderly: take the locks back at once, not at the next lockAll (up to 20 s later)."""
        if self.orderly:
            self.rebalance_impl.lock_all()

    @property
    def adopts_offset_resets(self) -> bool:
        return True

    def offsets_reset(self, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: what is cached of these queues is dropped, their pulls
        start again from the reset offsets (broadcasting keeps its own offsets: not watched)."""
        if self.running:
            self.rebalance_impl.reset_offsets(offsets)

    # ------------------------------------------------------------ where pulled messages go (consumer_impl)

    def _start_queue(self, request: PullRequest) -> None:
        # A queue the group never committed keeps the start computePullFromWhere gave it (it is
        # persisted with the others): a restart before its first message then resumes there
        # instead of computing a later start (`last`) and skipping what arrived meanwhile.
        mq = request.message_queue
        if self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY) < 0:
            self.offset_store.update_offset(mq, request.next_offset, increase_only=True)

    def _deliver(self, request: PullRequest, messages: list[MessageExt], dispatch_to_consume: bool) -> None:
        self.consume_service.submit_consume_request(messages, request.process_queue, request.message_queue,
                                                    dispatch_to_consume)

    def _consumed_through(self, mq: MessageQueue, offset: int) -> None:
        self.offset_store.update_offset(mq, offset, increase_only=True)

    # ---------------------------------------------------- send-back (spec consumer-pull-rebalance §18)

    def send_message_back(self, message: MessageExt, delay_level: int) -> bool:
        """CONSUMER_SEND_MSG_BACK to the message's broker; False when it failed (the caller
        consumes the message again locally)."""
        max_reconsume_times = self.config.max_reconsume_times
        try:
            self.client.send_message_back(
                self.group, message.broker_name, message.commit_log_offset, delay_level=delay_level,
                origin_msg_id=message.origin_msg_id, origin_topic=message.topic,
                max_reconsume_times=(retry.DEFAULT_MAX_RECONSUME_TIMES if max_reconsume_times is None
                                     else max_reconsume_times))
            return True
        except RmqError as error:
            logger.warning("sendMessageBack of %s failed: %s", message.msg_id, error)
            return False

