"""RebalanceService (spec consumer-pull-rebalance §7): a thread that rebalances every
`wait_interval_s` (20 s, rocketmq.client.rebalance.waitInterval) and at once when woken up:
at start, and when a broker pushes a change of the group's membership. A rebalance that was
not balanced (an orderly queue not yet handed over) runs again after `min_interval_s` (1 s,
rocketmq.client.rebalance.minInterval, as in RocketMQ 5's client)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)

WAIT_INTERVAL_S = 20.0
MIN_INTERVAL_S = 1.0


class RebalanceService:
    def __init__(self, do_rebalance: Callable[[], bool], wait_interval_s: float = WAIT_INTERVAL_S,
                 min_interval_s: float = MIN_INTERVAL_S) -> None:
        self._do_rebalance = do_rebalance
        self.wait_interval_s = wait_interval_s   # the owner may shorten it before start()
        self._min_interval_s = min_interval_s
        self._wakeup = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rmq-rebalance", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wakeup(self) -> None:
        """rebalanceImmediately: cut the current wait short (a wake-up before it counts too)."""
        self._wakeup.set()

    def shutdown(self) -> None:
        self._stopped.set()
        self._wakeup.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        wait_s = self.wait_interval_s
        while not self._stopped.is_set():
            self._wakeup.wait(wait_s)
            self._wakeup.clear()
            if self._stopped.is_set():
                return
            try:
                balanced = self._do_rebalance()
            except Exception:
                logger.exception("doRebalance exception")
                balanced = True
            wait_s = self.wait_interval_s if balanced else min(self._min_interval_s, self.wait_interval_s)
