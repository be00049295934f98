"""Subprocess of the memory row: read one queue range with the connector's partition reader
(as an executor task does) and print the rows read and the peak RSS before/after, as JSON.

    python -m bench.partition_reader_peak ENDPOINTS TOPIC BROKER_NAME QUEUE_ID END_OFFSET
"""

from __future__ import annotations

import json
import resource
import sys

from connector.client import MessageQueue
from connector.options import parse_source_options
from connector.partition_reader import QueueRangePartition, read_queue_range


def peak_rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # KiB on Linux


def main(argv: list[str]) -> int:
    endpoints, topic, broker_name, queue_id, end = argv
    settings = parse_source_options({"endpoints": endpoints, "topic": topic}, streaming=False).pull
    partition = QueueRangePartition(MessageQueue(topic, broker_name, int(queue_id)), 0, int(end), settings)
    baseline = peak_rss_kib()
    rows = sum(batch.num_rows for batch in read_queue_range(partition))
    print(json.dumps({"rows": rows, "baseline_kib": baseline, "peak_kib": peak_rss_kib()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
