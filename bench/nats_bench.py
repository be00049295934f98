"""Row 12: rmq against NATS JetStream (file storage, nats-py), the second reference beside Redis:
produce with acks, a durable consumer committing what it read, and the wake of a parked read by
one write. rmq runs one broker process with ASYNC flush; JetStream stores to files and syncs on
its own schedule, so both acknowledge before the disk has the bytes."""

from __future__ import annotations

from bench import nats_reference as nr
from bench.environment import Environment
from bench.harness import Row, Stats, measure_pair, percentile, rate, wake_latency_ms
from bench.workload import GROUP, body_of, produce, single_queue
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient

PRODUCE_BATCH = 256
PULL_BATCH = 256
LONG_POLL_SUSPEND_MS = 5000
SETTLE_S = 0.02


def nats_rows(env: Environment) -> list[Row]:
    # JetStream takes ~18K msg/s and its durable run publishes its messages first (untimed): half the
    # scale's messages per run keeps each reference run near 3 s (issue 41, fourth stop: was all of them)
    count = env.scale.produce_messages // 2
    samples = env.scale.latency_samples
    body = body_of(100)
    with env.broker() as broker, env.nats() as server, RmqClient(broker.address) as client:
        client.create_topic("bench-nats", queues=1)
        mq = single_queue(client, "bench-nats")
        note = env.nats_missing or f"nats-server {server.version() if server else ''}, JetStream file storage"
        produced, published = measure_pair(
            lambda: rate(count, lambda: produce(client, "bench-nats", count, body, PRODUCE_BATCH, 0)),
            (lambda: nr.publish_rate(server, body, count)) if server else None, env.scale.repeats)
        consumed, fetched = measure_pair(
            lambda: _consume_rate(client, mq, count),
            (lambda: nr.durable_pull_rate(server, body, count)) if server else None, env.scale.repeats)
        woken = _wake_latencies(client, broker.address, samples, body)
        nats_woken = nr.wake_latencies(server, samples, body, SETTLE_S) if server else None
    rows = [
        Row(f"produce with acks, 100 B, batch {PRODUCE_BATCH}", "msg/s", produced,
            f"JetStream publish, {nr.PUBLISH_WINDOW} in flight", published, note=note),
        Row(f"durable consumer, 100 B: pull {PULL_BATCH} + commit", "msg/s", consumed,
            f"JetStream durable fetch {nr.FETCH_BATCH} + ack", fetched, note=note),
    ]
    for name, fraction in (("p50", 0.5), ("p99", 0.99)):
        rows.append(Row(f"wake {name}: write → parked read returns", "ms",
                        Stats.of([percentile(woken, fraction)]), f"JetStream fetch(1) wake {name}",
                        Stats.of([percentile(nats_woken, fraction)]) if nats_woken else None,
                        note=f"{samples} wakes"))
    return rows


def _consume_rate(client: RmqClient, mq: MessageQueue, count: int) -> float:
    """Messages/s reading the last `count` messages of the queue PULL_BATCH at a time, each pull
    committing the offset the previous one reached (the PushConsumer's commit rule)."""
    end = client.queue_offsets(mq).max_offset
    start = end - count

    def read() -> None:
        offset = start
        while offset < end:
            result = client.pull(mq, offset, min(PULL_BATCH, end - offset), group=GROUP, commit_offset=offset)
            offset = result.next_begin_offset
        client.update_consumer_offsets(GROUP, {mq: offset})
    return rate(count, read)


def _wake_latencies(client: RmqClient, address: str, samples: int, body: bytes) -> list[float]:
    """Like row 4: a pull held by long polling, woken by one send from a second client."""
    with RmqClient(address) as producer:
        client.create_topic("bench-nats-wake", queues=1)
        mq = single_queue(client, "bench-nats-wake")
        offset = [client.queue_offsets(mq).max_offset]

        def held_pull() -> None:
            result = client.pull(mq, offset[0], 32, group=GROUP, suspend_timeout_ms=LONG_POLL_SUSPEND_MS)
            offset[0] = result.next_begin_offset

        message = [OutgoingMessage(body=body, queue_id=0)]
        return [wake_latency_ms(held_pull, lambda: producer.send("bench-nats-wake", message), SETTLE_S)
                for _ in range(samples)]
