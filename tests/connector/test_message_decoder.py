"""Column-wise decoding of PackedMessages (spec store §3 layout, TV2 vector)."""

from __future__ import annotations

import random
import struct
import zlib
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest

from rmq import message_format as mf
from rmq import record_batch
from rmq.connector.spark.message_decoder import (
    SCHEMA,
    CorruptMessagesError,
    decode,
    decode_pulls,
    filter_tags,
)
from rmq.connector.spark.source_schema import SOURCE_ARROW_SCHEMA
from rmq.v1 import rmq_pb2
from tests.spec_vectors import TV2_RECORD as TV2

STORE_HOST = bytes([127, 0, 0, 1]) + (10911).to_bytes(4, "big")
BORN_HOST = bytes([127, 0, 0, 1]) + (1234).to_bytes(4, "big")



def record(topic: str = "T", body: bytes = b"hi", *, queue_id: int = 0, queue_offset: int = 0,
           physical_offset: int = 0, born: int = 1, stored: int = 2,
           properties: dict[str, str] | None = None, raw_properties: str | None = None) -> bytes:
    """One CommitLog record, byte for byte as spec store §3 lays it out (big-endian)."""
    text = raw_properties if raw_properties is not None else mf.encode_properties(properties or {})
    props = text.encode()
    name = topic.encode()
    total = mf.calc_msg_length(len(body), len(name), len(props))
    header = struct.pack(">iiiiiqqiq8sq8siqi", total, mf.MESSAGE_MAGIC_CODE, zlib.crc32(body) & 0x7FFFFFFF,
                         queue_id, 0, queue_offset, physical_offset, 0, born, BORN_HOST, stored, STORE_HOST,
                         0, 0, len(body))
    return header + body + struct.pack(">b", len(name)) + name + struct.pack(">h", len(props)) + props


def pack(records: list[bytes]) -> rmq_pb2.PackedMessages:
    sizes = np.array([len(r) for r in records], dtype="<i4")
    return rmq_pb2.PackedMessages(count=len(records), sizes=sizes.tobytes(), records=b"".join(records))


def ms(value: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=value)


def test_builder_reproduces_the_spec_vector() -> None:
    assert record() == TV2


def test_decodes_every_field_of_the_spec_vector() -> None:
    batch = decode(pack([TV2]), "broker-a")

    assert batch.schema == SCHEMA
    assert batch.to_pylist() == [{
        "topic": "T", "broker_name": "broker-a", "queue_id": 0, "queue_offset": 0,
        "msg_id": "7F00000100002A9F0000000000000000", "tags": None, "keys": None, "body": b"hi",
        "properties": [], "born_timestamp": ms(1), "store_timestamp": ms(2),
    }]
    # Epoch microseconds, what Spark's TimestampType holds.
    assert batch.column("store_timestamp").cast(pa.int64()).to_pylist() == [2000]


def test_schema_is_the_design_schema() -> None:
    assert [(f.name, str(f.type)) for f in SCHEMA] == [
        ("topic", "string"), ("broker_name", "string"), ("queue_id", "int32"), ("queue_offset", "int64"),
        ("msg_id", "string"), ("tags", "string"), ("keys", "string"), ("body", "binary"),
        ("properties", "map<string, string>"), ("born_timestamp", "timestamp[us, tz=UTC]"),
        ("store_timestamp", "timestamp[us, tz=UTC]"),
    ]


def test_schema_is_what_spark_takes_from_the_source_as_is() -> None:
    # Spark accepts read() batches only with exactly this schema: the reader does not cast.
    assert SCHEMA.equals(SOURCE_ARROW_SCHEMA, check_metadata=True)


def test_unicode_tags_keys_and_properties_round_trip() -> None:
    props = {"TAGS": "标签🙂", "KEYS": "k1 κλειδί", "ünï": "cödé", "empty": ""}
    batch = decode(pack([record("主题-ä", "body ✓".encode(), properties=props, queue_id=3,
                                queue_offset=41, physical_offset=0x0102030405060708)]), "b-ü")

    row = batch.to_pylist()[0]
    assert (row["topic"], row["broker_name"]) == ("主题-ä", "b-ü")
    assert (row["queue_id"], row["queue_offset"]) == (3, 41)
    assert (row["tags"], row["keys"]) == ("标签🙂", "k1 κλειδί")
    assert dict(row["properties"]) == props
    assert row["body"].decode() == "body ✓"
    assert row["msg_id"] == "7F00000100002A9F0102030405060708"


