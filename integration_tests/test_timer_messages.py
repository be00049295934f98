"""Timer messages across a kill -9 of a real `rmq broker` process (docs/internals/timer.md
§Recovery): 300 timers due over three seconds, the broker killed once the first second's are
being delivered and kept down until all are due; after the restart every one is delivered
exactly once, in time order. The in-process cases (every protocol, bad input, recall, failover):
tests/broker_server/test_timer_messages.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rmq import message_format as mf
from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.connector.message import MessageExt, decode_messages
from rmq.message_queue import MessageQueue
from testing import processes
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
COUNT = 300


def pulled(client: RmqClient, mq: MessageQueue) -> list[MessageExt]:
    messages: list[MessageExt] = []
    while True:
        result = client.pull(mq, len(messages), 256, group="timer-check")
        batch = decode_messages(result.messages, mq)
        if not batch:
            return messages
        messages += batch


def test_timers_due_during_a_kill_9_downtime_are_delivered_once_each_in_time_order(tmp_path: Path):
    broker = processes.broker(tmp_path, flush="async").start()
    try:
        with RmqClient(broker.address) as client:
            client.create_topic("timed", queues=1)
            mq = MessageQueue("timed", "broker-a", 0)
            first_due = (int(time.time()) + 3) * 1000
            sent = [OutgoingMessage(b"%03d" % i, properties={
                mf.PROPERTY_TIMER_DELIVER_MS: str(first_due + (i % 3) * 1000 + i)}) for i in range(COUNT)]
            client.send("timed", sent)
            wait_until(lambda: pulled(client, mq), "the first timers delivered", timeout=30)
        broker.kill()
        time.sleep(max(first_due + 3500 - time.time() * 1000, 0) / 1000)   # down while the rest come due
        broker.start()
        with RmqClient(broker.address) as client:
            wait_until(lambda: len(pulled(client, mq)) >= COUNT, "every timer delivered", timeout=30)
            sentinel = OutgoingMessage(b"sentinel", properties={mf.PROPERTY_TIMER_DELAY_MS: "1500"})
            client.send("timed", [sentinel])   # the latest: once it is here, every earlier slot was read
            wait_until(lambda: pulled(client, mq)[-1].body == b"sentinel", "the sentinel delivered",
                       timeout=30)
            messages = pulled(client, mq)[:-1]
        assert sorted(m.body for m in messages) == [b"%03d" % i for i in range(COUNT)]   # none lost or twice
        due = [int(m.properties[mf.PROPERTY_TIMER_DELIVER_MS]) // 1000 for m in messages]
        assert due == sorted(due)   # second by second
    finally:
        broker.stop()
