"""Traffic for the scenarios: producer threads that remember exactly what the broker
acknowledged (queue id, queue offset, body), and a full read of a topic back through the
client, so a scenario can compare the two."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.message_listener import ConsumeConcurrentlyStatus
from rmq.connector.push_consumer import PushConsumer
from rmq.connector.spark.message_decoder import decode


@dataclass(frozen=True, order=True)
class StoredMessage:
    """Where a message lives: its queue, its ConsumeQueue offset and its (unique) body."""

    queue_id: int
    queue_offset: int
    body: bytes


@dataclass
class Acknowledged:
    message: StoredMessage
    at: float                  # time.monotonic() when the acknowledgement arrived


@dataclass
class ProducerLedger:
    """What producer threads sent and what came back acknowledged."""

    sent: int = 0
    acknowledged: list[Acknowledged] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acknowledged_messages(self) -> list[StoredMessage]:
        return [ack.message for ack in self.acknowledged]


_PRODUCER_SETS = itertools.count()


class Producers:
    """`threads` threads, each sending batches of `batch` unique bodies to `topic` until
    stopped (or `max_batches` each), `pause` seconds apart. A failed send (broker down,
    refused) is counted as sent but not acknowledged and the thread keeps trying, like a
    retrying producer."""

    def __init__(self, endpoints: str, topic: str, threads: int = 4, batch: int = 32,
                 body_size: int = 64, max_batches: int | None = None, pause: float = 0.0,
                 timeout: float = 10.0) -> None:
        self.endpoints = endpoints
        self.topic = topic
        self.batch = batch
        self.body_size = body_size
        self.max_batches = max_batches
        self.pause = pause
        self.timeout = timeout
        self.ledger = ProducerLedger()
        self._set = next(_PRODUCER_SETS)      # bodies stay unique across Producers instances
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(threads)]

    def __enter__(self) -> Producers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> ProducerLedger:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
        return self.ledger

    def wait(self) -> ProducerLedger:
        """Join threads that were started with `max_batches`."""
        for thread in self._threads:
            thread.join(300)
        return self.ledger

    def _bodies(self, producer: int, batch_number: int) -> list[bytes]:
        return [f"s{self._set}-p{producer}-b{batch_number}-m{i}:".encode().ljust(self.body_size, b".")
                for i in range(self.batch)]

    def _run(self, producer: int) -> None:
        client = RmqClient(self.endpoints, timeout=self.timeout)
        try:
            batch_number = 0
            while not self._stop.is_set() and (self.max_batches is None or batch_number < self.max_batches):
                bodies = self._bodies(producer, batch_number)
                batch_number += 1
                started = time.monotonic()
                try:
                    result = client.send(self.topic, [OutgoingMessage(body) for body in bodies])
                except Exception as error:  # noqa: BLE001 - every failure is "not acknowledged"
                    with self.ledger.lock:
                        self.ledger.sent += len(bodies)
                        self.ledger.errors.append(f"{type(error).__name__}: {error}")
                    time.sleep(0.05)   # a producer's pause before it retries
                    continue
                now = time.monotonic()
                placed = zip(result.queue_ids, result.queue_offsets, bodies, strict=True)
                acknowledged = [Acknowledged(StoredMessage(q, o, b), now) for q, o, b in placed]
                with self.ledger.lock:
                    self.ledger.sent += len(bodies)
                    self.ledger.acknowledged += acknowledged
                    self.ledger.latencies_ms.append((now - started) * 1000)
                self._stop.wait(self.pause)
        finally:
            client.close()


def read_queue(client: RmqClient, mq: MessageQueue, start: int, end: int, group: str,
               batch: int = 512, stall_timeout: float = 10.0) -> Iterator[StoredMessage]:
    """Every message of `mq` in [start, end), pulled in order. A pull that does not advance
    (a message being removed by retention) is retried for up to `stall_timeout` seconds."""
    offset = start
    stalled_since: float | None = None
    while offset < end:
        result = client.pull(mq, offset, batch, group=group)
        if result.messages.count:
            columns = decode(result.messages, mq.broker_name).to_pydict()
            yield from (StoredMessage(q, o, b) for q, o, b in
                        zip(columns["queue_id"], columns["queue_offset"], columns["body"], strict=True))
        if result.next_begin_offset > offset:
            offset, stalled_since = result.next_begin_offset, None
            continue
        stalled_since = stalled_since or time.monotonic()
        if time.monotonic() - stalled_since > stall_timeout:
            raise AssertionError(f"pull of {mq} at {offset} made no progress for {stall_timeout}s: "
                                 f"{result.pull_status.name} ({result.store_status.name}), queue holds "
                                 f"[{result.min_offset}, {result.max_offset})")
        time.sleep(0.1)


def read_topic(client: RmqClient, topic: str, group: str = "reliability-reader") -> list[StoredMessage]:
    """Every message of every queue of `topic`, from each queue's min to max offset."""
    messages: list[StoredMessage] = []
    for mq, offsets in sorted(client.topic_offsets(topic).items(), key=lambda item: item[0].queue_id):
        messages += read_queue(client, mq, offsets.min_offset, offsets.max_offset, group)
    return messages


