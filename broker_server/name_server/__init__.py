"""The name server (`rmq namesrv`): the route table brokers register in, and the broker's side
of the name server protocol (BrokerOuterAPI)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmq.broker_server.exports import lazy_exports

if TYPE_CHECKING:
    from rmq.broker_server.name_server.broker_outer_api import BrokerOuterAPI as BrokerOuterAPI
    from rmq.broker_server.name_server.namesrv_controller import (
        RouteInfoManager as RouteInfoManager,
    )
    from rmq.broker_server.name_server.namesrv_controller import (
        serve_name_server as serve_name_server,
    )

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "broker_outer_api": ("BrokerOuterAPI",),
        "namesrv_controller": (
            "RouteInfoManager",
            "serve_name_server",
        ),
    },
)
