"""Allocation strategies against the spec's test vectors (consumer-pull-rebalance TV-1/TV-2,
consumption-longpolling-offsets TV-1/TV-2, consumer-startup test vectors 1-9)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.connector.allocation import AllocateStrategy, allocate
from rmq.connector.client import MessageQueue

AVG, CIRCLE = AllocateStrategy.AVG, AllocateStrategy.CIRCLE


def everyone(strategy: str, mqs: list, cids: list[str]) -> dict[str, list]:
    return {cid: allocate(strategy, cid, mqs, cids) for cid in cids}


Q8 = [f"q{i}" for i in range(1, 9)]
C3 = ["c1", "c2", "c3"]


def test_averagely_8_queues_3_consumers():
    assert everyone(AVG, Q8, C3) == {
        "c1": ["q1", "q2", "q3"], "c2": ["q4", "q5", "q6"], "c3": ["q7", "q8"],
    }


def test_by_circle_8_queues_3_consumers():
    assert everyone(CIRCLE, Q8, C3) == {
        "c1": ["q1", "q4", "q7"], "c2": ["q2", "q5", "q8"], "c3": ["q3", "q6"],
    }


def test_two_brokers_example_in_message_queue_order():
    mqs = [MessageQueue("T", broker, q) for broker in ("b2", "b1") for q in range(4)]   # unsorted input

    def names(result: list[MessageQueue]) -> list[str]:
        return [f"{mq.broker_name}_q{mq.queue_id}" for mq in result]

    avg = {cid: names(r) for cid, r in everyone(AVG, mqs, ["C1", "C2", "C3"]).items()}
    circle = {cid: names(r) for cid, r in everyone(CIRCLE, mqs, ["C1", "C2", "C3"]).items()}
    assert avg == {
        "C1": ["b1_q0", "b1_q1", "b1_q2"], "C2": ["b1_q3", "b2_q0", "b2_q1"], "C3": ["b2_q2", "b2_q3"],
    }
    assert circle == {
        "C1": ["b1_q0", "b1_q3", "b2_q2"], "C2": ["b1_q1", "b2_q0", "b2_q3"], "C3": ["b1_q2", "b2_q1"],
    }


@pytest.mark.parametrize("strategy", [AVG, CIRCLE])
def test_more_consumers_than_queues_leaves_the_extra_ones_idle(strategy):
    cids = [f"C{i}" for i in range(1, 7)]
    assert everyone(strategy, [0, 1, 2, 3], cids) == {
        "C1": [0], "C2": [1], "C3": [2], "C4": [3], "C5": [], "C6": [],
    }


def test_four_queues_two_consumers():
    assert everyone(AVG, [0, 1, 2, 3], ["c1", "c2"]) == {"c1": [0, 1], "c2": [2, 3]}
    assert everyone(CIRCLE, [0, 1, 2, 3], ["c1", "c2"]) == {"c1": [0, 2], "c2": [1, 3]}


def test_consumer_ids_are_sorted_before_allocating():
    assert everyone(AVG, Q8, ["c3", "c1", "c2"]) == everyone(AVG, Q8, C3)


def test_unknown_consumer_gets_nothing_and_empty_inputs_are_rejected():
    assert allocate(AVG, "c9", Q8, C3) == []
    with pytest.raises(ValueError, match="currentCID is empty"):
        allocate(AVG, "", Q8, C3)
    with pytest.raises(ValueError, match="mqAll is null or mqAll empty"):
        allocate(AVG, "c1", [], C3)
    with pytest.raises(ValueError, match="cidAll is null or cidAll empty"):
        allocate(CIRCLE, "c1", Q8, [])
    with pytest.raises(ValueError, match="expected one of avg, circle"):
        allocate("hash", "c1", Q8, C3)


@given(queues=st.integers(1, 40), consumers=st.integers(1, 12), strategy=st.sampled_from([AVG, CIRCLE]))
def test_every_queue_has_exactly_one_owner_and_shares_differ_by_at_most_one(queues, consumers, strategy):
    cids = [f"c{i:02d}" for i in range(consumers)]
    results = everyone(strategy, list(range(queues)), cids)
    owned = [q for result in results.values() for q in result]
    assert sorted(owned) == list(range(queues))
    sizes = [len(result) for result in results.values()]
    assert max(sizes) - min(sizes) <= 1
