"""Group membership and queue ownership of one streaming query (spec consumer-startup §3,
§4.2; consumer-pull-rebalance §8.4).

The query is one consumer of its group under a stable client id. It heartbeats every
broker (at once and then every HEARTBEAT_INTERVAL_S on a daemon thread, so it stays live
between slow triggers) and, at each micro-batch, re-evaluates which queues it owns:
broadcasting owns every queue; clustering asks a broker for the group's sorted consumer
list and applies the allocation strategy per topic.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import uuid
import weakref
from collections.abc import Sequence
from types import FrameType

from rmq.connector.allocation import allocate
from rmq.connector.broker_outages import BrokerOutages
from rmq.connector.client import MessageQueue, RmqClient, RmqError, RmqUnavailable
from rmq.connector.consumer_ids_watcher import ConsumerIdsWatcher

logger = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 10.0   # RocketMQ heartbeatBrokerInterval is 30 s; brokers expire after 120 s


def new_client_id() -> str:
    """RocketMQ-style `ip@instance` id, unique per query."""
    return f"{socket.gethostname()}@spark-{uuid.uuid4().hex[:16]}"


class ConsumerMembership:
    def __init__(
        self,
        client: RmqClient,
        group: str,
        client_id: str,
        subscriptions: dict[str, str],
        *,
        broadcasting: bool,
        strategy: str,
        outages: BrokerOutages | None = None,
    ) -> None:
        """`outages` hears of the brokers a heartbeat could not reach (the others are beaten)."""
        self.client_id = client_id
        self._client = client
        self._group = group
        self._subscriptions = subscriptions
        self._broadcasting = broadcasting
        self._strategy = strategy
        self._outages = outages or BrokerOutages(f"consumer group {group}")
        self._owned: dict[str, list[MessageQueue]] = {}
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        # Membership push: the open streams let the brokers unregister this query the moment
        # its driver dies, so the group's other queries take its queues at their next batch.
        self._watcher = ConsumerIdsWatcher(client, group, client_id, lambda: None, self.heartbeat)

    def start(self) -> None:
        _leave_groups_on_sigterm(self)
        self.heartbeat()
        self._thread = threading.Thread(target=self._heartbeat_loop, name="rmq-heartbeat", daemon=True)
        self._thread.start()
        if not self._broadcasting:
            try:
                self._watcher.watch(self._client.list_brokers())
            except RmqError as error:   # the brokers then expire this query after their timeout
                logger.warning("membership watch of %s in group %s not started: %s", self.client_id,
                               self._group, error)

    def subscribe(self, subscriptions: dict[str, str]) -> None:
        """Replace the subscriptions (topic -> sub expression) sent with the next heartbeat;
        the queues of topics no longer subscribed are no longer owned."""
        self._subscriptions = subscriptions
        self._owned = {topic: queues for topic, queues in self._owned.items() if topic in subscriptions}

    def heartbeat(self) -> None:
        unreachable: dict[str, RmqUnavailable] = {}
        self._client.heartbeat(
            self.client_id, self._group, self._subscriptions, broadcasting=self._broadcasting,
            unreachable=unreachable,
        )
        self._outages.unreachable_all(unreachable)

    def _heartbeat_loop(self) -> None:
        while not self._stopped.wait(HEARTBEAT_INTERVAL_S):
            try:
                self.heartbeat()
            except RmqError as error:   # the next beat (or the next micro-batch) tries again
                logger.warning("heartbeat of %s in group %s failed: %s", self.client_id, self._group, error)

    def rebalance(self, topic: str, mq_all: Sequence[MessageQueue]) -> list[MessageQueue]:
        """The queues of `topic` this consumer owns now (rebalanceByTopic)."""
        if self._broadcasting or not mq_all:
            owned = sorted(mq_all)
        else:
            self.heartbeat()   # be in the consumer list before reading it
            cid_all = self._client.consumer_list(self._group, topic)
            if self.client_id in cid_all:
                owned = allocate(self._strategy, self.client_id, mq_all, cid_all)
            else:
                # Not (yet) registered on the broker: keep the previous ownership rather
                # than drop every queue; the next micro-batch rebalances again.
                logger.warning("consumer %s not in group %s: %s", self.client_id, self._group, cid_all)
                owned = [mq for mq in self._owned.get(topic, []) if mq in mq_all]
        if owned != self._owned.get(topic):
            logger.info("rebalance group %s topic %s: %s owns %s", self._group, topic, self.client_id,
                        [str(mq) for mq in owned])
        self._owned[topic] = owned
        return owned

    def owned_queues(self) -> list[MessageQueue]:
        """Every queue owned after the last rebalance, in topic order."""
        return [mq for queues in self._owned.values() for mq in queues]

    def close(self) -> None:
        """Stop heartbeating and unregister, so the group rebalances at once (spec consumer-startup §4.6)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=HEARTBEAT_INTERVAL_S)
        self._watcher.stop()
        try:
            self._client.unregister(self.client_id, self._group)
        except RmqError as error:
            logger.warning("unregister of %s from group %s failed: %s", self.client_id, self._group, error)


_members: weakref.WeakSet[ConsumerMembership] = weakref.WeakSet()
_sigterm_installed = False


def _leave_groups_on_sigterm(member: ConsumerMembership) -> None:
    """Spark stops a Python streaming source that is busy with a micro-batch by sending it
    SIGTERM, without calling stop(). Unregister first, so the group rebalances at once
    rather than after the broker's client expiry (the spec's shutdown order, §4.6)."""
    global _sigterm_installed
    _members.add(member)
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def leave_and_terminate(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)   # Spark may repeat it while we unregister
        for live in list(_members):
            live.close()
        if callable(previous):
            previous(signum, frame)
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, leave_and_terminate)
    _sigterm_installed = True
