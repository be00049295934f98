"""Subprocess of the memory row: read one queue range with the connector's partition reader
(as an executor task does) and print the rows read, the RSS before reading and the peak RSS
while reading, as JSON.

    python -m bench.partition_reader_peak ENDPOINTS TOPIC BROKER_NAME QUEUE_ID END_OFFSET

The peak is the kernel's high-water mark VmHWM, reset to the current RSS after the imports
(`/proc/self/clear_refs`, value 5). `resource.getrusage(RUSAGE_SELF).ru_maxrss` cannot be
used here: Linux carries it across fork + exec, so a child of the benchmark process (Spark
driver, pyarrow: ~500 MiB) starts with the parent's peak.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rmq.connector.client import MessageQueue
from rmq.connector.spark.options import parse_source_options
from rmq.connector.spark.partition_reader import QueueRangePartition, read_queue_range

STATUS = Path("/proc/self/status")


def memory_kib(field: str) -> int:
    """A `VmRSS` / `VmHWM` line of /proc/self/status, in KiB."""
    for line in STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in {STATUS}")


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def main(argv: list[str]) -> int:
    endpoints, topic, broker_name, queue_id, end = argv
    settings = parse_source_options({"endpoints": endpoints, "topic": topic}, streaming=False).pull
    partition = QueueRangePartition(MessageQueue(topic, broker_name, int(queue_id)), 0, int(end), settings)
    reset_peak()
    baseline = memory_kib("VmRSS")
    rows = sum(batch.num_rows for batch in read_queue_range(partition))
    print(json.dumps({"rows": rows, "baseline_kib": baseline, "peak_kib": memory_kib("VmHWM")}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
