"""Section 12: Client SDK II. An orderly PushConsumer (queue locks, one thread per queue,
commit per batch) against the concurrent one on the same pre-filled 8-queue topic, both
with a no-op listener; the PullConsumer's poll loop against Redis XREAD COUNT n over one
stream (redis-py, reading on from the last id); and the PullConsumer reading its backlog
through the broker's Flight data plane against the same consumer reading by PullMessage only."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence

import redis

from bench import redis_reference as rr
from bench.environment import Environment
from bench.harness import Row, Target, measure_pair, rate
from bench.workload import body_of, produce
from rmq.connector import (
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    MessageExt,
    PullConsumer,
    PushConsumer,
)
from rmq.connector.client import RmqClient
from rmq.connector.transport import Transport

QUEUES = 8
BODY_SIZE = 100
PRODUCE_BATCH = 256
POLL_BATCH = 32
TOPIC = "bench-sdk2"
STREAM = "bench-sdk2-stream"
_groups = itertools.count()


def sdk2_rows(env: Environment) -> list[Row]:
    """Both PushConsumers and the PullConsumer are fresh group members in the benchmark
    process reading `produce_messages` 100-byte messages from the first offset, timed from
    start() until every message was seen; XREAD reads the same count of entries from a stream
    pre-filled with XADD, COUNT 32 per call."""
    count = env.scale.produce_messages
    body = body_of(BODY_SIZE)
    with env.broker() as broker, env.redis() as redis_server, RmqClient(broker.address) as client:
        client.create_topic(TOPIC, queues=QUEUES)
        produce(client, TOPIC, count, body, PRODUCE_BATCH)
        redis_client = redis_server.client() if redis_server else None
        if redis_client is not None:
            rr.xadd(redis_client, STREAM, body, count)
        orderly, concurrent = measure_pair(lambda: push_consumer_rate(broker.address, count, orderly=True),
                                           lambda: push_consumer_rate(broker.address, count, orderly=False),
                                           env.scale.repeats)
        poll, xread = measure_pair(
            lambda: pull_consumer_rate(broker.address, count),
            None if redis_client is None else (lambda: xread_rate(redis_client, count)),
            env.scale.repeats)
        flight, pulls = measure_pair(lambda: pull_consumer_rate(broker.address, count, Transport.FLIGHT),
                                     lambda: pull_consumer_rate(broker.address, count, Transport.GRPC),
                                     env.scale.repeats)
    return [
        Row(f"PushConsumer orderly, no-op listener, {BODY_SIZE} B, {QUEUES} queues (pulls of 32, "
            "batches of 1)",
            "msg/s", orderly, "the same PushConsumer, concurrent", concurrent, Target(min_ratio=0.5)),
        Row(f"PullConsumer.poll, {BODY_SIZE} B, {QUEUES} queues, batches of {POLL_BATCH} (transport auto: "
            "the backlog through Flight)", "msg/s", poll,
            f"XREAD COUNT {POLL_BATCH} (one stream)", xread, Target(min_ratio=1.5), env.redis_missing),
        Row(f"SDK bulk read via Flight vs PullMessage: PullConsumer.poll, {BODY_SIZE} B, {QUEUES} queues, "
            f"batches of {POLL_BATCH}, transport flight", "msg/s", flight,
            f"the same, transport grpc (pulls of {POLL_BATCH})", pulls, Target(min_ratio=1.5)),
    ]


def push_consumer_rate(address: str, count: int, orderly: bool) -> float:
    """Messages/s of a fresh group's PushConsumer (RocketMQ defaults) reading `count` messages."""
    seen = [0]
    lock = threading.Lock()
    done = threading.Event()

    def saw(messages: Sequence[MessageExt]) -> None:
        with lock:
            seen[0] += len(messages)
            if seen[0] >= count:
                done.set()

    def orderly_listener(messages: Sequence[MessageExt], context: object) -> ConsumeOrderlyStatus:
        saw(messages)
        return ConsumeOrderlyStatus.SUCCESS

    def concurrent_listener(messages: Sequence[MessageExt], context: object) -> ConsumeConcurrentlyStatus:
        saw(messages)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(f"bench-sdk2-{next(_groups)}", address, consume_from="first")
    consumer.subscribe(TOPIC)
    consumer.register_message_listener(orderly_listener if orderly else concurrent_listener, orderly=orderly)
    start = time.perf_counter()
    consumer.start()
    try:
        if not done.wait(600):
            raise RuntimeError(f"the PushConsumer saw {seen[0]} of {count} messages")
        return count / (time.perf_counter() - start)
    finally:
        consumer.shutdown()


def pull_consumer_rate(address: str, count: int, transport: Transport = Transport.AUTO) -> float:
    """Messages/s of a fresh group's PullConsumer polling until it read `count` messages."""
    consumer = PullConsumer(f"bench-sdk2-pull-{next(_groups)}", address, consume_from="first",
                            pull_batch_size=POLL_BATCH, auto_commit=False, transport=transport)
    consumer.subscribe(TOPIC)
    start = time.perf_counter()
    consumer.start()
    try:
        seen = 0
        deadline = time.monotonic() + 600
        while seen < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the PullConsumer read {seen} of {count} messages")
            seen += len(consumer.poll(1.0))
        return count / (time.perf_counter() - start)
    finally:
        consumer.shutdown()


def xread_rate(client: redis.Redis, count: int) -> float:
    """Entries/s of XREAD COUNT 32 from the start of the pre-filled stream, on from the last id."""
    def read_all() -> None:
        last, seen = "0", 0
        while seen < count:
            answer = client.xread({STREAM: last}, count=POLL_BATCH)
            entries = answer[0][1] if answer else []
            if not entries:
                raise RuntimeError(f"XREAD stopped after {seen} of {count} entries")
            last = entries[-1][0]
            seen += len(entries)

    return rate(count, read_all)
