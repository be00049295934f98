"""Log of refused calls that no caller can flood: at most `lines_per_interval` lines per
interval, each with the method, the caller's address and the refusal (whose access key is
cut to a short prefix, rmq.broker_server.security.request_auth.key_label), then one summary line with
the number of refusals not shown, by status code (written once the interval is over)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

log = logging.getLogger("rmq.auth")

DEFAULT_INTERVAL_S = 10.0
DEFAULT_LINES_PER_INTERVAL = 20
MAX_FIELD_CHARS = 200


class RefusalLog:
    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S,
                 lines_per_interval: int = DEFAULT_LINES_PER_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.lines_per_interval = lines_per_interval
        self._clock = clock
        self._interval_start = clock()
        self._lines = 0
        self._suppressed: Counter[str] = Counter()
        self._lock = threading.Lock()

    def record(self, method: str, peer: str, code: str, message: str) -> None:
        """`code`: the refusal's status name (UNAUTHENTICATED, or a RocketMQ 5 business code)."""
        with self._lock:
            self._roll_interval()
            if self._lines >= self.lines_per_interval:
                self._suppressed[code[:MAX_FIELD_CHARS]] += 1
                return
            self._lines += 1
        cut = MAX_FIELD_CHARS
        log.info("refused %s from %s: %s %s", method[:cut], peer[:cut], code[:cut], message[:cut])

    def flush(self) -> None:
        """Write the summary of a finished interval now rather than with the next refusal."""
        with self._lock:
            self._roll_interval()

    async def summarize_forever(self) -> None:
        """Flush once per interval until cancelled (a task on the server's event loop)."""
        while True:
            await asyncio.sleep(self.interval_s)
            self.flush()

    def _roll_interval(self) -> None:
        now = self._clock()
        if now - self._interval_start < self.interval_s:
            return
        if self._suppressed:
            counts = ", ".join(f"{count} {code}" for code, count in sorted(self._suppressed.items()))
            log.warning("%d more refused calls not logged in the last %.0f s (%s)",
                        sum(self._suppressed.values()), now - self._interval_start, counts)
        self._interval_start = now
        self._lines = 0
        self._suppressed.clear()
