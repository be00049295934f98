"""One of two brokers behind a name server is killed (-9) and restarted under a stream with
default options, driven the way Spark drives the reader: the planning of the next
micro-batch and a pull from the dead broker both wait for it, and every message is read
exactly once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from integration_tests.spark_source_support import first_offset, read_batch, stream_reader
from rmq.cli import processes
from rmq.connector.client import OutgoingMessage, RmqClient

pytestmark = pytest.mark.integration

BROKERS = ("broker-a", "broker-b")


def wait_until(check, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def retried(caplog, action: str) -> bool:
    return any(record.getMessage().startswith(action) and "retry" in record.getMessage()
               for record in caplog.records)


def test_a_stream_rides_out_one_of_two_brokers_restarting(namesrv, tmp_path: Path, caplog):
    brokers = {name: processes.broker(tmp_path, name, namesrv.address).start() for name in BROKERS}
    reader = None
    try:
        with RmqClient(namesrv.address) as client:
            wait_until(lambda: set(client.list_brokers()) == set(BROKERS), "both brokers registered")
            client.create_topic("halves", queues=2)
            wait_until(lambda: len(client.query_route("halves").message_queues) == 4, "the route of both")
            sent = []
            for name in BROKERS:
                bodies = [f"{name}-{i}".encode() for i in range(10)]
                client.send("halves", [OutgoingMessage(body) for body in bodies], broker_name=name)
                sent += bodies
            reader = stream_reader(namesrv.address, "halves", startingOffsets="earliest")
            start = first_offset(reader)
            brokers["broker-b"].kill()
            planned: list[dict] = []

            def plan() -> None:
                planned.append(reader.latestOffset(start, ReadAllAvailable()))

            planner = threading.Thread(target=plan)
            planner.start()
            wait_until(lambda: retried(caplog, "planning the next micro-batch"), "a planning retry round")
            time.sleep(2.0)
            brokers["broker-b"].start()
            planner.join(timeout=120)
            assert planned, "planning gave up"
            end = planned[0]
            brokers["broker-b"].kill()                     # down again while the batch is read
            restart = threading.Timer(3.0, brokers["broker-b"].start)
            restart.start()
            try:
                got = read_batch(reader, start, end).column("body").to_pylist()
            finally:
                restart.join()
            assert retried(caplog, "pulling topic halves broker broker-b")
            assert sorted(got) == sorted(sent)                                   # each message once
    finally:
        if reader is not None:
            reader.stop()
        for broker in brokers.values():
            broker.stop()
