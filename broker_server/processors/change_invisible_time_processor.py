"""ChangeInvisibleTimeProcessor (RocketMQ 5): a new invisibility for a delivery the
PopMessageProcessor handed out, named by its receipt handle's text, protocol-neutral; the delivery
gets a new receipt handle (the old one is then superseded)."""

from __future__ import annotations

from rmq.broker_server.errors import IllegalInvisibleTime
from rmq.broker_server.processors.names import check_group_name
from rmq.broker_server.processors.pop_message_processor import MAX_INVISIBLE_MS, PopMessageProcessor


class ChangeInvisibleTimeProcessor:
    def __init__(self, pop: PopMessageProcessor) -> None:
        self.pop = pop

    async def change(self, group: str, topic: str, receipt_handle: str, invisible_ms: int) -> str:
        """Make the delivery receivable again `invisible_ms` from now (0: at once); the new
        receipt handle's text."""
        check_group_name(group)
        handle = self.pop.handles.decode(receipt_handle, group, topic)
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            raise IllegalInvisibleTime(f"invisible duration {invisible_ms} ms is outside "
                                       f"0..{MAX_INVISIBLE_MS} ms")
        self.pop.check_in_flight(group, handle)
        changed = await self.pop.change_invisible(group, handle, invisible_ms)
        return self.pop.handles.encode(group, changed)