def gaps_and_repeats(messages: list[StoredMessage]) -> tuple[list[str], list[str]]:
    """Per queue, offsets missing from 0 to the last offset read, and offsets read twice."""
    by_queue: dict[int, list[int]] = {}
    for message in messages:
        by_queue.setdefault(message.queue_id, []).append(message.queue_offset)
    gaps, repeats = [], []
    for queue_id, offsets in sorted(by_queue.items()):
        seen = set(offsets)
        if len(seen) != len(offsets):
            repeats.append(f"queue {queue_id}: {len(offsets) - len(seen)} offsets repeated")
        missing = set(range(max(seen) + 1)) - seen
        if missing:
            gaps.append(f"queue {queue_id}: {len(missing)} offsets missing, first {min(missing)}")
    return gaps, repeats


class PushGroup:
    """`consumers` PushConsumers of one group (the product's RebalanceService shares the queues,
    long-polling pulls, offsets committed to the broker), each recording what its listener got
    and when the group last received a message."""

    def __init__(self, endpoints: str, topic: str, group: str, consumers: int = 2,
                 pull_batch: int = 256) -> None:
        self.group = group
        self.topic = topic
        self.read: list[StoredMessage] = []
        self.last_read_at = 0.0
        self._lock = threading.Lock()
        self.consumers = [PushConsumer(group, endpoints, consume_from="first", instance_name=f"{group}-{n}",
                                       pull_batch_size=pull_batch, consume_message_batch_max_size=pull_batch,
                                       consume_thread_max=2, rebalance_interval_s=1.0)
                          for n in range(consumers)]
        for consumer in self.consumers:
            consumer.subscribe(topic)
            consumer.register_message_listener(self._listen)

    def _listen(self, messages: list, context: object) -> ConsumeConcurrentlyStatus:
        batch = [StoredMessage(m.queue_id, m.queue_offset, m.body) for m in messages]
        with self._lock:
            self.read += batch
            self.last_read_at = time.monotonic()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def __enter__(self) -> PushGroup:
        for consumer in self.consumers:
            consumer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for consumer in self.consumers:
            consumer.shutdown()

    def owners(self) -> list[set[MessageQueue]]:
        """The topic's queues each consumer holds now (its retry topic's queue aside)."""
        return [{mq for mq in consumer.process_queues() if mq.topic == self.topic}
                for consumer in self.consumers]

    def wait_balanced(self, queues: int, timeout: float = 60) -> None:
        """Until the rebalance gave every queue to exactly one consumer, none idle."""
        deadline = time.monotonic() + timeout
        while True:
            owners = self.owners()
            held = [mq for owned in owners for mq in owned]
            if len(held) == len(set(held)) == queues and all(owners):
                return
            assert time.monotonic() < deadline, f"{self.group} not balanced: {owners}"
            time.sleep(0.1)

    def wait_read(self, count: int, timeout: float = 120) -> list[StoredMessage]:
        """Until the group received `count` distinct messages; returns everything received."""
        deadline = time.monotonic() + timeout
        while len({m.body for m in self.read}) < count:
            assert time.monotonic() < deadline, f"{self.group} read {len(self.read)} of {count}"
            time.sleep(0.05)
        return list(self.read)
