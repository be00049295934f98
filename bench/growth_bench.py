"""Section 14: how cost grows with the number of topics, of queues and of consumers in one group
(issue 29 item 5). Each row sets the cost at the large size against the same cost at a small size
measured in the same run, per unit where the cost is per unit, so a ratio near 1× is linear
growth and a large one is superlinear (bench/NOTES.md explains the curve)."""

from __future__ import annotations

import itertools
import os
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from bench.environment import Environment
from bench.harness import Row, Stats, Target, call_latencies_ms, measure_pair, percentile
from bench.sdk_bench import producer_send
from bench.workload import body_of
from rmq.connector import Message, Producer, PullConsumer, PushConsumer
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.message_listener import ConsumeConcurrentlyStatus
from testing.processes import ServerProcess

BODY_SIZE = 100
TOPIC_QUEUES = 8                 # queues of each topic of the topics rows
CREATE_THREADS = 4               # concurrent CreateTopic calls
ROUTE_SAMPLES = 200
QUEUE_COUNTS = (8, 1000)         # the queues rows: one topic of each size
PULL_BATCH = 32
PRODUCE_BATCH = 256
GROUP_QUEUES = 200               # the consumers rows: one topic of this many queues
BALANCE_TIMEOUT_S = 300.0
NOT_SUPERLINEAR = Target(max_ratio=2.0)
_names = itertools.count()


@dataclass(frozen=True)
class Sizes:
    topics: tuple[int, int]       # (small, large) topic counts
    consumers: tuple[int, int]    # (small, large) consumers of one group


def sizes_for(env: Environment) -> Sizes:
    quick = env.scale.produce_messages < 100_000
    return Sizes(topics=(100, 1000) if quick else (1000, 10_000), consumers=(4, 16) if quick else (10, 100))


def growth_rows(env: Environment) -> list[Row]:
    """One broker per group of rows. Topics: topics of 8 queues created through CreateTopic
    (4 calls at a time) up to the small count, then up to the large count: the broker's RSS
    growth per topic and the create time per topic of each step, and the p50 of a route lookup
    (QueryRoute of a random topic, 200 calls) at each count. Queues: Producer.send of 256-message
    lists and a PullConsumer reading 32 messages per queue (pulls of 32) on a topic of 1,000
    queues against one of 8 queues. Consumers: PushConsumers of one group (one consume thread
    each) started one after the other on a topic of 200 queues, timed until
    every queue is owned by exactly one of them, large count against small."""
    sizes = sizes_for(env)
    return [*topic_rows(env, sizes.topics), *queue_rows(env), *consumer_rows(env, sizes.consumers)]


# ---------------------------------------------------------------- topics


def topic_rows(env: Environment, counts: tuple[int, int]) -> list[Row]:
    small, large = counts
    with env.broker("broker-topics") as broker, RmqClient(broker.address) as client:
        base_rss = rss_kib(broker)
        start = time.perf_counter()
        create_topics(client, 0, small)
        small_create_ms = (time.perf_counter() - start) * 1000 / small
        small_rss = rss_kib(broker)
        small_route = route_lookup_ms(client, small)
        start = time.perf_counter()
        create_topics(client, small, large)
        large_create_ms = (time.perf_counter() - start) * 1000 / (large - small)
        large_rss = rss_kib(broker)
        large_route = route_lookup_ms(client, large)
    return [
        Row(f"Broker RSS growth per topic ({TOPIC_QUEUES} queues), {small:,} → {large:,} topics", "KiB",
            one((large_rss - small_rss) / (large - small)), f"the same, 0 → {small:,} topics",
            one((small_rss - base_rss) / small), NOT_SUPERLINEAR),
        Row(f"CreateTopic time per topic, {small:,} → {large:,} topics", "ms", one(large_create_ms),
            f"the same, 0 → {small:,} topics", one(small_create_ms), NOT_SUPERLINEAR),
        Row(f"Route lookup (QueryRoute) p50 at {large:,} topics", "ms", large_route,
            f"the same at {small:,} topics", small_route, NOT_SUPERLINEAR),
    ]


def create_topics(client: RmqClient, first: int, end: int) -> None:
    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        list(pool.map(lambda i: client.create_topic(f"growth-{i}", queues=TOPIC_QUEUES), range(first, end)))


def route_lookup_ms(client: RmqClient, topics: int) -> Stats:
    names = (f"growth-{(i * 7919) % topics}" for i in itertools.count())
    samples = call_latencies_ms(lambda: client.query_route(next(names)), ROUTE_SAMPLES)
    return Stats(percentile(samples, 0.5), min(samples), percentile(samples, 0.99), 1)


