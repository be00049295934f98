"""`rmq broker` (RocketMQ BrokerController): builds the store, the managers and the gRPC
services, starts them in order and stops them in reverse. On SIGTERM/SIGINT it stops
accepting calls, answers every held pull, stops delayed delivery, unregisters from the name
servers, persists consumer offsets, flushes the store and exits 0."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import pathlib
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import grpc
import pyarrow as pa

from rmq import __version__
from rmq.broker_server.background_tasks import cancel_all
from rmq.broker_server.config import BrokerConfig
from rmq.broker_server.errors import UserError
from rmq.broker_server.long_polling.pull_request_hold_service import PullRequestHoldService
from rmq.broker_server.memory_tuning import keep_freed_memory
from rmq.broker_server.metrics.broker_stats import BrokerStatsManager, GroupLabels
from rmq.broker_server.metrics.collectors import (
    BoundedTables,
    BrokerCollector,
    BrokerFigures,
    QueueOffset,
    broker_node_id,
    serve_metrics,
)
from rmq.broker_server.name_server.broker_outer_api import BrokerOuterAPI
from rmq.broker_server.offsets.consumer_ids_watch import ConsumerIdsWatchService
from rmq.broker_server.offsets.consumer_manager import ConsumerManager, ConsumerTableLimits
from rmq.broker_server.offsets.consumer_offset_manager import ConsumerOffsetManager
from rmq.broker_server.offsets.producer_manager import ProducerManager
from rmq.broker_server.offsets.rebalance_lock_manager import LOCKS_FILE, RebalanceLockManager
from rmq.broker_server.offsets.subscription_group_manager import SubscriptionGroupManager
from rmq.broker_server.processors.ack_message_processor import AckMessageProcessor
from rmq.broker_server.processors.admin_broker_processor import AdminBrokerProcessor, BrokerAdmin
from rmq.broker_server.processors.change_invisible_time_processor import ChangeInvisibleTimeProcessor
from rmq.broker_server.processors.client_manage_processor import ClientManageProcessor
from rmq.broker_server.processors.consumer_manage_processor import ConsumerManageProcessor
from rmq.broker_server.processors.consumer_send_msg_back import ConsumerSendMsgBackProcessor
from rmq.broker_server.processors.delay_levels import parse_delay_levels
from rmq.broker_server.processors.end_transaction_processor import (
    EndTransactionProcessor,
    TransactionSettings,
)
from rmq.broker_server.processors.filter_executor import FilterExecutor
from rmq.broker_server.processors.names import SCHEDULE_TOPIC, TIMER_TOPIC
from rmq.broker_server.processors.pipeline import BrokerProcessors
from rmq.broker_server.processors.pop_message_processor import GroupPolicy, PopMessageProcessor
from rmq.broker_server.processors.pop_state import PopStateTable
from rmq.broker_server.processors.pull_message_processor import PullLimits, PullMessageProcessor
from rmq.broker_server.processors.pull_response_budget import PullResponseBudget
from rmq.broker_server.processors.query_message_processor import QueryMessageProcessor
from rmq.broker_server.processors.recall_message_processor import RecallMessageProcessor
from rmq.broker_server.processors.receipt_handle import ReceiptHandleCodec, load_or_create_secret
from rmq.broker_server.processors.remembered_receives import RememberedReceives
from rmq.broker_server.processors.schedule_message_service import ScheduleMessageService
from rmq.broker_server.processors.send_message_processor import SendMessageProcessor
from rmq.broker_server.processors.store_executor import StoreExecutor
from rmq.broker_server.processors.subscription_group_processor import SubscriptionGroupProcessor
from rmq.broker_server.processors.timer_message_store import RecallHandles, TimerMessageStore, TimerSettings
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.broker_server.processors.topic_route_processor import TopicRouteProcessor
from rmq.broker_server.remoting.remoting_server import RemotingServer
from rmq.broker_server.remoting.service import bind_remoting_port, build_broker_remoting
from rmq.broker_server.replication.broker_group import Replication
from rmq.broker_server.rmq_v1.admin_service import AdminService
from rmq.broker_server.rmq_v1.flight_connections import ConnectionLimits, FlightConnectionGuard
from rmq.broker_server.rmq_v1.flight_service import FlightReadService, FlightStreamSlots
from rmq.broker_server.rmq_v1.grpc_server import (
    SHUTDOWN_GRACE_SECONDS,
    connection_limit,
    create_server,
    generic_only,
    wait_for_termination,
)
from rmq.broker_server.rmq_v1.messaging_service import MessagingService
from rmq.broker_server.rmq_v1.route_service import BrokerRouteService
from rmq.broker_server.rocketmq_v2.messaging_service import RocketMQv2MessagingService
from rmq.broker_server.rocketmq_v2.service import build_service as build_rocketmq_v2_service
from rmq.broker_server.security.acl import Acl
from rmq.broker_server.security.cluster_auth import load_cluster_secret
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.request_signing import broker_server_id
from rmq.rocketmq_v2 import add_messaging_service as add_rocketmq_v2_service
from rmq.store import DispatchRequest, MessageStore, MessageStoreConfig, StoreError
from rmq.store.private_files import SERVER_UMASK
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

log = logging.getLogger(__name__)
DAY_MARK_INTERVAL_MS = 60_000   # how often the put/get totals are checked for a new day (today's counts)


def store_host(address: str) -> str:
    """The IPv4 host:port the store writes into records and message ids."""
    host, _, port = address.rpartition(":")
    try:
        ipaddress.IPv4Address(host)
        return address
    except ValueError:
        try:
            return f"{socket.gethostbyname(host)}:{port}"
        except OSError:
            return f"127.0.0.1:{port}"


def open_store(config: BrokerConfig) -> MessageStore:
    try:
        store_config = MessageStoreConfig(
            store_dir=config.store_path,
            flush_disk_type=config.flush,
            # 4.x consumers send a failed message back to the broker its store host names: a fixed
            # remoting port (--remoting-listen HOST:PORT) is; an ephemeral one, which changes with
            # each start, is not (its config's remoting_address is "" until bound)
            broker_address=store_host(config.remoting_address or config.broker_address),
            broker_role=config.broker_role,
            max_message_size=config.max_message_size,
            min_in_sync_replicas=config.min_in_sync_replicas,
            ha_max_time_not_caught_up_ms=config.ha_max_time_not_caught_up_ms,
            **cast(dict[str, Any], config.store),   # checked against the fields (check_store_settings)
        )
    except TypeError as error:
        raise UserError(f"store settings in the config file: {error}") from None
    try:
        return MessageStore(store_config)
    except StoreError as error:
        raise UserError(f"cannot open store {config.store_path}: {error}") from None


def pop_policy(config: BrokerConfig) -> GroupPolicy:
    """How the broker treats pop consumer groups: retry_max_times + 1 deliveries, the FIFO groups
    (fifo_consumer_groups), the shortest invisibility, SQL92 filters (enable_property_filter)."""
    fifo_groups = frozenset(g.strip() for g in config.fifo_consumer_groups.split(",") if g.strip())
    return GroupPolicy(config.retry_max_times + 1, fifo_groups, config.min_invisible_ms,
                       config.enable_property_filter)


class BrokerController:
    def __init__(self, config: BrokerConfig, security: ServerSecurity,
                 clock: Callable[[], float] = time.time, truncate_to: int | None = None) -> None:
        """`clock`: the wall clock (seconds) of the timer-driven services: delay levels and
        RocketMQ 5 invisibility (a test gives its own). `truncate_to`: controller mode, the
        CommitLog offset this member drops bytes from before it replicates
        (rmq.broker_server.replication.replicas_manager)."""
        security.check_listen(config.listen)   # the main port's refusal first, naming --listen
        self._remoting_fixed = bool(config.remoting_address)   # "" for an ephemeral (default) port
        bound, self._remoting_socket = bind_remoting_port(config, security)   # an ephemeral port resolved
        self.store = open_store(config)   # before binding resolved it: records' store host (open_store)
        config = self.config = bound
        self.security = security
        self.clock = clock
        self.boot_timestamp_ms = int(time.time() * 1000)
        self.truncate_to = truncate_to
        path = config.store_path
        self.executor = StoreExecutor(config.store_threads)
        self.topics = TopicConfigManager(
            path, config.auto_create_topic_enable, config.default_topic_queue_nums
        )
        self.offsets = ConsumerOffsetManager(path, config.max_consumer_offsets,
                                             config.max_consumer_offsets_per_account)
        self.consumers = ConsumerManager(config.client_expiry_ms, limits=ConsumerTableLimits(
            config.max_consumer_groups, config.max_clients_per_group, config.max_consumer_clients,
            config.max_subscriptions_per_client, config.max_subscription_bytes))
        self.watches = ConsumerIdsWatchService(self.consumers, config.max_consumer_id_watchers)
        self.subscription_groups = SubscriptionGroupManager(path, config.max_consumer_groups)
        self.locks = RebalanceLockManager(config.rebalance_lock_max_live_time_ms,
                                          max_locks=config.max_queue_locks,
                                          path=path / "config" / LOCKS_FILE)
        self.consumers.add_listener(self.locks.unlock_clients)   # a client gone frees its locks at once
        self.hold_service = PullRequestHoldService(
            self.store.get_max_offset_in_queue,
            config.long_polling_enable,
            config.hold_check_interval_ms,
            config.short_polling_time_ms,
            config.max_held_pulls,
        )
        delay_levels = parse_delay_levels(config.message_delay_level)
        handle_secret = load_or_create_secret(path / "config" / "receiptHandle.key")
        self.schedule_service = ScheduleMessageService(
            self.store,
            self.topics,
            self.executor,
            path,
            delay_levels,
            config.delay_offset_persist_interval_ms,
            clock,
        )
        self.timer = TimerMessageStore(
            self.store, self.topics, self.executor, path,
            TimerSettings(config.timer_precision_ms, config.timer_max_delay_s * 1000,
                          config.timer_max_pending, config.timer_max_pending_per_account),
            recall_handles(config, handle_secret),
            clock)
        self.replication = Replication(config, self.store, self.topics, self.offsets,
                                       self.subscription_groups, self.schedule_service, self.timer,
                                       security.open_client_channel, self._topics_changed,
                                       acl=security.acl_file is not None)
        self.outer_api = BrokerOuterAPI(
            config.namesrv_addresses,
            config.broker_name,
            config.broker_address,
            self.topics,
            config.register_broker_interval_ms,
            open_channel=security.open_client_channel,
            member=self.replication.member,
            cluster_name=config.cluster_name,
        )
        self.stats = BrokerStatsManager(
            labels=GroupLabels(config.max_metric_groups, config.max_metric_groups_per_account))
        self.send_processor = SendMessageProcessor(
            self.store, self.topics, self.executor, delay_levels, config.max_message_size, self.stats
        )
        self.send_processor.timer = self.timer
        self.filters = FilterExecutor(config.filter_threads, config.max_pending_filter_reads_per_account)
        self.pull_processor = PullMessageProcessor(
            self.store,
            self.topics,
            self.offsets,
            self.hold_service,
            self.executor,
            PullLimits(config.max_pull_messages, config.default_pull_max_bytes, config.max_pull_bytes),
            self.stats,
            self.filters,
            config.enable_property_filter,
            PullResponseBudget(config.max_inflight_pull_bytes, config.max_inflight_pull_bytes_per_connection,
                               max_bytes_per_account=config.pull_bytes_per_account),
            security.refusals,
            self.subscription_groups,
        )
        self.send_back_processor = ConsumerSendMsgBackProcessor(
            self.store,
            self.topics,
            self.executor,
            max(delay_levels),
            self._group_exists,
            self.outer_api.register_soon,
            self.stats,
            self.subscription_groups,
        )
        pop = PopMessageProcessor(
            self.topics, self.offsets, self.hold_service, PopStateTable(path, self.executor),
            RememberedReceives(config.max_remembered_receives, config.max_remembered_receive_bytes),
            self.pull_processor, self.send_back_processor, ReceiptHandleCodec(handle_secret),
            pop_policy(config), clock)
        self.processors = BrokerProcessors(
            self.send_processor,
            self.pull_processor,
            self.send_back_processor,
            ConsumerManageProcessor(self.topics, self.offsets, self.consumers, self.watches),
            ClientManageProcessor(self.topics, self.consumers, self.outer_api.register_soon, ProducerManager(
                config.client_expiry_ms, config.max_consumer_groups, config.max_clients_per_group)),
            AdminBrokerProcessor(self.store, self.executor, self.topics, self.locks, self.offsets,
                                 self.consumers, self.hold_service, self.stats,
                                 BrokerAdmin(self.status, self._topics_changed_now, self._acl)),
            QueryMessageProcessor(self.store, self.executor, self.topics),
            EndTransactionProcessor(self.store, self.executor, self.send_processor, path, TransactionSettings(
                config.transaction_timeout_ms, config.transaction_check_interval_ms,
                config.transaction_check_max, config.max_open_transactions,
                config.max_open_transactions_per_account)),
            pop,
            AckMessageProcessor(pop),
            ChangeInvisibleTimeProcessor(pop),
            SubscriptionGroupProcessor(self.subscription_groups, self.executor),
            TopicRouteProcessor(config.broker_name, config.broker_address, self.topics,
                                config.namesrv_addresses, security.open_client_channel),
            RecallMessageProcessor(self.timer),
        )
        self._tasks: list[asyncio.Task[None]] = []
        self.rocketmq_v2: RocketMQv2MessagingService | None = None
        self.flight: FlightReadService | None = None
        self.flight_connections: FlightConnectionGuard | None = None
        self.remoting: RemotingServer | None = None

    def _topics_changed(self) -> None:
        self.outer_api.register_soon()

    async def _topics_changed_now(self) -> None:
        """A topic change by an admin: announced at once; on a SYNC_MASTER, returns once a slave has it."""
        self.outer_api.register_soon()
        await self.replication.topics_replicated()

    def status(self) -> rmq_pb2.BrokerStatusResponse:
        """`rmq broker status` and the console's broker table: role and replication, version,
        uptime and today's puts and gets."""
        response = self.replication.status()
        today = self.stats.today()
        response.MergeFrom(rmq_pb2.BrokerStatusResponse(
            version=__version__, boot_timestamp=self.boot_timestamp_ms, put_today=today.put_messages,
            get_today=today.get_messages, put_total=today.put_total, get_total=today.get_total))
        return response

    def _acl(self) -> Acl | None:
        return None if self.security.acl_file is None else self.security.acl_file.acl

    def _group_exists(self, group: str) -> bool:
        return self.consumers.has_group(group) or bool(self.offsets.query_offsets(group))

    def load(self) -> None:
        """Load the config files and recover the store (StoreError/ValueError -> UserError)."""
        try:
            self.topics.load()
            self.offsets.load()
            self.subscription_groups.load()
            self.schedule_service.load()
            self.timer.load(is_master=not self.replication.is_slave)
            self.processors.end_transaction.load()
            self.processors.pop.load()
            self.store.add_dispatch_listener(self._on_dispatch)
            self.store.start(self.truncate_to)
        except (StoreError, ValueError) as error:
            raise UserError(f"cannot start broker on {self.config.store_path}: {error}") from None

    def _on_dispatch(self, request: DispatchRequest) -> None:
        """Held pulls of the queue woken; the schedule service and the timer told of their own
        topic's records only (no call per ordinary record)."""
        topic = request.topic
        self.hold_service.on_dispatch(topic, request.queue_id, request.consume_queue_offset,
                                      request.tags_code)
        if topic == SCHEDULE_TOPIC:
            self.schedule_service.on_dispatch(request.queue_id)
        elif topic == TIMER_TOPIC:
            self.timer.on_dispatch()

    def build_server(self) -> grpc.aio.Server:
        server = create_server(self.config.listen, self.config.grpc_max_message_bytes, self.security,
                               broker_server_id(self.config.broker_name, self.config.broker_id))
        services = generic_only(server)
        messaging = MessagingService(self.processors)
        rmq_pb2_grpc.add_MessagingServiceServicer_to_server(messaging, services)
        rmq_pb2_grpc.add_AdminServiceServicer_to_server(
            AdminService(self.processors), services,
        )
        self.flight = self._start_flight()   # before the route service: its member carries the address
        rmq_pb2_grpc.add_RouteServiceServicer_to_server(
            BrokerRouteService(self.processors.route, self.replication.member),
            services,
        )
        self.replication.add_to_server(services)
        # remoting first: an open transaction is checked with a 4.x producer of its group before a
        # RocketMQ 5 producer of its topic (each adapter adds its check to EndTransactionProcessor)
        self.remoting = build_broker_remoting(self.config, self.security, self.processors, self.topics,
                                              self.consumers, self._remoting_socket, self._remoting_fixed)
        self.rocketmq_v2 = build_rocketmq_v2_service(self.config, self.processors, self.timer)
        add_rocketmq_v2_service(self.rocketmq_v2, server)
        return server

    def _start_flight(self) -> FlightReadService | None:
        """The Arrow Flight data plane (docs/data-plane.md), serving from now on; None when off."""
        config = self.config
        listen = config.flight_bind_address
        if listen is None:
            return None
        self.security.check_listen(listen)
        try:
            flight = FlightReadService(
                listen, config.broker_name, self.pull_processor, self.pull_processor.budget,
                FlightStreamSlots(config.max_flight_streams, config.max_flight_streams_per_account),
                asyncio.get_running_loop(), self.security.tls,
                self.security.request_authenticator(broker_server_id(config.broker_name, config.broker_id)),
                self.security.refusals)
        except pa.ArrowException:   # gRPC could not bind: the address is taken or not on this host
            raise UserError(f"cannot serve Flight on {listen} (--flight-listen): the address is in use or "
                            "not available on this host") from None
        self.replication.member.flight_address = config.flight_advertised_address(flight.port)
        limits = ConnectionLimits(connection_limit(self.security), config.max_flight_connections_per_address,
                                  self.security.idle_timeout_s)
        self.flight_connections = FlightConnectionGuard(flight.port, int(config.listen.rpartition(":")[2]),
                                                        limits, flight.slots.streaming)
        self.flight_connections.start()
        return flight

    async def _stop_flight(self) -> None:
        """Stop the data plane, waiting up to the shutdown grace for its streams to end (a stream
        whose client stopped reading would hold FlightServerBase.shutdown forever)."""
        if self.flight is None:
            return
        if self.flight_connections is not None:
            self.flight_connections.stop()
        stopping = threading.Thread(target=self.flight.shutdown, name="rmq-flight-stop", daemon=True)
        stopping.start()
        await asyncio.get_running_loop().run_in_executor(None, stopping.join, SHUTDOWN_GRACE_SECONDS)
        if stopping.is_alive():
            log.warning("Flight streams still open after %s s: stopping without them", SHUTDOWN_GRACE_SECONDS)

    async def serve(self) -> None:
        """Run until SIGTERM/SIGINT, then shut down gracefully."""
        os.umask(SERVER_UMASK)   # every file this process creates is its user's alone
        self.load()
        server = await self.start_serving()
        await wait_for_termination()
        await self.shutdown(server)

    async def start_serving(self) -> grpc.aio.Server:
        """After load(): the gRPC server and every service started."""
        try:
            server = self.build_server()
            if self.config.metrics_listen:
                serve_metrics(self.config.metrics_listen, self.security,
                              BrokerCollector(self.metrics_figures()))
        except UserError:
            self.store.shutdown()
            raise
        await server.start()
        await self.start_remoting()
        self.security.start(self.config.listen)
        self.start_services()
        config = self.config
        print(
            f"rmq broker {config.broker_name} listening on {config.listen} "
            f"(store {config.store_path}, flush {config.flush.value}, {config.broker_role.value} "
            f"id {config.broker_id})",
            flush=True,
        )
        return server

    async def start_remoting(self) -> None:
        if self.remoting is not None:
            await self.remoting.start()
            print(f"rmq broker {self.config.broker_name} serving RocketMQ remoting on "
                  f"{self.config.remoting_listen}", flush=True)

    def metrics_figures(self) -> BrokerFigures:
        offsets = self.offsets

        def consumer_offsets() -> list[QueueOffset]:
            accounts = offsets.added_by()
            return [QueueOffset(key.group, key.topic, key.queue_id, offset, accounts.get(key, ""))
                    for key, offset in offsets.all_offsets().items()]

        def client_tables() -> BoundedTables:
            return BoundedTables(self.consumers.subscription_bytes(), self.locks.size(), offsets.size())

        return BrokerFigures(self.config.broker_name, self.store, self.stats, self.hold_service.held_count,
                             consumer_offsets, self.consumers.table_sizes, lambda: len(self.topics.all()),
                             client_tables, lambda: self.pull_processor.budget.held, self.timer.figures,
                             node_id=broker_node_id(self.config.broker_name, self.config.broker_id),
                             cluster=self.config.cluster_name)

    def start_services(self) -> None:
        keep_freed_memory()
        if self.rocketmq_v2 is not None:
            self.rocketmq_v2.start()
        self.processors.end_transaction.start()
        self.hold_service.start()
        if not self.replication.is_slave:   # a slave copies the master's delay progress instead
            self.schedule_service.start()
        self.timer.start()   # a slave builds its wheel and settles what the master delivered
        self.outer_api.start()
        self.replication.start()
        self._tasks = [
            _every(self.config.consumer_offset_persist_interval_ms, self._persist_offsets),
            _every(self.config.client_scan_interval_ms, self.consumers.scan_not_active_channel),
            _every(self.config.client_scan_interval_ms, self.locks.purge_expired),
            _every(DAY_MARK_INTERVAL_MS, self.stats.mark_day),
        ]

    async def _persist_offsets(self) -> None:
        await self.executor.run(self.offsets.persist)

    def close_unserved(self) -> None:
        """Let go of a broker loaded but never served: its store threads, store and remoting socket."""
        self.executor.shutdown()
        self.store.shutdown()
        if self._remoting_socket is not None:
            self._remoting_socket.close()

    async def shutdown(self, server: grpc.aio.Server, unregister: bool = True) -> None:
        """Stop serving; `unregister`: tell the name servers this broker left (not when a
        controller-mode term ends: the next term re-registers the member, BrokerOuterAPI)."""
        log.info("shutting down broker %s", self.config.broker_name)
        self.hold_service.shutdown()
        self.watches.end_all()
        self.replication.end_streams()
        if self.rocketmq_v2 is not None:
            await self.rocketmq_v2.shutdown()
        if self.remoting is not None:
            await self.remoting.stop()
        if self._remoting_socket is not None:
            self._remoting_socket.close()   # bound in __init__ even when never served
        await server.stop(SHUTDOWN_GRACE_SECONDS)
        await self._stop_flight()
        await self.security.stop()
        await cancel_all(self._tasks)
        await self.replication.stop()
        await self.schedule_service.stop()
        await self.timer.stop()
        await self.processors.end_transaction.stop()
        await self.outer_api.stop(unregister)
        self.offsets.persist()
        self.filters.shutdown()
        self.executor.shutdown()
        self.store.shutdown()
        log.info("broker %s stopped", self.config.broker_name)


def _every(interval_ms: int, action: Callable[[], object]) -> asyncio.Task[None]:
    async def repeat() -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                result = action()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("periodic task %s failed", getattr(action, "__qualname__", action))

    return asyncio.get_running_loop().create_task(repeat())


def recall_handles(config: BrokerConfig, store_secret: bytes) -> RecallHandles:
    """Signed under the group's cluster secret when there is one (a handle outlives a failover),
    else under the store's own key (config/receiptHandle.key: a promoted slave refuses them)."""
    if config.cluster_secret_file:
        secret = load_cluster_secret(pathlib.Path(config.cluster_secret_file).expanduser())
        return RecallHandles.of_group(secret, config.broker_name)
    return RecallHandles(store_secret, config.broker_name)
