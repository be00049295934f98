"""Section 11: the official RocketMQ 5 Python client (`rocketmq-python-client`) against rmq's
`apache.rocketmq.v2` service, beside rmq's own SDK on the same broker: produce rate (the
official Producer sends one message per synchronous call, so rmq's Producer does the same
here) and consume rate (the official PushConsumer pops with receive / ack; rmq's PushConsumer
pulls with RocketMQ's defaults)."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from bench.environment import Environment
from bench.harness import Row, measure_pair, not_measured, rate
from bench.sdk_bench import push_consumer_rate
from bench.workload import body_of, produce
from rmq.connector import Message, Producer
from rmq.connector.client import RmqClient

QUEUES = 8
BODY_SIZE = 100
PRODUCE_BATCH = 256
SCALE_DIVISOR = 50        # the official client sends one message per call (~500/s): fewer messages
CONSUME_TOPIC = "bench-push"   # the topic sdk_bench.push_consumer_rate reads
_groups = itertools.count()


def rocketmq_v2_rows(env: Environment) -> list[Row]:
    """Official Producer.send vs rmq Producer.send, one 100-byte message per call, one thread;
    official PushConsumer (no-op listener, fresh group) vs rmq PushConsumer draining a topic of
    8 queues pre-filled with 100-byte messages, timed from start until the listener saw all."""
    try:
        import rocketmq
    except ImportError:
        return [not_measured("official RocketMQ 5 Python client", "rocketmq-python-client is not installed")]
    count = max(env.scale.produce_messages // SCALE_DIVISOR, 100)
    body = body_of(BODY_SIZE)
    with env.broker() as broker, RmqClient(broker.address) as client:
        client.create_topic("bench-v2-produce", queues=QUEUES)
        if CONSUME_TOPIC not in {config.topic_name for config in client.list_topics()}:
            client.create_topic(CONSUME_TOPIC, queues=QUEUES)   # else section 9 filled it on this broker
            produce(client, CONSUME_TOPIC, count, body, PRODUCE_BATCH)
        config = rocketmq.ClientConfiguration(broker.address, rocketmq.Credentials())
        official = rocketmq.Producer(config, ("bench-v2-produce",))
        official.startup()
        try:
            with Producer(broker.address) as own:
                sent = measure_pair(
                    lambda: rate(count, lambda: official_send(rocketmq, official, body, count)),
                    lambda: rate(count, lambda: own_send(own, body, count)),
                    env.scale.repeats)
        finally:
            official.shutdown()
        consumed = measure_pair(lambda: official_push_rate(rocketmq, config, count),
                                lambda: push_consumer_rate(broker.address, count, 32, 1),
                                env.scale.repeats)
    return [
        Row(f"official Python Producer.send, {BODY_SIZE} B, 1 message per call", "msg/s", sent[0],
            "rmq Producer.send, 1 Message per call", sent[1]),
        Row(f"official Python PushConsumer (pop: receive + ack), no-op listener, {QUEUES} queues", "msg/s",
            consumed[0], "rmq PushConsumer, RocketMQ defaults (pulls of 32)", consumed[1]),
    ]


def official_send(rocketmq: Any, producer: Any, body: bytes, count: int,
                  topic: str = "bench-v2-produce") -> None:
    """`count` sends of the official RocketMQ 5 client, one message each."""
    for _ in range(count):
        message = rocketmq.Message()
        message.topic, message.body = topic, body
        producer.send(message)


def own_send(producer: Producer, body: bytes, count: int) -> None:
    for _ in range(count):
        producer.send(Message("bench-v2-produce", body))


def official_push_rate(rocketmq: Any, config: Any, count: int) -> float:
    """Messages/s of a fresh group's official PushConsumer reading `count` pre-filled messages."""
    seen = [0]
    lock = threading.Lock()
    done = threading.Event()

    class Listener(rocketmq.MessageListener):
        def consume(self, message: Any) -> Any:
            with lock:
                seen[0] += 1
                if seen[0] >= count:
                    done.set()
            return rocketmq.ConsumeResult.SUCCESS

    consumer = rocketmq.PushConsumer(config, f"bench-v2-push-{next(_groups)}", Listener(),
                                     {CONSUME_TOPIC: rocketmq.FilterExpression("*")})
    start = time.perf_counter()
    consumer.startup()
    try:
        if not done.wait(600):
            raise RuntimeError(f"the official PushConsumer saw {seen[0]} of {count} messages")
        return count / (time.perf_counter() - start)
    finally:
        consumer.shutdown()
