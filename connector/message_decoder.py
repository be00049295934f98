"""Column-wise decoding of pulled messages into Arrow (ARCHITECTURE.md §1, §3).

`PackedMessages.records` holds CommitLog records back to back in the layout of
`rmq.message_format` (spec store §3, big-endian). Every column is computed for all records
at once: numpy gathers at the fixed field offsets, Arrow arrays built straight from
(offsets, data) buffers for the variable-length fields, pyarrow.compute for the properties
map. There is no per-message Python code.
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq import message_format as mf
from rmq.connector.errors import CorruptMessagesError
from rmq.v1 import rmq_pb2

# Records store epoch milliseconds; Spark takes timestamps as microseconds (TimestampType).
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_US_PER_MS = 1000
_PROPERTIES = pa.map_(pa.string(), pa.string())

SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("broker_name", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("msg_id", pa.string()),
    ("tags", pa.string()),
    ("keys", pa.string()),
    ("body", pa.binary()),
    ("properties", _PROPERTIES),
    ("born_timestamp", _TIMESTAMP),
    ("store_timestamp", _TIMESTAMP),
])

# Prebuilt scalars: pyarrow.compute converting a Python str per call costs ≈ 60 µs more.
_EMPTY = pa.scalar("", pa.string())
_TAGS = pa.scalar(mf.PROPERTY_TAGS, pa.string())
_KEYS = pa.scalar(mf.PROPERTY_KEYS, pa.string())


def decode(packed: rmq_pb2.PackedMessages, broker_name: str) -> pa.RecordBatch:
    """All records of one pull as a RecordBatch with SCHEMA."""
    records = np.frombuffer(packed.records, dtype=np.uint8)
    sizes = _sizes(packed, len(records))
    starts = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    if len(sizes):
        magic = _read_int(records, starts + mf.MAGIC_CODE_POS, "i4")
        _check(magic == mf.MESSAGE_MAGIC_CODE, "bad magic code")
        total_size = _read_int(records, starts + mf.TOTAL_SIZE_POS, "i4")
        _check(total_size == sizes, "total size differs from sizes")

    room = sizes - mf.FIXED_OVERHEAD  # bytes left for body + topic + properties
    body_length = _read_int(records, starts + mf.BODY_LENGTH_POS, "i4").astype(np.int64)
    _check((body_length >= 0) & (body_length <= room), "body length out of range")
    topic_length_pos = starts + mf.BODY_POS + body_length
    topic_length = _read_int(records, topic_length_pos, "u1").astype(np.int64)
    _check(topic_length <= room - body_length, "topic length out of range")
    properties_length_pos = topic_length_pos + 1 + topic_length
    properties_length = _read_int(records, properties_length_pos, "i2").astype(np.int64)
    _check(body_length + topic_length + properties_length == room, "field lengths do not add up")

    properties_text = _variable(records, pa.string(), properties_length_pos + 2, properties_length)
    properties = _Properties.parse(properties_text)
    columns = [
        _variable(records, pa.string(), topic_length_pos + 1, topic_length),
        pa.repeat(pa.scalar(broker_name, pa.string()), len(sizes)),
        pa.array(_read_int(records, starts + mf.QUEUE_ID_POS, "i4"), pa.int32()),
        pa.array(_read_int(records, starts + mf.QUEUE_OFFSET_POS, "i8"), pa.int64()),
        _msg_ids(records, starts),
        properties.lookup(_TAGS),
        properties.lookup(_KEYS),
        _variable(records, pa.binary(), starts + mf.BODY_POS, body_length),
        properties.entries,
        _timestamps(records, starts + mf.BORN_TIMESTAMP_POS),
        _timestamps(records, starts + mf.STORE_TIMESTAMP_POS),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def filter_tags(batch: pa.RecordBatch, tags: set[str] | frozenset[str] | None) -> pa.RecordBatch:
    """Rows whose tag is one of `tags` (None: all rows). The broker filters by tag hash
    code, which can collide; this re-checks the tag strings (RocketMQ processPullResult)."""
    if tags is None:
        return batch
    return batch.filter(pc.is_in(batch.column("tags"), value_set=pa.array(sorted(tags), pa.string())))


# ---------------------------------------------------------------- helpers


def _sizes(packed: rmq_pb2.PackedMessages, records_length: int) -> np.ndarray:
    if len(packed.sizes) != 4 * packed.count:
        raise CorruptMessagesError(f"corrupt PackedMessages: {len(packed.sizes)} bytes of sizes "
                                   f"for {packed.count} messages")
    sizes = np.frombuffer(packed.sizes, dtype="<i4").astype(np.int64)
    _check(sizes >= mf.FIXED_OVERHEAD, "record shorter than the fixed overhead")
    if int(sizes.sum()) != records_length:
        raise CorruptMessagesError(f"corrupt PackedMessages: sizes add up to {int(sizes.sum())} "
                                   f"but records hold {records_length} bytes")
    return sizes


def _check(ok: np.ndarray, problem: str) -> None:
    if not ok.all():
        raise CorruptMessagesError(f"corrupt record #{int(np.argmin(ok))} in PackedMessages: {problem}")


def _rows(records: np.ndarray, positions: np.ndarray, width: int) -> np.ndarray:
    """records[p:p + width] for each position p, as the rows of an (n, width) array."""
    if len(positions) > 1:
        step = int(positions[1] - positions[0])
        if step > 0 and (np.diff(positions) == step).all():
            # Evenly spaced (records of one size): a strided view instead of an index gather.
            rows = np.ndarray((len(positions), width), np.uint8, records, int(positions[0]), (step, 1))
            rows.flags.writeable = False
            return rows
    return records[positions[:, None] + np.arange(width)]


def _read_int(records: np.ndarray, positions: np.ndarray, kind: str) -> np.ndarray:
    """The big-endian integer of type `kind` (numpy code) at each position, native order."""
    dtype = np.dtype(">" + kind)
    raw = _rows(records, positions, dtype.itemsize)
    return raw.view(dtype).reshape(-1).astype(dtype.newbyteorder("="))


def _timestamps(records: np.ndarray, positions: np.ndarray) -> pa.Array:
    """The epoch-ms timestamp at each position as a microsecond timestamp array."""
    return pa.array(_read_int(records, positions, "i8") * _US_PER_MS, _TIMESTAMP)


def _variable(records: np.ndarray, kind: pa.DataType, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A string/binary array of records[start:start+length] per row, from (offsets, data)."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    if len(lengths) and (lengths == lengths[0]).all():
        data = np.ascontiguousarray(_rows(records, starts, int(lengths[0]))).reshape(-1)
    else:
        # Byte k of row i sits at starts[i] + (k - offsets[i]).
        data = records[np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])]
    array = pa.Array.from_buffers(kind, len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    if kind == pa.string():
        try:
            array.validate(full=True)
        except pa.ArrowInvalid as error:
            raise CorruptMessagesError(f"corrupt record in PackedMessages: {error}") from None
    return array


def _msg_ids(records: np.ndarray, starts: np.ndarray) -> pa.Array:
    """Upper-case hex of store host + physical offset: 32 characters per row."""
    raw = np.hstack([_rows(records, starts + mf.STORE_HOST_POS, mf.HOST_SIZE),
                     _rows(records, starts + mf.PHYSICAL_OFFSET_POS, 8)])
    digits = binascii.hexlify(raw.tobytes()).upper()
    width = 2 * raw.shape[1]
    offsets = np.arange(0, width * (len(starts) + 1), width, dtype=np.int32)
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(digits)]
    return pa.Array.from_buffers(pa.string(), len(starts), buffers)


@dataclass(frozen=True)
class _Properties:
    """The properties column as a map plus its flat (row, name, value) entries."""

    entries: pa.MapArray
    rows: np.ndarray
    names: pa.Array
    values: pa.Array

    @classmethod
    def parse(cls, text: pa.Array) -> _Properties:
        """Parse `name \\x01 value \\x02 ...` strings into a map per row."""
        items_per_row = pc.split_pattern(text, mf.PROPERTY_SEPARATOR)
        items = items_per_row.flatten()
        keep = pc.not_equal(items, _EMPTY)  # the empty piece after the trailing separator
        items = items.filter(keep)
        rows = pc.list_parent_indices(items_per_row).filter(keep).to_numpy()

        pairs = pc.split_pattern(items, mf.NAME_VALUE_SEPARATOR, max_splits=1)
        pieces = pairs.flatten()
        first = pairs.offsets.to_numpy()[:-1] - pairs.offsets[0].as_py()
        has_value = pc.list_value_length(pairs).to_numpy() == 2
        names = pieces.take(first)
        values = pc.fill_null(pieces.take(pa.array(first + 1, mask=~has_value)), _EMPTY)

        offsets = np.zeros(len(text) + 1, dtype=np.int32)
        np.cumsum(np.bincount(rows, minlength=len(text)), out=offsets[1:])
        entries = pa.MapArray.from_arrays(pa.array(offsets), names, values, type=_PROPERTIES)
        return cls(entries, rows, names, values)

    def lookup(self, name: pa.StringScalar) -> pa.Array:
        """The value of property `name` per row, null where the row has none."""
        matches = pc.equal(self.names, name).to_numpy(zero_copy_only=False)
        index = np.full(len(self.entries), -1, dtype=np.int64)
        index[self.rows[matches]] = np.arange(int(matches.sum()))
        return self.values.filter(matches).take(pa.array(index, mask=index < 0))
