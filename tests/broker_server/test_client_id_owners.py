"""A consumer client id belongs to the account that first used it."""

from __future__ import annotations

import pytest

from rmq.broker_server.offsets.client_id_owners import ClientIdOwners, ClientIdTaken

NOW = 1_000_000


def test_another_account_cannot_use_a_claimed_id_until_it_lies_unused_for_the_ttl() -> None:
    owners = ClientIdOwners(ttl_ms=1000)
    owners.claim("alice", "c1", NOW)
    owners.claim("alice", "c1", NOW + 900)          # refreshed
    with pytest.raises(ClientIdTaken, match="client id 'c1' is registered by another account"):
        owners.claim("bob", "c1", NOW + 1800)
    owners.claim("bob", "c1", NOW + 1900)           # alice left it unused for the ttl
    assert owners.owner("c1") == "bob"
    with pytest.raises(ClientIdTaken):
        owners.claim("alice", "c1", NOW + 1901)


def test_an_account_filling_its_budget_forgets_only_its_own_ids() -> None:
    owners = ClientIdOwners(account_capacity=3)
    owners.claim("alice", "victim-id", NOW)
    for i in range(100):
        owners.claim("mallory", f"m{i}", NOW)
    assert owners.owner("victim-id") == "alice"
    assert [owners.owner(f"m{i}") for i in (96, 97, 98, 99)] == [None, "mallory", "mallory", "mallory"]
    with pytest.raises(ClientIdTaken):
        owners.claim("mallory", "victim-id", NOW + 1)
