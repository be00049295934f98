"""The RocketMQ 5 MessagingService assembled from the broker's processors: `build_service`, called
once by BrokerController."""

from __future__ import annotations

from rmq import retry
from rmq.broker_server.config import BrokerConfig
from rmq.broker_server.processors.delay_levels import parse_delay_levels
from rmq.broker_server.processors.pipeline import BrokerProcessors
from rmq.broker_server.processors.pop_message_processor import MAX_BATCH
from rmq.broker_server.processors.timer_message_store import TimerMessageStore
from rmq.broker_server.rocketmq_v2.messaging_service import RocketMQv2MessagingService
from rmq.broker_server.rocketmq_v2.offset_rpcs import OffsetRpcs
from rmq.broker_server.rocketmq_v2.telemetry import ServerSettings, TelemetrySessions
from rmq.broker_server.rocketmq_v2.transactions import TelemetryTransactionCheck
from rmq.message_format import FIXED_OVERHEAD

PUSH_LONG_POLLING_S = 20   # the long polling a PushConsumer is told to use (proxy default 20 s)


def build_service(config: BrokerConfig, processors: BrokerProcessors,
                  timer: TimerMessageStore) -> RocketMQv2MessagingService:
    """The v2 service of one broker over its processors (the pop processors' state is loaded by
    BrokerController.load)."""
    delays = parse_delay_levels(config.message_delay_level)
    # retry delays: the delay levels a retried message waits at, from level 3 on (rmq.v1's retry)
    retry_delays = [delays[level] for level in sorted(delays) if level >= retry.FIRST_RETRY_DELAY_LEVEL]
    policy = processors.pop.policy
    max_body_size = config.max_message_size - FIXED_OVERHEAD
    settings = ServerSettings(max_body_size, PUSH_LONG_POLLING_S, MAX_BATCH, policy.max_attempts,
                              retry_delays, policy.fifo_groups)
    sessions = TelemetrySessions(settings, config.max_telemetry_sessions,
                                 config.max_telemetry_sessions_per_account, processors.client_manage)
    processors.end_transaction.add_check(TelemetryTransactionCheck(sessions))
    return RocketMQv2MessagingService(
        processors, sessions, timer, OffsetRpcs(processors), max_body_size)
