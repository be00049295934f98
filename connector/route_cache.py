"""The client's route cache and broker choice (RocketMQ MQClientInstance's topicRouteTable and
brokerAddrTable, with MQClientAPIImpl's choice of member): topic routes cached for
ROUTE_CACHE_SECONDS, every broker group's members, the member a queue is read from (the
broker's suggestion, the master, else a live slave), members that did not answer lately and
remoting ports that could not be reached (docs/client-behaviour.md, docs/replication.md).

It holds state and decides; it calls nothing: the client API (client_api.ClientAPI) asks the
endpoints and tells it what it learned."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from rmq.message_queue import MessageQueue
from rmq.mix_all import MASTER_ID
from rmq.topic_config import PERM_READ, PERM_WRITE, QueueData
from rmq.v1 import rmq_pb2

ROUTE_CACHE_SECONDS = 30.0      # RocketMQ pollNameServerInterval
SEND_WHICH_QUEUE_RANGE = 1 << 30
MEMBER_DOWN_SECONDS = 5.0       # a broker that did not answer is passed over for this long
REMOTING_DOWN_SECONDS = 60.0    # a remoting port that could not be connected to: gRPC for this long


@dataclass(frozen=True)
class BrokerMember:
    """One member of a broker group (docs/replication.md): id 0 the master, 1.. slaves."""

    broker_id: int
    address: str
    role: int                                 # rmq_pb2.BrokerRole
    flight_address: str = ""                  # its Arrow Flight data plane; "" when it serves none
    epoch: int = 0                            # controller mode: the master epoch it serves in
    remoting_address: str = ""                # its remoting port (the SDK's hot path); "" when none


def group_members(data: rmq_pb2.BrokerData) -> tuple[BrokerMember, ...]:
    """The members a BrokerData lists (an older broker lists none: its address is the master)."""
    members = tuple(BrokerMember(m.broker_id, m.address, m.role, m.flight_address, m.epoch,
                                 m.remoting_address) for m in data.members)
    return members or (BrokerMember(MASTER_ID, data.address, rmq_pb2.ASYNC_MASTER),)


@dataclass(frozen=True)
class TopicRoute:
    topic: str
    brokers: dict[str, str]                   # broker name -> address (the master's when it is up)
    queue_datas: tuple[QueueData, ...]
    message_queues: tuple[MessageQueue, ...]  # readable queues, sorted
    members: dict[str, tuple[BrokerMember, ...]] = field(default_factory=dict)   # by broker name

    @classmethod
    def from_proto(cls, topic: str, response: rmq_pb2.QueryRouteResponse) -> TopicRoute:
        queue_datas = tuple(
            sorted(
                (QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm)
                 for q in response.queue_datas),
                key=lambda q: q.broker_name,
            )
        )
        # topicRouteData2TopicSubscribeInfo: readable queues of every broker, then sorted.
        queues = sorted(
            MessageQueue(topic, q.broker_name, queue_id)
            for q in queue_datas
            if q.perm & PERM_READ
            for queue_id in range(q.read_queue_nums)
        )
        ordered = sorted(response.brokers, key=lambda b: b.broker_name)
        brokers = {b.broker_name: b.address for b in ordered}
        members = {b.broker_name: group_members(b) for b in ordered}
        return cls(topic, brokers, queue_datas, tuple(queues), members)

    def writable_brokers(self) -> list[str]:
        return [q.broker_name for q in self.queue_datas if q.perm & PERM_WRITE and q.write_queue_nums > 0]


def newest_masters(answers: Sequence[rmq_pb2.QueryRouteResponse]) -> rmq_pb2.QueryRouteResponse:
    """One route of several endpoints' answers: each broker group (its BrokerData and QueueDatas)
    as the answer naming the master of the newest epoch tells it (a group without a master ranks
    last; of equals, the first answer). A name server the group's new master could not reach
    names the deposed one, or none (its queues read-only), until that master registers there."""
    chosen: dict[str, tuple[int, rmq_pb2.BrokerData, list[rmq_pb2.QueueData]]] = {}
    for answer in answers:
        for data in answer.brokers:
            rank = max((m.epoch for m in data.members if m.role != rmq_pb2.SLAVE), default=-1)
            if data.broker_name not in chosen or rank > chosen[data.broker_name][0]:
                queues = [q for q in answer.queue_datas if q.broker_name == data.broker_name]
                chosen[data.broker_name] = (rank, data, queues)
    return rmq_pb2.QueryRouteResponse(status=answers[0].status, brokers=[c[1] for c in chosen.values()],
                                      queue_datas=[q for c in chosen.values() for q in c[2]])


class RouteCache:
    """What the client knows of the cluster, thread-safe; every decision that rests on it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._broker_addresses: dict[str, str] = {}
        self._members: dict[str, tuple[BrokerMember, ...]] = {}
        self._pull_from: dict[MessageQueue, int] = {}       # pullFromWhichNodeTable (spec pull §12.4)
        self._down_until: dict[str, float] = {}             # address -> monotonic time
        self._routes: dict[str, tuple[float, TopicRoute]] = {}
        self._doubted: set[str] = set()     # topics whose next route query asks every endpoint
        self._remoting_down_until: dict[str, float] = {}    # remoting address -> monotonic time
        self._send_sequence = itertools.count(send_which_queue_start())

    # ------------------------------------------------------------ what the endpoints answered

    def store(self, route: TopicRoute) -> None:
        """A route just read: cached for ROUTE_CACHE_SECONDS, its brokers and members learned."""
        with self._lock:
            self._broker_addresses.update(route.brokers)
            self._members.update(route.members)
            self._routes[route.topic] = (time.monotonic(), route)
            self._doubted.discard(route.topic)

    def learn(self, brokers: dict[str, str], members: dict[str, tuple[BrokerMember, ...]]) -> None:
        with self._lock:
            self._broker_addresses.update(brokers)
            self._members.update(members)

    def cached(self, topic: str) -> TopicRoute | None:
        """The topic's route while it is fresh, else None (ask the endpoints)."""
        with self._lock:
            cached = self._routes.get(topic)
        if cached is not None and time.monotonic() - cached[0] < ROUTE_CACHE_SECONDS:
            return cached[1]
        return None

    def forget(self, topic: str) -> None:
        """Drop the topic's route (a topic changed: ask again)."""
        with self._lock:
            self._routes.pop(topic, None)

    def doubt(self, topic: str) -> None:
        """Drop the topic's route because a send to it failed or was stored on a master alone: a
        group may have a new master, which the first endpoint may not know yet, so the next
        query asks every endpoint (`newest_masters`)."""
        with self._lock:
            self._routes.pop(topic, None)
            self._doubted.add(topic)

    def doubted(self, topic: str) -> bool:
        with self._lock:
            return topic in self._doubted

    def address(self, broker_name: str) -> str | None:
        with self._lock:
            return self._broker_addresses.get(broker_name)

    def members(self, broker_name: str) -> tuple[BrokerMember, ...]:
        with self._lock:
            return self._members.get(broker_name, ())

    def groups(self, names: Sequence[str]) -> dict[str, tuple[BrokerMember, ...]]:
        with self._lock:
            return {name: self._members[name] for name in names}

    # ------------------------------------------------------------ choices

    def next_broker(self, writable: Sequence[str]) -> str:
        """Round-robin over a topic's writable brokers (sendWhichQueue)."""
        return writable[next(self._send_sequence) % len(writable)]

    def read_address(self, broker_name: str, mq: MessageQueue | None) -> str | None:
        """findBrokerAddressInSubscribe: the member the broker suggested for `mq` (spec pull
        §12.4), else the master, else a slave, passing over members that did not answer lately;
        None when no member is known or every one is down."""
        now = time.monotonic()
        with self._lock:
            members = self._members.get(broker_name, ())
            wanted = self._pull_from.get(mq, MASTER_ID) if mq is not None else MASTER_ID
            down = {address for address, until in self._down_until.items() if until > now} \
                if self._down_until else set()
        return choose_member(members, wanted, down)

    def record_suggestion(self, mq: MessageQueue, broker_id: int) -> None:
        """processPullResult: remember which member to pull `mq` from next."""
        if broker_id == MASTER_ID and mq not in self._pull_from:   # the common case, without the lock
            return
        with self._lock:
            if broker_id == MASTER_ID:
                self._pull_from.pop(mq, None)
            else:
                self._pull_from[mq] = broker_id

    def mark_down(self, address: str) -> None:
        """Pass the member at `address` over for MEMBER_DOWN_SECONDS: it did not answer."""
        with self._lock:
            self._down_until[address] = time.monotonic() + MEMBER_DOWN_SECONDS

    def remoting_member(self, broker_name: str, address: str) -> BrokerMember | None:
        """The member at `address` when it serves a remoting port not marked unreachable."""
        with self._lock:
            member = next((m for m in self._members.get(broker_name, ()) if m.address == address), None)
            if member is None or not member.remoting_address:
                return None
            if self._remoting_down_until.get(member.remoting_address, 0.0) > time.monotonic():
                return None
            return member

    def mark_remoting_down(self, remoting_address: str) -> None:
        """Use gRPC for this member for REMOTING_DOWN_SECONDS: its remoting port was unreachable."""
        with self._lock:
            self._remoting_down_until[remoting_address] = time.monotonic() + REMOTING_DOWN_SECONDS


def send_which_queue_start() -> int:
    """Where a sender's round-robin over brokers starts: at random, like RocketMQ's
    sendWhichQueue (ThreadLocalIndex), so short-lived producers spread over the brokers
    (docs/client-behaviour.md "Producers start at a random queue")."""
    return random.randrange(SEND_WHICH_QUEUE_RANGE)


def choose_member(members: Sequence[BrokerMember], wanted: int, down: set[str]) -> str | None:
    """The address of member `wanted` unless it is down, else the master's, else the live
    member's with the lowest id; None when every member is down (or none is known). The
    master is the member with a master role (MASTER_ID asks for it): under a controller any
    id can be master, and of two masters listed the one of the newer epoch is."""
    def rank(member: BrokerMember) -> tuple[bool, bool, int, int]:
        master = member.role != rmq_pb2.SLAVE
        chosen = master if wanted == MASTER_ID else member.broker_id == wanted
        return not chosen, not master, -member.epoch, member.broker_id

    if len(members) == 1:   # a group of one (the common case): nothing to rank
        return None if members[0].address in down else members[0].address
    ranked = sorted(members, key=rank)
    live = [m for m in ranked if m.address not in down]
    return live[0].address if live else None
