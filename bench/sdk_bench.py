"""Section 9: the client SDK. A PushConsumer with a no-op listener draining a topic of 8
queues against a Redis Streams consumer group drained with XREADGROUP + XACK through
redis-py; the SDK Producer's batched send against XADD pipelined."""

from __future__ import annotations

import itertools
import threading
import time

import redis

from bench import redis_reference as rr
from bench.environment import Environment
from bench.harness import Row, Target, measure_pair, rate
from bench.workload import body_of, produce
from rmq.connector import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
from rmq.connector.client import RmqClient

QUEUES = 8
BODY_SIZE = 100
PRODUCE_BATCH = 256
CONSUMER_SETTINGS = (  # (label, pull_batch_size, consume_message_batch_max_size, target ratio)
    # issue 29 item 2: at RocketMQ's defaults ≥ 1.5× a Redis consumer group
    ("RocketMQ defaults: pulls of 32, listener batches of 1", 32, 1, 1.5),
    ("pulls of 256, listener batches of 32", 256, 32, 2.0),
)
_groups = itertools.count()


def sdk_rows(env: Environment) -> list[Row]:
    """PushConsumer (one consumer in the benchmark process, clustering, 8 queues pre-filled
    with 100-byte messages, from the first offset, timed from start() until the listener saw
    every message) against one redis-py client reading its consumer group with XREADGROUP
    COUNT n and acknowledging each batch with XACK pipelined into the next read; then
    Producer.send of Message lists (256 per call) against XADD pipelined 256 deep."""
    count = env.scale.produce_messages
    body = body_of(BODY_SIZE)
    rows = []
    with env.broker() as broker, env.redis() as redis_server, RmqClient(broker.address) as client:
        client.create_topic("bench-push", queues=QUEUES)
        client.create_topic("bench-sdk-produce", queues=QUEUES)
        produce(client, "bench-push", count, body, PRODUCE_BATCH)
        redis_client = redis_server.client() if redis_server else None
        if redis_client is not None:
            rr.xadd(redis_client, "bench-group-stream", body, count)
        for label, pull_batch, consume_batch, target in CONSUMER_SETTINGS:
            subject, reference = measure_pair(
                lambda pull_batch=pull_batch, consume_batch=consume_batch: push_consumer_rate(
                    broker.address, count, pull_batch, consume_batch
                ),
                None
                if redis_client is None
                else (lambda pull_batch=pull_batch: xreadgroup_rate(redis_client, count, pull_batch)),
                env.scale.repeats,
            )
            rows.append(
                Row(
                    f"PushConsumer, no-op listener, {BODY_SIZE} B, {QUEUES} queues, 1 consumer ({label})",
                    "msg/s",
                    subject,
                    f"XREADGROUP COUNT {pull_batch} + XACK pipelined",
                    reference,
                    Target(min_ratio=target),
                    env.redis_missing,
                )
            )
        with Producer(broker.address) as producer:
            messages = [Message("bench-sdk-produce", body) for _ in range(PRODUCE_BATCH)]
            subject, reference = measure_pair(
                lambda: rate(count, lambda: producer_send(producer, messages, count)),
                None if redis_client is None else (lambda: rr.xadd_rate(redis_client, body, count)),
                env.scale.repeats,
            )
        rows.append(
            Row(
                f"Producer.send, {BODY_SIZE} B Message lists of {PRODUCE_BATCH}",
                "msg/s",
                subject,
                f"XADD pipelined {PRODUCE_BATCH}",
                reference,
                Target(min_ratio=1.5),
                env.redis_missing,
            )
        )
    return rows


def push_consumer_rate(address: str, count: int, pull_batch: int, consume_batch: int) -> float:
    """Messages/s of a fresh group's PushConsumer reading `count` pre-filled messages."""
    seen = [0]
    lock = threading.Lock()
    done = threading.Event()

    def listener(messages, context) -> ConsumeConcurrentlyStatus:
        with lock:
            seen[0] += len(messages)
            if seen[0] >= count:
                done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        f"bench-push-{next(_groups)}",
        address,
        consume_from="first",
        pull_batch_size=pull_batch,
        consume_message_batch_max_size=consume_batch,
    )
    consumer.subscribe("bench-push")
    consumer.register_message_listener(listener)
    start = time.perf_counter()
    consumer.start()
    try:
        if not done.wait(600):
            raise RuntimeError(f"the PushConsumer saw {seen[0]} of {count} messages")
        return count / (time.perf_counter() - start)
    finally:
        consumer.shutdown()


def xreadgroup_rate(client: redis.Redis, count: int, batch: int) -> float:
    """Entries/s of a fresh consumer group reading the pre-filled stream with XREADGROUP
    COUNT `batch`, each batch's XACK sent in the same pipeline as the next read."""
    key, group = "bench-group-stream", f"bench-group-{next(_groups)}"
    client.xgroup_create(key, group, id="0")
    try:
        return rate(count, lambda: _drain_group(client, key, group, batch, count))
    finally:
        client.xgroup_destroy(key, group)


def _drain_group(client: redis.Redis, key: str, group: str, batch: int, count: int) -> None:
    seen, pending = 0, []
    while seen < count:
        pipe = client.pipeline(transaction=False)
        if pending:
            pipe.xack(key, group, *pending)
        pipe.xreadgroup(group, "consumer-1", {key: ">"}, count=batch)
        answer = pipe.execute()[-1]
        entries = answer[0][1] if answer else []
        if not entries:
            raise RuntimeError(f"the consumer group stopped after {seen} of {count} entries")
        pending = [entry_id for entry_id, _ in entries]
        seen += len(entries)
    if pending:
        client.xack(key, group, *pending)


def producer_send(producer: Producer, messages: list[Message], count: int) -> None:
    for start in range(0, count, len(messages)):
        producer.send(messages[: min(len(messages), count - start)])
