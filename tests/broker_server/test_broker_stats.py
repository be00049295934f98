"""BrokerStatsManager's figures for the console's broker table and group pages: today's puts and
gets start from zero at local midnight (RocketMQ's msgPutTotalTodayNow minus the morning's
total), and a group's counters say when its pulls last returned messages."""

from __future__ import annotations

from datetime import datetime, timedelta

from rmq.broker_server.metrics.broker_stats import BrokerStatsManager


def test_todays_counts_start_again_at_midnight_and_totals_go_on() -> None:
    evening = datetime(2026, 11, 28, 23, 59).timestamp()
    now = [evening]
    stats = BrokerStatsManager(clock=lambda: now[0])
    stats.record_put("Orders", 5, 50)
    stats.record_get("Orders", 3, 30, "g1")
    assert (stats.today().put_messages, stats.today().get_messages) == (5, 3)
    now[0] = (datetime(2026, 11, 28, 23, 59) + timedelta(minutes=2)).timestamp()   # 00:01 next day
    stats.mark_day()          # the broker's minute task
    stats.record_put("Orders", 2, 20)
    today = stats.today()
    assert (today.put_messages, today.get_messages, today.put_total, today.get_total) == (2, 0, 7, 3)


def test_a_groups_counters_say_what_its_pulls_took_and_when_last() -> None:
    now = [1_000.0]
    stats = BrokerStatsManager(clock=lambda: now[0])
    stats.record_get("Orders", 4, 40, "g1")
    now[0] = 1_005.5
    stats.record_get("Orders", 2, 20, "g1")
    stats.record_get("Orders", 9, 90, "g2")
    [(topic, counters)] = stats.of_group("g1").items()
    assert (topic, counters.get_messages, counters.last_get_ms) == ("Orders", 6, 1_005_500)
    assert stats.of_group("nobody") == {}
