"""Store benchmark: MessageStore appends (put_batch, 256 messages per batch, ASYNC flush) and batch
reads (get_message, max 1024) in process, for 100-byte and 1 KiB bodies, against raw sequential
slice writes / reads of the same record bytes into a file-backed mmap from Python, measured
alternately in the same run.

    .venv/bin/python -m bench.store_bench [--repeats 5] [--messages 200000]
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from rmq.store import FlushDiskType, MessageBatch, MessageStore, MessageStoreConfig

TOPIC = "bench-store"
QUEUES = 8
PUT_BATCH = 256
GET_BATCH = 1024
BODY_SIZES = (100, 1024)
DEFAULT_MESSAGES = {100: 200_000, 1024: 100_000}
FILE_SIZE = 256 * 1024 * 1024


def make_messages(count: int, body_size: int) -> list[MessageBatch]:
    """Batches shaped like the broker's: one queue per batch, a tag per message and no keys
    (what `rmq produce --tags T` sends; every key would add an index entry to the dispatch),
    as the column-wise MessageBatch the broker's SendMessage builds."""
    body = os.urandom(body_size)
    properties = b"TAGS\x01TagA\x02"
    batches = []
    for start in range(0, count, PUT_BATCH):
        queue_id = (start // PUT_BATCH) % QUEUES
        batches.append(MessageBatch.of(TOPIC, queue_id, [body] * min(PUT_BATCH, count - start), properties,
                                       born_timestamps=1))
    return batches


class StoreRun:
    """One fresh store: timed appends, then timed reads of everything appended."""

    def __init__(self, root: Path, batches: list[MessageBatch]) -> None:
        self.root = root
        self.batches = batches
        self.count = sum(len(b) for b in batches)

    def run(self) -> tuple[float, float, int, list[tuple[int, int]]]:
        """(append seconds, read seconds, record bytes, [(physical offset, size)] in CommitLog order)."""
        shutil.rmtree(self.root, ignore_errors=True)
        store = MessageStore(MessageStoreConfig(store_dir=self.root, flush_disk_type=FlushDiskType.ASYNC,
                                                mapped_file_size_commit_log=FILE_SIZE))
        store.start()
        try:
            put = store.put_batch
            start = time.perf_counter()
            for batch in self.batches:
                put(batch)
            append_s = time.perf_counter() - start
            while store.dispatch_behind_bytes() > 0:
                time.sleep(0.01)
            total_bytes = store.get_commit_log_max_offset()
            start = time.perf_counter()
            read = 0
            for queue_id in range(QUEUES):
                offset, max_offset = 0, store.get_max_offset_in_queue(TOPIC, queue_id)
                while offset < max_offset:
                    result = store.get_message("bench", TOPIC, queue_id, offset, GET_BATCH)
                    read += result.message_count
                    offset = result.next_begin_offset
            read_s = time.perf_counter() - start
            assert read == self.count, f"read {read} of {self.count}"
            records = _record_positions(store)
        finally:
            store.shutdown()
        return append_s, read_s, total_bytes, records


def _record_positions(store: MessageStore) -> list[tuple[int, int]]:
    positions = []
    for queue_id in range(QUEUES):
        cq = store.find_consume_queue(TOPIC, queue_id)
        entries = cq.get_entries(0, cq.get_max_offset_in_queue())
        positions.extend(zip(entries["offset"].tolist(), entries["size"].tolist(), strict=True))
    return sorted(positions)


def raw_write_read(path: Path, records: list[bytes]) -> tuple[float, float]:
    """Sequential per-record slice writes into a fresh file-backed mmap, then per-record reads."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, FILE_SIZE)
        mm = mmap.mmap(fd, FILE_SIZE)
    finally:
        os.close(fd)
    try:
        start = time.perf_counter()
        position = 0
        for record in records:
            end = position + len(record)
            mm[position:end] = record
            position = end
        write_s = time.perf_counter() - start
        start = time.perf_counter()
        position = 0
        for record in records:
            end = position + len(record)
            mm[position:end]
            position = end
        read_s = time.perf_counter() - start
    finally:
        mm.close()
        path.unlink(missing_ok=True)
    return write_s, read_s


def _records_of(root: Path, positions: list[tuple[int, int]]) -> list[bytes]:
    data = (root / "commitlog" / "0".zfill(20)).read_bytes()
    return [data[offset:offset + size] for offset, size in positions]


def _row(name: str, unit: str, values: list[float], references: list[float], note: str) -> dict:
    value, reference = statistics.median(values), statistics.median(references)
    return {"name": name, "value": value, "unit": unit, "reference": reference,
            "ratio": value / reference if reference else 0.0,
            "low": min(values), "high": max(values),
            "reference_low": min(references), "reference_high": max(references),
            "reference_name": "raw mmap slices", "note": note}


def run(repeats: int = 5, messages: dict[int, int] | None = None) -> list[dict]:
    messages = messages or DEFAULT_MESSAGES
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="rmq-store-bench-") as tmp:
        for body_size in BODY_SIZES:
            batches = make_messages(messages[body_size], body_size)
            count = sum(len(b) for b in batches)
            subject = StoreRun(Path(tmp) / "store", batches)
            samples: dict[str, list[float]] = {k + u: [] for k in "arwq" for u in ("ps", "mb")}
            records: list[bytes] | None = None
            for _ in range(repeats):
                append_s, read_s, total, positions = subject.run()
                if records is None:
                    records = _records_of(subject.root, positions)
                raw_w, raw_r = raw_write_read(Path(tmp) / "raw", records)
                raw_bytes = sum(len(r) for r in records)
                for key, seconds, size in (("a", append_s, total), ("r", read_s, total),
                                           ("w", raw_w, raw_bytes), ("q", raw_r, raw_bytes)):
                    samples[key + "ps"].append(count / seconds)
                    samples[key + "mb"].append(size / seconds / 1e6)
            label = f"{body_size} B" if body_size < 1024 else f"{body_size // 1024} KiB"
            append_note = f"put_batch x{PUT_BATCH}, ASYNC flush, {count} msgs, {QUEUES} queues"
            read_note = f"get_message max {GET_BATCH}, {count} msgs"
            rows += [
                _row(f"store append {label}", "msgs/s", samples["aps"], samples["wps"], append_note),
                _row(f"store append {label}", "MB/s", samples["amb"], samples["wmb"], append_note),
                _row(f"store read {label}", "msgs/s", samples["rps"], samples["qps"], read_note),
                _row(f"store read {label}", "MB/s", samples["rmb"], samples["qmb"], read_note),
            ]
    return rows


def format_rows(rows: list[dict]) -> str:
    lines = ["| benchmark | store (median, min-max) | raw mmap (median) | ratio |", "|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['name']} ({row['unit']}) | {_num(row['value'])} ({_num(row['low'])}-"
                     f"{_num(row['high'])}) | {_num(row['reference'])} | {row['ratio']:.2f} |")
    return "\n".join(lines)


def _num(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--messages", type=int, default=None, help="messages per body size")
    args = parser.parse_args(argv)
    messages = {size: args.messages for size in BODY_SIZES} if args.messages else None
    print(format_rows(run(args.repeats, messages)))


if __name__ == "__main__":
    main()
