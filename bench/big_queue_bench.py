"""Row 6 (executor memory) and row 7 (recovery): one broker whose store holds a large range
of 1 KiB messages in one queue, filled once per run and shared by both sections."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from bench.environment import REPO_ROOT, Environment
from bench.harness import Row, Stats, Target, measure_pair
from bench.workload import GROUP, body_of, produce, single_queue
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient, RmqError

BROKER = "broker-big"
TOPIC = "bench-big"
BODY_SIZE = 1024
FILL_BATCH = 1024
RANGE_FRACTIONS = (8, 1)   # read 1/8 of the range, then all of it: the peak must not grow with it
READS = 2                  # subprocess reads per range
BOUNDED = Target(max_ratio=2.0)


@dataclass(frozen=True)
class BigQueue:
    mq: MessageQueue
    messages: int


def big_queue(env: Environment, endpoints: str) -> BigQueue:
    """The filled queue, produced on first use (the store outlives the broker process)."""
    with RmqClient(endpoints) as client:
        if TOPIC not in {topic.topic_name for topic in client.list_topics()}:
            client.create_topic(TOPIC, queues=1)
            produce(client, TOPIC, env.scale.big_range_bytes // BODY_SIZE, body_of(BODY_SIZE), FILL_BATCH,
                    queue_id=0)
        mq = single_queue(client, TOPIC)
        return BigQueue(mq, client.topic_offsets(TOPIC)[mq].max_offset)


def memory_rows(env: Environment) -> list[Row]:
    """The Spark partition reader (`rmq.connector.spark.partition_reader.read_queue_range`, what an
    executor task runs) reads offsets [0, end) of one queue of 1 KiB messages in a fresh
    subprocess; the figure is the growth of its peak RSS (kernel high-water mark VmHWM, reset
    after the imports; see `bench/partition_reader_peak.py` for why not `getrusage`) over the
    RSS before reading, two reads per range. Read 1/8 of the range, then all of it: a reader
    bounded by its batch size (default pullBatchSize; a pull answer is at most the broker's
    default_pull_max_bytes, 8 MiB) grows alike for both, so the ratio of the two must stay ≤ 2."""
    with env.broker(BROKER) as broker:
        queue = big_queue(env, broker.address)
        part, whole = (_reader_growth_row(broker.address, queue, queue.messages // fraction)
                       for fraction in RANGE_FRACTIONS)
    # Bounded: 8 times the range must not take much more memory than the eighth did.
    whole.reference_name, whole.reference, whole.target = "same, 1/8 of the range", part.value, BOUNDED
    if env.scale.big_range_bytes < 1 << 30:
        whole.note += f"; range scaled down to {_mib(env.scale.big_range_bytes)} for this run's budget"
    return [part, whole]


def _reader_growth_row(endpoints: str, queue: BigQueue, end: int) -> Row:
    runs = [_reader_rss_mib(endpoints, queue.mq, end) for _ in range(READS)]
    growth = Stats.of([peak - baseline for baseline, peak in runs])
    note = (f"peak RSS {max(peak for _, peak in runs):.0f} MiB, of which "
            f"{min(baseline for baseline, _ in runs):.0f} MiB before the first pull (imports)")
    return Row(f"peak RSS growth reading {end:,} × 1 KiB messages ({_mib(end * BODY_SIZE)})", "MiB", growth,
               note=note)


def _reader_rss_mib(endpoints: str, mq: MessageQueue, end: int) -> tuple[float, float]:
    """(peak RSS before the first pull, peak RSS after reading [0, end)) in MiB."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.partition_reader_peak", endpoints, mq.topic, mq.broker_name,
         str(mq.queue_id), str(end)],
        capture_output=True, text=True, check=False, timeout=600, cwd=REPO_ROOT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"partition reader subprocess failed: {done.stderr.strip()[-2000:]}")
    result = json.loads(done.stdout)
    if result["rows"] != end:
        raise RuntimeError(f"partition reader read {result['rows']} rows, expected {end}")
    return result["baseline_kib"] / 1024, result["peak_kib"] / 1024


