"""AckMessageProcessor (RocketMQ 5 AckMessageProcessor, and the proxy's forward to the dead-letter
queue): ends deliveries the PopMessageProcessor handed out, named by their receipt handles'
text, protocol-neutral (refusals are BrokerError leaves: InvalidReceiptHandle)."""

from __future__ import annotations

from rmq.broker_server.errors import InvalidReceiptHandle
from rmq.broker_server.processors.names import check_group_name
from rmq.broker_server.processors.pop_message_processor import PopMessageProcessor
from rmq.broker_server.processors.receipt_handle import ReceiptHandle


class AckMessageProcessor:
    def __init__(self, pop: PopMessageProcessor) -> None:
        self.pop = pop

    async def ack(self, group: str, topic: str,
                  receipt_handles: list[str]) -> list[InvalidReceiptHandle | None]:
        """Acknowledge the delivery each handle names (an already acknowledged message is fine:
        acks are idempotent), durably before this returns. Per handle: None, or why it is
        refused (not issued to the group for the topic, or superseded: the message was
        delivered again since, and a stale handle must not end that delivery)."""
        check_group_name(group)
        refusals: list[InvalidReceiptHandle | None] = []
        handles: list[ReceiptHandle] = []
        for text in receipt_handles:
            try:
                handles.append(self.pop.current_handle(text, group, topic))
                refusals.append(None)
            except InvalidReceiptHandle as refused:
                refusals.append(refused)
        await self.pop.ack(group, handles)   # no await since the checks: they still hold
        return refusals

    async def forward_to_dlq(self, group: str, topic: str, receipt_handle: str,
                             max_attempts: int = 0) -> None:
        """End the delivery by moving its message to the group's DLQ with `max_attempts` as its
        deliveries (0: the group's max_attempts)."""
        check_group_name(group)
        handle = self.pop.handles.decode(receipt_handle, group, topic)
        self.pop.check_in_flight(group, handle)
        await self.pop.forward_to_dlq(group, handle, max_attempts or self.pop.policy.max_attempts)
