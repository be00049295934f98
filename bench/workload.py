"""Producing and pulling through the rmq client the way the benchmark rows need it."""

from __future__ import annotations

from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.spark.message_decoder import decode
from rmq.subscription import MessageSelector

GROUP = "bench-group"
PULL_BATCH = 1024


def body_of(size: int) -> bytes:
    return bytes(range(256)) * (size // 256) + bytes(size % 256)


def produce(
    client: RmqClient, topic: str, count: int, body: bytes, batch: int, queue_id: int | None = None
) -> None:
    """Send `count` messages in batches of `batch` (the last one may be smaller)."""
    full = [OutgoingMessage(body=body, queue_id=queue_id) for _ in range(batch)]
    for start in range(0, count, batch):
        client.send(topic, full[: min(batch, count - start)])


def single_queue(client: RmqClient, topic: str, queue_id: int = 0) -> MessageQueue:
    return next(mq for mq in client.query_route(topic).message_queues if mq.queue_id == queue_id)


def pull_range(
    client: RmqClient, mq: MessageQueue, start: int, end: int, with_decode: bool, batch: int = PULL_BATCH,
    selector: MessageSelector | None = None,
) -> int:
    """Pull [start, end) of one queue in batches (filtered by `selector` on the broker when
    given), decoding each into Arrow when asked; returns the number of pull requests."""
    offset, requests = start, 0
    while offset < end:
        result = client.pull(mq, offset, min(batch, end - offset), group=GROUP,
                             sub_expression=selector or "*")
        requests += 1
        if with_decode:
            decode(result.messages, mq.broker_name)
        if result.next_begin_offset <= offset:
            raise RuntimeError(f"pull of {mq} at {offset} did not advance ({result.pull_status})")
        offset = result.next_begin_offset
    return requests
