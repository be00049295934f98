"""The RocketMQ 5 MessagingService assembled from the broker's parts (store, executor, topics,
offsets, long polling): `build_service`, called once by BrokerController."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from rmq import retry
from rmq.broker_server.config import BrokerConfig
from rmq.broker_server.long_polling.pull_request_hold_service import PullRequestHoldService
from rmq.broker_server.offsets.consumer_offset_manager import ConsumerOffsetManager
from rmq.broker_server.processors.delay_levels import parse_delay_levels
from rmq.broker_server.processors.pipeline import BrokerProcessors
from rmq.broker_server.processors.store_executor import StoreExecutor
from rmq.broker_server.processors.timer_message_store import TimerMessageStore
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.broker_server.rocketmq_v2.messaging_service import GroupPolicy, RocketMQv2MessagingService
from rmq.broker_server.rocketmq_v2.offset_rpcs import OffsetRpcs
from rmq.broker_server.rocketmq_v2.pop_service import MAX_BATCH, PopService
from rmq.broker_server.rocketmq_v2.pop_state import PopStateTable
from rmq.broker_server.rocketmq_v2.receipt_handle import ReceiptHandleCodec
from rmq.broker_server.rocketmq_v2.remembered_receives import RememberedReceives
from rmq.broker_server.rocketmq_v2.route import RouteResolver
from rmq.broker_server.rocketmq_v2.telemetry import ServerSettings, TelemetrySessions
from rmq.broker_server.rocketmq_v2.transactions import TelemetryTransactionCheck
from rmq.message_format import FIXED_OVERHEAD
from rmq.store import MessageStore

PUSH_LONG_POLLING_S = 20   # the long polling a PushConsumer is told to use (proxy default 20 s)


def build_service(config: BrokerConfig, store: MessageStore, executor: StoreExecutor,
                  topics: TopicConfigManager,
                  offsets: ConsumerOffsetManager, hold_service: PullRequestHoldService,
                  processors: BrokerProcessors, timer: TimerMessageStore,
                  open_channel: Callable[[str], grpc.aio.Channel],
                  on_topics_changed: Callable[[], None],
                  clock: Callable[[], float]) -> RocketMQv2MessagingService:
    """The v2 service of one broker, its pop state loaded from the store directory; `clock`:
    the wall clock invisibilities are measured against."""
    table = PopStateTable(config.store_path, executor)
    table.load()
    for queue, state in table.queues.items():   # the journal is fsynced, the offsets file periodic
        offsets.commit_offset(queue.group, queue.topic, queue.queue_id, state.consumer_offset())
    delays = parse_delay_levels(config.message_delay_level)
    # retry delays: the delay levels a retried message waits at, from level 3 on (rmq.v1's retry)
    retry_delays = [delays[level] for level in sorted(delays) if level >= retry.FIRST_RETRY_DELAY_LEVEL]
    fifo_groups = frozenset(g.strip() for g in config.fifo_consumer_groups.split(",") if g.strip())
    max_attempts = config.retry_max_times + 1
    max_body_size = config.max_message_size - FIXED_OVERHEAD
    settings = ServerSettings(max_body_size, PUSH_LONG_POLLING_S, MAX_BATCH, max_attempts, retry_delays,
                              fifo_groups)
    sessions = TelemetrySessions(settings, config.max_telemetry_sessions,
                                 config.max_telemetry_sessions_per_account, processors.client_manage)
    send_processor, pull_processor = processors.send, processors.pull
    processors.end_transaction.add_check(TelemetryTransactionCheck(sessions))
    return RocketMQv2MessagingService(
        send_processor, topics,
        RouteResolver(config.broker_name, config.broker_address, topics, config.namesrv_addresses,
                      open_channel),
        PopService(offsets, hold_service, table,
                   RememberedReceives(config.max_remembered_receives, config.max_remembered_receive_bytes),
                   pull_processor, processors.send_back, clock),
        sessions, GroupPolicy(max_attempts, fifo_groups, config.min_invisible_ms,
                              config.enable_property_filter), timer, processors.end_transaction,
        OffsetRpcs(processors),
        ReceiptHandleCodec.of_store(config.store_path), max_body_size)
