"""One of two brokers behind a name server is killed (-9) and restarted under a stream with
default options, driven the way Spark drives the reader: the planning of the next
micro-batch isolates the dead broker (its queues keep their positions, the live broker's are
planned and read, one warning names it) and plans its queues again once it is back; a pull
from a broker killed while its batch is read waits for it; every message is read exactly
once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from integration_tests.spark_source_support import first_offset, positions, read_batch, stream_reader
from rmq.connector.client import OutgoingMessage, RmqClient
from testing import processes

pytestmark = pytest.mark.integration

BROKERS = ("broker-a", "broker-b")
UNREACHABLE = "broker broker-b is unreachable"


def wait_until(check, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def retried(caplog, action: str) -> bool:
    return any(record.getMessage().startswith(action) and "retry" in record.getMessage()
               for record in caplog.records)


def send_to_each(client: RmqClient, prefix: str) -> dict[str, list[bytes]]:
    """10 messages to each broker; their bodies by broker."""
    sent = {}
    for name in BROKERS:
        sent[name] = [f"{name}-{prefix}-{i}".encode() for i in range(10)]
        client.send("halves", [OutgoingMessage(body) for body in sent[name]], broker_name=name)
    return sent


def of_broker(offset: dict, broker: str) -> dict[str, int]:
    return {queue: value for queue, value in positions(offset).items() if f":{broker}:" in queue}


def test_a_stream_isolates_one_of_two_brokers_and_rides_out_its_restart(namesrv, tmp_path: Path, caplog):
    brokers = {name: processes.broker(tmp_path, name, namesrv.address).start() for name in BROKERS}
    reader = None
    try:
        with RmqClient(namesrv.address) as client:
            wait_until(lambda: set(client.list_brokers()) == set(BROKERS), "both brokers registered")
            client.create_topic("halves", queues=2)
            wait_until(lambda: len(client.query_route("halves").message_queues) == 4, "the route of both")
            reader = stream_reader(namesrv.address, "halves", startingOffsets="earliest")
            start = first_offset(reader)
            before = send_to_each(client, "before")
            first = reader.latestOffset(start, ReadAllAvailable())
            got = read_batch(reader, start, first).column("body").to_pylist()
            sent = send_to_each(client, "during")
            brokers["broker-b"].kill()

            isolated = reader.latestOffset(first, ReadAllAvailable())      # no wait for broker-b
            assert of_broker(isolated, "broker-b") == of_broker(first, "broker-b")    # 10 read, kept
            assert sum(of_broker(isolated, "broker-a").values()) == 20
            got_a = read_batch(reader, first, isolated).column("body").to_pylist()
            assert reader.latestOffset(isolated, ReadAllAvailable()) == isolated   # nothing new
            warnings = [r.getMessage() for r in caplog.records if UNREACHABLE in r.getMessage()]
            assert len(warnings) == 1, warnings                  # one per outage, not one per planning
            assert not retried(caplog, "planning the next micro-batch")

            brokers["broker-b"].start()
            wait_until(lambda: of_broker(reader.latestOffset(isolated, ReadAllAvailable()), "broker-b")
                       != of_broker(isolated, "broker-b"), "broker-b's queues planned again")
            end = reader.latestOffset(isolated, ReadAllAvailable())
            assert sum(of_broker(end, "broker-b").values()) == 20
            brokers["broker-b"].kill()                     # down again while the batch is read
            restart = threading.Timer(3.0, brokers["broker-b"].start)
            restart.start()
            try:
                got_b = read_batch(reader, isolated, end).column("body").to_pylist()
            finally:
                restart.join()
            assert retried(caplog, "reading topic halves broker broker-b")
            assert sorted(got) == sorted(before["broker-a"] + before["broker-b"])    # each message once
            assert sorted(got_a) == sorted(sent["broker-a"])
            assert sorted(got_b) == sorted(sent["broker-b"])
    finally:
        if reader is not None:
            reader.stop()
        for broker in brokers.values():
            broker.stop()
