"""The `rmq` stream and batch readers against a real broker process, driven the way Spark
drives them (no Spark session: fast and exact about offsets and ownership)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from integration_tests.spark_source_support import (
    first_offset,
    positions,
    produce,
    read_batch,
    retained_min_offset,
    retention_config,
    stream_reader,
    wait_dispatched,
)
from rmq.connector.allocation import allocate
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient, RmqError, RmqUnavailable
from rmq.connector.spark.batch_reader import RmqBatchReader
from rmq.connector.spark.options import parse_source_options
from rmq.connector.spark.partition_reader import (
    QueueRangePartition,
    RmqDataLossError,
    RmqReadError,
    read_queue_range,
)
from testing import processes
from tests.acl_files import write_acl

pytestmark = pytest.mark.integration


@pytest.fixture
def client(broker):
    with RmqClient(broker.address) as rmq:
        yield rmq


def owned_queue_ids(offset: dict) -> list[int]:
    return sorted(int(key.rsplit(":", 1)[1]) for key in positions(offset))


@pytest.mark.parametrize("strategy", ["avg", "circle"])
def test_two_queries_in_one_group_split_8_queues_by_the_strategy(broker, client, strategy):
    client.create_topic("split", queues=8)
    first = stream_reader(broker.address, "split", consumerGroup="g-split", allocateStrategy=strategy)
    second = stream_reader(broker.address, "split", consumerGroup="g-split", allocateStrategy=strategy)
    try:
        start_first = first_offset(first)
        assert owned_queue_ids(start_first) == list(range(8))        # alone in the group
        start_second = first_offset(second)
        end_first = first.latestOffset(start_first, ReadAllAvailable())   # rebalance: drops half
        ids = {"first": start_first["@clientId"], "second": start_second["@clientId"]}
        mqs = [MessageQueue("split", "broker-a", q) for q in range(8)]
        expected = {name: [mq.queue_id for mq in allocate(strategy, cid, mqs, list(ids.values()))]
                    for name, cid in ids.items()}
        assert owned_queue_ids(end_first) == expected["first"]
        assert owned_queue_ids(start_second) == expected["second"]
        assert len(expected["first"]) == len(expected["second"]) == 4
        if strategy == "circle":
            assert {tuple(ids) for ids in expected.values()} == {(0, 2, 4, 6), (1, 3, 5, 7)}
        else:
            assert {tuple(ids) for ids in expected.values()} == {(0, 1, 2, 3), (4, 5, 6, 7)}
    finally:
        first.stop()
        second.stop()


def test_queues_move_between_consumers_without_gap_or_duplicate(broker, client, columns):
    client.create_topic("moves", queues=8)
    bodies = produce(client, "moves", 80)
    wait_dispatched(client, "moves", 80)
    options = {"consumerGroup": "g-moves", "startingOffsets": "committed"}
    first = stream_reader(broker.address, "moves", columns, **{**options, "startingOffsets": "earliest"})
    second = stream_reader(broker.address, "moves", columns, **options)
    seen: list[bytes] = []

    def run_batch(reader, start, limit=None):
        end = reader.latestOffset(start, limit or ReadAllAvailable())
        seen.extend(read_batch(reader, start, end).column("body").to_pylist())
        reader.commit(end)
        return end

    try:
        a = run_batch(first, first_offset(first), ReadMaxRows(40))     # half of it, all 8 queues
        b = first_offset(second)          # joins: starts its 4 queues at the group's committed offsets
        a = run_batch(first, a)             # first drops the second's queues
        assert len(positions(a)) == len(positions(b)) == 4
        b = run_batch(second, b)
        second.stop()                       # unregisters: the first takes every queue back
        a = run_batch(first, a)             # adopts them at the committed offsets (empty range)
        assert len(positions(a)) == 8
        produce(client, "moves", 16, start=80)
        wait_dispatched(client, "moves", 96)
        run_batch(first, a)
    finally:
        first.stop()
        second.stop()
    assert sorted(seen) == sorted(bodies + [f"m-{i}".encode() for i in range(80, 96)])


def test_a_restarted_driver_rejoins_under_the_client_id_kept_in_its_offsets(broker, client):
    client.create_topic("restart", queues=2)
    first = stream_reader(broker.address, "restart", consumerGroup="g-restart")
    assert first.initialOffset() == first.initialOffset()            # Spark may ask twice
    start = first_offset(first)
    first.stop()
    assert client.consumer_list("g-restart", "restart") == []
    restarted = stream_reader(broker.address, "restart", consumerGroup="g-restart")
    try:
        assert positions(restarted.latestOffset(start, ReadAllAvailable())) == positions(start)
        assert client.consumer_list("g-restart", "restart") == [start["@clientId"]]
    finally:
        restarted.stop()


def test_queries_without_a_group_each_read_everything_and_a_restart_keeps_the_group(broker, client):
    client.create_topic("own", queues=4)
    bodies = produce(client, "own", 20)
    wait_dispatched(client, "own", 20)
    readers = [stream_reader(broker.address, "own", startingOffsets="earliest") for _ in range(2)]
    try:
        starts = [first_offset(reader) for reader in readers]
        groups = [start["@group"] for start in starts]
        assert groups[0] != groups[1] and all(group.startswith("spark-rmq-") for group in groups)
        ends = [reader.latestOffset(start, ReadAllAvailable())
                for reader, start in zip(readers, starts, strict=True)]
        for reader, start, end in zip(readers, starts, ends, strict=True):
            assert owned_queue_ids(end) == [0, 1, 2, 3]                    # no split: groups of their own
            assert sorted(read_batch(reader, start, end).column("body").to_pylist()) == sorted(bodies)
            reader.commit(end)
    finally:
        for reader in readers:
            reader.stop()
    mqs = [MessageQueue("own", "broker-a", q) for q in range(4)]
    assert client.query_consumer_offsets(groups[0], "own") == dict.fromkeys(mqs, 5)
    restarted = stream_reader(broker.address, "own")       # from the checkpoint: the same group
    try:
        produce(client, "own", 4, start=20)
        wait_dispatched(client, "own", 24)
        end = restarted.latestOffset(ends[0], ReadAllAvailable())
        assert (end["@group"], end["@clientId"]) == (groups[0], starts[0]["@clientId"])
        assert client.consumer_list(groups[0], "own") == [starts[0]["@clientId"]]
        assert {p.pull.consumer_group for p in restarted.partitions(ends[0], end)} == {groups[0]}
        assert sorted(read_batch(restarted, ends[0], end).column("body").to_pylist()) == [
            f"m-{i}".encode() for i in range(20, 24)]
    finally:
        restarted.stop()


def test_offsets_checkpointed_without_a_group_resume_under_the_former_default_group(broker, client):
    client.create_topic("legacy", queues=1)
    checkpointed = {"@clientId": "vm@spark-old", "legacy": {"broker-a": {"0": 0}}}   # no "@group"
    reader = stream_reader(broker.address, "legacy")
    try:
        end = reader.latestOffset(checkpointed, ReadAllAvailable())
        assert end["@group"] == "spark-rmq-legacy"
        assert client.consumer_list("spark-rmq-legacy", "legacy") == ["vm@spark-old"]
    finally:
        reader.stop()


def test_queues_added_to_a_topic_are_picked_up_and_read_from_their_start(broker, client):
    client.create_topic("grows", queues=2)
    produce(client, "grows", 4, prefix="old")
    wait_dispatched(client, "grows", 4)
    reader = stream_reader(broker.address, "grows")            # startingOffsets latest
    seen: list[tuple[int, int, bytes]] = []

    def send(queue_ids: list[int], prefix: str) -> list[bytes]:
        messages = [OutgoingMessage(f"{prefix}-{i}".encode(), queue_id=q) for i, q in enumerate(queue_ids)]
        client.send("grows", messages)
        return [m.body for m in messages]

    def run_batch(start: dict) -> dict:
        end = reader.latestOffset(start, ReadAllAvailable())
        table = read_batch(reader, start, end)
        seen.extend(zip(table.column("queue_id").to_pylist(), table.column("queue_offset").to_pylist(),
                        table.column("body").to_pylist(), strict=True))
        reader.commit(end)
        return end

    try:
        start = first_offset(reader)
        assert positions(start) == {"grows:broker-a:0": 2, "grows:broker-a:1": 2}
        assert client.update_topic("grows", queues=4) == ["broker-a"]
        sent = send([0, 2, 2, 3], "before")      # new queues 2 and 3 get messages before the next batch
        wait_dispatched(client, "grows", 8)
        first = run_batch(start)                 # adopts queues 2 and 3 at their start (empty range)
        assert positions(first) == {"grows:broker-a:0": 3, "grows:broker-a:1": 2,
                                    "grows:broker-a:2": 0, "grows:broker-a:3": 0}
        sent += send([1, 2, 3], "after")
        wait_dispatched(client, "grows", 11)
        second = run_batch(first)
        assert positions(second) == {"grows:broker-a:0": 3, "grows:broker-a:1": 3,
                                     "grows:broker-a:2": 3, "grows:broker-a:3": 2}
    finally:
        reader.stop()
    assert sorted(body for _, _, body in seen) == sorted(sent)                 # nothing lost
    assert len({(queue, offset) for queue, offset, _ in seen}) == len(seen)   # no duplicate


def test_max_rows_bounds_batches_and_available_now_stops_at_the_snapshot(broker, client, columns):
    client.create_topic("limits", queues=8)
    produce(client, "limits", 100)
    wait_dispatched(client, "limits", 100)
    reader = stream_reader(broker.address, "limits", columns, startingOffsets="earliest",
                           maxMessagesPerTrigger="30")
    try:
        assert reader.getDefaultReadLimit() == ReadMaxRows(30)
        start = first_offset(reader)
        reader.prepareForTriggerAvailableNow()
        produce(client, "limits", 50, start=100)       # after the snapshot: not read
        wait_dispatched(client, "limits", 150)
        sizes = []
        while (end := reader.latestOffset(start, reader.getDefaultReadLimit())) != start:
            table = read_batch(reader, start, end)
            assert table.num_rows == 0 or table.schema.names == list(columns)
            sizes.append(table.num_rows)
            start = end
        assert sizes == [30, 30, 30, 10]
        assert sum(positions(reader.reportLatestOffset()).values()) == 150   # the true latest
    finally:
        reader.stop()


@pytest.mark.parametrize("transport", ["flight", "grpc"])   # each decodes only the query's columns
def test_tag_filter_skips_other_tags_but_advances_offsets(broker, client, columns, transport):
    client.create_topic("tags", queues=2)
    for tag in ("A", "B", "C"):
        produce(client, "tags", 10, tags=tag, prefix=tag)
    wait_dispatched(client, "tags", 30)
    reader = stream_reader(broker.address, "tags", columns, startingOffsets="earliest",
                           subExpression="A || C", pullBatchSize="4", transport=transport)
    try:
        start = first_offset(reader)
        end = reader.latestOffset(start, ReadAllAvailable())
        table = read_batch(reader, start, end)
    finally:
        reader.stop()
    assert table.schema.names == list(columns)   # the tags re-checked, and left out when not asked for
    assert sorted(body[:1] for body in table.column("body").to_pylist()) == [b"A"] * 10 + [b"C"] * 10
    assert sum(positions(end).values()) == 30


def test_timestamp_and_committed_starting_offsets(broker, client):
    client.create_topic("starts", queues=2)
    produce(client, "starts", 10, prefix="old")
    wait_dispatched(client, "starts", 10)
    time.sleep(0.05)   # not an event: the clock moves on, so "middle" lies strictly between the batches
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    produce(client, "starts", 6, prefix="new")
    wait_dispatched(client, "starts", 16)
    by_time = stream_reader(broker.address, "starts", startingOffsets=f"timestamp:{middle}")
    q0, q1 = (MessageQueue("starts", "broker-a", q) for q in (0, 1))
    client.update_consumer_offsets("g-starts", {q0: 2})
    committed = stream_reader(broker.address, "starts", startingOffsets="committed", consumerGroup="g-starts")
    try:
        start = first_offset(by_time)
        assert positions(start) == {"starts:broker-a:0": 5, "starts:broker-a:1": 5}
        new = read_batch(by_time, start, by_time.latestOffset(start, ReadAllAvailable()))
        assert sorted(new.column("body").to_pylist()) == sorted(f"new-{i}".encode() for i in range(6))
        # q0 resumes at the group's offset, q1 (nothing committed) starts at the latest.
        assert positions(first_offset(committed)) == {"starts:broker-a:0": 2, "starts:broker-a:1": 8}
    finally:
        by_time.stop()
        committed.stop()


def test_commit_writes_the_group_offsets_so_progress_shows_no_lag(broker, client):
    client.create_topic("progress", queues=4)
    produce(client, "progress", 40)
    wait_dispatched(client, "progress", 40)
    reader = stream_reader(broker.address, "progress", startingOffsets="earliest", consumerGroup="g-progress")
    try:
        start = first_offset(reader)
        end = reader.latestOffset(start, ReadAllAvailable())
        assert read_batch(reader, start, end).num_rows == 40
        reader.commit(end)
    finally:
        reader.stop()
    output = subprocess.run(
        [sys.executable, "-m", "rmq.cli", "group", "progress", "g-progress", "--json",
         "--endpoints", broker.address], capture_output=True, text=True, check=True).stdout
    report = json.loads(output)
    assert report["total_lag"] == 0
    rows = report["queues"]
    assert [row["consumer_offset"] for row in rows if row["topic"] == "progress"] == [10, 10, 10, 10]
    assert {row["topic"] for row in rows} == {"progress", "%RETRY%g-progress"}   # its empty retry topic


def test_broadcasting_reads_all_queues_and_keeps_offsets_in_a_local_file(broker, client, tmp_path):
    client.create_topic("bcast", queues=4)
    produce(client, "bcast", 8)
    wait_dispatched(client, "bcast", 8)
    options = {"messageModel": "broadcasting", "consumerGroup": "g-bcast", "startingOffsets": "earliest",
               "offsetStoreDir": str(tmp_path / "offsets")}
    readers = [stream_reader(broker.address, "bcast", **options) for _ in range(2)]
    try:
        for reader in readers:
            start = first_offset(reader)
            end = reader.latestOffset(start, ReadAllAvailable())
            assert read_batch(reader, start, end).num_rows == 8
            reader.commit(end)
    finally:
        for reader in readers:
            reader.stop()
    saved = json.loads((tmp_path / "offsets" / "g-bcast" / "offsets.json").read_text())
    assert saved == {"bcast": {"broker-a": {"0": 2, "1": 2, "2": 2, "3": 2}}}
    assert client.query_consumer_offsets("g-bcast", "bcast") == {}      # nothing on the broker


def test_batch_reader_reads_between_starting_and_ending_offsets(broker, client):
    client.create_topic("batch", queues=2)
    produce(client, "batch", 20)
    wait_dispatched(client, "batch", 20)
    options = parse_source_options({
        "endpoints": broker.address, "topic": "batch",
        "startingOffsets": '{"batch":{"broker-a":{"0":3}}}',
        "endingOffsets": '{"batch":{"broker-a":{"0":7,"1":-1}}}',
    }, streaming=False)
    reader = RmqBatchReader(options)
    partitions = reader.partitions()
    assert [(p.mq.queue_id, p.start_offset, p.end_offset) for p in partitions] == [(0, 3, 7), (1, 0, 10)]
    rows = [row for p in partitions for batch in reader.read(p) for row in batch.to_pylist()]
    assert [(r["queue_id"], r["queue_offset"]) for r in rows] == [(0, o) for o in range(3, 7)] + [
        (1, o) for o in range(10)]
    assert all(r["topic"] == "batch" and r["broker_name"] == "broker-a" for r in rows)


def test_deleted_offsets_fail_or_are_skipped_per_fail_on_data_loss(tmp_path, columns):
    server = processes.broker(tmp_path, extra=retention_config(tmp_path)).start()
    try:
        with RmqClient(server.address) as client:
            client.create_topic("retained", queues=1)
            for start in range(0, 200, 20):
                produce(client, "retained", 20, start=start)
            wait_dispatched(client, "retained", 200)
            mq = MessageQueue("retained", "broker-a", 0)
            low = retained_min_offset(client, mq)
        strict = parse_source_options({"endpoints": server.address, "topic": "retained"}, streaming=True,
                                      columns=columns).pull
        with pytest.raises(RmqDataLossError, match=rf"offsets \[0, {low}\) of topic retained broker broker-a "
                                                   r"queue 0 no longer exist .*deleted by retention; "
                                                   r"set failOnDataLoss=false to skip them"):
            list(read_queue_range(QueueRangePartition(mq, 0, 200, strict)))
        lenient = parse_source_options({"endpoints": server.address, "topic": "retained",
                                        "failOnDataLoss": "false"}, streaming=True, columns=columns).pull
        rows = [o for b in read_queue_range(QueueRangePartition(mq, 0, 200, lenient))
                for o in b.column("queue_offset").to_pylist()]
        assert rows == list(range(low, 200))
    finally:
        server.stop()


def test_unreachable_broker_fails_the_read_naming_broker_and_queue(broker, client, columns):
    client.create_topic("down", queues=1)
    produce(client, "down", 3)
    wait_dispatched(client, "down", 3)
    pull = parse_source_options({"endpoints": broker.address, "topic": "down", "brokerOutageWindowMs": "800"},
                                streaming=True, columns=columns).pull
    partition = QueueRangePartition(MessageQueue("down", "broker-a", 0), 0, 3, pull)
    broker.stop()
    with pytest.raises(RmqReadError, match=r"cannot read topic down broker broker-a queue 0 at offset 0 .*"
                                           r"after retrying for 800 ms \(brokerOutageWindowMs\)"):
        list(read_queue_range(partition))


def test_a_queue_that_ends_before_the_checkpoint_is_data_loss(broker, client):
    client.create_topic("reset", queues=1)
    produce(client, "reset", 3)
    wait_dispatched(client, "reset", 3)
    checkpointed = {"@clientId": "vm@spark-old", "reset": {"broker-a": {"0": 50}}}
    strict = stream_reader(broker.address, "reset", consumerGroup="g-reset")
    lenient = stream_reader(broker.address, "reset", consumerGroup="g-reset", failOnDataLoss="false")
    try:
        with pytest.raises(RmqDataLossError, match="queue 0 now ends at offset 3 but the query has already "
                                                   "read up to 50: messages were lost; set failOnDataLoss"):
            strict.latestOffset(checkpointed, ReadAllAvailable())
        end = lenient.latestOffset(checkpointed, ReadAllAvailable())
        assert positions(end) == {"reset:broker-a:0": 3}
        assert lenient.partitions(checkpointed, end) == []
        produce(client, "reset", 2, start=3)
        wait_dispatched(client, "reset", 5)
        following = lenient.latestOffset(end, ReadAllAvailable())
        assert read_batch(lenient, end, following).column("body").to_pylist() == [b"m-3", b"m-4"]
    finally:
        strict.stop()
        lenient.stop()


def test_unknown_topic_fails_at_query_start(broker):
    reader = stream_reader(broker.address, "missing")
    try:
        with pytest.raises(RmqError, match="TOPIC_NOT_EXIST"):
            first_offset(reader)
    finally:
        reader.stop()
    batch = RmqBatchReader(parse_source_options({"endpoints": broker.address, "topic": "missing"},
                                                streaming=False))
    with pytest.raises(RmqError, match="TOPIC_NOT_EXIST"):
        batch.partitions()


ACL = """\
accounts:
  - accessKey: admin1
    secretKey: admin-secret
    admin: true
  - accessKey: reader1
    secretKey: reader-secret
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
"""


def test_signed_reads_on_a_broker_with_an_acl(tmp_path, caplog):
    write_acl(tmp_path / "acl.yml", ACL)
    server = processes.broker(tmp_path, extra=["--acl", str(tmp_path / "acl.yml")]).start()
    try:
        with RmqClient(server.address, access_key="admin1", secret_key="admin-secret") as admin:
            admin.create_topic("secured", queues=2)
            produce(admin, "secured", 6)
            wait_dispatched(admin, "secured", 6)
        signed = stream_reader(server.address, "secured", startingOffsets="earliest", accessKey="reader1",
                               secretKey="reader-secret")
        unsigned = stream_reader(server.address, "secured")
        try:
            start = first_offset(signed)
            end = signed.latestOffset(start, ReadAllAvailable())
            assert read_batch(signed, start, end).num_rows == 6
            signed.commit(end)
            with pytest.raises(RmqError, match="UNAUTHENTICATED"):
                first_offset(unsigned)
            assert not [r for r in caplog.records if "retry" in r.getMessage()]   # a refusal: no retry
        finally:
            signed.stop()
            unsigned.stop()
    finally:
        server.stop()


def test_planning_rides_out_a_broker_restart_within_the_outage_window(broker, client, caplog):
    client.create_topic("restarts", queues=2)
    patient = stream_reader(broker.address, "restarts", startingOffsets="earliest")   # default window
    hasty = stream_reader(broker.address, "restarts", startingOffsets="earliest", brokerOutageWindowMs="300")
    try:
        patient_start, hasty_start = first_offset(patient), first_offset(hasty)
        broker.kill()
        with pytest.raises(RmqUnavailable, match=r"planning the next micro-batch: still unreachable after "
                                                 r"retrying for 300 ms \(brokerOutageWindowMs\)"):
            hasty.latestOffset(hasty_start, ReadAllAvailable())
        rounds = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
        assert rounds and all(broker.address in line for line in rounds)   # names the broker
        assert "planning the next micro-batch: broker" in rounds[0] and "retry 1 in" in rounds[0]
        restart = threading.Timer(1.0, broker.start)
        restart.start()
        try:
            end = patient.latestOffset(patient_start, ReadAllAvailable())   # retries until it is back
        finally:
            restart.join()
        assert positions(end) == positions(patient_start)
    finally:
        patient.stop()
        hasty.stop()
