"""The group page's operations in headless Chromium (as test_console_browser.py): a live
PushConsumer's running info (its process queue), the group's settings changed from the page (consume
disabled: the broker refuses the group's pulls), and "Skip accumulated" adopted by the live consumer,
which consumes what arrives next and not its backlog."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from integration_tests.test_console_browser import browser, chromium, console, sync_api  # noqa: F401 (fixtures)
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.errors import RmqError
from rmq.connector.message import MessageExt
from rmq.connector.message_listener import ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus
from rmq.connector.push_consumer import PushConsumer
from testing import processes
from tests.waiting import wait_until

MQ = MessageQueue("Orders", "broker-a", 0)


def test_running_info_settings_and_skip_accumulated_from_the_group_page(
        broker: processes.ServerProcess, console: str, browser: Any) -> None:  # noqa: F811
    seen: list[int] = []
    gate = threading.Event()

    def listener(messages: tuple[MessageExt, ...],
                 context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        seen.extend(m.queue_offset for m in messages)
        if messages[0].queue_offset == 2:
            gate.wait(30)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    with RmqClient(broker.address) as client:
        client.create_topic("Orders", queues=1)
        client.send("Orders", [OutgoingMessage(f"order {i}".encode(), queue_id=0) for i in range(10)])
        consumer = PushConsumer("shop", broker.address, consume_thread_max=1, consume_from="first",
                                persist_consumer_offset_interval_s=0.1, instance_name="console-op")
        consumer.subscribe("Orders")
        consumer.register_message_listener(listener)
        consumer.start()
        try:
            wait_until(lambda: 2 in seen, "the consumer blocked on offset 2")
            browser.goto(console + "/groups/shop")
            running = browser.inner_text("#running")
            assert consumer.client_id in running and "push" in running
            rows = browser.locator("#running tr").all_inner_texts()
            row = next(r for r in rows if "Orders/broker-a/0" in r)
            assert row.split("\t")[2:5] == ["2", "8", "2-9"]    # committed 2; 2-9 cached

            browser.click("#skip-accumulated button")
            wait_until(lambda: consumer.rebalance_impl.process_queue_table[MQ].msg_count == 0,
                       "the consumer dropped its backlog")
            gate.set()
            client.send("Orders", [OutgoingMessage(b"next", queue_id=0)])
            wait_until(lambda: 10 in seen, lambda: f"the message after the reset consumed: {seen}")
            assert seen == [0, 1, 2, 10]

            browser.goto(console + "/groups/shop")
            assert "no live producer in producer group shop" in browser.inner_text("#producers")
            browser.uncheck("#change-settings input[name=consume_enable]")
            browser.fill("#change-settings input[name=retry_max_times]", "3")
            browser.click("#change-settings button")     # answered with the group's page again
            sync_api.expect(browser.locator("#settings")).to_contain_text("broker-a\tno\t3\tyes",
                                                                          use_inner_text=True)
            with pytest.raises(RmqError, match="subscription group no permission"):
                client.pull(MQ, 0, 1, group="shop")
        finally:
            gate.set()
            consumer.shutdown()
