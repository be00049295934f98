"""Source-schema Arrow RecordBatches from CommitLog records (ARCHITECTURE.md §1, §3): one decoder,
`decode_columns`, of records gathered column-wise (rmq.record_columns) — by the broker's store read
out of the CommitLog mapping for its Flight data plane (docs/data-plane.md), or by `decode_records`
out of records lying back to back (the client's decoder of pulled PackedMessages).

The records are in the layout of `rmq.message_format` (spec store §3, big-endian). Every column is
computed for all records at once: the fixed headers as numpy records, Arrow arrays built straight
from the gathered (offsets, data) buffers for the variable-length fields, the properties split on
their separator bytes with numpy. There is no per-message Python code."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq import message_format as mf
from rmq.record_columns import RecordColumns, RecordParts, RecordTails, Spans, gather, spans


class CorruptRecordsError(ValueError):
    """The bytes are not well-formed records; the message names the first bad one."""


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


@functools.cache
def _string(text: str) -> pa.StringScalar:
    """An Arrow string scalar, made on first use from its buffers: pa.scalar loads pandas (pyarrow's
    conversion looks for it), which costs every Spark planning worker ~0.5 s and the broker ~200
    memory maps."""
    data = text.encode()
    offsets = np.array([0, len(data)], dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])[0]

# The fixed header (rmq.message_format.HEADER_FIELDS) as one big-endian numpy record.
_HEADER_CODES = {"i": ">i4", "q": ">i8", f"{mf.HOST_SIZE}s": (np.uint8, mf.HOST_SIZE)}
_HEADER = np.dtype([(name, _HEADER_CODES[code]) for name, code in mf.HEADER_FIELDS])
assert _HEADER.itemsize == mf.BODY_POS
# The 4 upper-case hex digits of every 16-bit value, as 4-byte items: a message id's 16 bytes
# become 32 characters with one np.take (half the time of binascii.hexlify(...).upper()).
_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)[
    (np.arange(1 << 16)[:, None] >> np.array([12, 8, 4, 0])) & 0xF].view(np.uint32).reshape(-1)


COLUMNS = tuple(SCHEMA.names)
# the columns read from a record's tail (topic, properties) besides its fixed header and body
TAIL_COLUMNS = frozenset({"topic", "tags", "keys", "properties"})
# the columns read from a record's fixed header and body alone (RecordParts.HEADS)
HEAD_COLUMNS = frozenset(COLUMNS) - TAIL_COLUMNS


def column_problem(names: Sequence[str]) -> str | None:
    """Why `names` is not a column set of SCHEMA (unknown or repeated name), None when it is."""
    for index, name in enumerate(names):
        if name not in SCHEMA.names:
            return f"unknown column {name!r}: the columns are {', '.join(COLUMNS)}"
        if name in names[:index]:
            return f"column {name!r} named twice"
    return None


def parts_of(columns: Sequence[str]) -> RecordParts:
    """What of each record the `columns` are read from (the store's column-wise gather)."""
    return RecordParts.HEADS if HEAD_COLUMNS.issuperset(columns) else RecordParts.HEADS_AND_TAILS


def decode_records(records: np.ndarray, sizes: np.ndarray, broker_name: str,
                   columns: Sequence[str] = COLUMNS) -> pa.RecordBatch:
    """The records (uint8, back to back) of the given sizes (int64) as one RecordBatch of SCHEMA's
    `columns` in that order (all by default): decode_columns of their column-wise gather."""
    _check(sizes >= mf.FIXED_OVERHEAD, "record shorter than the fixed overhead")
    if int(sizes.sum()) != len(records):
        raise CorruptRecordsError(f"sizes add up to {int(sizes.sum())} but records hold {len(records)} bytes")
    starts = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    return decode_columns(gather(records, starts, sizes, parts_of(columns)), broker_name, columns)


def decode_columns(read: RecordColumns, broker_name: str, columns: Sequence[str] = COLUMNS) -> pa.RecordBatch:
    """The records gathered column-wise (rmq.record_columns: by the store out of the CommitLog, or
    by decode_records) as one RecordBatch of SCHEMA's `columns` in that order. Only those are
    computed, and only the fields they come from are checked: the fixed header and body length
    always, the topic and properties lengths for topic, properties, tags and keys (the properties
    parsed only for the last three). A bad record is refused (CorruptRecordsError naming it)."""
    tails = read.tails if not TAIL_COLUMNS.isdisjoint(columns) else None
    if tails is None and not HEAD_COLUMNS.issuperset(columns):
        raise ValueError(f"columns {sorted(set(columns) - HEAD_COLUMNS)} are not in the records' heads")
    _check(read.sizes >= mf.FIXED_OVERHEAD, "record shorter than the fixed overhead")
    decoded = _Columns(read, broker_name, tails)
    arrays = [decoded.column(name) for name in columns]
    return pa.RecordBatch.from_arrays(arrays, schema=schema_of(tuple(columns)))


class _Columns:
    """The Arrow columns of records gathered column-wise, each checked as far as it is read."""

    def __init__(self, read: RecordColumns, broker_name: str, tails: RecordTails | None) -> None:
        self.read = read
        self.broker_name = broker_name
        sizes = read.sizes
        self.fields = read.headers.view(_HEADER).reshape(-1)
        if not _sizes_and_magic_stored(read.headers, sizes):   # the two checks name the problem
            _check(self.fields["magic_code"] == mf.MESSAGE_MAGIC_CODE, "bad magic code")
            _check(self.fields["total_size"] == sizes, "total size differs from sizes")
        # each body was gathered clipped to its record's room: a stored length equal to the
        # gathered one is within range, so that one comparison checks both
        body_lengths = read.bodies.lengths
        _check(body_lengths == self.fields["body_length"], "body length out of range")
        self.tails = tails
        if tails is not None:   # the topic clipped the same way to the room the body left
            topic_lengths = tails.topics.lengths
            _check(topic_lengths == tails.topic_lengths, "topic length out of range")
            _check(body_lengths + topic_lengths + tails.properties_lengths == sizes - mf.FIXED_OVERHEAD,
                   "field lengths do not add up")

    def column(self, name: str) -> pa.Array:
        fields, count = self.fields, len(self.read.sizes)
        match name:
            case "broker_name":
                return pa.repeat(_string(self.broker_name), count)
            case "queue_id":
                return _primitive(fields["queue_id"].astype(np.int32), pa.int32())
            case "queue_offset":
                return _primitive(fields["queue_offset"].astype(np.int64), pa.int64())
            case "msg_id":
                return _msg_ids(self.read.headers)
            case "born_timestamp" | "store_timestamp":
                return _timestamps(fields[name])
            case "body":
                return _variable(pa.binary(), self.read.bodies)
            case "topic":
                return self._topics
            case "tags":
                return self._properties.lookup(_string(mf.PROPERTY_TAGS))
            case "keys":
                return self._properties.lookup(_string(mf.PROPERTY_KEYS))
            case "properties":
                return self._properties.entries
        raise ValueError(f"no column {name!r} in the source schema")

    @functools.cached_property
    def _topics(self) -> pa.Array:
        assert self.tails is not None
        return _strings(self.tails.topics, "topic")

    @functools.cached_property
    def _properties(self) -> _Properties:
        assert self.tails is not None
        properties = self.tails.properties
        if properties.data.size:
            _strings(properties, "properties")   # checked UTF-8
            return _Properties.parse(properties)
        return _Properties.none(len(self.read.sizes))


@functools.cache
def schema_of(columns: tuple[str, ...]) -> pa.Schema:
    """SCHEMA's fields `columns`, in that order."""
    return SCHEMA if columns == COLUMNS else pa.schema([SCHEMA.field(name) for name in columns])


# ---------------------------------------------------------------- helpers


def _check(ok: np.ndarray, problem: str) -> None:
    if not ok.all():
        raise CorruptRecordsError(f"corrupt record #{int(np.argmin(ok))}: {problem}")


# a record's first 8 bytes: its total size, then the magic code
assert (mf.TOTAL_SIZE_POS, mf.MAGIC_CODE_POS) == (0, 4)
_MAGIC_CODE = mf.MESSAGE_MAGIC_CODE & 0xFFFFFFFF


def _sizes_and_magic_stored(headers: np.ndarray, sizes: np.ndarray) -> bool:
    """Whether every header starts with its size and the magic code: one comparison of the raw
    8 bytes with the expected ones (byte-swapped on the contiguous side, not the strided one)."""
    stored = np.ndarray((len(sizes),), np.uint64, headers, mf.TOTAL_SIZE_POS, (mf.BODY_POS,))
    expected = ((sizes.astype(np.uint64) << np.uint64(32)) | np.uint64(_MAGIC_CODE)).astype(">u8")
    return bool((stored == expected.view(np.uint64)).all())


def _variable(kind: pa.DataType, spans: Spans) -> pa.Array:
    """A string/binary array over the spans' (offsets, data) buffers, without a copy."""
    return pa.Array.from_buffers(kind, len(spans.offsets) - 1, [None, pa.py_buffer(spans.offsets),
                                                                 pa.py_buffer(spans.data)])


def _strings(spans: Spans, field: str) -> pa.Array:
    """The spans as a string array, refused (naming the first such record) unless all are UTF-8."""
    array = _variable(pa.string(), spans)
    try:
        array.validate(full=True)
    except pa.ArrowInvalid:
        offsets = spans.offsets.tolist()
        for index, (start, end) in enumerate(itertools.pairwise(offsets)):   # the error's path only
            try:
                spans.data[start:end].tobytes().decode()
            except UnicodeDecodeError:
                raise CorruptRecordsError(f"corrupt record #{index}: {field} is not UTF-8") from None
        raise
    return array


def _primitive(values: np.ndarray, kind: pa.DataType, valid: np.ndarray | None = None) -> pa.Array:
    """`values` (numpy, of kind's width) as an Arrow array over the same memory, null where `valid`
    is False. Not pa.array: it imports pandas on first use (~200 memory maps in the broker,
    tests/broker_server/test_broker_imports.py) and checks every value."""
    values = np.ascontiguousarray(values)
    if values.dtype.itemsize * 8 != kind.bit_width:
        raise TypeError(f"{values.dtype} values for an Arrow {kind} array")
    if valid is None or valid.all():
        return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    nulls = int((~valid).sum())
    return pa.Array.from_buffers(kind, len(values), [bitmap, pa.py_buffer(values)], null_count=nulls)


def _numpy(array: pa.Array) -> np.ndarray:
    """A null-free integer or boolean Arrow array as numpy (not Array.to_numpy: it loads pandas)."""
    if array.null_count:
        raise ValueError(f"{array.null_count} nulls in a {array.type} array read as numpy")
    data = array.buffers()[1]
    if pa.types.is_boolean(array.type):
        bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
        return bits[array.offset:array.offset + len(array)].view(np.bool_)
    dtype = np.dtype(f"<i{array.type.bit_width // 8}")
    return np.frombuffer(data, dtype, len(array), array.offset * dtype.itemsize)


def _timestamps(epoch_ms: np.ndarray) -> pa.Array:
    """Epoch-ms timestamps as a microsecond timestamp array."""
    return _primitive(epoch_ms.astype(np.int64) * _US_PER_MS, _TIMESTAMP)


def _msg_ids(header: np.ndarray) -> pa.Array:
    """Upper-case hex of store host + physical offset (from the (n, BODY_POS) header rows):
    32 characters per row."""
    raw = np.empty((len(header), mf.HOST_SIZE + 8), dtype=np.uint8)
    raw[:, :mf.HOST_SIZE] = header[:, mf.STORE_HOST_POS:mf.STORE_HOST_POS + mf.HOST_SIZE]
    raw[:, mf.HOST_SIZE:] = header[:, mf.PHYSICAL_OFFSET_POS:mf.PHYSICAL_OFFSET_POS + 8]
    digits = np.take(_HEX_DIGITS, raw.view(">u2"))
    width = 2 * raw.shape[1]
    offsets = np.arange(0, width * (len(header) + 1), width, dtype=np.int32)
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(digits)]
    return pa.Array.from_buffers(pa.string(), len(header), buffers)


