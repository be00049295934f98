"""Broker-side filtering: one queue read from its first to its last offset through a filter that
matches 10 % of the messages, SQL92 on properties (`region = 'eu'`, evaluated on each stored
record) against a tag filter (`Hit`, matched on ConsumeQueue hash codes), in the same run."""

from __future__ import annotations

from bench.environment import Environment
from bench.harness import Row, measure_pair, rate
from bench.workload import body_of, pull_range, single_queue
from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.subscription import MessageSelector

TOPIC = "bench-filter"
MATCH_EVERY = 10     # one message in ten matches both filters
BATCH = 1024


def filter_rows(env: Environment) -> list[Row]:
    count, body = env.scale.pull_messages, body_of(100)
    hit = OutgoingMessage(body, tags="Hit", properties={"region": "eu", "amount": "150"}, queue_id=0)
    miss = OutgoingMessage(body, tags="Miss", properties={"region": "us", "amount": "150"}, queue_id=0)
    batch = [hit if n % MATCH_EVERY == 0 else miss for n in range(BATCH)]
    with env.broker() as broker, RmqClient(broker.address) as client:
        client.create_topic(TOPIC, queues=1)
        for start in range(0, count, BATCH):
            client.send(TOPIC, batch[: min(BATCH, count - start)])
        mq = single_queue(client, TOPIC)

        def scan(selector: MessageSelector) -> float:
            return rate(count, lambda: pull_range(client, mq, 0, count, True, selector=selector))

        sql, tags = measure_pair(lambda: scan(MessageSelector.by_sql("region = 'eu'")),
                                 lambda: scan(MessageSelector.by_tag("Hit")), env.scale.repeats)
    return [Row(f"pull through a filter matching 10 %, SQL92 on properties, {count:,} messages scanned",
                "scanned msg/s", sql, "tag filter matching 10 %", tags,
                note="the same messages match both; rate = messages scanned (matched and skipped) "
                     "per second")]
