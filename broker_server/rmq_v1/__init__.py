"""The rmq.v1 gRPC adapter: MessagingService, AdminService, RouteService and the Arrow Flight
data plane over the processors, and the gRPC server they share."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmq.broker_server.exports import lazy_exports

if TYPE_CHECKING:
    from rmq.broker_server.rmq_v1.admin_service import AdminService as AdminService
    from rmq.broker_server.rmq_v1.flight_service import (
        FlightReadService as FlightReadService,
    )
    from rmq.broker_server.rmq_v1.flight_service import (
        FlightStreamSlots as FlightStreamSlots,
    )
    from rmq.broker_server.rmq_v1.grpc_server import (
        SHUTDOWN_GRACE_SECONDS as SHUTDOWN_GRACE_SECONDS,
    )
    from rmq.broker_server.rmq_v1.grpc_server import (
        create_server as create_server,
    )
    from rmq.broker_server.rmq_v1.grpc_server import (
        run_until_terminated as run_until_terminated,
    )
    from rmq.broker_server.rmq_v1.grpc_server import (
        wait_for_termination as wait_for_termination,
    )
    from rmq.broker_server.rmq_v1.messaging_service import MessagingService as MessagingService
    from rmq.broker_server.rmq_v1.route_service import BrokerRouteService as BrokerRouteService
    from rmq.broker_server.status import OK as OK
    from rmq.broker_server.status import answers_with_status as answers_with_status

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "admin_service": ("AdminService",),
        "flight_service": (
            "FlightReadService",
            "FlightStreamSlots",
        ),
        "grpc_server": (
            "SHUTDOWN_GRACE_SECONDS",
            "create_server",
            "run_until_terminated",
            "wait_for_termination",
        ),
        "messaging_service": ("MessagingService",),
        "route_service": ("BrokerRouteService",),
        "status": (
            "OK",
            "answers_with_status",
        ),
    },
)
