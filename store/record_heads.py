"""Column-wise gathers of CommitLog records' heads (RecordHeads: fixed header and body), for a
reader that needs no topic nor properties (a Flight read of header columns and the body,
docs/data-plane.md): the header rows by one numpy row gather, the bodies by one more, instead of
copying whole records and the bodies out of them again. No per-record Python."""

from __future__ import annotations

import numpy as np

from rmq import message_format as mf
from rmq.store.results import RecordHeads

_BODY_LENGTH = np.dtype(">i4")
# bodies of unequal lengths are gathered padded to the longest, then the padding dropped, while
# that copies at most this many times the bodies' bytes; beyond it one slice per body
MAX_PADDING_FACTOR = 2


def gather_heads(data: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> RecordHeads:
    """The heads of the records at `starts` (positions in `data`, uint8) of `sizes` (int64), each
    record lying whole inside `data`. Every array answered is a copy: none refers to `data`."""
    count = len(starts)
    if count == 0:
        return RecordHeads(sizes, np.zeros((0, mf.BODY_POS), dtype=np.uint8), np.zeros(1, dtype=np.int32),
                           np.zeros(0, dtype=np.uint8))
    headers = _rows(data, starts, mf.BODY_POS)
    # the stored body lengths, read in place (a strided view of the rows' field)
    stored = np.ndarray((count,), _BODY_LENGTH, headers, mf.BODY_LENGTH_POS, (mf.BODY_POS,))
    lengths = np.clip(stored, 0, np.maximum(sizes - mf.FIXED_OVERHEAD, 0), dtype=np.int64)
    offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    bodies = _bodies(data, starts + mf.BODY_POS, lengths, int(offsets[-1]))
    return RecordHeads(sizes, headers, offsets, bodies)


def concatenate(parts: list[RecordHeads]) -> RecordHeads:
    """The heads of several gathers (records of several files), in order."""
    if len(parts) == 1:
        return parts[0]
    body_offsets = [parts[0].body_offsets]
    for part in parts[1:]:
        body_offsets.append(part.body_offsets[1:] + body_offsets[-1][-1])
    return RecordHeads(np.concatenate([part.sizes for part in parts]),
                       np.concatenate([part.headers for part in parts]),
                       np.concatenate(body_offsets), np.concatenate([part.bodies for part in parts]))


def _rows(data: np.ndarray, positions: np.ndarray, width: int) -> np.ndarray:
    """data[p:p + width] for each position p, as the rows of a new (n, width) array: a gather of
    `width`-byte items (one copy each, half the CPU of a uint8 window view's element loop)."""
    items = np.ndarray((len(data) - width + 1,), np.dtype((np.void, width)), data, 0, (1,))
    rows: np.ndarray = items[positions].view(np.uint8).reshape(len(positions), width)
    return rows


def _bodies(data: np.ndarray, positions: np.ndarray, lengths: np.ndarray, total: int) -> np.ndarray:
    """data[p:p + length] for each position and length, back to back (`total` bytes)."""
    if total == 0:
        return np.zeros(0, dtype=np.uint8)
    longest = int(lengths.max())
    if int(lengths.min()) == longest:   # one length: one row gather
        return _rows(data, positions, longest).reshape(-1)
    if longest * len(lengths) <= MAX_PADDING_FACTOR * total and int(positions.max()) + longest <= len(data):
        padded = _rows(data, positions, longest)
        bodies: np.ndarray = padded[np.arange(longest) < lengths[:, None]]
        return bodies
    pieces = [data[start:start + length] for start, length in zip(positions.tolist(), lengths.tolist(),
                                                                  strict=True)]
    return np.concatenate(pieces)
