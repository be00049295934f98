"""Source option validation: defaults, case-insensitive names, one clear message per mistake."""

from __future__ import annotations

import os
import re

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from rmq.connector.client import MessageQueue
from rmq.connector.spark.options import (
    RmqOptionError,
    Transport,
    check_source_options,
    parse_source_options,
)
from rmq.connector.spark.source_offsets import AtTimestamp, Committed, Earliest, Latest, Specific, Timestamps
from rmq.connector.spark.source_schema import ALL_COLUMNS, SOURCE_SCHEMA, source_columns

BASE = {"endpoints": "127.0.0.1:9876", "topic": "orders"}


def schema(*fields: tuple[str, DataType] | tuple[str, DataType, bool]) -> StructType:
    """A query's schema: (name, type[, nullable])."""
    return StructType([StructField(*field) for field in fields])


def parse(streaming: bool = True, **options: str):
    return parse_source_options({**BASE, **options}, streaming=streaming)


def test_defaults_for_stream_and_batch():
    stream = parse()
    assert stream.topics == ("orders",)
    assert stream.consumer_group is None
    assert stream.starting_offsets == Latest()
    assert stream.max_messages_per_trigger is None
    assert stream.allocate_strategy == "avg"
    assert stream.message_model == "clustering"
    assert stream.pull.sub_expression == "*" and stream.pull.tags is None
    assert (stream.pull.pull_batch_size, stream.pull.pull_timeout_ms) == (4096, 3000)
    assert stream.pull.fail_on_data_loss is True
    assert stream.pull.transport is Transport.AUTO
    assert stream.offset_store_dir == os.path.expanduser("~/.rmq/offsets")
    batch = parse(streaming=False)
    assert batch.starting_offsets == Earliest()
    assert batch.ending_offsets == Latest()


def test_without_consumer_group_each_query_gets_a_group_of_its_own():
    first, second = parse(), parse(streaming=False)
    for options in (first, second):
        assert re.fullmatch(r"spark-rmq-[0-9a-f]{32}", options.pull.consumer_group)
    assert first.pull.consumer_group != second.pull.consumer_group
    shared = parse(consumerGroup="etl")
    assert shared.consumer_group == shared.pull.consumer_group == "etl"


@pytest.mark.parametrize("streaming", [True, False])
def test_committed_starting_offsets_need_a_consumer_group(streaming):
    needs_group = "Option 'startingOffsets' committed needs option 'consumerGroup'"
    with pytest.raises(RmqOptionError, match=needs_group):
        parse(streaming, startingOffsets="committed")
    with pytest.raises(RmqOptionError, match="needs option 'consumerGroup'"):
        check_source_options({**BASE, "startingOffsets": "COMMITTED"})
    assert parse(streaming, startingOffsets="committed", consumerGroup="g").starting_offsets == Committed()


def test_names_are_case_insensitive_and_values_parsed():
    options = parse_source_options({
        "ENDPOINTS": "h1:1,h2:2", "Topic": "a, b", "consumergroup": "g1", "SUBEXPRESSION": "TagA ||TagB",
        "startingoffsets": "Timestamp:1700000000000", "MaxMessagesPerTrigger": "100",
        "pullbatchsize": "32768", "allocatestrategy": "CIRCLE", "messagemodel": "Broadcasting",
        "failondataloss": "FALSE",
    }, streaming=True)
    assert options.endpoints == "h1:1,h2:2"
    assert options.topics == ("a", "b")
    assert options.consumer_group == "g1"
    assert options.pull.sub_expression == "TagA || TagB"
    assert options.pull.tags == frozenset({"TagA", "TagB"})
    assert options.starting_offsets == AtTimestamp(1700000000000)
    assert options.max_messages_per_trigger == 100
    assert options.pull.pull_batch_size == 32768
    assert options.allocate_strategy == "circle"
    assert options.broadcasting
    assert options.pull.fail_on_data_loss is False


