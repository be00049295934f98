"""MessageQueueLock (spec consumer-pull-rebalance §2.12): one lock object per MessageQueue,
so at most one consume thread of a consumer works on a queue at a time (orderly)."""

from __future__ import annotations

import threading

from rmq.connector.client import MessageQueue


class MessageQueueLock:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._mq_lock_table: dict[MessageQueue, threading.Lock] = {}

    def fetch_lock_object(self, mq: MessageQueue) -> threading.Lock:
        with self._guard:
            return self._mq_lock_table.setdefault(mq, threading.Lock())
