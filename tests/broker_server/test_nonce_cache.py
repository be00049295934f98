"""Replay defence: a nonce is accepted once inside the window; the bounded cache never lets an
evicted nonce back in."""

from __future__ import annotations

import pytest

from rmq.broker_server.nonce_cache import NonceCache

WINDOW_MS = 60_000
NOW = 1_700_000_000_000


def test_a_nonce_is_admitted_once() -> None:
    cache = NonceCache(WINDOW_MS)
    assert cache.admit("a" * 32, NOW, NOW)
    assert not cache.admit("a" * 32, NOW, NOW + 1000)
    assert cache.admit("b" * 32, NOW, NOW)


def test_entries_older_than_the_window_are_dropped() -> None:
    cache = NonceCache(WINDOW_MS)
    cache.admit("old", NOW, NOW)
    cache.admit("new", NOW + WINDOW_MS, NOW + WINDOW_MS)
    assert len(cache) == 2
    cache.admit("later", NOW + WINDOW_MS + 1, NOW + WINDOW_MS + 1)
    assert len(cache) == 2          # "old" left: its timestamp is outside the window now


def test_full_cache_evicts_the_oldest_and_refuses_everything_at_or_below_it() -> None:
    cache = NonceCache(WINDOW_MS, capacity=2)
    assert cache.admit("n1", NOW + 1, NOW)
    assert cache.admit("n2", NOW + 2, NOW)
    assert cache.admit("n3", NOW + 3, NOW)    # evicts n1 (timestamp NOW + 1), floor = NOW + 1
    assert len(cache) == 2
    assert not cache.admit("n1", NOW + 1, NOW)     # the evicted nonce cannot be replayed
    assert not cache.admit("n0", NOW, NOW)          # nor anything as old
    assert not cache.admit("n2", NOW + 2, NOW)      # still remembered


def test_a_request_older_than_what_a_full_cache_evicts_is_refused_and_not_stored() -> None:
    cache = NonceCache(WINDOW_MS, capacity=1)
    assert cache.admit("n5", NOW + 5, NOW)
    assert not cache.admit("n4", NOW + 4, NOW)    # evicting n5 raises the floor above n4
    assert len(cache) == 0
    assert cache.admit("n6", NOW + 6, NOW)


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        NonceCache(WINDOW_MS, capacity=0)
