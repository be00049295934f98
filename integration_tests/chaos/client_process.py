"""The chaos run's clients, each started in a network namespace of its own; every event is one
JSON line in OUT (line-buffered, written before the next step), times from CLOCK_MONOTONIC
(one clock for every process of the machine):

    python -m integration_tests.chaos.client_process producer ENDPOINTS TOPIC OUT NAME
    python -m integration_tests.chaos.client_process consumer ENDPOINTS GROUP TOPIC OUT NAME
    python -m integration_tests.chaos.client_process monitor OUT MEMBER=HOST:PORT ...

producer: the SDK Producer sends NAME-0, NAME-1, ..., each to the queue of its key
(select_message_queue_by_hash over KEYS keys, key = number % KEYS), from one thread per key:
a key's messages go one at a time, and one not answered SEND_OK is sent again with the same body
(a new attempt) until it is, as an orderly RocketMQ application does (per-key order); the other
keys go on meanwhile, so a fault in one broker group holds only the keys whose queues are there.
Lines: {"s" (sent), "t" (answered), "body", "attempt", "status" (SendStatus name or the
error's class), "msg_id", "broker", "queue" (the queue the selector chose, also for a refused
send; absent when no route was had), "offset"}.
consumer: an orderly PushConsumer; a line per message before the listener returns SUCCESS:
{"t", "body", "broker", "queue", "offset"}; OUT with suffix .owned holds the queues
([broker, queue id]) it owns now; OUT with suffix .commits a line each time the offset it
committed for an owned queue moves: {"t", "broker", "queue", "offset"}.
monitor: every member's GetBrokerStatus every POLL_S: {"t", "group", "member", "role" (null: no
answer), "epoch"}; members are given as GROUP/MEMBER=HOST:PORT.
SIGTERM ends each cleanly.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import grpc

from rmq.connector import ConsumeOrderlyContext, ConsumeOrderlyStatus, MessageExt, MessageQueue, PushConsumer
from rmq.connector.errors import RmqError
from rmq.connector.message import Message
from rmq.connector.offset_store import ReadOffsetType
from rmq.connector.producer import Producer, SendStatus, select_message_queue_by_hash
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

KEYS = 8
KEY_PAUSE_S = 0.05     # between one key's messages: about the rate of one sender without pauses
RETRY_PAUSE_S = 0.05   # before a refused message is sent again
POLL_S = 0.25
# The monitor's channel to a member retries its connection at least every POLL_S * 2: grpc's default
# back-off (1 s, growing 1.6× to 120 s) saw a member killed for 10 s and restarted ≈ 9 s after it
# served again, which the checker counted as time without a master (major-kill, stop 4).
MONITOR_CHANNEL = [("grpc.initial_reconnect_backoff_ms", int(POLL_S * 1000)),
                   ("grpc.min_reconnect_backoff_ms", int(POLL_S * 1000)),
                   ("grpc.max_reconnect_backoff_ms", int(POLL_S * 2000))]
SEND_TIMEOUT_S = 3.0


def _writer(path: str) -> tuple[IO[str], threading.Lock]:
    return open(path, "a", buffering=1), threading.Lock()


def _stopper() -> threading.Event:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return stop


def produce(endpoints: str, topic: str, out_path: str, name: str) -> None:
    out, lock = _writer(out_path)
    stop = _stopper()
    with Producer(endpoints, instance_name=name) as producer:
        producer.client.timeout = SEND_TIMEOUT_S
        senders = [threading.Thread(target=_send_key, args=(producer, topic, name, key, out, lock, stop))
                   for key in range(KEYS)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()


def _send_key(producer: Producer, topic: str, name: str, key: int, out: IO[str], lock: threading.Lock,
              stop: threading.Event) -> None:
    """One key's messages NAME-key, NAME-(key+KEYS), ... to the queue of the key, one at a time,
    each sent again until answered SEND_OK (an orderly sender: the key's next message waits)."""
    chosen: list[MessageQueue] = []      # the queue of the attempt under way, also for one refused

    def selector(queues: Sequence[MessageQueue], message: Message, arg: Any) -> MessageQueue:
        chosen.append(select_message_queue_by_hash(queues, message, arg))
        return chosen[-1]

    for number in range(key, 1 << 62, KEYS):
        body = f"{name}-{number}"
        for attempt in range(1, 1 << 30):
            line: dict[str, Any] = {"s": time.monotonic(), "body": body, "attempt": attempt}
            chosen.clear()
            try:
                result = producer.send(Message(topic, body.encode(), keys=body), selector, f"{name}-k{key}")
                line.update(status=result.status.name, msg_id=result.msg_id, offset=result.queue_offset)
            except RmqError as error:
                line.update(status=type(error).__name__, error=str(error)[:200])
            if chosen:
                line.update(broker=chosen[-1].broker_name, queue=chosen[-1].queue_id)
            with lock:
                out.write(json.dumps({"t": time.monotonic(), **line}) + "\n")
            if stop.wait(KEY_PAUSE_S if line["status"] == SendStatus.SEND_OK.name else RETRY_PAUSE_S):
                return
            if line["status"] == SendStatus.SEND_OK.name:
                break


def consume(endpoints: str, group: str, topic: str, out_path: str, name: str) -> None:
    out, lock = _writer(out_path)
    stop = _stopper()

    def listener(messages: Sequence[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        with lock:
            for m in messages:
                out.write(json.dumps({"t": time.monotonic(), "body": m.body.decode(), "broker": m.broker_name,
                                      "queue": m.queue_id, "offset": m.queue_offset}) + "\n")
        return ConsumeOrderlyStatus.SUCCESS

    consumer = PushConsumer(group, endpoints, consume_from="first", instance_name=name,
                            rebalance_interval_s=2.0)
    consumer.subscribe(topic)
    consumer.register_message_listener(listener, orderly=True)
    consumer.start()
    owned_path = Path(out_path).with_suffix(".owned")
    commits, _ = _writer(str(Path(out_path).with_suffix(".commits")))
    owned: list[tuple[str, int]] = []
    committed: dict[tuple[str, int], int] = {}
    while not stop.wait(0.1):
        queues = [mq for mq in consumer.process_queues() if mq.topic == topic]
        now = sorted((mq.broker_name, mq.queue_id) for mq in queues)
        if now != owned:
            owned = now
            owned_path.write_text(json.dumps(owned))
        for mq in queues:
            offset = consumer.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY)
            if offset >= 0 and committed.get((mq.broker_name, mq.queue_id)) != offset:
                committed[(mq.broker_name, mq.queue_id)] = offset
                commits.write(json.dumps({"t": time.monotonic(), "broker": mq.broker_name,
                                          "queue": mq.queue_id, "offset": offset}) + "\n")
    consumer.shutdown()


def monitor(out_path: str, members: Sequence[str]) -> None:
    out, lock = _writer(out_path)
    stop = _stopper()

    def poll(group: str, member: str, address: str) -> None:
        with grpc.insecure_channel(address, options=MONITOR_CHANNEL) as channel:
            stub = rmq_pb2_grpc.AdminServiceStub(channel)
            while not stop.is_set():
                began = time.monotonic()
                try:
                    status = stub.GetBrokerStatus(rmq_pb2.BrokerStatusRequest(), timeout=POLL_S * 2)
                    role: str | None = rmq_pb2.BrokerRole.Name(status.role)
                    epoch = status.epoch
                except grpc.RpcError:
                    role, epoch = None, 0
                with lock:
                    out.write(json.dumps({"t": began, "group": group, "member": member, "role": role,
                                          "epoch": epoch}) + "\n")
                stop.wait(max(0.0, POLL_S - (time.monotonic() - began)))

    for word in members:
        name, address = word.split("=", 1)
        group, _, member = name.rpartition("/")
        threading.Thread(target=poll, args=(group, member, address), daemon=True).start()
    stop.wait()


def main(argv: Sequence[str]) -> int:
    role, *args = argv
    if role == "producer":
        produce(*args)
    elif role == "consumer":
        consume(*args)
    elif role == "monitor":
        monitor(args[0], args[1:])
    else:
        raise SystemExit(f"unknown client role {role!r}: producer, consumer or monitor")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
