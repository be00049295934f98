"""Delay levels (spec consumer-pull-rebalance §19, TV-23): the broker config
string "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h" names one delay per
level, level 1 first; level N lives in queue N-1 of SCHEDULE_TOPIC_XXXX."""

from __future__ import annotations

DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
UNIT_MS = {"s": 1000, "m": 1000 * 60, "h": 1000 * 60 * 60, "d": 1000 * 60 * 60 * 24}


def parse_delay_levels(text: str) -> dict[int, int]:
    """{level: delay in ms} (ScheduleMessageService#parseDelayLevel). Raises ValueError
    naming the bad item."""
    levels: dict[int, int] = {}
    for level, item in enumerate(text.split(), start=1):
        unit, amount = item[-1:], item[:-1]
        if unit not in UNIT_MS or not amount.isdigit() or int(amount) <= 0:
            raise ValueError(f"delay level {item!r} is not a positive number followed by s, m, h or d")
        levels[level] = int(amount) * UNIT_MS[unit]
    if not levels:
        raise ValueError("no delay levels given")
    return levels


def delay_level_to_queue_id(level: int) -> int:
    return level - 1


def queue_id_to_delay_level(queue_id: int) -> int:
    return queue_id + 1
