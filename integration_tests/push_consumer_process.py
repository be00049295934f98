"""A PushConsumer in its own process, for tests that kill -9 or stop consumers:

    python -m integration_tests.push_consumer_process ENDPOINTS GROUP TOPIC STRATEGY OUT_DIR NAME

It consumes TOPIC in GROUP (clustering, from the first offset) and writes to OUT_DIR:
`NAME.consumed` (one line per message: queue, offset, body, as soon as the listener saw it),
`NAME.owned` (its client id, then on each line a change of its owned queues: time and queue
ids), `NAME.stopped` (the time shutdown() returned). SIGTERM shuts the consumer down cleanly.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from rmq.connector import ConsumeConcurrentlyStatus, MessageExt, PushConsumer
from rmq.connector.message_listener import ConsumeConcurrentlyContext


def main(argv: Sequence[str]) -> int:
    endpoints, group, topic, strategy, out_dir, name = argv
    out = Path(out_dir)
    consumed = open(out / f"{name}.consumed", "a", buffering=1)
    lock = threading.Lock()

    def listener(
        messages: Sequence[MessageExt], context: ConsumeConcurrentlyContext
    ) -> ConsumeConcurrentlyStatus:
        with lock:
            for m in messages:
                consumed.write(
                    json.dumps([m.message_queue.broker_name, m.queue_id, m.queue_offset, m.body.decode()])
                    + "\n"
                )
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        group, endpoints, allocate_strategy=strategy, consume_from="first", instance_name=name
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    consumer.start()
    owned_file = open(out / f"{name}.owned", "a", buffering=1)
    owned_file.write(consumer.client_id + "\n")
    owned: list[list[object]] = []
    while not stop.wait(0.02):
        now = [[mq.broker_name, mq.queue_id] for mq in consumer.process_queues() if mq.topic == topic]
        if now != owned:
            owned = now
            owned_file.write(json.dumps([time.time(), now]) + "\n")
    consumer.shutdown()
    (out / f"{name}.stopped").write_text(str(time.time()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
