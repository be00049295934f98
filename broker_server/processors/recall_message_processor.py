"""RecallMessageProcessor (RocketMQ 5.3's): RecallMessage of every protocol (rmq.v1, RocketMQ 5,
4.x RECALL_MESSAGE) cancels a pending timer message by its recall handle through the broker's
TimerMessageStore (docs/internals/timer.md §Recall). Refusals are BrokerErrors: a slave's
NotMaster, a handle for another topic (ILLEGAL_ARGUMENT) or another account (NO_PERMISSION), no
message pending under it (QUERY_NOT_FOUND)."""

from __future__ import annotations

from rmq.broker_server.processors.timer_message_store import TimerMessageStore


class RecallMessageProcessor:
    def __init__(self, timer: TimerMessageStore) -> None:
        self.timer = timer

    async def recall(self, topic: str, handle: str) -> str:
        """Cancel the timer message `handle` names in `topic`; returns its message id (UNIQ_KEY)."""
        return await self.timer.recall(topic, handle)
