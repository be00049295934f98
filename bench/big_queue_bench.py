"""Row 6 (executor memory) and row 7 (recovery): one broker whose store holds a large range
of 1 KiB messages in one queue, filled once per run and shared by both sections."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass

from bench.environment import REPO_ROOT, Environment
from bench.harness import Row, Stats, Target, measure_pair
from bench.workload import GROUP, body_of, produce, single_queue
from rmq.connector.client import MessageQueue, RmqClient

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
        if TOPIC not in {topic.topic for topic in client.list_topics()}:
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
    3 MiB transfer limit) grows alike for both, so the ratio of the two must stay ≤ 2."""
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
    """Time from starting `rmq broker` on the store to its first answer to ListBrokers,
    after `kill -9` (abnormal recovery: abort file present, CommitLog tail re-checked from
    the checkpoint) against after a graceful stop (normal recovery), alternately. After
    every restart the queue must still hold every message."""
    with env.broker(BROKER) as broker:
        queue = big_queue(env, broker.address)
        commit_log = queue.messages * _record_size(broker.address, queue.mq)

        def restart(kill: bool) -> float:
            broker.kill() if kill else broker.stop()
            start = time.perf_counter()
            broker.start()
            seconds = time.perf_counter() - start
            with RmqClient(broker.address) as client:
                recovered = client.topic_offsets(TOPIC)[queue.mq].max_offset
            if recovered != queue.messages:
                raise RuntimeError(f"after restart the queue holds {recovered} of {queue.messages} messages")
            return seconds

        abnormal, normal = measure_pair(lambda: restart(kill=True), lambda: restart(kill=False),
                                        env.scale.repeats)
    return [Row(f"restart to ready after kill -9, CommitLog of {_mib(commit_log)}", "s", abnormal,
                "restart after graceful stop", normal,
                note=f"{queue.messages:,} messages of 1 KiB; every restart recovered all of them")]


def _record_size(endpoints: str, mq: MessageQueue) -> int:
    """Bytes of one stored record of the big queue (all its records are alike)."""
    with RmqClient(endpoints) as client:
        return len(client.pull(mq, 0, 1, group=GROUP).messages.records)


def _mib(size: int) -> str:
    return f"{size / (1 << 20):,.0f} MiB"
