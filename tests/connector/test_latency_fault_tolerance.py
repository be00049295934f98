"""A broker that failed a send is left out of the choice for the isolation period, then chosen
again; when every broker is isolated, all are candidates (a send is still attempted)."""

from __future__ import annotations

from rmq.connector.latency_fault_tolerance import LatencyFaultTolerance


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_isolated_broker_skipped_for_the_period_then_back() -> None:
    clock = Clock()
    faults = LatencyFaultTolerance(isolation_s=30, clock=clock)
    faults.isolate("broker-b")
    assert faults.choose_from(["broker-a", "broker-b"]) == ["broker-a"]
    clock.now += 29.9
    assert not faults.is_available("broker-b")
    clock.now += 0.1
    assert faults.choose_from(["broker-a", "broker-b"]) == ["broker-a", "broker-b"]


def test_all_isolated_means_all_candidates() -> None:
    faults = LatencyFaultTolerance(isolation_s=30, clock=Clock())
    faults.isolate("broker-a")
    faults.isolate("broker-b")
    assert faults.choose_from(["broker-a", "broker-b"]) == ["broker-a", "broker-b"]
