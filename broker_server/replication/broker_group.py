"""A broker's place in its broker group (docs/replication.md): its id and role, the HAService
it serves as a master, the HAClient and SlaveSynchronize it runs as a slave, the cluster secret
its members authenticate each other with (rmq.broker_server.security.cluster_auth), and the status
`rmq broker status` shows."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import grpc

from rmq.broker_server.config import BrokerConfig
from rmq.broker_server.errors import BrokerError, UserError
from rmq.broker_server.offsets.consumer_offset_manager import ConsumerOffsetManager
from rmq.broker_server.offsets.subscription_group_manager import SubscriptionGroupManager
from rmq.broker_server.processors.schedule_message_service import ScheduleMessageService
from rmq.broker_server.processors.timer_message_store import TimerMessageStore
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.broker_server.replication.ha_client import HAClient, SlaveSynchronize
from rmq.broker_server.replication.ha_connection import HAServicer
from rmq.broker_server.security.cluster_auth import ClusterAuth, MasterAuth, SlaveAuth, load_cluster_secret
from rmq.broker_server.status import OK
from rmq.store import BrokerRole, MessageStore
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

log = logging.getLogger(__name__)

# store role -> wire role, by member
WIRE_ROLES = {BrokerRole.ASYNC_MASTER: rmq_pb2.ASYNC_MASTER, BrokerRole.SYNC_MASTER: rmq_pb2.SYNC_MASTER,
              BrokerRole.SLAVE: rmq_pb2.SLAVE}


class Replication:
    def __init__(self, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager,
                 offsets: ConsumerOffsetManager, groups: SubscriptionGroupManager,
                 schedule: ScheduleMessageService, timer: TimerMessageStore,
                 open_channel: Callable[[str], grpc.aio.Channel],
                 on_topics_changed: Callable[[], None], acl: bool = False) -> None:
        """`acl`: the broker runs with --acl, so its group needs a cluster secret (UserError for
        a slave without one; a master without one refuses slaves)."""
        self.config = config
        self.store = store
        self.topics = topics
        self.role = store.config.broker_role
        self.member = rmq_pb2.BrokerMember(broker_id=config.broker_id, address=config.broker_address,
                                           role=WIRE_ROLES[self.role],
                                           remoting_address=config.remoting_address)
        self.in_sync_ids: list[int] = []   # controller mode: the group's in-sync set, as last answered
        auth = self._cluster_auth(acl)
        self.servicer = HAServicer(store, topics, offsets, groups, lambda: dict(schedule.offsets),
                                   timer.master_progress, MasterAuth(auth, config.broker_address, acl,
                                                                      config.broker_id))
        self.client: HAClient | None = None
        self.synchronize: SlaveSynchronize | None = None
        if self.is_slave:
            slave_auth = SlaveAuth(auth, config.broker_id, config.master)
            self.client = HAClient(store, topics, offsets, on_topics_changed, config.master,
                                   config.broker_address, open_channel, slave_auth)
            self.synchronize = SlaveSynchronize(config.master, topics, offsets, groups, schedule.set_offsets,
                                                timer.set_master_progress, on_topics_changed,
                                                config.slave_synchronize_interval_ms, open_channel,
                                                slave_auth)

    def _cluster_auth(self, acl: bool) -> ClusterAuth | None:
        config = self.config
        if config.cluster_secret_file:
            return ClusterAuth(load_cluster_secret(Path(config.cluster_secret_file).expanduser()),
                               config.broker_name)
        if self.is_slave and acl:
            raise UserError("a SLAVE of a broker with --acl needs --cluster-secret FILE (the same file on "
                            "every member of the group), so that it replicates only from its real master")
        if self.is_slave:
            log.warning("no --cluster-secret: this slave trusts whoever answers on %s", config.master)
        return None

    @property
    def is_slave(self) -> bool:
        return self.role is BrokerRole.SLAVE

    async def topics_replicated(self) -> None:
        """SYNC_MASTER: a topic change is answered once a connected slave applied it
        (BrokerError FLUSH_SLAVE_TIMEOUT when none did in time; the change stays on the master)."""
        if self.role is not BrokerRole.SYNC_MASTER:
            return
        timeout_ms = self.store.config.sync_flush_timeout_ms
        if not await self.servicer.wait_for_topics(self.topics.version, timeout_ms / 1000):
            raise BrokerError(rmq_pb2.FLUSH_SLAVE_TIMEOUT, f"the topic change is stored on the master only: "
                                                            f"no slave confirmed it within {timeout_ms} ms")

    def add_to_server(self, server: grpc.aio.Server) -> None:
        rmq_pb2_grpc.add_HAServiceServicer_to_server(self.servicer, server)

    def end_streams(self) -> None:
        """Before the server stops: the transfer streams to slaves end at once."""
        self.servicer.end_streams()

    def start(self) -> None:
        for service in (self.client, self.synchronize):
            if service is not None:
                service.start()

    async def stop(self) -> None:
        for service in (self.synchronize, self.client):
            if service is not None:
                await service.stop()

    def status(self) -> rmq_pb2.BrokerStatusResponse:
        store = self.store
        max_offset = store.get_commit_log_max_offset()
        response = rmq_pb2.BrokerStatusResponse(
            status=OK, broker_name=self.config.broker_name, broker_id=self.config.broker_id,
            role=self.member.role, commit_log_min_offset=max(store.get_commit_log_min_offset(), 0),
            commit_log_max_offset=max_offset, epoch=self.member.epoch, in_sync_ids=self.in_sync_ids,
            slaves=[rmq_pb2.SlaveState(address=slave.address, ack_offset=slave.ack_offset,
                                       lag_bytes=max(max_offset - slave.ack_offset, 0))
                    for slave in store.ha_service.slaves()])
        if self.client is not None:
            response.master_address = self.config.master
            response.master_max_offset = self.client.master_max_offset
            response.replication_error = self.client.refusal or self.client.unauthenticated
        return response