_NAME_VALUE = ord(mf.NAME_VALUE_SEPARATOR)
_ITEM_END = ord(mf.PROPERTY_SEPARATOR)


def _items(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, ...]:
    """The properties items of texts data[offsets[i]:offsets[i + 1]] (_Properties.parse): each
    one's row, start, name end, value start and end (int64)."""
    separators = np.flatnonzero(data == _ITEM_END)
    row_ends = offsets[1:]
    unterminated = row_ends[(row_ends > offsets[:-1]) & (data[np.maximum(row_ends - 1, 0)] != _ITEM_END)]
    # each item ends at a separator (the next starts after it) or an unterminated row's end
    # (the next starts there), in order: a row's end before a separator at the same place
    ends = np.concatenate([unterminated, separators])
    following = np.concatenate([unterminated, separators + 1])
    if len(unterminated):
        order = np.argsort(ends, kind="stable")
        ends, following = ends[order], following[order]
    starts = np.concatenate([offsets[:1], following[:-1]])
    kept = ends > starts
    starts, ends = starts[kept], ends[kept]
    marks = np.flatnonzero(data == _NAME_VALUE)
    first = np.searchsorted(marks, starts)
    mark = marks[np.minimum(first, len(marks) - 1)] if len(marks) else ends
    split = (first < len(marks)) & (mark < ends)
    name_ends, value_starts = np.where(split, mark, ends), np.where(split, mark + 1, ends)
    return np.searchsorted(offsets, starts, side="right") - 1, starts, name_ends, value_starts, ends


