"""The Spark sink against a real broker: batch and streaming writes read back through the
source, topic routing, queue pinning and errors for DataFrames the sink cannot write."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rmq import message_format as mf
from rmq.auth import TlsSettings
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from testing import processes
from tests.tls_certs import make_tls_files

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROUND_TRIP_ROWS = 10_000
# Properties the broker or client set on every message; the round trip compares the rest.
SYSTEM_PROPERTIES = {mf.PROPERTY_TAGS, mf.PROPERTY_KEYS, mf.PROPERTY_UNIQ_KEY}


@pytest.fixture
def client(broker):
    with RmqClient(broker.address) as rmq:
        yield rmq


def write(df, endpoints: str, mode: str = "append", **options: str) -> None:
    df.write.format("rmq").mode(mode).option("endpoints", endpoints).options(**options).save()


def read_back(spark, endpoints: str, topic: str) -> list:
    return (spark.read.format("rmq").option("endpoints", endpoints).option("topic", topic).load()
            .select("body", "tags", "keys", "properties", "queue_id").collect())


def as_messages(rows) -> list[tuple]:
    """(body, tags, keys, user properties) per row, sorted, duplicates kept."""
    return sorted(
        (bytes(row.body), row.tags, row.keys,
         tuple(sorted((k, v) for k, v in (row.properties or {}).items() if k not in SYSTEM_PROPERTIES)))
        for row in rows
    )


def test_batch_write_of_10000_rows_reads_back_identical(spark, broker, client):
    client.create_topic("sink-round-trip", queues=8)
    expected = [
        (f"message {i} ".encode() + bytes([i % 256]) * (i % 50), f"Tag{i % 5}", f"key-{i} order-{i // 10}",
         {"row": str(i), "parity": "even" if i % 2 == 0 else "odd"})
        for i in range(ROUND_TRIP_ROWS)
    ]
    columns = "body binary, tags string, keys string, properties map<string,string>"
    write(spark.createDataFrame(expected, columns), broker.address, topic="sink-round-trip", batchSize="700")

    rows = read_back(spark, broker.address, "sink-round-trip")
    assert as_messages(rows) == sorted((b, t, k, tuple(sorted(p.items()))) for b, t, k, p in expected)
    offsets = client.topic_offsets("sink-round-trip")
    assert sum(q.max_offset for q in offsets.values()) == ROUND_TRIP_ROWS
    assert len({row.queue_id for row in rows}) == 8   # spread over every queue


def test_topic_column_routes_rows_and_queue_id_pins_the_queue(spark, broker, client):
    client.create_topic("sink-a", queues=4)
    client.create_topic("sink-b", queues=4)
    df = spark.createDataFrame(
        [(f"a{i}", "sink-a", 2) for i in range(30)] + [(f"b{i}", "sink-b", None) for i in range(20)],
        "body string, topic string, queue_id int",
    )
    write(df, broker.address)

    a_rows = read_back(spark, broker.address, "sink-a")
    b_rows = read_back(spark, broker.address, "sink-b")
    assert sorted(bytes(r.body) for r in a_rows) == sorted(f"a{i}".encode() for i in range(30))
    assert {r.queue_id for r in a_rows} == {2}
    assert sorted(bytes(r.body) for r in b_rows) == sorted(f"b{i}".encode() for i in range(20))


def test_topic_option_wins_over_the_topic_column(spark, broker, client):
    client.create_topic("sink-option", queues=2)
    df = spark.createDataFrame([("x", "elsewhere"), ("y", "elsewhere")], "body string, topic string")
    write(df, broker.address, topic="sink-option")
    assert sorted(bytes(r.body) for r in read_back(spark, broker.address, "sink-option")) == [b"x", b"y"]


def test_streaming_write_from_files_reads_back(spark, broker, client, tmp_path: Path):
    client.create_topic("sink-stream", queues=4)
    source = tmp_path / "events"
    source.mkdir()
    events = [{"id": n, "kind": f"k{n % 3}"} for n in range(300)]
    for part in range(3):
        (source / f"part-{part}.json").write_text("\n".join(json.dumps(e) for e in events[part * 100:][:100]))

    from pyspark.sql import functions as F

    stream = spark.readStream.schema("id long, kind string").json(str(source))
    messages = stream.select(
        F.to_json(F.struct("id", "kind")).alias("body"),
        F.col("kind").alias("tags"),
        F.col("id").cast("string").alias("keys"),
    )
    query = messages.writeStream.format("rmq").options(
        endpoints=broker.address, topic="sink-stream", checkpointLocation=str(tmp_path / "checkpoint")
    ).trigger(availableNow=True).start()
    query.awaitTermination(120)
    assert query.exception() is None

    rows = read_back(spark, broker.address, "sink-stream")
    got = sorted((json.loads(bytes(r.body))["id"], r.tags, r.keys) for r in rows)
    assert got == [(e["id"], e["kind"], str(e["id"])) for e in events]


def test_produce_stream_transform_and_sink_into_another_topic(spark, broker, client, tmp_path: Path):
    """produce -> Spark stream (rmq source) -> transform -> rmq sink -> read back."""
    client.create_topic("pipeline-in", queues=4)
    client.create_topic("pipeline-out", queues=4)
    sent = [OutgoingMessage(f"event-{i}".encode(), f"T{i % 2}", f"k{i}", {"n": str(i)}) for i in range(500)]
    client.send("pipeline-in", sent[:250])
    client.send("pipeline-in", sent[250:])

    from pyspark.sql import functions as F

    incoming = spark.readStream.format("rmq").options(
        endpoints=broker.address, topic="pipeline-in", consumerGroup="sink-pipeline",
        startingOffsets="earliest",
    ).load()
    outgoing = incoming.select(
        F.upper(F.col("body").cast("string")).alias("body"), "tags", "keys",
        F.map_concat(F.map_filter("properties", lambda k, _: k == "n"),
                     F.create_map(F.lit("via"), F.lit("spark"))).alias("properties"),
    )
    query = outgoing.writeStream.format("rmq").options(
        endpoints=broker.address, topic="pipeline-out", checkpointLocation=str(tmp_path / "checkpoint")
    ).trigger(availableNow=True).start()
    query.awaitTermination(120)
    assert query.exception() is None

    rows = read_back(spark, broker.address, "pipeline-out")
    assert as_messages(rows) == sorted(
        (f"EVENT-{i}".encode(), f"T{i % 2}", f"k{i}", (("n", str(i)), ("via", "spark"))) for i in range(500)
    )


def test_hash_keys_puts_every_key_on_one_queue_in_row_order(spark, broker, client):
    client.create_topic("sink-keyed", queues=8)
    rows = [(f"{i}", f"account-{i % 12}") for i in range(240)]
    df = spark.createDataFrame(rows, "body string, keys string").repartition(1)   # one task: row order
    write(df, broker.address, topic="sink-keyed", queueSelector="hashKeys")
    back = (spark.read.format("rmq").option("endpoints", broker.address).option("topic", "sink-keyed").load()
            .select("keys", "queue_id", "queue_offset", "body").collect())
    queues: dict[str, set[int]] = {}
    for row in back:
        queues.setdefault(row.keys, set()).add(row.queue_id)
    assert len(back) == 240 and all(len(ids) == 1 for ids in queues.values())    # one queue per key
    assert len({queue for ids in queues.values() for queue in ids}) > 1          # keys spread over queues
    for key in queues:        # per key, queue order is row order (what an orderly consumer sees)
        bodies = [int(bytes(r.body)) for r in sorted(back, key=lambda r: r.queue_offset) if r.keys == key]
        assert bodies == sorted(bodies) and len(bodies) == 20


def test_delay_level_column_delays_delivery(spark, broker, client):
    client.create_topic("sink-delayed", queues=1)
    df = spark.createDataFrame([("now", 0), ("later", 3)], "body string, delay_level int")   # level 3: 10 s

    def stored() -> int:
        return client.topic_offsets("sink-delayed")[MessageQueue("sink-delayed", "broker-a", 0)].max_offset

    write(df, broker.address, topic="sink-delayed")
    assert stored() == 1                      # the delayed message waits in the broker's schedule topic
    deadline = time.monotonic() + 60
    while stored() < 2:
        assert time.monotonic() < deadline, "the delayed message never arrived"
        time.sleep(0.5)
    rows = read_back(spark, broker.address, "sink-delayed")
    assert sorted(bytes(r.body) for r in rows) == [b"later", b"now"]


def test_complete_output_mode_sends_the_whole_result_every_batch(spark, broker, client, tmp_path: Path):
    client.create_topic("sink-counts-in", queues=2)
    client.create_topic("sink-counts-out", queues=2)
    client.send("sink-counts-in", [OutgoingMessage(b"x", keys=f"k{i % 3}") for i in range(30)])
    from pyspark.sql import functions as F

    counts = (spark.readStream.format("rmq").options(endpoints=broker.address, topic="sink-counts-in",
                                                     startingOffsets="earliest").load()
              .groupBy("keys").count()
              .select(F.col("keys"), F.to_json(F.struct("keys", "count")).alias("body")))
    query = counts.writeStream.format("rmq").outputMode("complete").options(
        endpoints=broker.address, topic="sink-counts-out", checkpointLocation=str(tmp_path / "checkpoint")
    ).trigger(availableNow=True).start()
    query.awaitTermination(120)
    assert query.exception() is None
    rows = read_back(spark, broker.address, "sink-counts-out")
    assert sorted(json.loads(bytes(r.body))["count"] for r in rows) == [10, 10, 10]


def test_mutual_tls_write_and_read(spark, tmp_path: Path):
    tls = make_tls_files(tmp_path / "tls")
    extra = ["--tls-cert", str(tls.server_cert), "--tls-key", str(tls.server_key),
             "--tls-client-ca", str(tls.ca)]
    server = processes.broker(tmp_path, extra=extra, channel_credentials=TlsSettings(
        tls.ca, tls.client_cert, tls.client_key).channel_credentials()).start()
    certificate = {"tlsCaFile": str(tls.ca), "tlsCertFile": str(tls.client_cert),
                   "tlsKeyFile": str(tls.client_key)}
    try:
        with RmqClient(server.address, tls_ca_file=str(tls.ca), tls_cert_file=str(tls.client_cert),
                       tls_key_file=str(tls.client_key)) as admin:
            admin.create_topic("sink-mtls", queues=2)
        write(spark.createDataFrame([("a",), ("b",)], "body string"), server.address, topic="sink-mtls",
              **certificate)
        rows = (spark.read.format("rmq").options(endpoints=server.address, topic="sink-mtls", **certificate)
                .load().collect())
        assert sorted(bytes(r.body) for r in rows) == [b"a", b"b"]
        # no client certificate: the broker closes the connection, and the read fails at once naming it
        with pytest.raises(Exception, match=f"nothing answers at {server.address}"):
            (spark.read.format("rmq").options(endpoints=server.address, topic="sink-mtls",
                                              tlsCaFile=str(tls.ca), brokerOutageWindowMs="1000")
             .load().collect())
    finally:
        server.stop()


def test_missing_body_column_fails_with_a_clear_error(spark, broker):
    with pytest.raises(Exception, match=r"no 'body' column.*binary or string"):
        write(spark.range(3), broker.address, topic="t")


def test_wrong_body_type_fails_with_a_clear_error(spark, broker):
    with pytest.raises(Exception, match=r"column 'body' has type bigint: the rmq sink accepts binary or str"):
        write(spark.range(3).withColumnRenamed("id", "body"), broker.address, topic="t")


def test_overwrite_is_refused(spark, broker):
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception, match="only appends"):
        write(df, broker.address, mode="overwrite", topic="t")


def test_unknown_topic_fails_the_write_naming_the_topic(spark, broker):
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception, match="no-such-topic"):
        write(df, broker.address, topic="no-such-topic")
