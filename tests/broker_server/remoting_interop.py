"""What the 4.x client tests share: waiting for an event, reading a topic through the rmq SDK and
`rmq group progress`."""

from __future__ import annotations

import contextlib
import io
import json

from rmq.cli.main import main as rmq_main
from rmq.connector.client import RmqClient
from rmq.connector.spark import message_decoder
from rmq.message_queue import MessageQueue
from tests.broker_server.in_process_broker import InProcessBroker

QUEUES = 2
FAST_RETRY_LEVELS = " ".join(["1s"] * 18)  # a retried message waits 1 s, not 10 s


def sdk_messages(broker: InProcessBroker, topic: str) -> list[dict]:
    client = RmqClient(broker.address)
    try:
        rows: list[dict] = []
        for queue_id in range(QUEUES):
            pulled = client.pull(
                MessageQueue(topic, broker.config.broker_name, queue_id), 0, 32, group="reader"
            )
            rows += message_decoder.decode(pulled.messages, broker.config.broker_name).to_pylist()
        return rows
    finally:
        client.close()


def group_progress(broker: InProcessBroker, group: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert rmq_main(["group", "progress", group, "--json", "--endpoints", broker.address]) == 0
    return json.loads(out.getvalue())
