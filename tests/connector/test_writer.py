"""The rmq sink's driver-side validation and its Arrow-batch to message conversion."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime
from typing import cast

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient  # noqa: E402
from rmq.connector.errors import RmqRefused  # noqa: E402
from rmq.connector.spark.writer import (  # noqa: E402
    DEFAULT_BATCH_SIZE,
    RmqCommitMessage,
    RmqDataSourceArrowWriter,
    RmqDataSourceStreamArrowWriter,
    RmqSinkError,
    SinkOptions,
    SinkPlan,
    by_keys,
    request_chunks,
    send_with_retry,
    sink_columns,
    total_sent,
)
from rmq.v1 import rmq_pb2  # noqa: E402

ENDPOINTS = {"endpoints": "127.0.0.1:9876"}


def schema(**columns) -> StructType:
    return StructType([StructField(name, data_type) for name, data_type in columns.items()])


FULL_SCHEMA = schema(
    body=BinaryType(), topic=StringType(), tags=StringType(), keys=StringType(),
    properties=MapType(StringType(), StringType()), queue_id=IntegerType(),
)


def plan(spark_schema: StructType = FULL_SCHEMA, **options: str) -> SinkPlan:
    return SinkPlan.create({**ENDPOINTS, **options}, spark_schema)


# ---------------------------------------------------------------- options


def test_options_defaults_and_case_insensitive_names():
    parsed = SinkOptions.parse({"ENDPOINTS": "h:1,h:2", "Topic": " T ", "BATCHSIZE": "7"})
    assert parsed == SinkOptions(endpoints="h:1,h:2", topic="T", batch_size=7)
    assert SinkOptions.parse(ENDPOINTS).batch_size == DEFAULT_BATCH_SIZE
    assert SinkOptions.parse(ENDPOINTS).topic is None


def test_unknown_options_are_refused_but_sparks_own_are_accepted():
    with pytest.raises(RmqSinkError, match=r"Unknown option 'batchsise' for the rmq sink: expected one of"):
        SinkOptions.parse({**ENDPOINTS, "batchSise": "5"})
    SinkOptions.parse({**ENDPOINTS, "checkpointLocation": "/tmp/c", "queryName": "q", "path": "p"})


def test_missing_endpoints_names_the_option():
    with pytest.raises(RmqSinkError, match="option 'endpoints' is required"):
        SinkOptions.parse({"topic": "T"})


def test_malformed_endpoints_names_the_option_and_the_entry():
    with pytest.raises(RmqSinkError, match=r"option 'endpoints'.*'nohost'"):
        SinkOptions.parse({"endpoints": "127.0.0.1:9876,nohost"})


@pytest.mark.parametrize("value", ["0", "-3", "abc", "10001", ""])
def test_bad_batch_size_names_the_option_and_range(value):
    with pytest.raises(RmqSinkError, match=r"option 'batchSize' must be an integer from 1 to 10000"):
        SinkOptions.parse({**ENDPOINTS, "batchSize": value})


def test_empty_topic_option_is_refused():
    with pytest.raises(RmqSinkError, match="option 'topic' is empty"):
        SinkOptions.parse({**ENDPOINTS, "topic": "  "})


def test_batch_overwrite_is_refused_and_complete_streaming_output_accepted():
    with pytest.raises(RmqSinkError, match="only appends messages to a topic: use mode\\('append'\\)"):
        RmqDataSourceArrowWriter(ENDPOINTS, FULL_SCHEMA, True)
    assert RmqDataSourceStreamArrowWriter(ENDPOINTS, FULL_SCHEMA, True).plan == plan()   # complete mode


def test_queue_selector_option():
    assert SinkOptions.parse(ENDPOINTS).queue_selector == "roundrobin"
    assert SinkOptions.parse({**ENDPOINTS, "queueSelector": "HashKeys"}).queue_selector == "hashkeys"
    expected = "Invalid value 'byKey' for option 'queueSelector': expected one of roundRobin, hashKeys"
    with pytest.raises(RmqSinkError, match=expected):
        SinkOptions.parse({**ENDPOINTS, "queueSelector": "byKey"})
    with pytest.raises(RmqSinkError, match="queueSelector=hashKeys picks the queue from the keys: drop the "
                                           "'queue_id' column"):
        plan(queueSelector="hashKeys")


def test_hash_keys_puts_each_key_on_one_queue_in_row_order():
    queues = [MessageQueue("T", broker, q) for broker in ("broker-a", "broker-b") for q in range(4)]
    keys = ["k1", "k2", "k1", "", "order-17", "k2", "k1"]
    messages = [OutgoingMessage(f"{i}".encode(), keys=key) for i, key in enumerate(keys)]
    runs = by_keys(messages, queues)
    assert [m.body for m in runs[None]] == [b"3"]                       # no keys: round-robin
    where = {m.keys: (broker, m.queue_id) for broker, run in runs.items() if broker for m in run}
    # Java String.hashCode modulo the 8 queues (SelectMessageQueueByHash)
    for key in ("k1", "k2", "order-17"):
        h = sum(ord(c) * 31 ** (len(key) - 1 - i) for i, c in enumerate(key)) % 2**32
        h = h - 2**32 if h >= 2**31 else h
        assert where[key] == (queues[abs(h) % 8].broker_name, queues[abs(h) % 8].queue_id)
    k1 = [m.body for run in runs.values() for m in run if m.keys == "k1"]
    assert k1 == [b"0", b"2", b"6"]                                       # row order kept


def test_delay_level_column():
    batch = pa.record_batch({"body": pa.array([b"a", b"b"]), "delay_level": pa.array([3, None], pa.int32())})
    messages = plan(schema(body=BinaryType(), delay_level=IntegerType()), topic="T").messages_by_topic(batch)
    assert [m.delay_level for m in messages["T"]] == [3, 0]
    bad = pa.record_batch({"body": pa.array([b"a"]), "delay_level": pa.array([-1], pa.int32())})
    with pytest.raises(RmqSinkError, match="column 'delay_level' is -1 in row 0 of a batch: delay levels"):
        plan(schema(body=BinaryType(), delay_level=IntegerType()), topic="T").messages_by_topic(bad)
    with pytest.raises(RmqSinkError, match="column 'delay_level' has type string: the rmq sink accepts an "
                                           "integer type"):
        plan(schema(body=BinaryType(), delay_level=StringType()), topic="T")


# ---------------------------------------------------------------- schema


def test_deliver_time_column_makes_timer_messages():
    """`deliver_time` (timestamp) is sent as the property TIMER_DELIVER_MS in epoch ms, replacing one
    the properties carry; null: no timer."""
    at = datetime(2030, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)
    batch = pa.record_batch({
        "body": pa.array([b"a", b"b", b"c"]),
        "properties": pa.array([[("k", "v")], [("TIMER_DELIVER_MS", "1")], None],
                               pa.map_(pa.string(), pa.string())),
        "deliver_time": pa.array([at, at, None], pa.timestamp("us", tz="UTC")),
    })
    sink = plan(schema(body=BinaryType(), properties=MapType(StringType(), StringType()),
                       deliver_time=TimestampType()), topic="T")
    messages = sink.messages_by_topic(batch)["T"]
    epoch_ms = str(int(at.timestamp() * 1000))
    assert [m.properties for m in messages] == [{"k": "v", "TIMER_DELIVER_MS": epoch_ms},
                                                {"TIMER_DELIVER_MS": epoch_ms}, {}]
    before_1970 = pa.array([datetime(1969, 12, 31, tzinfo=UTC)], pa.timestamp("us", tz="UTC"))
    early = pa.record_batch({"body": pa.array([b"a"]), "deliver_time": before_1970})
    with pytest.raises(RmqSinkError, match="column 'deliver_time' is 1969-12-31 00:00:00\\+00:00 in row 0 "
                                           "of a batch: a delivery time is after 1970-01-01"):
        plan(schema(body=BinaryType(), deliver_time=TimestampType()), topic="T").messages_by_topic(early)
    with pytest.raises(RmqSinkError, match="column 'deliver_time' has type bigint: the rmq sink accepts "
                                           "timestamp"):
        plan(schema(body=BinaryType(), deliver_time=LongType()), topic="T")


def test_missing_body_names_the_column_and_the_accepted_types():
    with pytest.raises(RmqSinkError, match=r"no 'body' column.*binary or string.*\(columns: value, topic\)"):
        sink_columns(schema(value=BinaryType(), topic=StringType()), None)


def test_wrong_body_type_is_refused():
    with pytest.raises(RmqSinkError, match=r"column 'body' has type int: the rmq sink accepts binary or str"):
        sink_columns(schema(body=IntegerType()), "T")


@pytest.mark.parametrize(
    ("column", "data_type", "accepted"),
    [
        ("tags", IntegerType(), "string"),
        ("keys", BinaryType(), "string"),
        ("properties", MapType(StringType(), IntegerType()), "map<string,string>"),
        ("queue_id", StringType(), "an integer type"),
    ],
)
def test_wrong_optional_column_types_are_refused(column, data_type, accepted):
    with pytest.raises(RmqSinkError, match=rf"column '{column}' has type .*accepts {accepted}"):
        sink_columns(schema(body=BinaryType(), **{column: data_type}), "T")


def test_topic_needed_from_option_or_column():
    with pytest.raises(RmqSinkError, match="set the 'topic' option or add a 'topic' column"):
        sink_columns(schema(body=BinaryType()), None)
    with pytest.raises(RmqSinkError, match="column 'topic' has type bigint"):
        sink_columns(schema(body=BinaryType(), topic=LongType()), None)


def test_topic_option_wins_over_a_topic_column_of_any_type():
    assert sink_columns(schema(body=StringType(), topic=LongType()), "T") == {"body": "body"}


def test_columns_match_case_insensitively_and_others_are_ignored():
    columns = sink_columns(schema(Body=BinaryType(), TAGS=StringType(), msg_id=StringType()), "T")
    assert columns == {"body": "Body", "tags": "TAGS"}


# ---------------------------------------------------------------- batches to messages


def full_batch() -> pa.RecordBatch:
    return pa.record_batch(
        {
            "body": pa.array([b"a", b"bb", b"ccc", b"d"], pa.binary()),
            "topic": ["T1", "T2", "T1", "T1"],
            "tags": ["x", None, "y", "x"],
            "keys": ["k1 k2", "k3", None, ""],
            "properties": pa.array([[("p", "1")], None, [], [("q", "2"), ("r", "3")]],
                                   pa.map_(pa.string(), pa.string())),
            "queue_id": pa.array([0, None, 3, 1], pa.int32()),
        }
    )


def test_rows_become_messages_grouped_by_topic_in_row_order():
    grouped = plan().messages_by_topic(full_batch())
    assert grouped == {
        "T1": [
            OutgoingMessage(b"a", "x", "k1 k2", {"p": "1"}, queue_id=0),
            OutgoingMessage(b"ccc", "y", "", {}, queue_id=3),
            OutgoingMessage(b"d", "x", "", {"q": "2", "r": "3"}, queue_id=1),
        ],
        "T2": [OutgoingMessage(b"bb", "", "k3", {}, queue_id=None)],
    }


def test_topic_option_sends_every_row_to_that_topic():
    grouped = plan(topic="Orders").messages_by_topic(full_batch())
    assert list(grouped) == ["Orders"]
    assert [m.body for m in grouped["Orders"]] == [b"a", b"bb", b"ccc", b"d"]


def test_string_bodies_are_sent_as_utf8_and_absent_columns_get_defaults():
    batch = pa.record_batch({"body": ["héllo", "{}"]})
    grouped = plan(schema(body=StringType()), topic="T").messages_by_topic(batch)
    assert grouped == {"T": [OutgoingMessage("héllo".encode(), "", "", {}, queue_id=None),
                             OutgoingMessage(b"{}", "", "", {}, queue_id=None)]}


def test_empty_batch_sends_nothing():
    batch = pa.record_batch({"body": pa.array([], pa.binary())})
    assert plan(schema(body=BinaryType()), topic="T").messages_by_topic(batch) == {}


@pytest.mark.parametrize("bodies", [[b"a", None, b"c"], [b"a", b"", b"c"]])
def test_null_or_empty_body_is_refused_naming_the_row(bodies):
    batch = pa.record_batch({"body": pa.array(bodies, pa.binary())})
    with pytest.raises(RmqSinkError, match=r"column 'body' is null or empty in row 1"):
        plan(schema(body=BinaryType()), topic="T").messages_by_topic(batch)


def test_null_topic_without_option_is_refused_naming_the_row():
    batch = pa.record_batch({"body": pa.array([b"a", b"b"]), "topic": ["T", None]})
    with pytest.raises(RmqSinkError, match=r"column 'topic' is null in row 1"):
        plan(schema(body=BinaryType(), topic=StringType())).messages_by_topic(batch)


@pytest.mark.parametrize("bad", [-1, 2**31])
def test_queue_id_outside_int32_range_is_refused_naming_the_row(bad):
    batch = pa.record_batch({"body": pa.array([b"a", b"b"]), "queue_id": pa.array([None, bad], pa.int64())})
    with pytest.raises(RmqSinkError, match=rf"column 'queue_id' is {bad} in row 1 of a batch: queue ids"):
        plan(schema(body=BinaryType(), queue_id=LongType()), topic="T").messages_by_topic(batch)


def test_null_property_value_is_refused():
    batch = pa.record_batch({
        "body": pa.array([b"a"]),
        "properties": pa.array([[("p", None)]], pa.map_(pa.string(), pa.string())),
    })
    spark_schema = schema(body=BinaryType(), properties=MapType(StringType(), StringType()))
    with pytest.raises(RmqSinkError, match="column 'properties' has a null value"):
        plan(spark_schema, topic="T").messages_by_topic(batch)


# ---------------------------------------------------------------- requests


def test_requests_hold_at_most_batch_size_messages_in_order():
    messages = [OutgoingMessage(str(i).encode()) for i in range(1100)]
    chunks = list(request_chunks(messages, 512))
    assert [len(chunk) for chunk in chunks] == [512, 512, 76]
    assert [m for chunk in chunks for m in chunk] == messages


# ---------------------------------------------------------------- writers and commit messages


def test_writers_are_spark_arrow_writers_and_pickle_with_their_plan():
    batch_writer = RmqDataSourceArrowWriter(ENDPOINTS, FULL_SCHEMA, False)
    stream_writer = RmqDataSourceStreamArrowWriter({**ENDPOINTS, "topic": "T"}, FULL_SCHEMA, False)
    assert isinstance(batch_writer, DataSourceArrowWriter)
    assert isinstance(stream_writer, DataSourceStreamArrowWriter)
    assert pickle.loads(pickle.dumps(stream_writer)).plan == stream_writer.plan


def test_writer_creation_validates_the_schema():
    with pytest.raises(RmqSinkError, match="no 'body' column"):
        RmqDataSourceStreamArrowWriter({**ENDPOINTS, "topic": "T"}, schema(value=BinaryType()), False)


def test_commit_messages_add_up_per_topic_and_skip_failed_tasks():
    messages_ = [RmqCommitMessage({"A": 3, "B": 1}), None, RmqCommitMessage({"A": 2})]
    assert total_sent(messages_) == {"A": 5, "B": 1}
    assert pickle.loads(pickle.dumps(messages_[0])) == messages_[0]


# ---------------------------------------------------------------- retries (the Producer's rule)


class RefusedOnce:
    """A client stub: the first send stores `acknowledged` messages, then is refused with `code`."""

    def __init__(self, code: int, acknowledged: int) -> None:
        self.code, self.acknowledged = code, acknowledged
        self.carried: list[list[bytes]] = []

    def route(self, topic: str) -> None:
        """The route is known."""

    def send(self, topic: str, messages: list[OutgoingMessage], broker_name: str | None = None) -> None:
        self.carried.append([m.body for m in messages])
        if len(self.carried) == 1:
            error = RmqRefused(self.code, "refused", broker="broker-a")
            error.acknowledged = self.acknowledged
            raise error


def test_a_send_refused_with_a_retry_code_resends_only_the_unacknowledged_tail():
    client = RefusedOnce(rmq_pb2.SYSTEM_ERROR, acknowledged=2)
    messages = [OutgoingMessage(str(i).encode()) for i in range(5)]
    send_with_retry(cast(RmqClient, client), "T", messages)
    assert client.carried == [[b"0", b"1", b"2", b"3", b"4"], [b"2", b"3", b"4"]]


def test_a_refusal_no_broker_cures_is_not_retried():
    client = RefusedOnce(rmq_pb2.MESSAGE_ILLEGAL, acknowledged=0)
    with pytest.raises(RmqRefused):
        send_with_retry(cast(RmqClient, client), "T", [OutgoingMessage(b"x")])
    assert len(client.carried) == 1


class UnknownTopic:
    """A client stub for a topic no name server knows: the route lookup (also inside send) is refused."""

    def __init__(self) -> None:
        self.sends = 0

    def route(self, topic: str) -> None:
        raise RmqRefused(rmq_pb2.TOPIC_NOT_EXIST, f"topic {topic} not exist")

    def send(self, topic: str, messages: list[OutgoingMessage], broker_name: str | None = None) -> None:
        self.sends += 1
        self.route(topic)


def test_a_topic_without_a_route_fails_at_once_without_retries():
    client = UnknownTopic()
    with pytest.raises(RmqRefused, match="topic NoSuchT not exist"):
        send_with_retry(cast(RmqClient, client), "NoSuchT", [OutgoingMessage(b"x")])
    assert client.sends == 0
