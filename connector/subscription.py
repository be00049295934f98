"""Subscription expressions as the SDK takes them (docs/manual/sdk.md): `rmq.subscription`'s
MessageSelector, whose malformed expressions raise ConfigError as every bad SDK argument does."""

from __future__ import annotations

from rmq import subscription
from rmq.connector.errors import config_errors


class MessageSelector(subscription.MessageSelector):
    """RocketMQ's MessageSelector: `by_tag("TagA || TagB")` or `by_sql("a > 1")`, checked when
    built (ConfigError; an SQL92 error names the position)."""

    @classmethod
    def by_tag(cls, expression: str = subscription.SUB_ALL) -> subscription.MessageSelector:
        with config_errors():
            return super().by_tag(expression)

    @classmethod
    def by_sql(cls, sql: str) -> subscription.MessageSelector:
        with config_errors():
            return super().by_sql(sql)
