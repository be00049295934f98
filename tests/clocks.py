"""A clock a test moves by hand, for the services that take one (`clock: Callable[[], float]`,
seconds): the test sets or advances the time instead of waiting it out, so a timer-driven
behaviour (an invisibility ending, a delay level coming due, an expiry) is checked at once
and exactly at its edge."""

from __future__ import annotations

import time


class ManualClock:
    def __init__(self, now: float | None = None) -> None:
        """Starts at `now`, else at the real wall-clock time (for services that compare it with
        timestamps the store wrote)."""
        self.now = time.time() if now is None else now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
