"""ClientInstance: RocketMQ's MQClientInstance, the one consumer runtime of a process and
client id (spec consumer-pull-rebalance §4-§7; consumer-startup-allocation-ordering §4).

Every consumer (PushConsumer, PullConsumer, the Spark source's group membership) registers
here and differs from the others only in where its pulled messages go. The instance owns what
they share:

- the RmqClient (MQClientAPIImpl) with its route cache and channels, closed with the last user
  when the instance created it;
- the consumer table: a group registers once per client id (spec pull §4.4, TV-23);
- one heartbeat loop (sendHeartbeatToAllBroker every `heartbeat_interval_s`, 30 s as RocketMQ's
  heartbeatBrokerInterval; brokers expire a silent client after 120 s) for every registered
  consumer, and each clustering group's membership watch (ConsumerIdsWatcher), which wakes
  the rebalance service when a broker pushes a membership change;
- one RebalanceService rebalancing every registered consumer (every 20 s, at once when woken);
- one PullMessageService (one pull thread and its scheduler) sending the pulls of every consumer
  of the instance, group members and assigning PullConsumers alike (consumer_impl);
- one ScheduledExecutor for the instance's periodic tasks (heartbeats, offset persisting).

`ClientInstance.acquire` is MQClientManager.getOrCreateMQClientInstance: consumers of one client
id and one RmqClient (or one endpoints list, when they let the instance create the client)
share an instance; `release` by the last user shuts it down.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from typing import ClassVar, Protocol

from rmq.connector.broker_outages import BrokerOutages
from rmq.connector.client import MessageQueue, RmqClient, RmqError, RmqUnavailable
from rmq.connector.consumer_ids_watcher import ConsumerIdsWatcher
from rmq.connector.errors import StateError
from rmq.connector.pull_message_service import PullMessageService
from rmq.connector.rebalance_service import WAIT_INTERVAL_S, RebalanceService
from rmq.connector.scheduled_executor import ScheduledExecutor, ScheduledTask
from rmq.v1 import rmq_pb2

logger = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 30.0   # heartbeatBrokerInterval; brokers expire clients after 120 s


def client_id_of(instance_name: str | None) -> str:
    """RocketMQ's `ip@instanceName` (clustering consumers use the process id as the instance
    name, changeInstanceNameToPID)."""
    return f"{socket.gethostname()}@{instance_name or os.getpid()}"


class MQConsumerInner(Protocol):
    """What the runtime asks of each registered consumer (RocketMQ's MQConsumerInner)."""

    @property
    def group(self) -> str: ...

    @property
    def broadcasting(self) -> bool: ...

    @property
    def rebalance_interval_s(self) -> float: ...

    @property
    def outages(self) -> BrokerOutages: ...

    def heartbeat_subscriptions(self) -> dict[str, str]:
        """topic -> sub expression, as the heartbeat carries them."""
        ...

    def do_rebalance(self) -> bool:
        """One rebalance of every subscribed topic; False when it should run again soon."""
        ...

    def connection_lost(self, broker_name: str) -> None: ...

    def connection_restored(self, broker_name: str) -> None: ...

    @property
    def adopts_offset_resets(self) -> bool:
        """Whether `offsets_reset` moves it (else the brokers count it as a member they cannot tell)."""
        ...

    def offsets_reset(self, offsets: dict[MessageQueue, int]) -> None:
        """An admin reset the group's offsets (RESET_CONSUMER_CLIENT_OFFSET): read on from there."""
        ...

    def running_info(self) -> rmq_pb2.ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO's answer (RocketMQ's consumerRunningInfo)."""
        ...


_InstanceKey = tuple[str, object]


class ClientInstance:
    _instances: ClassVar[dict[_InstanceKey, ClientInstance]] = {}
    _instances_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, client_id: str, client: RmqClient, *, owns_client: bool,
                 heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S) -> None:
        self.client_id = client_id
        self.client = client
        self._owns_client = owns_client
        self._heartbeat_interval_s = heartbeat_interval_s
        # reentrant: a SIGTERM handler may unregister a Spark query (spark.membership) on the
        # thread that holds them
        self._lock = threading.RLock()
        self._consumers: dict[str, MQConsumerInner] = {}
        self._watchers: dict[str, ConsumerIdsWatcher] = {}
        self._rebalance_lock = threading.RLock()   # held while a rebalance runs
        self._rebalance_service = RebalanceService(self.do_rebalance, WAIT_INTERVAL_S)
        self.pull_message_service = PullMessageService(f"rmq-pull-{client_id}")
        self._scheduler: ScheduledExecutor | None = None
        self._heartbeats: ScheduledTask | None = None
        self._key: _InstanceKey | None = None
        self._users = 0

    # ------------------------------------------------------------ MQClientManager

    @classmethod
    def acquire(cls, client_id: str, *, client: RmqClient | None = None,
                endpoints: str | Sequence[str] = (),
                heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S) -> ClientInstance:
        """The instance of `client_id` over `client` (or over a client of `endpoints` it creates
        and owns), created on first use; each acquire is matched by one `release`. The instance
        heartbeats at the shortest `heartbeat_interval_s` any of its users asked for."""
        key: _InstanceKey
        if client is not None:
            key = (client_id, client)
        else:
            text = endpoints if isinstance(endpoints, str) else ",".join(endpoints)
            key = (client_id, text)
        with cls._instances_lock:
            instance = cls._instances.get(key)
            if instance is None:
                owned = client is None
                instance = cls(client_id, client if client is not None else RmqClient(endpoints),
                               owns_client=owned, heartbeat_interval_s=heartbeat_interval_s)
                instance._key = key
                cls._instances[key] = instance
            instance._users += 1
        instance._adopt_heartbeat_interval(heartbeat_interval_s)
        return instance

    def _adopt_heartbeat_interval(self, interval_s: float) -> None:
        """Heartbeat every `interval_s` from now on when that is more often than now."""
        with self._lock:
            if interval_s >= self._heartbeat_interval_s:
                return
            self._heartbeat_interval_s = interval_s
            running = self._heartbeats
        if running is not None:
            running.cancel()
            self._schedule_heartbeats()

    def release(self) -> None:
        """One user is done; the last one shuts the instance down (and closes its own client)."""
        with self._instances_lock:
            self._users -= 1
            if self._users > 0:
                return
            if self._key is not None:
                self._instances.pop(self._key, None)
        self._shutdown()

    # ------------------------------------------------------------ consumer table

    def register_consumer(self, consumer: MQConsumerInner) -> None:
        """registerConsumer: StateError when the group is registered already under this client id."""
        with self._lock:
            if self._consumers.setdefault(consumer.group, consumer) is not consumer:
                logger.warning("the consumer group[%s] exist already.", consumer.group)
                raise StateError(f"The consumer group[{consumer.group}] has been created before in this "
                                 f"client ({self.client_id}), specify another name (or instance_name) "
                                 "please.")

    def unregister_consumer(self, consumer: MQConsumerInner, *, leave_group: bool) -> None:
        """unregisterConsumer: no more rebalances (one running now finishes first), heartbeats or
        membership watch for it; with `leave_group` the brokers unregister it at once, so the
        group's other members rebalance without waiting for the client expiry."""
        with self._rebalance_lock, self._lock:
            if self._consumers.get(consumer.group) is not consumer:
                return
            del self._consumers[consumer.group]
            watcher = self._watchers.pop(consumer.group, None)
        if watcher is not None:
            watcher.stop()
        if leave_group:
            try:
                self.client.unregister(self.client_id, consumer.group)
            except RmqError as error:
                logger.warning("unregister of %s from group %s failed: %s", self.client_id, consumer.group,
                               error)

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the heartbeat loop and the rebalance service (once; later calls do nothing but
        adopt a shorter rebalance interval of a consumer registered since)."""
        with self._lock:
            intervals = [consumer.rebalance_interval_s for consumer in self._consumers.values()]
            self._rebalance_service.wait_interval_s = min(intervals, default=WAIT_INTERVAL_S)
            if self._scheduler is not None:
                return
            self._scheduler = ScheduledExecutor(f"rmq-client-{self.client_id}")
        self._schedule_heartbeats()
        self._rebalance_service.start()

    def _schedule_heartbeats(self) -> None:
        assert self._scheduler is not None
        period = self._heartbeat_interval_s
        self._heartbeats = self._scheduler.schedule_at_fixed_rate(period, period, self.heartbeat_all)

    def _shutdown(self) -> None:
        self._rebalance_service.shutdown()
        self.pull_message_service.shutdown()
        if self._scheduler is not None:
            self._scheduler.shutdown()
        with self._lock:
            watchers, self._watchers = list(self._watchers.values()), {}
        for watcher in watchers:
            watcher.stop()
        if self._owns_client:
            self.client.close()

    def schedule_at_fixed_rate(self, period_s: float, task: Callable[[], None]) -> ScheduledTask:
        """Run `task` every `period_s` on the instance's scheduler (after start) until cancelled."""
        if self._scheduler is None:
            raise StateError("the client instance is not started")
        return self._scheduler.schedule_at_fixed_rate(period_s, period_s, task)

    # ------------------------------------------------------------ heartbeats and membership

    def send_heartbeat(self, consumer: MQConsumerInner) -> None:
        """One consumer's heartbeat to every broker; the unreachable ones go to its outages."""
        unreachable: dict[str, RmqUnavailable] = {}
        self.client.heartbeat(self.client_id, consumer.group, consumer.heartbeat_subscriptions(),
                              broadcasting=consumer.broadcasting, unreachable=unreachable)
        consumer.outages.unreachable_all(unreachable)

    def heartbeat(self, consumer: MQConsumerInner) -> None:
        """sendHeartbeatToAllBroker for `consumer`, and its group's membership watch on every
        broker (clustering; a broker that appeared since is watched from now on)."""
        try:
            self.send_heartbeat(consumer)
        except RmqError as error:
            logger.warning("heartbeat of %s in group %s failed: %s", self.client_id, consumer.group, error)
        if consumer.broadcasting:
            return
        with self._lock:
            if self._consumers.get(consumer.group) is not consumer:
                return   # unregistered meanwhile
            watcher = self._watchers.get(consumer.group)
            if watcher is None:
                watcher = self._watchers[consumer.group] = ConsumerIdsWatcher(
                    self.client, consumer.group, self.client_id, self.rebalance_immediately,
                    lambda: self.send_heartbeat(consumer), on_lost=consumer.connection_lost,
                    on_restored=consumer.connection_restored,
                    on_reset=consumer.offsets_reset if consumer.adopts_offset_resets else None,
                    running_info=consumer.running_info)
        try:
            watcher.watch(self.client.list_brokers())
        except RmqError as error:   # the brokers then expire this client after their timeout
            logger.debug("membership watch of %s in group %s not (re)started: %s", self.client_id,
                         consumer.group, error)

    def heartbeat_all(self) -> None:
        """The heartbeat loop's task: every registered consumer."""
        with self._lock:
            consumers = list(self._consumers.values())
        for consumer in consumers:
            self.heartbeat(consumer)

    # ------------------------------------------------------------ rebalancing

    def wait_for_rebalance(self) -> None:
        """Return once no rebalance runs (a consumer shutting down, no longer RUNNING, is not
        rebalanced again after this)."""
        with self._rebalance_lock:
            pass

    def rebalance_immediately(self) -> None:
        self._rebalance_service.wakeup()

    def do_rebalance(self) -> bool:
        """doRebalance of every registered consumer; False when one of them is not balanced."""
        with self._rebalance_lock:
            with self._lock:
                consumers = list(self._consumers.values())
            balanced = True
            for consumer in consumers:
                try:
                    balanced = consumer.do_rebalance() and balanced
                except Exception:
                    logger.exception("doRebalance of group %s failed", consumer.group)
            return balanced
