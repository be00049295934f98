"""Replication and high availability: a broker's place in its group, the master's and the
slave's sides of the HA stream, and controller mode (the controller and the broker's term)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmq.broker_server.exports import lazy_exports

if TYPE_CHECKING:
    from rmq.broker_server.replication.broker_group import Replication as Replication
    from rmq.broker_server.replication.controller_manager import (
        ControllerCollector as ControllerCollector,
    )
    from rmq.broker_server.replication.controller_manager import (
        ControllerService as ControllerService,
    )
    from rmq.broker_server.replication.controller_manager import (
        scan_forever as scan_forever,
    )
    from rmq.broker_server.replication.replicas_info_manager import ReplicasInfoManager as ReplicasInfoManager
    from rmq.broker_server.replication.replicas_manager import (
        serve_in_controller_mode as serve_in_controller_mode,
    )

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "broker_group": ("Replication",),
        "controller_manager": (
            "ControllerCollector",
            "ControllerService",
            "scan_forever",
        ),
        "replicas_info_manager": ("ReplicasInfoManager",),
        "replicas_manager": ("serve_in_controller_mode",),
    },
)
