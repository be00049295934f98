"""The refusal log stays bounded whatever callers send: lines per interval, field lengths."""

from __future__ import annotations

import logging

from rmq.broker_server.security.refusal_log import RefusalLog

UNAUTHENTICATED, DENIED = "UNAUTHENTICATED", "PERMISSION_DENIED"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_at_most_n_lines_per_interval_then_one_summary(caplog) -> None:
    caplog.set_level(logging.INFO, logger="rmq.auth")
    clock = Clock()
    refusals = RefusalLog(interval_s=10, lines_per_interval=3, clock=clock)
    for i in range(50):
        code = UNAUTHENTICATED if i % 2 else DENIED
        refusals.record("/rmq.v1.MessagingService/SendMessage", "ipv4:127.0.0.1:1", code, "refused")
    assert len(caplog.records) == 3
    clock.now += 10
    refusals.record("/m", "peer", UNAUTHENTICATED, "next interval")
    messages = [r.getMessage() for r in caplog.records]
    summary = "47 more refused calls not logged in the last 10 s (23 PERMISSION_DENIED, 24 UNAUTHENTICATED)"
    assert messages[3] == summary
    assert caplog.records[3].levelname == "WARNING"
    assert messages[4].endswith("UNAUTHENTICATED next interval")
    assert len(messages) == 5


def test_fields_are_cut(caplog) -> None:
    caplog.set_level(logging.INFO, logger="rmq.auth")
    RefusalLog().record("/" + "m" * 5000, "p" * 5000, DENIED, "x" * 5000)
    line = caplog.records[0].getMessage()
    assert len(line) < 700 and "m" * 201 not in line and "x" * 201 not in line


def test_flush_writes_the_summary_once_the_interval_is_over(caplog) -> None:
    caplog.set_level(logging.INFO, logger="rmq.auth")
    clock = Clock()
    refusals = RefusalLog(interval_s=10, lines_per_interval=1, clock=clock)
    for _ in range(5):
        refusals.record("/m", "peer", DENIED, "refused")
    refusals.flush()
    assert len(caplog.records) == 1            # the interval is not over yet
    clock.now += 10
    refusals.flush()
    summary = "4 more refused calls not logged in the last 10 s (4 PERMISSION_DENIED)"
    assert caplog.records[-1].getMessage() == summary
    refusals.flush()
    assert len(caplog.records) == 2            # nothing more to say
