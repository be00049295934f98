"""The sender processes of section 16 (bench/one_message_bench.py): what each spawned process
runs. Kept apart and light so that a spawned process imports only its own client (rmq's SDK,
redis-py or nats-py; each import is inside its function): the section starts four processes per
run of many senders, and importing the whole benchmark (pyarrow, Spark's decoder, every client)
in each cost about 1 s of CPU per process, more than many of the timed runs themselves.

Each `*_senders` function sets up untimed (a connection, a warm-up request) and returns the
timed part, as bench.parallel.parallel_measure expects."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

TOPIC = "bench-one"
REDIS_KEY = "bench-one"
NATS_SUBJECT = "bench.one"


def rmq_senders(address: str, mode: str, threads: int, per_thread: int, body: bytes) -> Callable[[], None]:
    """One process's senders: `threads` threads sharing one Producer (started, its route and
    connection made before the clock starts), each sending `per_thread` messages one per call
    (`send`), or keeping them in flight (`send_async`). The process's end closes it."""
    from rmq.connector import Message, Producer

    producer = Producer(address)
    producer.start()
    producer.send(Message(TOPIC, body))

    def sender() -> None:
        if mode == "send":
            for _ in range(per_thread):
                producer.send(Message(TOPIC, body))
            return
        futures: list[Future[Any]] = [producer.send_async(Message(TOPIC, body)) for _ in range(per_thread)]
        for future in futures:
            future.result()

    return functools.partial(on_threads, threads, sender)


def redis_senders(port: int, threads: int, per_thread: int, body: bytes) -> Callable[[], None]:
    """One process's senders: one redis-py client (its connection pool), one XADD per call."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, max_connections=threads)
    client.ping()

    def sender() -> None:
        for _ in range(per_thread):
            client.xadd(REDIS_KEY, {"body": body})

    return functools.partial(on_threads, threads, sender)


def nats_senders(url: str, tasks: int, per_task: int, body: bytes) -> Callable[[], None]:
    """One process's senders: one NATS connection (made before the clock starts), `tasks`
    coroutines each awaiting every JetStream publish (its ack) before the next."""
    import nats

    from rmq import event_loop

    loop = event_loop.loop_factory()()
    connection = loop.run_until_complete(nats.connect(url))
    jetstream = connection.jetstream()

    async def sender() -> None:
        for _ in range(per_task):
            await jetstream.publish(NATS_SUBJECT, body)

    async def senders() -> None:
        await asyncio.gather(*(sender() for _ in range(tasks)))

    return functools.partial(loop.run_until_complete, senders())


def on_threads(count: int, work: Callable[[], None]) -> None:
    """`work` on `count` threads at once (the calling thread is one of them); re-raises a failure."""
    failures: list[BaseException] = []

    def guarded() -> None:
        try:
            work()
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller
            failures.append(error)

    others = [threading.Thread(target=guarded) for _ in range(count - 1)]
    for thread in others:
        thread.start()
    guarded()
    for thread in others:
        thread.join()
    if failures:
        raise failures[0]