ODD_PROPERTIES = [
    "A\x011",                     # the last item without its separator, then a row starting with one
    "\x02B\x012\x02\x02",          # empty items
    "",
    "TAGS\x01x\x02TAGS\x01y\x02KEYS",   # a name twice (the last counts), an item without a value
    "C\x01v\x01w\x02\x01only value\x02TAGS\x01",
    "\x02",
    "TAGS\x01z",
]


def test_odd_properties_texts_split_as_decode_properties_does() -> None:
    """Rows of empty and unterminated texts side by side, empty items, repeated names: the map
    holds each row's items in order and tags / keys the last value of their name, as the
    per-message decode (rmq.message_format.decode_properties) reads them."""
    batch = decode(pack([record(raw_properties=raw) for raw in ODD_PROPERTIES]), "b")

    items = [[tuple(item.partition("\x01")[::2]) for item in raw.split("\x02") if item]
             for raw in ODD_PROPERTIES]
    assert batch.column("properties").to_pylist() == items
    decoded = [mf.decode_properties(raw) for raw in ODD_PROPERTIES]
    assert batch.column("tags").to_pylist() == [p.get("TAGS") for p in decoded] == [
        None, None, None, "y", "", None, "z"]
    assert batch.column("keys").to_pylist() == [p.get("KEYS") for p in decoded]


@pytest.mark.parametrize("texts", [
    ["AB\x01c\x02", "A\x01bc\x02", "AB\x01c\x02"],      # the separators of one length's texts elsewhere
    ["AB\x01c\x02", "A\x02\x01c\x02", "AB\x01c\x02"],    # where the first row has them, and one more
    ["TAGS\x01a\x02KEYS\x01b c\x02", "TAGS\x01x\x02KEYS\x01y z\x02"],   # alike: split once
], ids=["elsewhere", "one-more", "alike"])
def test_properties_texts_of_one_length_split_as_decode_properties_does(texts: list[str]) -> None:
    """Texts of one length are split once only when every row has its separators where the first
    row has them; otherwise each row is split on its own."""
    batch = decode(pack([record(raw_properties=raw) for raw in texts]), "b")

    items = [[tuple(item.partition("\x01")[::2]) for item in raw.split("\x02") if item] for raw in texts]
    assert batch.column("properties").to_pylist() == items
    assert batch.column("keys").to_pylist() == [mf.decode_properties(raw).get("KEYS") for raw in texts]


def test_empty_body_and_empty_properties() -> None:
    batch = decode(pack([record(body=b"", properties={}), record(body=b"", properties={"TAGS": "a"})]), "b")

    assert batch.column("body").to_pylist() == [b"", b""]
    assert batch.column("properties").to_pylist() == [[], [("TAGS", "a")]]
    assert batch.column("tags").to_pylist() == [None, "a"]
    assert batch.column("keys").to_pylist() == [None, None]


def test_property_without_separator_gets_an_empty_value_like_decode_properties() -> None:
    raw = "A\x011\x02lonely\x02B\x01x\x01y\x02"
    batch = decode(pack([record(raw_properties=raw)]), "b")

    assert dict(batch.column("properties")[0].as_py()) == mf.decode_properties(raw) == {
        "A": "1", "lonely": "", "B": "x\x01y"}


def test_no_messages_gives_an_empty_batch_with_the_schema() -> None:
    batch = decode(rmq_pb2.PackedMessages(count=0), "b")

    assert batch.num_rows == 0
    assert batch.schema == SCHEMA


