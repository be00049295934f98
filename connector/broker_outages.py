"""The brokers a consumer cannot reach now, each reported once per outage (issue 18, "one broker
of several down").

A killed broker stays in the topic's route until the name server evicts it (120 s), so the
consumer keeps retrying it: every queue's pull every 3 s (PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION),
each rebalance's offset reads, every offset persist and heartbeat. RocketMQ logs each of these
failures; here the first failure of an outage logs one warning naming the broker (again every
REPEAT_WARNING_S while it lasts), the others go to debug, and the first success after it logs
that the broker answers again. The other brokers' queues are read meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from rmq.connector.errors import RmqError, RmqUnavailable

logger = logging.getLogger(__name__)

REPEAT_WARNING_S = 60.0


class BrokerOutages:
    def __init__(self, owner: str, repeat_warning_s: float = REPEAT_WARNING_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`owner` names the consumer in the log lines ("consumer group orders")."""
        self._owner = owner
        self._repeat_warning_s = repeat_warning_s
        self._clock = clock
        self._lock = threading.Lock()
        self._warned_at: dict[str, float] = {}     # broker name -> clock() of its last warning

    def unreachable(self, broker_name: str, error: RmqUnavailable) -> None:
        """A call to `broker_name` found it unreachable."""
        now = self._clock()
        with self._lock:
            warned_at = self._warned_at.get(broker_name)
            warn = warned_at is None or now - warned_at >= self._repeat_warning_s
            if warn:
                self._warned_at[broker_name] = now
        if warn:
            logger.warning("%s: broker %s is unreachable, its queues wait until it answers (the other "
                           "brokers' queues are read meanwhile): %s", self._owner, broker_name, error)
        else:
            logger.debug("%s: broker %s still unreachable: %s", self._owner, broker_name, error)

    def unreachable_all(self, unreachable: Mapping[str, RmqUnavailable]) -> None:
        for broker_name, error in unreachable.items():
            self.unreachable(broker_name, error)

    def report(self, broker_name: str, error: RmqError | None) -> bool:
        """True when `error` is `broker_name` being unreachable (reported here); False for
        any other failure, which the caller logs itself."""
        if not isinstance(error, RmqUnavailable):
            return False
        self.unreachable(broker_name, error)
        return True

    def answered(self, broker_name: str) -> None:
        """A call to `broker_name` succeeded: its outage, if any, is over."""
        if broker_name not in self._warned_at:    # the common case, without the lock
            return
        with self._lock:
            ended = self._warned_at.pop(broker_name, None) is not None
        if ended:
            logger.info("%s: broker %s answers again", self._owner, broker_name)
