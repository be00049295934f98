"""Long polling: pulls held until a message arrives (PullRequestHoldService) and the fair,
bounded table of what waiting callers may hold."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmq.broker_server.exports import lazy_exports

if TYPE_CHECKING:
    from rmq.broker_server.long_polling.fair_shares import (
        FairShares as FairShares,
    )
    from rmq.broker_server.long_polling.fair_shares import (
        ShareExceeded as ShareExceeded,
    )
    from rmq.broker_server.long_polling.pull_request_hold_service import (
        HoldTableFull as HoldTableFull,
    )
    from rmq.broker_server.long_polling.pull_request_hold_service import (
        PullRequestHoldService as PullRequestHoldService,
    )

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "fair_shares": (
            "FairShares",
            "ShareExceeded",
        ),
        "pull_request_hold_service": (
            "HoldTableFull",
            "PullRequestHoldService",
        ),
    },
)
