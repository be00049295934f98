"""The broker's side of the name server protocol (RocketMQ BrokerOuterAPI): register name,
address and topics with every name server at start, every 30 s, and at once after a topic
changes; unregister on a clean stop, but not at the end of a controller-mode term: the next
term's registration replaces the member's entry (as RocketMQ's role change re-registers without
unregistering), and an unregistration waits out REQUEST_TIMEOUT_SECONDS for a name server cut
off, which held a promoted slave 3 s from serving in the chaos runs' bridge (issue 47). A name
server that did not answer is asked again every REGISTER_RETRY_S until it does, and never stops
the broker."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import grpc
from google.protobuf.message import Message

from rmq.broker_server.background_tasks import wait_for_event
from rmq.broker_server.config import DEFAULT_CLUSTER_NAME
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

log = logging.getLogger(__name__)
REQUEST_TIMEOUT_SECONDS = 3.0
# a name server that missed a registration (down, restarted, cut off) is asked again this soon, not
# at the next period: until it hears a new master it names the old one, or none, and the producers
# asking it see the group's queues unwritable (the chaos runs' bridge and ring: 30 s of no writable
# queue after the heal, issue 47). RocketMQ 5 beats the name servers every brokerHeartbeatInterval (1 s)
REGISTER_RETRY_S = 1.0


class BrokerOuterAPI:
    def __init__(
        self,
        namesrv_addresses: list[str],
        broker_name: str,
        broker_address: str,
        topics: TopicConfigManager,
        register_interval_ms: int,
        open_channel: Callable[[str], grpc.aio.Channel] = grpc.aio.insecure_channel,
        member: rmq_pb2.BrokerMember | None = None,
        cluster_name: str = DEFAULT_CLUSTER_NAME,
    ) -> None:
        self.namesrv_addresses = namesrv_addresses
        self.broker = rmq_pb2.BrokerData(broker_name=broker_name, address=broker_address,
                                         cluster_name=cluster_name)
        # this broker's id and role in its group (docs/replication.md)
        self.member = member or rmq_pb2.BrokerMember(address=broker_address)
        self.topics = topics
        self.register_interval_ms = register_interval_ms
        self._open_channel = open_channel   # ServerSecurity.open_client_channel: signed / TLS
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._changed = asyncio.Event()
        self._unreached: set[str] = set()   # name servers whose last call failed (logged once)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if not self.namesrv_addresses:
            return
        self._channels = {address: self._open_channel(address) for address in self.namesrv_addresses}
        self._task = asyncio.get_running_loop().create_task(self._register_forever())

    def register_soon(self) -> None:
        """Announce a topic change now instead of at the next period."""
        self._changed.set()

    def registration(self) -> rmq_pb2.RegisterBrokerRequest:
        """What this broker tells the name servers: its group, cluster, topics and member."""
        return rmq_pb2.RegisterBrokerRequest(
            broker=self.broker, topics=[config.to_proto() for config in self.topics.all()], member=self.member
        )

    async def _register_with(self, addresses: list[str]) -> list[str]:
        """Register with these name servers; answers those that could not be reached."""
        request = self.registration()
        reached = await asyncio.gather(*(self._call(address, "RegisterBroker", request)
                                         for address in addresses))
        return [address for address, answered in zip(addresses, reached, strict=True) if not answered]

    async def stop(self, unregister: bool = True) -> None:
        """Stop registering; `unregister`: also tell every name server this member left."""
        if self._task is None:
            return
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        if unregister:
            await self._unregister()
        await asyncio.gather(*(channel.close() for channel in self._channels.values()))

    async def _unregister(self) -> None:
        request = rmq_pb2.UnregisterBrokerRequest(broker_name=self.broker.broker_name,
                                                  broker_id=self.member.broker_id)
        await asyncio.gather(
            *(self._call(address, "UnregisterBroker", request) for address in self._channels)
        )

    async def _register_forever(self) -> None:
        """Every period (or topic change) with every name server; in between, every
        REGISTER_RETRY_S with those the last round did not reach."""
        addresses = list(self._channels)
        while True:
            self._changed.clear()
            missed = await self._register_with(addresses)
            period_s = REGISTER_RETRY_S if missed else self.register_interval_ms / 1000
            if await wait_for_event(self._changed, period_s):
                addresses = list(self._channels)
            else:
                addresses = missed or list(self._channels)

    async def _call(self, address: str, method: str, request: Message) -> bool:
        """One call to one name server; False when it could not be reached (a refusal is logged
        and answered True: asking again would be refused again)."""
        stub = rmq_pb2_grpc.NameServerServiceStub(self._channels[address])
        try:
            response = await getattr(stub, method)(request, timeout=REQUEST_TIMEOUT_SECONDS)
        except grpc.RpcError as error:
            if address not in self._unreached:
                log.warning("%s with name server %s failed: %s", method, address, error.code().name)
            self._unreached.add(address)
            return False
        if address in self._unreached:
            self._unreached.discard(address)
            log.info("%s with name server %s: answered again", method, address)
        if response.status.code != rmq_pb2.OK:
            log.warning("%s with name server %s refused: %s", method, address, response.status.message)
        return True
