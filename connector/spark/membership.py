"""Group membership and queue ownership of one streaming query (spec consumer-startup §3,
§4.2; consumer-pull-rebalance §8.4): the Spark source's consumer of the client runtime.

The query is one consumer of its group under a stable client id, registered with the
ClientInstance of that id (rmq.connector.client_instance), which heartbeats every broker (at
once and then every QUERY_HEARTBEAT_INTERVAL_S, so the query stays live between slow triggers)
and watches the group's membership. Unlike a PushConsumer it is not rebalanced in the background:
at each micro-batch the stream reader asks which queues it owns (broadcasting: every queue;
clustering: the allocation strategy over the group's sorted consumer list, per topic).
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

from rmq import __version__
from rmq.connector.allocation import AllocateStrategy, allocate_topic
from rmq.connector.broker_outages import BrokerOutages
from rmq.connector.client import MessageQueue, RmqClient
from rmq.connector.client_instance import ClientInstance
from rmq.connector.rebalance_service import WAIT_INTERVAL_S
from rmq.v1 import rmq_pb2

logger = logging.getLogger(__name__)

# RocketMQ's heartbeatBrokerInterval is 30 s (brokers expire a client after 120 s); a query's
# instance beats more often, as micro-batches may be far apart
QUERY_HEARTBEAT_INTERVAL_S = 10.0


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
        strategy: AllocateStrategy | str,
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
        self._closed = threading.Event()
        self._instance: ClientInstance | None = None

    # ------------------------------------------------------------ MQConsumerInner (client_instance)

    @property
    def group(self) -> str:
        return self._group

    @property
    def broadcasting(self) -> bool:
        return self._broadcasting

    @property
    def rebalance_interval_s(self) -> float:
        return WAIT_INTERVAL_S

    @property
    def outages(self) -> BrokerOutages:
        return self._outages

    def heartbeat_subscriptions(self) -> dict[str, str]:
        return dict(self._subscriptions)

    def do_rebalance(self) -> bool:
        """Nothing in the background: the stream reader rebalances at each micro-batch."""
        return True

    def connection_lost(self, broker_name: str) -> None:
        """Nothing to do: a query holds no queue locks."""

    def connection_restored(self, broker_name: str) -> None:
        """Nothing to do: a query holds no queue locks."""

    @property
    def adopts_offset_resets(self) -> bool:
        """No: a query's positions are its checkpoint's (it commits the group's offsets only as
        progress), so a reset counts it as a member that cannot be told; restart the query with
        `startingOffsets` instead."""
        return False

    def offsets_reset(self, offsets: dict[MessageQueue, int]) -> None:
        """Never told (adopts_offset_resets is False)."""

    def running_info(self) -> rmq_pb2.ConsumerRunningInfo:
        """A query reads its queues on the executors: its subscriptions only."""
        return rmq_pb2.ConsumerRunningInfo(
            client_id=self.client_id, consume_type=rmq_pb2.CONSUME_ACTIVELY, sdk_version=__version__,
            subscriptions=[rmq_pb2.Subscription(topic=topic, sub_expression=expression)
                           for topic, expression in sorted(self._subscriptions.items())])

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Register with the client instance: heartbeats (the first one now) and, clustering, the
        membership watch, whose open streams let the brokers unregister this query the moment its
        driver dies, so the group's other queries take its queues at their next batch."""
        _leave_groups_on_sigterm(self)
        self._instance = ClientInstance.acquire(self.client_id, client=self._client,
                                                heartbeat_interval_s=QUERY_HEARTBEAT_INTERVAL_S)
        self._instance.register_consumer(self)
        self._instance.heartbeat(self)
        self._instance.start()

    def subscribe(self, subscriptions: dict[str, str]) -> None:
        """Replace the subscriptions (topic -> sub expression) sent with the next heartbeat;
        the queues of topics no longer subscribed are no longer owned."""
        self._subscriptions = subscriptions
        self._owned = {topic: queues for topic, queues in self._owned.items() if topic in subscriptions}

    def heartbeat(self) -> None:
        assert self._instance is not None, "start() first"
        self._instance.send_heartbeat(self)

    def rebalance(self, topic: str, mq_all: Sequence[MessageQueue]) -> list[MessageQueue]:
        """The queues of `topic` this consumer owns now (allocate_topic, RebalanceImpl's rule)."""
        cid_all: list[str] = []
        if not self._broadcasting and mq_all:
            self.heartbeat()   # be in the consumer list before reading it
            cid_all = self._client.consumer_list(self._group, topic)
        if cid_all and self.client_id not in cid_all:
            # Not (yet) registered on the broker: keep the previous ownership rather than drop
            # every queue (a micro-batch is planned from it); the next micro-batch rebalances again.
            logger.warning("consumer %s not in group %s: %s", self.client_id, self._group, cid_all)
            owned = [mq for mq in self._owned.get(topic, []) if mq in mq_all]
        else:
            owned = allocate_topic(self._strategy, self.client_id, mq_all, cid_all, self._broadcasting) or []
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
        if self._closed.is_set():
            return
        self._closed.set()
        if self._instance is not None:
            self._instance.unregister_consumer(self, leave_group=True)
            self._instance.release()


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