def test_committed_and_json_starting_offsets():
    assert parse(startingOffsets="committed", consumerGroup="g").starting_offsets == Committed()
    policy = parse(startingOffsets='{"orders":{"broker-a":{"0":-2,"3":17}}}').starting_offsets
    assert isinstance(policy, Specific)
    assert policy.positions == {
        MessageQueue("orders", "broker-a", 0): -2, MessageQueue("orders", "broker-a", 3): 17,
    }
    assert policy.fallback == Latest()
    ending = parse(streaming=False, endingOffsets='{"orders":{"broker-a":{"1":-1}}}').ending_offsets
    assert ending.positions == {MessageQueue("orders", "broker-a", 1): -1}


@pytest.mark.parametrize("option, value, expected", [
    ("allocateStrategy", "foo",
     "Invalid value 'foo' for option 'allocateStrategy': expected one of avg, circle"),
    ("messageModel", "pubsub",
     "Invalid value 'pubsub' for option 'messageModel': expected one of clustering, broadcasting"),
    ("failOnDataLoss", "yes", "Invalid value 'yes' for option 'failOnDataLoss': expected one of true, false"),
    ("transport", "http", "Invalid value 'http' for option 'transport': expected one of auto, flight, grpc"),
    ("maxMessagesPerTrigger", "0",
     "Invalid value '0' for option 'maxMessagesPerTrigger': expected a positive integer"),
    ("pullBatchSize", "40000",
     "Invalid value '40000' for option 'pullBatchSize': expected a positive integer <= 32768"),
    ("pullTimeoutMs", "3s", "Invalid value '3s' for option 'pullTimeoutMs': expected a positive integer"),
    ("startingOffsets", "newest",
     "Invalid value 'newest' for option 'startingOffsets': expected one of earliest, latest, committed, "
     "timestamp:<epoch-ms>, or JSON"),
    ("startingOffsets", "timestamp:yesterday",
     "Invalid value 'timestamp:yesterday' for option 'startingOffsets': expected timestamp:<epoch-ms>"),
    ("startingOffsets", '{"orders":{"broker-a":{"0":-3}}}',
     "offset -3 of orders/broker-a/0 is not an integer >= -2"),
    ("startingOffsets", '{"other":{"broker-a":{"0":1}}}', "topic 'other' is not in option 'topic' (orders)"),
    ("subExpression", "A || ", "Invalid value 'A ||' for option 'subExpression': expected '*' or tags"),
    ("topic", "bad topic", "Invalid value 'bad topic' for option 'topic'"),
    ("consumerGroup", "g/1", "Invalid value 'g/1' for option 'consumerGroup'"),
    ("endpoints", "localhost", "Invalid value 'localhost' for option 'endpoints'"),
    ("pullBatchSizes", "10", "Unknown option 'pullbatchsizes' for the rmq source: expected one of endpoints"),
])
def test_bad_values_name_the_option_and_the_accepted_values(option, value, expected):
    with pytest.raises(RmqOptionError) as error:
        parse(**{option: value})
    assert expected in str(error.value)


def test_required_and_mode_specific_options():
    with pytest.raises(RmqOptionError, match="Option 'endpoints' is required"):
        parse_source_options({"topic": "t"}, streaming=True)
    with pytest.raises(RmqOptionError, match="Option 'topic' is required"):
        parse_source_options({"endpoints": "h:1"}, streaming=False)
    with pytest.raises(RmqOptionError, match="'endingOffsets' applies to batch reads only"):
        parse(endingOffsets="latest")
    with pytest.raises(RmqOptionError, match="'maxMessagesPerTrigger' applies to streams only"):
        parse(streaming=False, maxMessagesPerTrigger="10")
    with pytest.raises(RmqOptionError, match="option 'endingOffsets': expected latest, or JSON"):
        parse(streaming=False, endingOffsets="earliest")
    with pytest.raises(RmqOptionError, match="is not an integer >= -1"):
        parse(streaming=False, endingOffsets='{"orders":{"b":{"0":-2}}}')


