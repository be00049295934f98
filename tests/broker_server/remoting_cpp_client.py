"""One scenario of the official RocketMQ 4.x C++ client (PyPI `rocketmq`, librocketmq.so) against
a remoting address, run in its own process (the native client's threads and logs stay out of the
test process): `python remoting_cpp_client.py SCENARIO_JSON` prints one JSON line of results.

Scenarios: {"do": "produce", "address", "topic", "group", "messages": [{"body", "tags", "keys",
"properties", "order_key"?}], "batch": bool} and {"do": "consume", "address", "topic", "group",
"expect": N, "orderly": bool, "broadcast": bool, "fail_once_key": K, "timeout_s"} and {"do": "pull",
"address", "topic", "group"} (a PullConsumer reading every queue from offset 0); with
"access_key"/"secret_key" the client signs its requests."""

from __future__ import annotations

import json
import sys
import threading
import time

from rocketmq.client import (
    Message,
    MessageModel,
    Producer,
    PullConsumer,
    PushConsumer,
    RecvMessage,
    SendStatus,
    dll,
    ffi_check,
)

CONSUME_SUCCESS, RECONSUME_LATER = 0, 1  # the native listener's ConsumeStatus


def credentials(client: Producer | PushConsumer, scenario: dict) -> None:
    if scenario.get("access_key"):
        client.set_session_credentials(scenario["access_key"], scenario["secret_key"], "")


def produce(scenario: dict) -> dict:
    producer = Producer(scenario["group"], timeout=10_000)
    producer.set_namesrv_addr(scenario["address"])
    credentials(producer, scenario)
    producer.start()
    results = []
    try:
        messages = []
        for spec in scenario["messages"]:
            message = Message(scenario["topic"])
            message.set_body(spec["body"].encode())
            message.set_tags(spec.get("tags", ""))
            message.set_keys(spec.get("keys", ""))
            for name, value in spec.get("properties", {}).items():
                message.set_property(name, value)
            messages.append((message, spec))
        if scenario.get("batch"):
            sent = producer.send_batch([message for message, _ in messages])
            results.append({"status": int(sent.status), "msg_id": sent.msg_id})
        for message, spec in [] if scenario.get("batch") else messages:
            if "order_key" in spec:
                sent = producer.send_orderly(message, spec["order_key"])
            else:
                sent = producer.send_sync(message)
            results.append({"status": int(sent.status), "msg_id": sent.msg_id, "offset": sent.offset})
    except Exception as error:  # a refusal: reported, not a traceback
        results.append({"error": str(error)})
    finally:
        producer.shutdown()
    return {"sent": results, "ok": all(r.get("status") == SendStatus.OK for r in results)}


def consume(scenario: dict) -> dict:
    received: list[dict] = []
    failed: set[str] = set()
    lock = threading.Lock()

    def on_message(_consumer: object, handle: object) -> int:
        message = RecvMessage(handle)
        keys = (message.keys or b"").decode()
        with lock:
            if keys == scenario.get("fail_once_key") and keys not in failed:
                failed.add(keys)
                return RECONSUME_LATER
            received.append(
                {
                    "id": message.id,
                    "topic": message.topic,
                    "tags": (message.tags or b"").decode(),
                    "keys": keys,
                    "body": message.body.decode(),
                    "queue_id": message.queue_id,
                    "queue_offset": message.queue_offset,
                    "reconsume_times": message.reconsume_times,
                    "color": (message.get_property("color") or b"").decode(),
                }
            )
        return CONSUME_SUCCESS

    model = MessageModel.BROADCASTING if scenario.get("broadcast") else MessageModel.CLUSTERING
    consumer = PushConsumer(scenario["group"], orderly=scenario.get("orderly", False), message_model=model)
    consumer.set_namesrv_addr(scenario["address"])
    credentials(consumer, scenario)
    # PushConsumer.subscribe's wrapper re-raises a listener's exception inside the native callback,
    # which then reports success: register a listener that returns RECONSUME_LATER itself.
    ffi_check(
        dll.Subscribe(consumer._handle, scenario["topic"].encode(), scenario.get("expression", "*").encode())
    )
    consumer._register_callback(on_message)
    consumer.start()
    deadline = time.monotonic() + scenario.get("timeout_s", 60)
    while time.monotonic() < deadline:
        with lock:
            if len(received) >= scenario["expect"]:
                break
        time.sleep(0.05)
    consumer.shutdown()  # commits the consumed offsets
    return {"received": received}


def pull(scenario: dict) -> dict:
    consumer = PullConsumer(scenario["group"])
    consumer.set_namesrv_addr(scenario["address"])
    credentials(consumer, scenario)
    consumer.start()
    try:
        received = [
            {
                "body": message.body.decode(),
                "tags": (message.tags or b"").decode(),
                "keys": (message.keys or b"").decode(),
                "queue_id": message.queue_id,
                "queue_offset": message.queue_offset,
            }
            for message in consumer.pull(scenario["topic"])
        ]
    finally:
        consumer.shutdown()
    return {"received": received}


SCENARIOS = {"produce": produce, "consume": consume, "pull": pull}

if __name__ == "__main__":
    scenario = json.loads(sys.argv[1])
    result = SCENARIOS[scenario["do"]](scenario)
    print(json.dumps(result), flush=True)
