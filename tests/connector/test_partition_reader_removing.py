"""The Spark partition reader meets entries whose CommitLog file is gone while their ConsumeQueue
entries are still there (the store answers MESSAGE_WAS_REMOVING, spec longpolling §7.1: the window
between retention deleting CommitLog files and CleanConsumeQueueService correcting the queue's
minimum). That is data loss: failOnDataLoss=true fails naming the offsets, false skips them with
a warning; it must never be taken for a tag-filter miss and skipped silently."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient  # noqa: E402
from rmq.connector.spark.options import parse_source_options  # noqa: E402
from rmq.connector.spark.partition_reader import (  # noqa: E402
    QueueRangePartition,
    RmqDataLossError,
    RmqReadError,
    read_queue_range,
)
from tests.broker_server.in_process_broker import InProcessBroker  # noqa: E402

TOPIC = "removing"
COUNT = 1000       # ~200-byte records in 4 KiB CommitLog files: ~980 entries lose their record
SCAN = 800         # a pull scans at least 16000 / 20 ConsumeQueue entries (store MIN_FILTER_SCAN_BYTES)
SMALL_FILES = {"mapped_file_size_commit_log": 4096, "mapped_file_size_consume_queue": 20 * 1000,
               "message_index_enable": False}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    broker = InProcessBroker(tmp_path / "store", store=SMALL_FILES).start()
    yield broker
    broker.stop()


def delete_commit_log_files_only(broker: InProcessBroker) -> int:
    """Retention's first half (spec store §11): every CommitLog file but the newest is deleted,
    the ConsumeQueue still points into them. Returns the new CommitLog minimum."""
    store = broker.controller.store
    while store.commit_log.mapped_file_queue.delete_expired_file_by_time(0, 0, 0, True):
        pass    # at most 10 files per run
    return store.get_commit_log_min_offset()


@pytest.mark.parametrize("transport", ["grpc", "flight"])
def test_entries_whose_commit_log_file_was_deleted_are_data_loss(broker: InProcessBroker, caplog,
                                                                  transport: str) -> None:
    with RmqClient(broker.address) as client:
        client.create_topic(TOPIC, queues=1)
        for start in range(0, COUNT, 100):
            client.send(TOPIC, [OutgoingMessage(b"m-%04d." % n * 20) for n in range(start, start + 100)])
        mq = MessageQueue(TOPIC, broker.config.broker_name, 0)
        assert client.topic_offsets(TOPIC)[mq].max_offset == COUNT
        assert delete_commit_log_files_only(broker) > SCAN * 200
        assert client.topic_offsets(TOPIC)[mq].min_offset == 0     # the queue does not know yet

    options = {"endpoints": broker.address, "topic": TOPIC, "pullBatchSize": "32", "transport": transport}
    strict = parse_source_options(options, streaming=True).pull
    # a pull of 32 scans SCAN entries; a Flight read at least BATCH_ROWS (partition_reader), all of them
    first_gap = SCAN if transport == "grpc" else r"9\d\d"
    with pytest.raises(RmqDataLossError, match=rf"offsets \[0, {first_gap}\) of topic removing .* "
                                               r"MESSAGE_WAS_REMOVING.*CommitLog file was deleted"):
        list(read_queue_range(QueueRangePartition(mq, 0, COUNT, strict)))

    lenient = parse_source_options({**options, "failOnDataLoss": "false"}, streaming=True).pull
    with caplog.at_level(logging.WARNING):
        offsets = [o for batch in read_queue_range(QueueRangePartition(mq, 0, COUNT, lenient))
                   for o in batch.column("queue_offset").to_pylist()]
    assert offsets and offsets == list(range(offsets[0], COUNT)) and offsets[0] > SCAN
    # every lost offset is reported, [0, first kept) in consecutive gaps ([0, SCAN) by the first pull)
    gaps = [(int(low), int(high)) for low, high in re.findall(r"offsets \[(\d+), (\d+)\)", caplog.text)]
    assert gaps[0][0] == 0 and gaps[-1][1] == offsets[0]
    assert all(earlier[1] == later[0] for earlier, later in zip(gaps, gaps[1:], strict=False))


def test_transport_flight_needs_a_data_plane_and_auto_falls_back(tmp_path: Path) -> None:
    broker = InProcessBroker(tmp_path / "store", flight_listen="off").start()
    try:
        with RmqClient(broker.address) as client:
            client.create_topic(TOPIC, queues=1)
            client.send(TOPIC, [OutgoingMessage(b"m-%04d" % n) for n in range(50)])
        mq = MessageQueue(TOPIC, broker.config.broker_name, 0)
        options = {"endpoints": broker.address, "topic": TOPIC}
        flight = parse_source_options({**options, "transport": "flight"}, streaming=True).pull
        with pytest.raises(RmqReadError, match="transport=flight, but broker broker-a advertises no Arrow "
                                               "Flight data plane"):
            list(read_queue_range(QueueRangePartition(mq, 0, 50, flight)))
        auto = parse_source_options(options, streaming=True).pull
        assert sum(len(b) for b in read_queue_range(QueueRangePartition(mq, 0, 50, auto))) == 50
    finally:
        broker.stop()