def test_load_time_check_validates_values_before_the_read_mode_is_known():
    check_source_options({**BASE, "endingOffsets": "latest", "maxMessagesPerTrigger": "5"})
    with pytest.raises(RmqOptionError, match="Invalid value 'sometimes' for option 'failOnDataLoss'"):
        check_source_options({**BASE, "failOnDataLoss": "sometimes"})


def test_security_options_are_checked_and_the_secret_never_printed():
    settings = parse(accessKey="ak", secretKey="s3cr3t").pull
    assert settings.security.access_key == "ak" and "s3cr3t" not in repr(settings)
    with pytest.raises(RmqOptionError, match="accessKey is set but secretKey is not"):
        parse(accessKey="ak")
    with pytest.raises(RmqOptionError, match="Invalid value 'maybe' for option 'tls': expected true or"):
        parse(tls="maybe")


def test_outage_window_is_its_own_option_and_rides_out_two_minutes_by_default():
    pull = parse().pull
    assert (pull.pull_timeout_ms, pull.outage_window_ms) == (3000, 120_000)
    assert parse(brokerOutageWindowMs="600000", pullTimeoutMs="500").pull.outage_window_ms == 600_000
    expected = "Invalid value '2m' for option 'brokerOutageWindowMs': expected a positive integer"
    with pytest.raises(RmqOptionError, match=expected):
        parse(brokerOutageWindowMs="2m")


def test_offset_store_dir_must_be_a_directory(tmp_path):
    (tmp_path / "file").write_text("")
    fresh = str(tmp_path / "new" / "dir")
    assert parse(offsetStoreDir=fresh).offset_store_dir == fresh
    for path in (tmp_path / "file", tmp_path / "file" / "below"):
        expected = (rf"Invalid value '{path}' for option 'offsetStoreDir': expected a directory .* but "
                    rf"{tmp_path / 'file'} is a file")
        with pytest.raises(RmqOptionError, match=expected):
            parse(offsetStoreDir=str(path))


def test_kafka_style_options():
    options = parse(minPartitions="16", minMessagesPerTrigger="100", maxTriggerDelay="30s")
    assert (options.min_partitions, options.min_messages_per_trigger, options.max_trigger_delay_ms) == (
        16, 100, 30_000)
    assert parse().max_trigger_delay_ms == 15 * 60_000
    assert parse(maxTriggerDelay="250").max_trigger_delay_ms == 250
    a0, a1 = MessageQueue("orders", "broker-a", 0), MessageQueue("orders", "broker-a", 1)
    by_time = parse(startingOffsetsByTimestamp='{"orders":{"broker-a":{"0":1700000000000}}}',
                    startingOffsets="earliest").starting_offsets
    assert by_time == Timestamps({a0: 1700000000000}, Earliest())
    ending = parse(streaming=False, endingOffsetsByTimestamp='{"orders":{"broker-a":{"1":5}}}').ending_offsets
    assert ending == Timestamps({a1: 5}, Latest())
    assert parse(streaming=False, endingTimestamp="17").ending_offsets == AtTimestamp(17)
    committed = {"startingOffsets": "committed", "consumerGroup": "g"}
    assert parse(**committed).starting_offsets == Committed(Latest())
    assert parse(**committed, committedFallback="earliest").starting_offsets == Committed(Earliest())
    assert parse(**committed, committedFallback="timestamp:7").starting_offsets == Committed(AtTimestamp(7))
    assert parse(**committed, committedFallback="ERROR").starting_offsets == Committed(None)


def test_topic_pattern_replaces_topic():
    options = parse_source_options({"endpoints": "h:1", "topicPattern": r"orders-\d+"}, streaming=True)
    assert options.topics == () and options.subscribes("orders-12") and not options.subscribes("orders-x")
    assert not options.subscribes("orders-1-old")                      # the whole name must match
    json_offsets = '{"orders-1":{"broker-a":{"0":1}}}'
    parse_source_options({"endpoints": "h:1", "topicPattern": "orders-.*", "startingOffsets": json_offsets},
                         streaming=True)


