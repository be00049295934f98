"""Which account registered each consumer client id, on a server started with `--acl`: a
client id belongs to the first account that uses it (Heartbeat, WatchConsumerIds, LockBatchMQ,
...) until that account has left it unused for `ttl_ms`; calls naming it from any other
account are refused, so an account with SUB on a group cannot unregister, unlock or impersonate
another account's consumer.

Bounded per account (an account can only forget its own oldest ids, never another's), so a
client id's owner cannot be pushed out by someone else.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from rmq.broker_server.errors import BrokerError
from rmq.v1 import rmq_pb2

DEFAULT_TTL_MS = 120_000          # ConsumerManager's client expiry (spec: channel expired after 120 s)
DEFAULT_ACCOUNT_CAPACITY = 10_000


class ClientIdTaken(BrokerError):
    """The client id is registered by another account."""

    def __init__(self, message: str) -> None:
        super().__init__(rmq_pb2.NO_PERMISSION, message)


class ClientIdOwners:
    def __init__(self, ttl_ms: int = DEFAULT_TTL_MS,
                 account_capacity: int = DEFAULT_ACCOUNT_CAPACITY) -> None:
        self.ttl_ms = ttl_ms
        self.account_capacity = account_capacity
        self._owner: dict[str, str] = {}
        self._by_account: dict[str, OrderedDict[str, int]] = {}   # client id -> last use, oldest first
        self._lock = threading.Lock()

    def claim(self, access_key: str, client_id: str, now_ms: int) -> None:
        """Bind `client_id` to the account (or refresh the binding); ClientIdTaken when it is
        bound to another account that used it within the ttl."""
        with self._lock:
            owner = self._owner.get(client_id)
            if owner is not None and owner != access_key:
                last_use = self._by_account[owner][client_id]
                if now_ms - last_use < self.ttl_ms:
                    raise ClientIdTaken(f"client id {client_id[:64]!r} is registered by another account")
                self._forget(owner, client_id)
            ids = self._by_account.setdefault(access_key, OrderedDict())
            ids[client_id] = now_ms
            ids.move_to_end(client_id)
            self._owner[client_id] = access_key
            while len(ids) > self.account_capacity:
                oldest, _ = ids.popitem(last=False)
                del self._owner[oldest]

    def owner(self, client_id: str) -> str | None:
        with self._lock:
            return self._owner.get(client_id)

    def _forget(self, access_key: str, client_id: str) -> None:
        del self._by_account[access_key][client_id]
        del self._owner[client_id]
