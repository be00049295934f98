"""Column-wise gathers of CommitLog records (RecordColumns), for a reader that builds columns of them
(a Flight read, docs/data-plane.md; the client's decoder of pulled records): the fixed headers by one
numpy row gather, the bodies by one more and, when the reader needs the topic or the properties,
each record's tail (topic length, topic, properties length, properties) by one more, split into
topics and properties afterwards. Never a copy of whole records with the fields copied out of it
again. No per-record Python; numpy only (the store answers these, rmq.record_batch builds Arrow).

The record layout is rmq.message_format's (spec store §3). A gather never reads outside a record:
lengths are clipped to the room their record has, and the lengths as stored are kept so that a
decoder checking them sees the corruption (rmq.record_batch)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from rmq import message_format as mf

_BODY_LENGTH = np.dtype(">i4")
_PROPERTIES_LENGTH = np.dtype(">i2")
# the bytes of a record behind its body besides the topic and properties: their two lengths
_TAIL_OVERHEAD = mf.FIXED_OVERHEAD - mf.BODY_POS
# fields of unequal lengths are gathered padded to the longest, then the padding dropped, while
# that copies at most this many times the fields' bytes; beyond it one slice per field
MAX_PADDING_FACTOR = 2


class RecordParts(enum.Enum):
    """What a column-wise gather copies of each record."""

    HEADS = "fixed header and body"
    HEADS_AND_TAILS = "fixed header, body, topic and properties"


@dataclass(frozen=True)
class Spans:
    """Variable-length fields of n records back to back: field i is data[offsets[i]:offsets[i + 1]]."""

    offsets: np.ndarray   # int32 (n + 1)
    data: np.ndarray      # uint8

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


@dataclass(frozen=True)
class RecordTails:
    """What follows each body: the topic and the properties, with their lengths as stored."""

    topic_lengths: np.ndarray        # int64, the 1-byte topic length as stored
    topics: Spans                    # each clipped to its record's room
    properties_lengths: np.ndarray   # int64, the 2-byte properties length as stored (signed)
    properties: Spans                # each clipped to the room its record has left


@dataclass(frozen=True)
class RecordColumns:
    """The fixed headers, bodies and (RecordParts.HEADS_AND_TAILS) tails of a read's records. The
    header's fields are as stored (unchecked); a body length out of its record is gathered as the
    bytes the record has room for, so a decoder that checks the headers sees the corruption."""

    sizes: np.ndarray      # int64, each record's size (its ConsumeQueue entry's)
    headers: np.ndarray    # uint8 (count, message_format.BODY_POS), one row per record
    bodies: Spans
    tails: RecordTails | None = None

    @property
    def byte_count(self) -> int:
        """The bytes held, never more than the records' (a read granted the records' bytes holds
        no more than it was granted): heads count 88 + 4 + body per record (a record is at least
        92 + body bytes); with the tails every byte of the records is held, counted as the
        records' sizes."""
        if self.tails is not None:
            return int(self.sizes.sum())
        return int(self.headers.nbytes + self.bodies.data.nbytes) + 4 * len(self.sizes)


def gather(data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, parts: RecordParts) -> RecordColumns:
    """The `parts` of the records at `starts` (positions in `data`, uint8) of `sizes` (int64), each
    record lying whole inside `data` and at least its fixed header long. Every array answered is a
    copy: none refers to `data`."""
    if len(starts) == 0:
        no_spans = Spans(np.zeros(1, dtype=np.int32), np.zeros(0, dtype=np.uint8))
        no_lengths = np.zeros(0, dtype=np.int64)
        no_tails = RecordTails(no_lengths, no_spans, no_lengths, no_spans)
        return RecordColumns(sizes, np.zeros((0, mf.BODY_POS), dtype=np.uint8), no_spans,
                             no_tails if parts is RecordParts.HEADS_AND_TAILS else None)
    headers = _rows(data, starts, mf.BODY_POS)
    # the stored body lengths, read in place (a strided view of the rows' field)
    stored = np.ndarray((len(starts),), _BODY_LENGTH, headers, mf.BODY_LENGTH_POS, (mf.BODY_POS,))
    room = np.maximum(sizes - mf.FIXED_OVERHEAD, 0)   # for body, topic and properties
    body_lengths = np.clip(stored, 0, room, dtype=np.int64)
    bodies = spans(data, starts + mf.BODY_POS, body_lengths)
    if parts is RecordParts.HEADS:
        return RecordColumns(sizes, headers, bodies)
    # each tail in one gather (the records are cold in the cache: one pass over them), then split
    tail_room = room - body_lengths
    tails = spans(data, starts + mf.BODY_POS + body_lengths, tail_room + _TAIL_OVERHEAD)
    return RecordColumns(sizes, headers, bodies, _split_tails(tails, tail_room))


