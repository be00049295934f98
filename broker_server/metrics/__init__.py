"""Metrics: per-topic and per-group put/get counters, the Prometheus collectors of the broker
and the name server, and the bounded `/metrics` HTTP endpoint."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmq.broker_server.exports import lazy_exports

if TYPE_CHECKING:
    from rmq.broker_server.metrics.broker_stats import BrokerStatsManager as BrokerStatsManager
    from rmq.broker_server.metrics.collectors import (
        BoundedTables as BoundedTables,
    )
    from rmq.broker_server.metrics.collectors import (
        BrokerCollector as BrokerCollector,
    )
    from rmq.broker_server.metrics.collectors import (
        BrokerFigures as BrokerFigures,
    )
    from rmq.broker_server.metrics.collectors import (
        NameServerCollector as NameServerCollector,
    )
    from rmq.broker_server.metrics.collectors import (
        QueueOffset as QueueOffset,
    )
    from rmq.broker_server.metrics.collectors import (
        broker_node_id as broker_node_id,
    )
    from rmq.broker_server.metrics.collectors import (
        serve_metrics as serve_metrics,
    )

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "broker_stats": ("BrokerStatsManager",),
        "collectors": (
            "BoundedTables",
            "BrokerCollector",
            "BrokerFigures",
            "NameServerCollector",
            "QueueOffset",
            "broker_node_id",
            "serve_metrics",
        ),
    },
)
