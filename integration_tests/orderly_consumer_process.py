"""An orderly PushConsumer in its own process, for tests that add and kill -9 consumers:

    python -m integration_tests.orderly_consumer_process ENDPOINTS GROUP TOPIC OUT_FILE NAME

It consumes TOPIC in GROUP orderly (from the first offset, rebalancing every 2 s) and, for
each message, appends to OUT_FILE one JSON line written before the listener returns SUCCESS:
[broker, queue id, queue offset, pid, start, end, keys, body], start/end being the
listener's wall-clock interval. SIGTERM shuts it down cleanly.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence

from rmq.connector import ConsumeOrderlyContext, ConsumeOrderlyStatus, MessageExt, PushConsumer

WORK_S = 0.01    # each message takes a while: a queue changing hands is likely mid-work


def main(argv: Sequence[str]) -> int:
    endpoints, group, topic, out_file, name = argv
    out = open(out_file, "a", buffering=1)
    pid = os.getpid()

    def listener(messages: Sequence[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        for m in messages:
            start = time.time()
            time.sleep(WORK_S)   # the behaviour under test: a listener that works a while
            out.write(json.dumps([m.broker_name, m.queue_id, m.queue_offset, pid, start, time.time(), m.keys,
                                  m.body.decode()]) + "\n")
        return ConsumeOrderlyStatus.SUCCESS

    consumer = PushConsumer(group, endpoints, consume_from="first", instance_name=name,
                            rebalance_interval_s=2.0)
    consumer.subscribe(topic)
    consumer.register_message_listener(listener, orderly=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    consumer.start()
    stop.wait()
    consumer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