def concatenate(parts: list[RecordColumns]) -> RecordColumns:
    """The columns of several gathers (records of several files), in order."""
    if len(parts) == 1:
        return parts[0]
    tails = [part.tails for part in parts if part.tails is not None]
    joined = None
    if tails:
        joined = RecordTails(np.concatenate([tail.topic_lengths for tail in tails]),
                             _join([tail.topics for tail in tails]),
                             np.concatenate([tail.properties_lengths for tail in tails]),
                             _join([tail.properties for tail in tails]))
    return RecordColumns(np.concatenate([part.sizes for part in parts]),
                         np.concatenate([part.headers for part in parts]),
                         _join([part.bodies for part in parts]), joined)


def _split_tails(tails: Spans, room: np.ndarray) -> RecordTails:
    """The topics and properties of tails (topic length, topic, properties length, properties),
    `room` bytes each besides the two lengths, out of the tails' copy (no more reads of the records)."""
    starts = tails.offsets[:-1].astype(np.int64)
    topic_lengths = tails.data[starts].astype(np.int64)
    topic_clipped = np.minimum(topic_lengths, room)
    # tails of one length with topics of one length (a queue's records of one producer): every
    # field lies one tail length from the last, so it is copied by a strided view, not a gather
    lengths = tails.lengths
    even = bool((lengths == lengths[0]).all() and (topic_clipped == topic_clipped[0]).all())
    step = int(lengths[0]) if even else None
    properties_length_pos = starts + 1 + topic_clipped
    properties_lengths = _rows(tails.data, properties_length_pos, 2, step).view(_PROPERTIES_LENGTH)[:, 0]
    properties_clipped = np.clip(properties_lengths, 0, room - topic_clipped, dtype=np.int64)
    return RecordTails(topic_lengths, spans(tails.data, starts + 1, topic_clipped, step),
                       properties_lengths.astype(np.int64),
                       spans(tails.data, properties_length_pos + 2, properties_clipped, step))


def _join(spans: list[Spans]) -> Spans:
    offsets = [spans[0].offsets]
    for part in spans[1:]:
        offsets.append(part.offsets[1:] + offsets[-1][-1])
    return Spans(np.concatenate(offsets), np.concatenate([part.data for part in spans]))


def _rows(data: np.ndarray, positions: np.ndarray, width: int, step: int | None = None) -> np.ndarray:
    """data[p:p + width] for each position p, as the rows of a new (n, width) array: a gather of
    `width`-byte items (one copy each, half the CPU of a uint8 window view's element loop), or,
    with `step` (the positions lie `step` bytes apart), a copy of a strided view (no index)."""
    item = np.dtype((np.void, width))
    if step is not None and len(positions):
        items = np.ndarray((len(positions),), item, data, int(positions[0]), (step,))
    else:
        items = np.ndarray((len(data) - width + 1,), item, data, 0, (1,))[positions]
    rows: np.ndarray = items.copy() if step is not None else items
    return rows.view(np.uint8).reshape(len(positions), width)


def spans(data: np.ndarray, positions: np.ndarray, lengths: np.ndarray, step: int | None = None) -> Spans:
    """data[p:p + length] for each position and length, back to back; `step`: the positions lie
    that many bytes apart (_rows)."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return Spans(offsets, np.zeros(0, dtype=np.uint8))
    longest = int(lengths.max())
    if int(lengths.min()) == longest:   # one length: one row gather
        return Spans(offsets, _rows(data, positions, longest, step).reshape(-1))
    if longest * len(lengths) <= MAX_PADDING_FACTOR * total and int(positions.max()) + longest <= len(data):
        padded = _rows(data, positions, longest)
        return Spans(offsets, padded[np.arange(longest) < lengths[:, None]])
    pieces = [data[start:start + length] for start, length in zip(positions.tolist(), lengths.tolist(),
                                                                  strict=True)]
    return Spans(offsets, np.concatenate(pieces))
