"""The request pipeline every protocol adapter calls (rmq.v1, RocketMQ 5, remoting): sending,
pulling, sending back, and the topics and delayed delivery they act on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmq.broker_server.exports import lazy_exports

if TYPE_CHECKING:
    from rmq.broker_server.processors.consumer_send_msg_back import (
        DLQ_TOPIC_PERM as DLQ_TOPIC_PERM,
    )
    from rmq.broker_server.processors.consumer_send_msg_back import (
        ConsumerSendMsgBackProcessor as ConsumerSendMsgBackProcessor,
    )
    from rmq.broker_server.processors.consumer_send_msg_back import (
        SendBackTarget as SendBackTarget,
    )
    from rmq.broker_server.processors.consumer_send_msg_back import (
        ensure_group_topic as ensure_group_topic,
    )
    from rmq.broker_server.processors.consumer_send_msg_back import (
        ensure_retry_topic as ensure_retry_topic,
    )
    from rmq.broker_server.processors.consumer_send_msg_back import (
        send_back_copy as send_back_copy,
    )
    from rmq.broker_server.processors.delay_levels import (
        DEFAULT_MESSAGE_DELAY_LEVEL as DEFAULT_MESSAGE_DELAY_LEVEL,
    )
    from rmq.broker_server.processors.delay_levels import (
        parse_delay_levels as parse_delay_levels,
    )
    from rmq.broker_server.processors.filter_executor import FilterExecutor as FilterExecutor
    from rmq.broker_server.processors.names import (
        SYSTEM_TOPIC_PREFIX as SYSTEM_TOPIC_PREFIX,
    )
    from rmq.broker_server.processors.names import (
        check_group_name as check_group_name,
    )
    from rmq.broker_server.processors.names import (
        check_topic_name as check_topic_name,
    )
    from rmq.broker_server.processors.pull_message_processor import (
        MAX_SUB_EXPRESSION_LENGTH as MAX_SUB_EXPRESSION_LENGTH,
    )
    from rmq.broker_server.processors.pull_message_processor import (
        PullLimits as PullLimits,
    )
    from rmq.broker_server.processors.pull_message_processor import (
        PullMessageProcessor as PullMessageProcessor,
    )
    from rmq.broker_server.processors.pull_message_processor import (
        PullQuery as PullQuery,
    )
    from rmq.broker_server.processors.pull_message_processor import (
        Sql92RecordFilter as Sql92RecordFilter,
    )
    from rmq.broker_server.processors.pull_message_processor import (
        pack_messages as pack_messages,
    )
    from rmq.broker_server.processors.pull_message_processor import (
        sql92_record_filter as sql92_record_filter,
    )
    from rmq.broker_server.processors.pull_response_budget import (
        CallContext as CallContext,
    )
    from rmq.broker_server.processors.pull_response_budget import (
        PullBytesLease as PullBytesLease,
    )
    from rmq.broker_server.processors.pull_response_budget import (
        PullResponseBudget as PullResponseBudget,
    )
    from rmq.broker_server.processors.put_status import check_put_status as check_put_status
    from rmq.broker_server.processors.schedule_message_service import (
        ScheduleMessageService as ScheduleMessageService,
    )
    from rmq.broker_server.processors.schedule_message_service import (
        message_timeup as message_timeup,
    )
    from rmq.broker_server.processors.send_message_processor import (
        SendMessageProcessor as SendMessageProcessor,
    )
    from rmq.broker_server.processors.send_message_processor import (
        born_host_from_peer as born_host_from_peer,
    )
    from rmq.broker_server.processors.store_executor import StoreExecutor as StoreExecutor
    from rmq.broker_server.processors.topic_config_manager import TopicConfigManager as TopicConfigManager

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "consumer_send_msg_back": (
            "ConsumerSendMsgBackProcessor",
            "DLQ_TOPIC_PERM",
            "SendBackTarget",
            "ensure_group_topic",
            "ensure_retry_topic",
            "send_back_copy",
        ),
        "delay_levels": (
            "DEFAULT_MESSAGE_DELAY_LEVEL",
            "parse_delay_levels",
        ),
        "filter_executor": ("FilterExecutor",),
        "names": (
            "SYSTEM_TOPIC_PREFIX",
            "check_group_name",
            "check_topic_name",
        ),
        "pull_message_processor": (
            "MAX_SUB_EXPRESSION_LENGTH",
            "PullLimits",
            "PullMessageProcessor",
            "PullQuery",
            "Sql92RecordFilter",
            "pack_messages",
            "sql92_record_filter",
        ),
        "pull_response_budget": (
            "CallContext",
            "PullBytesLease",
            "PullResponseBudget",
        ),
        "schedule_message_service": (
            "ScheduleMessageService",
            "message_timeup",
        ),
        "put_status": ("check_put_status",),
        "send_message_processor": (
            "SendMessageProcessor",
            "born_host_from_peer",
        ),
        "store_executor": ("StoreExecutor",),
        "topic_config_manager": ("TopicConfigManager",),
    },
)
