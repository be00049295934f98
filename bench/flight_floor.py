"""Row 5's floors with rmq removed (issue 43): what a Spark query reaches when its rows come from
another process over Arrow Flight with no rmq code on either side, and what a server that gathers
the rows out of stored records costs per row.

A bare pyarrow Flight server (this module run as a program; it imports nothing of rmq) answers a
DoGet for `count` rows of one queue in one of two modes:
- `prebuilt`: the reference's template batch (`bench/reference_source.py`), over and over: no
  per-row work on the server, so the query's rate is the transport's floor;
- `gathered`: records laid out as CommitLog records
  (spec store §3, big-endian: 88-byte header, body, topic, properties) back to back in a file of
  the server's, the queues taking turns record by record as rmq's broker stores the benchmark's
  batches (it spreads each batch over the queues round-robin: one queue's consecutive records lie
  `queues` records apart), with no properties (rmq's records of the benchmark carry none), read
  through a memory map. Per batch of 16,384 rows it takes the ConsumeQueue positions, gathers
  the records' fixed headers and then their bodies into one buffer (numpy, the least a store
  keeping whole records must do), reads queue_id and queue_offset from the headers, and sends
  the batch. For the default schema (11 columns) it also gathers each record's tail (topic
  length, topic, properties length) the same way, hexes the message id (store host + physical
  offset), scales the two timestamps and, the records holding no properties, answers empty
  property maps and null tags and keys: no checks, nothing parsed.
`FlightFloorDataSource` (Spark name NAME) is the reference source's twin whose partitions read
through DoGet instead of a memory map. `bench/spark_bench.py` runs both modes in row 5.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from bench.reference_source import FixedRowsDataSource, FixedRowsStreamReader, repeated

NAME = "rmq_flight_floor"
MODES = ("prebuilt", "gathered")
BATCH_ROWS = 16_384          # the rows of one Flight batch rmq's reader asks for (partition_reader)
QUEUE_ID_POS, QUEUE_OFFSET_POS, BODY_LENGTH_POS, BODY_POS = 12, 20, 84, 88
PHYSICAL_OFFSET_POS, STORE_HOST_POS, ID_SIZE = 28, 64, 16   # message id: store host (8) + physical offset
TOPIC = b"bench-e2e"
MAGIC_CODE = -626843481   # 0xDAA320A7, a stored message
STORE_HOST = bytes([127, 0, 0, 1, 0, 0, 0x27, 0x11])   # 127.0.0.1:10001 (IPv4 address, then port)
PROPERTIES = b""   # as rmq stores the benchmark's messages (RmqClient.send sets none)
BORN_TIMESTAMP_POS, STORE_TIMESTAMP_POS = 40, 56
HEADER = np.dtype({"names": ["queue_id", "queue_offset", "born_timestamp", "store_timestamp", "body_length"],
                   "formats": [">i4", ">i8", ">i8", ">i8", ">i4"],
                   "offsets": [QUEUE_ID_POS, QUEUE_OFFSET_POS, BORN_TIMESTAMP_POS, STORE_TIMESTAMP_POS,
                               BODY_LENGTH_POS], "itemsize": BODY_POS})
# the 4 upper-case hex digits of every 16-bit value, as one 4-byte item
HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)[
    (np.arange(1 << 16)[:, None] >> np.array([12, 8, 4, 0])) & 0xF].view(np.uint32).reshape(-1)


def layout(rows: int, queues: int) -> tuple[np.ndarray, np.ndarray]:
    """The queue and queue offset of each record: rows / queues records per queue (rounded up),
    the queues taking turns record by record (rmq's broker spreads each batch of the benchmark's
    producer over the queues round-robin)."""
    share = -(-rows // queues)
    return np.tile(np.arange(queues), share), np.repeat(np.arange(share), queues)


def write_records(path: Path, rows: int, queues: int, body_size: int) -> np.ndarray:
    """CommitLog-shaped records of `body_size`-byte bodies in the order of `layout`; the queue of
    each record (what `GatheredStore` indexes)."""
    size = BODY_POS + body_size + 1 + len(TOPIC) + 2 + len(PROPERTIES)
    queue, offset = layout(rows, queues)
    count = len(queue)
    record = np.zeros((count, size), dtype=np.uint8)
    record[:, 0:4] = _big_endian(np.full(count, size), ">i4")
    record[:, 4:8] = _big_endian(np.full(count, MAGIC_CODE), ">i4")
    record[:, QUEUE_ID_POS:QUEUE_ID_POS + 4] = _big_endian(queue, ">i4")
    record[:, QUEUE_OFFSET_POS:QUEUE_OFFSET_POS + 8] = _big_endian(offset, ">i8")
    record[:, PHYSICAL_OFFSET_POS:PHYSICAL_OFFSET_POS + 8] = _big_endian(np.arange(count) * size, ">i8")
    record[:, STORE_HOST_POS:STORE_HOST_POS + 8] = np.frombuffer(STORE_HOST, dtype=np.uint8)
    record[:, BODY_LENGTH_POS:BODY_POS] = _big_endian(np.full(count, body_size), ">i4")
    record[:, BODY_POS:BODY_POS + body_size] = ord("x")
    tail = bytes([len(TOPIC)]) + TOPIC + len(PROPERTIES).to_bytes(2, "big") + PROPERTIES
    record[:, BODY_POS + body_size:] = np.frombuffer(tail, dtype=np.uint8)
    record.tofile(str(path))
    return queue


def _primitive(values: np.ndarray, kind: pa.DataType) -> pa.Array:
    """`values` as an Arrow array over the same memory (pa.array would check each value)."""
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(np.ascontiguousarray(values))])


def _msg_ids(headers: np.ndarray) -> pa.Array:
    """Each header's message id: its store host and physical offset, 32 upper-case hex digits."""
    ids = np.empty((len(headers), ID_SIZE), dtype=np.uint8)
    ids[:, :8] = headers[:, STORE_HOST_POS:STORE_HOST_POS + 8]
    ids[:, 8:] = headers[:, PHYSICAL_OFFSET_POS:PHYSICAL_OFFSET_POS + 8]
    offsets = np.arange(0, 2 * ID_SIZE * (len(headers) + 1), 2 * ID_SIZE, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), len(headers), [None, pa.py_buffer(offsets),
                                                             pa.py_buffer(np.take(HEX, ids.view(">u2")))])


