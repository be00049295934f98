"""The per-group settings an admin sets (RocketMQ's updateSubGroup / getSubscriptionGroupConfig,
rmq.v1 UpdateSubscriptionGroup / GetSubscriptionGroup / DeleteSubscriptionGroup); the pull, pop and
send-back processors enforce them through SubscriptionGroupManager (consume_enable, retry_max_times)."""

from __future__ import annotations

from rmq.broker_server.offsets.subscription_group_manager import (
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
)
from rmq.broker_server.processors.names import check_group_name
from rmq.broker_server.processors.store_executor import StoreExecutor


class SubscriptionGroupProcessor:
    def __init__(self, groups: SubscriptionGroupManager, executor: StoreExecutor) -> None:
        self.groups = groups
        self.executor = executor

    def get(self, group: str) -> tuple[SubscriptionGroupConfig, bool]:
        """The group's settings and whether they were stored (else RocketMQ's defaults)."""
        check_group_name(group)
        stored = self.groups.find(group)
        return (stored, True) if stored is not None else (SubscriptionGroupConfig(group), False)

    async def update(self, config: SubscriptionGroupConfig) -> None:
        """Store the group's settings (durably, on a store thread) before returning."""
        check_group_name(config.group)
        await self.executor.run(self.groups.update, config)

    async def delete(self, group: str) -> bool:
        """Forget the group's stored settings (`rmq group delete`, durably, on a store thread);
        False when none were stored."""
        check_group_name(group)
        return await self.executor.run(self.groups.delete, group)