def test_ten_thousand_messages_match_a_per_message_decode() -> None:
    rng = random.Random(7)
    messages = []
    for i in range(10_000):
        props = {"UNIQ_KEY": f"u{i}"}
        if i % 3:
            props["TAGS"] = rng.choice(["TagA", "TagB", "标签"])
        if i % 5 == 0:
            props["KEYS"] = f"key-{i} other"
        body = rng.randbytes(rng.randrange(0, 300))
        messages.append(dict(body=body, queue_id=i % 8, queue_offset=i // 8, physical_offset=1000 * i,
                             born=1_700_000_000_000 + i, stored=1_700_000_000_500 + i, properties=props))

    batch = decode(pack([record("TopicTest", **m) for m in messages]), "broker-b")

    assert batch.num_rows == 10_000
    assert batch.column("body").to_pylist() == [m["body"] for m in messages]
    assert batch.column("queue_id").to_pylist() == [m["queue_id"] for m in messages]
    assert batch.column("queue_offset").to_pylist() == [m["queue_offset"] for m in messages]
    assert batch.column("tags").to_pylist() == [m["properties"].get("TAGS") for m in messages]
    assert batch.column("keys").to_pylist() == [m["properties"].get("KEYS") for m in messages]
    assert [dict(p) for p in batch.column("properties").to_pylist()] == [m["properties"] for m in messages]
    assert batch.column("msg_id").to_pylist() == [mf.message_id(STORE_HOST, m["physical_offset"])
                                                  for m in messages]
    assert batch.column("born_timestamp").to_pylist() == [ms(m["born"]) for m in messages]
    assert batch.column("store_timestamp").to_pylist() == [ms(m["stored"]) for m in messages]
    assert set(batch.column("topic").to_pylist()) == {"TopicTest"}


@pytest.mark.parametrize(
    ("packed", "problem"),
    [
        (rmq_pb2.PackedMessages(count=2, sizes=struct.pack("<i", 94), records=TV2), "sizes"),
        (rmq_pb2.PackedMessages(count=1, sizes=struct.pack("<i", 95), records=TV2 + b"x"), "total size"),
        (rmq_pb2.PackedMessages(count=1, sizes=struct.pack("<i", 94), records=TV2[:93]), "add up"),
        (pack([TV2[:4] + b"\x00\x00\x00\x00" + TV2[8:]]), "magic"),
        (pack([TV2[:84] + struct.pack(">i", 50) + TV2[88:]]), "body length"),
        (pack([TV2[:90] + b"\x05" + TV2[91:]]), "topic length"),
    ],
)
def test_corrupt_buffers_are_refused_with_a_clear_error(packed: rmq_pb2.PackedMessages, problem: str) -> None:
    with pytest.raises(CorruptMessagesError, match=problem):
        decode(packed, "b")


def test_invalid_utf8_topic_is_refused() -> None:
    bad = bytearray(TV2)
    bad[91] = 0xFF  # the topic byte
    with pytest.raises(CorruptMessagesError, match="utf8|UTF8|UTF-8"):
        decode(pack([bytes(bad)]), "b")


def test_filter_tags_rechecks_tag_strings() -> None:
    tags = ["TagA", "TagB", None, "TagC"]
    batch = decode(pack([record(properties={"TAGS": t} if t else {}) for t in tags]), "b")

    assert filter_tags(batch, None).num_rows == 4
    assert filter_tags(batch, {"TagA", "TagC"}).column("tags").to_pylist() == ["TagA", "TagC"]
    assert filter_tags(batch, set()).num_rows == 0
    assert isinstance(filter_tags(batch, {"TagB"}), pa.RecordBatch)


def test_records_of_one_size_decode_like_mixed_sizes() -> None:
    """Evenly spaced records take the strided path; it must agree with the gather path."""
    same_size = [record("T", b"%05d" % i, queue_offset=i, physical_offset=96 * i,
                        properties={"TAGS": f"t{i % 10}"}) for i in range(100)]
    mixed = same_size + [record("T", b"longer body", properties={"TAGS": "x"})]

    uniform_batch = decode(pack(same_size), "b")

    assert len({len(r) for r in same_size}) == 1
    assert uniform_batch.to_pylist() == decode(pack(mixed), "b").slice(0, 100).to_pylist()
    assert uniform_batch.column("body").to_pylist() == [b"%05d" % i for i in range(100)]
    assert uniform_batch.column("tags").to_pylist() == [f"t{i % 10}" for i in range(100)]


