"""The RocketMQ 4.x remoting adapter (docs/remoting-protocol.md): RemotingCommand frames over TCP,
served by the broker and the name server beside their gRPC ports, over the same processors."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmq.broker_server.exports import lazy_exports

if TYPE_CHECKING:
    from rmq.broker_server.remoting.remoting_server import RemotingServer as RemotingServer
    from rmq.broker_server.remoting.service import (
        build_broker_remoting as build_broker_remoting,
    )
    from rmq.broker_server.remoting.service import (
        build_name_server_remoting as build_name_server_remoting,
    )

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "remoting_server": ("RemotingServer",),
        "service": (
            "build_broker_remoting",
            "build_name_server_remoting",
        ),
    },
)
