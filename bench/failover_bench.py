"""Section 13: controller failover (docs/controller.md). A SYNC_MASTER
group of two started with --controller under `rmq namesrv --controller` (default settings:
heartbeat every second, failover after 3 s of silence), one producer sending through the name
server; the master is killed with SIGKILL and the figure is the time until the producer's first
send acknowledged by the new master (its offset message id names the member that stored it)."""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack

from bench.environment import FLUSH, Environment, _running
from bench.harness import Row, Stats, Target
from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.connector.errors import RmqError
from rmq.v1 import rmq_pb2
from testing import processes

TOPIC = "bench-failover"
BATCH = 32
WAIT_S = 60.0


def _role(client: RmqClient, address: str) -> int:
    return client.broker_status(address).role


def _port_of(msg_id: str) -> int:
    return int(msg_id[8:16], 16)


def failover_seconds(env: Environment, run: int) -> float:
    directory = env.directory(f"failover-{run}")
    with ExitStack() as stack:
        namesrv = stack.enter_context(_running(processes.namesrv(
            directory, ["--controller", "--controller-dir", str(directory / "controller")])))
        flags = ["--controller", namesrv.address]
        old = stack.enter_context(_running(processes.group_member(
            directory, "failover", 0, "SYNC_MASTER", namesrv.address, flush=FLUSH, extra=flags)))
        new = stack.enter_context(_running(processes.group_member(
            directory, "failover", 1, "SYNC_MASTER", namesrv.address, flush=FLUSH, extra=flags)))
        client = stack.enter_context(RmqClient(namesrv.address, timeout=5.0))
        _wait(lambda: _role(client, new.address) == rmq_pb2.SLAVE
              and client.broker_status(old.address).slaves, "the slave to connect")
        client.create_topic(TOPIC, queues=8)
        new_port = int(new.address.rpartition(":")[2])
        taken_over = threading.Event()
        stop = threading.Event()
        taken_at: list[float] = []

        def produce() -> None:
            batch = [OutgoingMessage(b"x" * 100) for _ in range(BATCH)]
            while not stop.is_set():
                try:
                    result = client.send(TOPIC, batch)
                except RmqError:
                    time.sleep(0.01)
                    continue
                if _port_of(result.msg_ids[0]) == new_port and not taken_over.is_set():
                    taken_at.append(time.monotonic())
                    taken_over.set()

        producer = threading.Thread(target=produce)
        producer.start()
        try:
            time.sleep(1.0)      # steady sending before the kill
            old.kill()
            killed_at = time.monotonic()
            if not taken_over.wait(WAIT_S):
                raise RuntimeError(f"no send acknowledged by the new master within {WAIT_S:g} s")
        finally:
            stop.set()
            producer.join(30)
        return taken_at[0] - killed_at


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def failover_rows(env: Environment) -> list[Row]:
    runs = [failover_seconds(env, run) for run in range(env.scale.repeats)]
    return [Row("kill -9 of a SYNC_MASTER under one producer: time until the new master acknowledges a send "
                "(controller defaults: heartbeat 1 s, failover after 3 s)", "s", Stats.of(runs),
                target=Target(max_value=10.0, unit="s"))]