def _columns_of(table: np.ndarray, pieces: list[tuple[int, int]]) -> pa.Array:
    """The string array of the pieces [start, end) of every row of a uint8 table, row by row (each
    piece copied as one strided column of items)."""
    count, width = table.shape
    if not pieces:
        return pa.nulls(0, pa.string())
    total = sum(end - start for start, end in pieces)
    data = np.empty(count * total, dtype=np.uint8)
    place = 0
    for start, end in pieces:
        item = np.dtype((np.void, end - start))
        if end > start:
            np.ndarray((count,), item, data, place, (total,))[...] = np.ndarray((count,), item, table, start,
                                                                                (width,))
        place += end - start
    offsets = np.zeros(count * len(pieces) + 1, dtype=np.int32)
    np.cumsum(np.tile([end - start for start, end in pieces], count), out=offsets[1:])
    return _variable(pa.string(), Spans(offsets, data))


class _Properties:
    """The properties of `count` records (`name \\x01 value \\x02 ...` each, rmq.message_format)
    split into their items on the text's bytes (numpy: the separators are ASCII, so every piece of
    UTF-8 text is UTF-8): the map column, and one name's value per row."""

    def __init__(self, count: int, rows: np.ndarray, names: pa.Array, values: pa.Array) -> None:
        self.count = count
        self.rows = rows        # int64, the row of each item, in order
        self.names = names      # string, one per item
        self.values = values    # string, one per item ("" after a name without a separator)

    @classmethod
    def parse(cls, text: Spans) -> _Properties:
        """The items of each row's text (UTF-8, checked): pieces between PROPERTY_SEPARATORs (the
        last one may lack its separator), empty ones dropped, each split at its first
        NAME_VALUE_SEPARATOR (none: the value is empty), as rmq.message_format.decode_properties.
        Texts of one length with their separators at the same places (one producer's messages:
        the same names, values of one length) are split once, their pieces copied column-wise."""
        count, lengths = len(text.offsets) - 1, text.lengths
        width = int(lengths[0])
        if count > 1 and width and bool((lengths == width).all()):
            alike = cls._alike(text.data.reshape(count, width))
            if alike is not None:
                return alike
        rows, starts, name_ends, value_starts, ends = _items(text.data, text.offsets.astype(np.int64))
        return cls(count, rows, _variable(pa.string(), spans(text.data, starts, name_ends - starts)),
                   _variable(pa.string(), spans(text.data, value_starts, ends - value_starts)))

    @classmethod
    def _alike(cls, table: np.ndarray) -> _Properties | None:
        """The texts of a (count, width) table when every row has its separators where the first
        row has them (the first row's separator bytes in every row, and no more of them in all):
        the first row's items, at the same places in every row. None otherwise."""
        count, width = table.shape
        first = table[0]
        for separator in (_ITEM_END, _NAME_VALUE):
            places = np.flatnonzero(first == separator)
            if (np.count_nonzero(table == separator) != count * len(places)
                    or not bool((table[:, places] == separator).all())):
                return None
        _rows, starts, name_ends, value_starts, ends = _items(first, np.array([0, width], dtype=np.int64))
        names = [(int(start), int(end)) for start, end in zip(starts, name_ends, strict=True)]
        values = [(int(start), int(end)) for start, end in zip(value_starts, ends, strict=True)]
        return cls(count, np.repeat(np.arange(count, dtype=np.int64), len(names)),
                   _columns_of(table, names), _columns_of(table, values))

    @classmethod
    def none(cls, count: int) -> _Properties:
        """`count` rows without properties (what parse gives for empty texts, without parsing)."""
        no_items = pa.nulls(0, pa.string())
        return cls(count, np.zeros(0, dtype=np.int64), no_items, no_items)

    @functools.cached_property
    def entries(self) -> pa.MapArray:
        offsets = np.zeros(self.count + 1, dtype=np.int32)
        np.cumsum(np.bincount(self.rows, minlength=self.count), out=offsets[1:])
        return pa.MapArray.from_arrays(_primitive(offsets, pa.int32()), self.names, self.values,
                                       type=_PROPERTIES)

    def lookup(self, name: pa.StringScalar) -> pa.Array:
        """The value of property `name` per row (its last item of that name), null where the row
        has none."""
        if not len(self.names):
            return pa.nulls(self.count, pa.string())
        matches = np.flatnonzero(_numpy(pc.equal(self.names, name)))
        index = np.full(self.count, -1, dtype=np.int64)
        index[self.rows[matches]] = matches
        return self.values.take(_primitive(index, pa.int64(), valid=index >= 0))