def test_records_of_one_size_with_fields_at_different_places() -> None:
    """Equal record sizes do not put every field at the same place: a longer body with a
    shorter topic moves the topic and properties of that record."""
    records = [record("TT", b"abc", properties={"TAGS": "x"}), record("TTT", b"ab", properties={"TAGS": "x"}),
               record("T", b"abcd", properties={"TAGS": "x"})]

    batch = decode(pack(records), "b")

    assert len({len(r) for r in records}) == 1
    assert batch.column("topic").to_pylist() == ["TT", "TTT", "T"]
    assert batch.column("body").to_pylist() == [b"abc", b"ab", b"abcd"]
    assert batch.column("tags").to_pylist() == ["x", "x", "x"]


def test_tails_of_one_length_with_topics_of_different_lengths() -> None:
    """Records whose tails (topic and properties) have one length, the topic's share differing:
    the properties of each lie at their own place, not one tail length from the last."""
    records = [record("TT", b"ab", properties={"TAGS": "xyz"}),
               record("TTTT", b"ab", properties={"TAGS": "x"}),
               record("TTT", b"ab", properties={"TAGS": "xy"})]

    batch = decode(pack(records), "b")

    assert len({len(r) for r in records}) == 1
    assert batch.column("topic").to_pylist() == ["TT", "TTTT", "TTT"]
    assert batch.column("tags").to_pylist() == ["xyz", "x", "xy"]


def test_several_pulls_decode_as_their_rows_in_order() -> None:
    """decode_pulls (the Spark reader's batches of consecutive pulls) gives the rows of each
    pull's decode, in pull order, also when one pull is empty or a corrupt one comes later."""
    pulls = [
        pack([record("T", b"a", queue_offset=0, properties={"TAGS": "x"})]),
        rmq_pb2.PackedMessages(count=0),
        pack([record("T", b"b" * i, queue_offset=1 + i, physical_offset=200 * i,
                     properties={"KEYS": f"k{i}"} if i % 2 else {}) for i in range(5)]),
    ]

    batch = decode_pulls(pulls, "b")

    assert batch.schema == SCHEMA
    assert batch.to_pylist() == [row for pull in pulls for row in decode(pull, "b").to_pylist()]
    assert batch.column("queue_offset").to_pylist() == list(range(6))
    corrupt = rmq_pb2.PackedMessages(count=2, sizes=struct.pack("<i", 94), records=TV2)
    with pytest.raises(CorruptMessagesError, match="sizes"):
        decode_pulls([pulls[0], corrupt], "b")


def test_named_columns_decode_as_those_of_the_full_batch_in_their_order() -> None:
    pulls = [pack([record(body=b"x" * n, queue_offset=n, properties={"TAGS": f"t{n}", "k": "v"})
                   for n in range(5)])]
    full = decode_pulls(pulls, "broker-a")
    for columns in (["body"], ["queue_offset", "queue_id", "body"], ["keys", "msg_id", "tags"], SCHEMA.names):
        narrow = decode_pulls(pulls, "broker-a", columns)
        assert narrow.schema.names == list(columns)
        assert narrow == full.select(list(columns))


def test_properties_are_parsed_only_for_the_columns_made_of_them(monkeypatch) -> None:
    """properties, tags and keys come from the properties text; other columns never parse it."""
    pulls = [pack([record(properties={"TAGS": "a", "KEYS": "k"}) for _ in range(3)])]

    def refuse(text: pa.Array) -> None:
        raise AssertionError("properties parsed")

    monkeypatch.setattr(record_batch._Properties, "parse", refuse)
    decode_pulls(pulls, "broker-a", ["topic", "broker_name", "queue_id", "queue_offset", "msg_id", "body",
                                     "born_timestamp", "store_timestamp"])
    for column in ("properties", "tags", "keys"):
        with pytest.raises(AssertionError, match="properties parsed"):
            decode_pulls(pulls, "broker-a", [column])
