"""Replay defence: a nonce is accepted once inside the window; a full cache never lets an
evicted nonce back in, and one account filling its cache never touches another's."""

from __future__ import annotations

import pytest

from rmq.broker_server.security.nonce_cache import NonceCache, ReplayGuard

WINDOW_MS = 60_000
NOW = 1_700_000_000_000
A, B, C, D = (int(c * 32, 16) for c in "abcd")


def nonce(i: int) -> str:
    return f"{i:032x}"


def test_a_nonce_is_admitted_once() -> None:
    cache = NonceCache(WINDOW_MS)
    assert cache.admit(A, NOW, NOW)
    assert not cache.admit(A, NOW, NOW + 1000)
    assert cache.admit(B, NOW, NOW)


def test_entries_older_than_the_window_are_dropped() -> None:
    cache = NonceCache(WINDOW_MS)
    cache.admit(A, NOW, NOW)
    cache.admit(B, NOW + WINDOW_MS, NOW + WINDOW_MS)
    assert len(cache) == 2
    cache.admit(C, NOW + WINDOW_MS + 1, NOW + WINDOW_MS + 1)
    assert len(cache) == 2          # A left: its timestamp is outside the window now


def test_full_cache_evicts_the_oldest_and_refuses_everything_at_or_below_it() -> None:
    cache = NonceCache(WINDOW_MS, capacity=2)
    assert cache.admit(1, NOW + 1, NOW)
    assert cache.admit(2, NOW + 2, NOW)
    assert cache.admit(3, NOW + 3, NOW)    # evicts 1 (timestamp NOW + 1), floor = NOW + 1
    assert len(cache) == 2
    assert not cache.admit(1, NOW + 1, NOW)     # the evicted nonce cannot be replayed
    assert not cache.admit(0, NOW, NOW)          # nor anything as old
    assert not cache.admit(2, NOW + 2, NOW)      # still remembered


def test_a_request_older_than_what_a_full_cache_evicts_is_refused_and_not_stored() -> None:
    cache = NonceCache(WINDOW_MS, capacity=1)
    assert cache.admit(5, NOW + 5, NOW)
    assert not cache.admit(4, NOW + 4, NOW)    # evicting 5 raises the floor above 4
    assert len(cache) == 0
    assert cache.admit(6, NOW + 6, NOW)


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        NonceCache(WINDOW_MS, capacity=0)
    with pytest.raises(ValueError, match="at least 1"):
        ReplayGuard(WINDOW_MS, 0, NOW)


def test_one_account_flooding_its_budget_leaves_the_others_untouched() -> None:
    guard = ReplayGuard(WINDOW_MS, account_capacity=3, started_ms=NOW)
    assert guard.admit("victim", nonce(1), NOW, NOW)
    for i in range(100):    # signed ahead of the clock: the flood raises only its own floor
        guard.admit("flooder", nonce(1000 + i), NOW + 5000 + i, NOW)
    assert guard.nonces("flooder") == 3
    assert not guard.admit("flooder", nonce(5), NOW + 10, NOW)      # its own window narrowed
    assert guard.admit("victim", nonce(2), NOW + 1, NOW)             # the victim's did not
    assert not guard.admit("victim", nonce(1), NOW, NOW)             # and its replays stay refused
    assert guard.admit("other", nonce(1), NOW, NOW)                  # nonces are per account