@pytest.mark.parametrize("options, expected", [
    ({"topicPattern": "o.*"}, "Options 'topic' and 'topicPattern' exclude each other"),
    ({"minPartitions": "0"}, "Invalid value '0' for option 'minPartitions': expected a positive integer"),
    ({"maxTriggerDelay": "soon"}, "Invalid value 'soon' for option 'maxTriggerDelay': expected a duration: "
                                  "<n>ms, <n>s, <n>m or <n>h"),
    ({"committedFallback": "latest"}, "Option 'committedFallback' applies to startingOffsets=committed only"),
    ({"startingOffsets": "committed", "consumerGroup": "g", "committedFallback": "first"},
     "Invalid value 'first' for option 'committedFallback': expected one of latest, earliest, "
     "timestamp:<epoch-ms>, error"),
    ({"startingOffsetsByTimestamp": '{"orders":{"broker-a":{"0":-1}}}'},
     "offset -1 of orders/broker-a/0 is not an integer >= 0"),
    ({"startingOffsetsByTimestamp": "[1]"}, "Invalid value '[1]' for option 'startingOffsetsByTimestamp'"),
])
def test_bad_kafka_style_options_name_the_option(options, expected):
    with pytest.raises(RmqOptionError) as error:
        parse(**options)
    assert expected in str(error.value)


def test_pattern_errors_and_mode_of_the_new_options():
    expected = r"Invalid value '\(' for option 'topicPattern': expected a Python regular expression"
    with pytest.raises(RmqOptionError, match=expected):
        parse_source_options({"endpoints": "h:1", "topicPattern": "("}, streaming=True)
    with pytest.raises(RmqOptionError, match="topic 'other' does not match option 'topicPattern'"):
        parse_source_options({"endpoints": "h:1", "topicPattern": "orders-.*",
                              "startingOffsets": '{"other":{"b":{"0":1}}}'}, streaming=True)
    for option in ("endingOffsetsByTimestamp", "endingTimestamp"):
        with pytest.raises(RmqOptionError, match=f"Option '{option}' applies to batch reads only"):
            parse(**{option: "1"})
    for option in ("minMessagesPerTrigger", "maxTriggerDelay"):
        with pytest.raises(RmqOptionError, match=f"Option '{option}' applies to streams only"):
            parse(streaming=False, **{option: "1"})
    with pytest.raises(RmqOptionError, match="Option 'endingTimestamp' applies to every queue"):
        parse(streaming=False, endingTimestamp="1", endingOffsets="latest")
    with pytest.raises(RmqOptionError, match="Invalid value 'noon' for option 'endingTimestamp'"):
        parse(streaming=False, endingTimestamp="noon")


def test_sql_filter_is_checked_at_load_and_replaces_the_tag_expression():
    pull = parse(sqlFilter="region = 'eu' AND amount BETWEEN 100 AND 500").pull
    assert pull.sql_filter == "region = 'eu' AND amount BETWEEN 100 AND 500"
    assert pull.selector.is_sql and pull.selector.expression == pull.sql_filter
    assert parse().pull.selector == "*"
    with pytest.raises(RmqOptionError, match=r"'sqlFilter': invalid SQL92 filter at position 26: "
                                             r"expected a property name, literal or '\('"):
        check_source_options({**BASE, "sqlFilter": "region = 'eu' AND amount >"})
    with pytest.raises(RmqOptionError, match="'sqlFilter' and 'subExpression' are mutually exclusive"):
        check_source_options({**BASE, "sqlFilter": "a = 1", "subExpression": "TagA"})
    with pytest.raises(RmqOptionError, match=r"'sqlFilter': invalid SQL92 filter at position 64: "
                                             r"parentheses nested deeper than 64 levels"):
        check_source_options({**BASE, "sqlFilter": "(" * 200 + "a = 1" + ")" * 200})
    assert parse(sqlFilter="amount > -5").pull.sql_filter == "amount > -5"


