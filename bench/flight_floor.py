"""Row 5's floors with rmq removed (issue 43): what a Spark query reaches when its rows come from
another process over Arrow Flight with no rmq code on either side, and what a server that gathers
the rows out of stored records costs per row.

A bare pyarrow Flight server (this module run as a program; it imports nothing of rmq) answers a
DoGet for `count` rows of one queue in one of two modes:
- `prebuilt`: the reference's template batch (`bench/reference_source.py`), over and over: no
  per-row work on the server, so the query's rate is the transport's floor;
- `gathered` (3 columns: queue_id, queue_offset, body): records laid out as CommitLog records
  (spec store §3, big-endian: 88-byte header, body, topic, properties) back to back in a file of
  the server's, the queues taking turns record by record as rmq's broker stores the benchmark's
  batches (it spreads each batch over the queues round-robin: one queue's consecutive records lie
  `queues` records apart), with no properties (rmq's records of the benchmark carry none), read
  through a memory map. Per batch of 16,384 rows it takes the ConsumeQueue positions, gathers
  the records' fixed headers and then their bodies into one buffer (numpy, the least a store
  keeping whole records must do), reads queue_id and queue_offset from the headers, and sends
  the batch.
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
TOPIC = b"bench-e2e"
PROPERTIES = b""   # as rmq stores the benchmark's messages (RmqClient.send sets none)
HEADER = np.dtype({"names": ["queue_id", "queue_offset", "body_length"], "formats": [">i4", ">i8", ">i4"],
                   "offsets": [QUEUE_ID_POS, QUEUE_OFFSET_POS, BODY_LENGTH_POS], "itemsize": BODY_POS})
GATHERED_SCHEMA = pa.schema([("queue_id", pa.int32()), ("queue_offset", pa.int64()), ("body", pa.binary())])


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
    record[:, QUEUE_ID_POS:QUEUE_ID_POS + 4] = _big_endian(queue, ">i4")
    record[:, QUEUE_OFFSET_POS:QUEUE_OFFSET_POS + 8] = _big_endian(offset, ">i8")
    record[:, BODY_LENGTH_POS:BODY_POS] = _big_endian(np.full(count, body_size), ">i4")
    record[:, BODY_POS:BODY_POS + body_size] = ord("x")
    tail = bytes([len(TOPIC)]) + TOPIC + len(PROPERTIES).to_bytes(2, "big") + PROPERTIES
    record[:, BODY_POS + body_size:] = np.frombuffer(tail, dtype=np.uint8)
    record.tofile(str(path))
    return queue


def _big_endian(values: np.ndarray, dtype: str) -> np.ndarray:
    return values.astype(dtype).view(np.uint8).reshape(len(values), -1)


class GatheredStore:
    """The records file through a memory map, and each queue's ConsumeQueue (record positions)."""

    def __init__(self, path: Path, queue_of_record: np.ndarray) -> None:
        """`queue_of_record`: what `write_records` answered for the file."""
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
        its body; the columns read from the gathered headers."""
        headers = self._items(positions, BODY_POS).view(HEADER).reshape(-1)
        lengths = headers["body_length"].astype(np.int64)
        offsets = np.zeros(len(positions) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        longest = int(lengths.max())
        padded = self._items(positions + BODY_POS, longest).view(np.uint8).reshape(len(positions), longest)
        bodies = (padded.reshape(-1) if int(lengths.min()) == longest
                  else padded[np.arange(longest) < lengths[:, None]])
        body = pa.Array.from_buffers(pa.binary(), len(positions),
                                     [None, pa.py_buffer(offsets), pa.py_buffer(bodies)])
        return pa.RecordBatch.from_arrays([pa.array(headers["queue_id"].astype(np.int32)),
                                           pa.array(headers["queue_offset"].astype(np.int64)), body],
                                          schema=GATHERED_SCHEMA)

    def _items(self, starts: np.ndarray, width: int) -> np.ndarray:
        """data[p:p + width] for each p, gathered as `width`-byte items (one copy each)."""
        items = np.ndarray((len(self.data) - width + 1,), np.dtype((np.void, width)), self.data, 0, (1,))
        return items[starts]


class FloorServer(flight.FlightServerBase):  # type: ignore[misc]
    """DoGet of {"queue": q, "count": n}: n rows, prebuilt or gathered (module docstring)."""

    def __init__(self, location: str, template: pa.RecordBatch | None, store: GatheredStore | None) -> None:
        super().__init__(location)
        self.template, self.store = template, store

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
        request = json.loads(ticket.ticket)
        if self.store is not None:
            batches = self.store.batches(request["queue"], request["count"])
            return flight.GeneratorStream(GATHERED_SCHEMA, batches)
        assert self.template is not None
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
    template = store = None
    if args.mode == "gathered":
        path = args.directory / "records"
        store = GatheredStore(path, write_records(path, args.rows, args.queues, body_size=100))
    else:
        with pa.memory_map(str(args.template)) as source:
            template = pa.ipc.open_file(source).get_batch(0)
    server = FloorServer("grpc://127.0.0.1:0", template, store)
    print(server.port, flush=True)
    server.serve()


if __name__ == "__main__":
    main()
