"""One thread of the official RocketMQ 4.x C++ client (PyPI rocketmq 0.4.4) sending one message
per `send_sync`, run in its own process by bench.one_message_bench with the client first on its
path (testing.cpp_client.client_env): `python cpp_send_sync.py SCENARIO_JSON` with
{"address": remoting host:port, "topic", "count", "body": hex}. It warms up (route, connection),
prints "ready", waits for a line on stdin, sends `count` messages and prints one JSON line:
{"rate": msg/s, "failed": the first failure or "", "client_cpu_us": the client process's CPU
(all its threads) per send}."""

from __future__ import annotations

import json
import sys
import time

from rocketmq.client import Message, Producer, SendStatus

WARM_UP = 20


def main() -> None:
    scenario = json.loads(sys.argv[1])
    body = bytes.fromhex(scenario["body"])
    producer = Producer("bench-cpp-send-sync", timeout=10_000)
    producer.set_namesrv_addr(scenario["address"])
    producer.start()
    try:
        message = Message(scenario["topic"])
        message.set_body(body)
        for _ in range(WARM_UP):
            producer.send_sync(message)
        print("ready", flush=True)
        sys.stdin.readline()
        failed = ""
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(scenario["count"]):
            sent = producer.send_sync(message)
            if sent.status != SendStatus.OK and not failed:
                failed = f"status {int(sent.status)}"
        rate = scenario["count"] / (time.perf_counter() - start)
        cpu_us = (time.process_time() - cpu_start) / scenario["count"] * 1e6
        print(json.dumps({"rate": rate, "failed": failed, "client_cpu_us": cpu_us}), flush=True)
    finally:
        producer.shutdown()


if __name__ == "__main__":
    main()