def test_a_schema_names_source_columns_in_its_order():
    assert source_columns(schema(("queue_id", IntegerType()), ("queue_offset", LongType()),
                                 ("body", BinaryType()))) == ("queue_id", "queue_offset", "body")
    assert source_columns(schema(("properties", MapType(StringType(), StringType())),
                                 ("store_timestamp", TimestampType()))) == ("properties", "store_timestamp")
    assert source_columns(SOURCE_SCHEMA) == ALL_COLUMNS


@pytest.mark.parametrize(("fields", "problem"), [
    ([("queue_id", IntegerType()), ("nope", StringType())],
     "Column 'nope' of the schema is not a column of the rmq source"),
    ([("body", StringType())], "Column 'body' of the schema is binary in the rmq source, not string"),
    ([("queue_id", LongType())], "Column 'queue_id' of the schema is int in the rmq source, not bigint"),
    ([("body", BinaryType()), ("body", BinaryType())], "Column 'body' of the schema is named twice"),
    ([("properties", StructType([StructField("a", StringType())]))],
     "Column 'properties' of the schema is map<string,string> in the rmq source, not struct<a:string>"),
    ([("tags", ArrayType(StringType()))],
     "Column 'tags' of the schema is string in the rmq source, not array<string>"),
    ([("body", BinaryType(), False)], "Column 'body' of the schema is declared NOT NULL"),
    ([], "The schema names no column"),
])
def test_a_schema_with_a_bad_column_is_refused_naming_it_and_listing_the_valid_ones(fields, problem):
    with pytest.raises(RmqOptionError, match=re.escape(problem)) as refusal:
        source_columns(schema(*fields))
    assert "the rmq source's columns are topic string, broker_name string, queue_id int, queue_offset " \
           "bigint, msg_id string, tags string, keys string, body binary, properties map<string,string>, " \
           "born_timestamp timestamp, store_timestamp timestamp" in str(refusal.value)


def test_a_read_gathers_the_columns_it_needs_beside_the_querys():
    narrow = parse_source_options(BASE, streaming=True, columns=("body",)).pull
    assert narrow.read_columns == ("body", "queue_offset")
    tagged = parse_source_options({**BASE, "subExpression": "A || B"}, streaming=True, columns=("body",)).pull
    assert tagged.read_columns == ("body", "queue_offset", "tags")
    assert parse(subExpression="A").pull.read_columns == parse().pull.columns   # every column already


def test_kafka_style_limits_and_the_timestamp_strategy():
    stream = parse(maxBytesPerTrigger="1048576", maxRecordsPerPartition="5000")
    assert (stream.max_bytes_per_trigger, stream.max_records_per_partition) == (1048576, 5000)
    assert parse(streaming=False, maxRecordsPerPartition="10").max_records_per_partition == 10
    with pytest.raises(RmqOptionError, match="Option 'maxBytesPerTrigger' applies to streams only"):
        parse(streaming=False, maxBytesPerTrigger="100")
    with pytest.raises(RmqOptionError, match="Invalid value '0' for option 'maxRecordsPerPartition': "
                                             "expected a positive integer"):
        parse(maxRecordsPerPartition="0")
    assert parse(startingOffsets="timestamp:5").starting_offsets == AtTimestamp(5)
    assert parse(startingOffsets="timestamp:5", startingOffsetsByTimestampStrategy="ERROR"
                 ).starting_offsets == AtTimestamp(5, strict=True)
    by_time = parse(startingOffsetsByTimestamp='{"orders":{"broker-a":{"0":7}}}',
                    startingOffsetsByTimestampStrategy="error").starting_offsets
    assert isinstance(by_time, Timestamps) and by_time.strict and by_time.fallback == Latest()
    with pytest.raises(RmqOptionError, match="Invalid value 'fail' for option "
                                             "'startingOffsetsByTimestampStrategy': expected one of error, "
                                             "latest"):
        parse(startingOffsets="timestamp:5", startingOffsetsByTimestampStrategy="fail")
    with pytest.raises(RmqOptionError, match="Option 'startingOffsetsByTimestampStrategy' applies to "
                                             "startingOffsetsByTimestamp and startingOffsets=timestamp"):
        parse(startingOffsetsByTimestampStrategy="error")