def recovery_rows(env: Environment) -> list[Row]:
    """Time from starting `rmq broker` on the store to its first answer to ListBrokers, for a
    broker stopped while producers send into it (LOAD_TOPIC, 4 threads, 64 × 1 KiB batches,
    ASYNC flush), after `kill -9` under that load (abnormal recovery: abort file present, the
    CommitLog re-checked from the checkpoint, dirty pages of the last flush interval included)
    against after a graceful stop under the same load (normal recovery), alternately. After every
    restart the big queue still holds every message and the loaded topic every acknowledged one."""
    with env.broker(BROKER) as broker:
        queue = big_queue(env, broker.address)
        commit_log = queue.messages * _record_size(broker.address, queue.mq)
        with RmqClient(broker.address) as client:
            if LOAD_TOPIC not in {topic.topic_name for topic in client.list_topics()}:
                client.create_topic(LOAD_TOPIC, queues=4)

        acknowledged = [0]     # load messages acknowledged over all runs (the topic only grows)

        def restart(kill: bool) -> float:
            with _Load(broker.address) as load:
                load.wait_acknowledged(LOAD_WARMUP_MESSAGES)
                broker.kill() if kill else broker.stop()
            start = time.perf_counter()
            broker.start()
            seconds = time.perf_counter() - start
            acknowledged[0] += load.acknowledged
            _check_recovered(broker.address, queue, acknowledged[0])
            return seconds

        abnormal, normal = measure_pair(lambda: restart(kill=True), lambda: restart(kill=False),
                                        env.scale.repeats)
    return [Row(f"restart to ready after kill -9 under load, CommitLog of {_mib(commit_log)}+", "s", abnormal,
                "restart after graceful stop under the same load", normal,
                note=f"{queue.messages:,} messages of 1 KiB in the big queue; producers sending at the "
                     "stop; every restart recovered every acknowledged message")]


LOAD_TOPIC = "bench-recovery-load"
LOAD_WARMUP_MESSAGES = 4 * 64 * 8      # acknowledged before the stop, so the load is in full swing


class _Load:
    """Producer threads sending 1 KiB messages to LOAD_TOPIC until the broker goes away;
    `acknowledged` counts what the broker acknowledged (failed sends end the thread)."""

    def __init__(self, endpoints: str, threads: int = 4, batch: int = 64) -> None:
        self.acknowledged = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(endpoints, batch), daemon=True)
                         for _ in range(threads)]

    def __enter__(self) -> _Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def wait_acknowledged(self, count: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.acknowledged < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"load producers acknowledged only {self.acknowledged} of {count}")
            time.sleep(0.01)

    def _run(self, endpoints: str, batch: int) -> None:
        messages = [OutgoingMessage(body_of(BODY_SIZE)) for _ in range(batch)]
        with RmqClient(endpoints, timeout=5) as client:
            while not self._stop.is_set():
                try:
                    client.send(LOAD_TOPIC, messages)
                except RmqError:
                    return                  # the broker was stopped or killed
                with self._lock:
                    self.acknowledged += batch


def _check_recovered(endpoints: str, queue: BigQueue, acknowledged: int) -> None:
    """The big queue is whole and the loaded topic holds at least the `acknowledged` messages."""
    with RmqClient(endpoints) as client:
        recovered = client.topic_offsets(TOPIC)[queue.mq].max_offset
        loaded = sum(o.max_offset for o in client.topic_offsets(LOAD_TOPIC).values())
    if recovered != queue.messages:
        raise RuntimeError(f"after restart the queue holds {recovered} of {queue.messages} messages")
    if loaded < acknowledged:
        raise RuntimeError(f"after restart {LOAD_TOPIC} holds {loaded} messages, {acknowledged} acknowledged")


def _record_size(endpoints: str, mq: MessageQueue) -> int:
    """Bytes of one stored record of the big queue (all its records are alike)."""
    with RmqClient(endpoints) as client:
        return len(client.pull(mq, 0, 1, group=GROUP).messages.records)


def _mib(size: int) -> str:
    return f"{size / (1 << 20):,.0f} MiB"
