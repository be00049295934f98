"""Column-wise decoding of pulled messages into Arrow (ARCHITECTURE.md §1, §3).

`PackedMessages.records` holds CommitLog records back to back in the layout of
`rmq.message_format` (spec store §3, big-endian); rmq.record_batch turns them into a
RecordBatch with SCHEMA, every column for all records at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq.connector.errors import CorruptMessagesError
from rmq.record_batch import COLUMNS, SCHEMA, CorruptRecordsError, decode_records
from rmq.v1 import rmq_pb2

__all__ = ["SCHEMA", "CorruptMessagesError", "decode", "decode_pulls", "filter_tags"]


def decode(packed: rmq_pb2.PackedMessages, broker_name: str) -> pa.RecordBatch:
    """All records of one pull as a RecordBatch with SCHEMA."""
    return decode_pulls([packed], broker_name)


def decode_pulls(pulls: Sequence[rmq_pb2.PackedMessages], broker_name: str,
                 columns: Sequence[str] = COLUMNS) -> pa.RecordBatch:
    """The records of several pulls, in order, as one RecordBatch of SCHEMA's `columns`: the rows
    of `decode` of each, concatenated (one pass over all of them, one batch for Spark)."""
    for packed in pulls:
        _check_count(packed)
    records = np.frombuffer(_joined([packed.records for packed in pulls]), dtype=np.uint8)
    sizes = np.frombuffer(_joined([packed.sizes for packed in pulls]), dtype="<i4").astype(np.int64)
    try:
        return decode_records(records, sizes, broker_name, columns)
    except CorruptRecordsError as error:
        raise CorruptMessagesError(f"corrupt PackedMessages: {error}") from None


def filter_tags(batch: pa.RecordBatch, tags: set[str] | frozenset[str] | None) -> pa.RecordBatch:
    """Rows whose tag is one of `tags` (None: all rows). The broker filters by tag hash
    code, which can collide; this re-checks the tag strings (RocketMQ processPullResult)."""
    if tags is None:
        return batch
    return batch.filter(pc.is_in(batch.column("tags"), value_set=pa.array(sorted(tags), pa.string())))


def _check_count(packed: rmq_pb2.PackedMessages) -> None:
    if len(packed.sizes) != 4 * packed.count:
        raise CorruptMessagesError(f"corrupt PackedMessages: {len(packed.sizes)} bytes of sizes "
                                   f"for {packed.count} messages")


def _joined(parts: list[bytes]) -> bytes:
    return parts[0] if len(parts) == 1 else b"".join(parts)
