"""Offsets and membership: consumer offsets and their changes, consumer groups and their
membership watch, ordered-consumption queue locks, and which account owns a client id."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmq.broker_server.exports import lazy_exports

if TYPE_CHECKING:
    from rmq.broker_server.offsets.client_id_owners import (
        ClientIdOwners as ClientIdOwners,
    )
    from rmq.broker_server.offsets.client_id_owners import (
        ClientIdTaken as ClientIdTaken,
    )
    from rmq.broker_server.offsets.consumer_ids_watch import (
        ConsumerIdsWatchService as ConsumerIdsWatchService,
    )
    from rmq.broker_server.offsets.consumer_manager import (
        ConsumerManager as ConsumerManager,
    )
    from rmq.broker_server.offsets.consumer_manager import (
        ConsumerTableLimits as ConsumerTableLimits,
    )
    from rmq.broker_server.offsets.consumer_offset_manager import (
        ConsumerOffsetManager as ConsumerOffsetManager,
    )
    from rmq.broker_server.offsets.consumer_offset_manager import (
        OffsetKey as OffsetKey,
    )
    from rmq.broker_server.offsets.offset_changes import (
        OffsetChanges as OffsetChanges,
    )
    from rmq.broker_server.offsets.offset_changes import (
        group_offset as group_offset,
    )
    from rmq.broker_server.offsets.rebalance_lock_manager import (
        LOCKS_FILE as LOCKS_FILE,
    )
    from rmq.broker_server.offsets.rebalance_lock_manager import (
        RebalanceLockManager as RebalanceLockManager,
    )

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "client_id_owners": (
            "ClientIdOwners",
            "ClientIdTaken",
        ),
        "consumer_ids_watch": ("ConsumerIdsWatchService",),
        "consumer_manager": (
            "ConsumerManager",
            "ConsumerTableLimits",
        ),
        "consumer_offset_manager": (
            "ConsumerOffsetManager",
            "OffsetKey",
        ),
        "offset_changes": (
            "OffsetChanges",
            "group_offset",
        ),
        "rebalance_lock_manager": (
            "LOCKS_FILE",
            "RebalanceLockManager",
        ),
    },
)
