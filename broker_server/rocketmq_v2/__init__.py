"""The RocketMQ 5 adapter: apache.rocketmq.v2.MessagingService on every broker's port, over the
same processors as rmq.v1 (its names load on first use)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmq.broker_server.exports import lazy_exports

if TYPE_CHECKING:
    from rmq.broker_server.rocketmq_v2.messaging_service import (
        RocketMQv2MessagingService as RocketMQv2MessagingService,
    )
    from rmq.broker_server.rocketmq_v2.service import build_service as build_service
    from rmq.broker_server.rocketmq_v2.status import V2Error as V2Error
    from rmq.broker_server.rocketmq_v2.telemetry import consumer_connection as consumer_connection
    from rmq.broker_server.rocketmq_v2.transactions import (
        HALF_TOPIC as HALF_TOPIC,
    )
    from rmq.broker_server.rocketmq_v2.transactions import (
        OpenTransaction as OpenTransaction,
    )
    from rmq.broker_server.rocketmq_v2.transactions import (
        TransactionService as TransactionService,
    )

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "messaging_service": ("RocketMQv2MessagingService",),
        "service": ("build_service",),
        "status": ("V2Error",),
        "telemetry": ("consumer_connection",),
        "transactions": (
            "HALF_TOPIC",
            "OpenTransaction",
            "TransactionService",
        ),
    },
)