def rss_kib(server: ServerProcess) -> float:
    """The server process's resident set (VmRSS) in KiB."""
    assert server.process is not None
    with open(f"/proc/{server.process.pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return float(line.split()[1])


def one(value: float) -> Stats:
    return Stats(value, value, value, 1)


# ---------------------------------------------------------------- queues


def queue_rows(env: Environment) -> list[Row]:
    few, many = QUEUE_COUNTS
    count = many * PULL_BATCH            # every queue of the large topic holds one full pull
    body = body_of(BODY_SIZE)
    with env.broker("broker-queues") as broker, RmqClient(broker.address) as client:
        topics = {queues: f"growth-queues-{queues}" for queues in QUEUE_COUNTS}
        for queues, topic in topics.items():
            client.create_topic(topic, queues=queues)
            fill_evenly(client, topic, queues, count, body)
        with Producer(broker.address) as producer:
            def produce(queues: int) -> Callable[[], float]:
                messages = [Message(topics[queues], body) for _ in range(PRODUCE_BATCH)]
                return lambda: timed_rate(count, lambda: producer_send(producer, messages, count))
            produce_many, produce_few = measure_pair(produce(many), produce(few), env.scale.repeats)
        pull_many, pull_few = measure_pair(lambda: pull_rate(broker.address, topics[many], count),
                                           lambda: pull_rate(broker.address, topics[few], count),
                                           env.scale.repeats)
    return [
        Row(f"Producer.send, {BODY_SIZE} B lists of {PRODUCE_BATCH}, topic of {many:,} queues", "msg/s",
            produce_many, f"the same, topic of {few} queues", produce_few, Target(min_ratio=0.5)),
        Row(f"PullConsumer.poll (pulls of {PULL_BATCH}), {count:,} messages in {many:,} queues, from "
            "start()", "msg/s", pull_many, f"the same in {few} queues", pull_few, Target(min_ratio=0.5)),
    ]


def fill_evenly(client: RmqClient, topic: str, queues: int, count: int, body: bytes) -> None:
    """`count` messages spread evenly over the topic's queues (explicit queue ids)."""
    per_queue = count // queues
    for queue_id in range(queues):
        for start in range(0, per_queue, PRODUCE_BATCH):
            size = min(PRODUCE_BATCH, per_queue - start)
            client.send(topic, [OutgoingMessage(body=body, queue_id=queue_id)] * size)


def timed_rate(count: int, run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return count / (time.perf_counter() - start)


def pull_rate(address: str, topic: str, count: int) -> float:
    """Messages/s of a fresh group's PullConsumer reading `count` messages from start()."""
    consumer = PullConsumer(f"growth-pull-{next(_names)}", address, consume_from="first",
                            pull_batch_size=PULL_BATCH, auto_commit=False)
    consumer.subscribe(topic)
    start = time.perf_counter()
    consumer.start()
    try:
        seen, deadline = 0, time.monotonic() + BALANCE_TIMEOUT_S
        while seen < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the PullConsumer read {seen} of {count} messages of {topic}")
            seen += len(consumer.poll(1.0))
        return count / (time.perf_counter() - start)
    finally:
        consumer.shutdown()


# ---------------------------------------------------------------- consumers of one group


def consumer_rows(env: Environment, counts: tuple[int, int]) -> list[Row]:
    small, large = counts
    with env.broker("broker-group") as broker, RmqClient(broker.address) as client:
        topic = "growth-group"
        client.create_topic(topic, queues=GROUP_QUEUES)
        large_s, small_s = measure_pair(lambda: balance_seconds(broker.address, topic, large),
                                        lambda: balance_seconds(broker.address, topic, small), 1)
    return [Row(f"Rebalance: {large} PushConsumers of one group ({GROUP_QUEUES} queues) started one after "
                "the other, until every queue has one owner, per consumer", "s", large_s,
                f"the same with {small}", small_s, NOT_SUPERLINEAR)]


def balance_seconds(address: str, topic: str, consumers: int) -> float:
    """Seconds per member from the first start() until every queue of `topic` is owned by
    exactly one of `consumers` fresh members of a new group."""
    group = f"growth-group-{next(_names)}"
    members: list[PushConsumer] = []
    start = time.perf_counter()
    try:
        for index in range(consumers):
            consumer = PushConsumer(group, address, consume_thread_max=1,
                                    instance_name=f"{os.getpid()}-{group}-{index}")
            consumer.subscribe(topic)
            consumer.register_message_listener(no_op)
            consumer.start()
            members.append(consumer)
        deadline = time.monotonic() + BALANCE_TIMEOUT_S
        while not balanced(members, topic, GROUP_QUEUES):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{consumers} consumers of {group} did not balance in time")
            time.sleep(0.01)
        return (time.perf_counter() - start) / consumers
    finally:
        for consumer in members:
            consumer.shutdown()


def no_op(messages: object, context: object) -> ConsumeConcurrentlyStatus:
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def balanced(members: list[PushConsumer], topic: str, queues: int) -> bool:
    """Every queue of `topic` owned by exactly one member, and every member owns its avg share
    (the group's retry topic aside)."""
    owners: Counter[MessageQueue] = Counter()
    for member in members:
        owned = [mq for mq in member.process_queues() if mq.topic == topic]
        if len(owned) not in (queues // len(members), -(-queues // len(members))):
            return False
        owners.update(owned)
    return len(owners) == queues and set(owners.values()) == {1}