def _big_endian(values: np.ndarray, dtype: str) -> np.ndarray:
    return values.astype(dtype).view(np.uint8).reshape(len(values), -1)


class GatheredStore:
    """The records file through a memory map, and each queue's ConsumeQueue (record positions)."""

    def __init__(self, path: Path, queue_of_record: np.ndarray, template: pa.RecordBatch) -> None:
        """`queue_of_record`: what `write_records` answered for the file; `template`: the
        reference's batch, whose schema the batches take (and broker name, for the default one)."""
        self.schema = template.schema
        self.broker_name = template.column("broker_name")[0] if "broker_name" in self.schema.names else None
        self.data = np.memmap(str(path), dtype=np.uint8, mode="r")
        size = int(self.data[:4].view(">i4")[0])
        queues = int(queue_of_record.max()) + 1
        self.positions = [np.flatnonzero(queue_of_record == q) * size for q in range(queues)]

    def batches(self, queue: int, count: int) -> Iterator[pa.RecordBatch]:
        entries = self.positions[queue][:count]
        for start in range(0, len(entries), BATCH_ROWS):
            yield self._gathered(entries[start:start + BATCH_ROWS])

    def _gathered(self, positions: np.ndarray) -> pa.RecordBatch:
        """Two gathers, as rmq's store makes (the fastest of the ways bench/NOTES.md's fifth pass
        of issue 43 tried with the CommitLog cold in the cache): each record's fixed header, then
        its body; the columns read from the gathered headers. The default schema's other columns
        come from one more gather (the tails) and from the headers."""
        headers = self._items(positions, BODY_POS).view(np.uint8).reshape(len(positions), BODY_POS)
        fields = headers.view(HEADER).reshape(-1)
        lengths = fields["body_length"].astype(np.int64)
        columns = {"queue_id": _primitive(fields["queue_id"].astype(np.int32), pa.int32()),
                   "queue_offset": _primitive(fields["queue_offset"].astype(np.int64), pa.int64()),
                   "body": self._variable(pa.binary(), positions + BODY_POS, lengths)}
        if len(self.schema) > len(columns):
            columns.update(self._default_columns(positions + BODY_POS + lengths, headers, fields))
        return pa.RecordBatch.from_arrays([columns[name] for name in self.schema.names], schema=self.schema)

    def _default_columns(self, tails: np.ndarray, headers: np.ndarray,
                         fields: np.ndarray) -> dict[str, pa.Array]:
        """The default schema's columns beyond the 3 (`tails`: where each record's topic length lies)."""
        count = len(tails)
        topic_lengths = self._items(tails, 1).view(np.uint8).astype(np.int64)
        properties_lengths = self._items(tails + 1 + topic_lengths, 2).view(">i2")
        assert not properties_lengths.any(), "the floor's records hold no properties"
        no_strings = pa.nulls(count, pa.string())
        no_entries = pa.MapArray.from_arrays(_primitive(np.zeros(count + 1, dtype=np.int32), pa.int32()),
                                             pa.nulls(0, pa.string()), pa.nulls(0, pa.string()),
                                             type=self.schema.field("properties").type)
        return {"topic": self._variable(pa.string(), tails + 1, topic_lengths),
                "broker_name": pa.repeat(self.broker_name, count), "msg_id": _msg_ids(headers),
                "tags": no_strings, "keys": no_strings, "properties": no_entries,
                "born_timestamp": self._timestamps(fields["born_timestamp"]),
                "store_timestamp": self._timestamps(fields["store_timestamp"])}

    def _timestamps(self, epoch_ms: np.ndarray) -> pa.Array:
        return _primitive(epoch_ms.astype(np.int64) * 1000, self.schema.field("born_timestamp").type)

    def _variable(self, kind: pa.DataType, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
        """data[s:s + length] per row as a binary/string array: one gather of the longest length's
        items, the padding dropped when the lengths differ."""
        offsets = np.zeros(len(starts) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        longest = int(lengths.max())
        padded = self._items(starts, longest).view(np.uint8).reshape(len(starts), longest)
        if int(lengths.min()) == longest:
            data = padded.reshape(-1)
        else:
            data = padded[np.arange(longest) < lengths[:, None]]
        return pa.Array.from_buffers(kind, len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(data)])

    def _items(self, starts: np.ndarray, width: int) -> np.ndarray:
        """data[p:p + width] for each p, gathered as `width`-byte items (one copy each)."""
        items = np.ndarray((len(self.data) - width + 1,), np.dtype((np.void, width)), self.data, 0, (1,))
        return items[starts]


class FloorServer(flight.FlightServerBase):  # type: ignore[misc]
    """DoGet of {"queue": q, "count": n}: n rows, prebuilt or gathered (module docstring)."""

    def __init__(self, location: str, template: pa.RecordBatch, store: GatheredStore | None) -> None:
        super().__init__(location)
        self.template, self.store = template, store

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
        request = json.loads(ticket.ticket)
        if self.store is not None:
            batches = self.store.batches(request["queue"], request["count"])
            return flight.GeneratorStream(self.template.schema, batches)
        return flight.GeneratorStream(self.template.schema, repeated(self.template, request["count"]))


@dataclass(frozen=True)
class QueueRows(InputPartition):  # type: ignore[misc]
    queue: int
    count: int


class FlightFloorDataSource(FixedRowsDataSource):
    """Options: location, rows, partitions (one per queue) and the schema (JSON)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def streamReader(self, schema: StructType) -> FlightFloorStreamReader:
        return FlightFloorStreamReader(self.options["location"], int(self.options["rows"]),
                                       int(self.options["partitions"]))


class FlightFloorStreamReader(FixedRowsStreamReader):
    """Each partition reads its queue's share of the rows through one DoGet."""

    def __init__(self, location: str, rows: int, partitions: int) -> None:
        super().__init__(rows, partitions)
        self.location = location

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[QueueRows]:
        share = (end["row"] - start["row"]) // self.partition_count
        return [QueueRows(queue, share) for queue in range(self.partition_count)] if share else []

    def read(self, partition: QueueRows) -> Iterator[pa.RecordBatch]:
        client = flight.FlightClient(self.location)
        try:
            ticket = flight.Ticket(json.dumps({"queue": partition.queue, "count": partition.count}).encode())
            for chunk in client.do_get(ticket):
                yield chunk.data
        finally:
            client.close()


def options(location: str, rows: int, partitions: int, schema: StructType) -> dict[str, str]:
    return {"location": location, "rows": str(rows), "partitions": str(partitions), "schema": schema.json()}


@dataclass(frozen=True)
class RunningFloor:
    location: str
    pid: int


@contextmanager
def running(mode: str, template: Path, rows: int, queues: int) -> Iterator[RunningFloor]:
    """The floor server in its own process (no rmq import), stopped on exit."""
    command = [sys.executable, "-m", "bench.flight_floor", "--mode", mode, "--template", str(template),
               "--rows", str(rows), "--queues", str(queues)]
    with tempfile.TemporaryDirectory(prefix="flight-floor-") as directory:
        server = subprocess.Popen([*command, "--directory", directory], stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            port = server.stdout.readline().strip()
            if not port.isdigit():
                raise RuntimeError(f"the Flight floor server did not start (exit {server.poll()})")
            yield RunningFloor(f"grpc://127.0.0.1:{port}", server.pid)
        finally:
            server.terminate()
            server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--template", type=Path, required=True, help="the reference's Arrow IPC file")
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--queues", type=int, required=True)
    parser.add_argument("--directory", type=Path, required=True, help="where the gathered records go")
    args = parser.parse_args()
    with pa.memory_map(str(args.template)) as source:
        template = pa.ipc.open_file(source).get_batch(0)
    store = None
    if args.mode == "gathered":
        path = args.directory / "records"
        store = GatheredStore(path, write_records(path, args.rows, args.queues, body_size=100), template)
    server = FloorServer("grpc://127.0.0.1:0", template, store)
    print(server.port, flush=True)
    server.serve()


if __name__ == "__main__":
    main()
