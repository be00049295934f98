"""Timer messages across a controller failover with real processes (docs/internals/timer.md
§Replication, docs/controller.md): a SYNC_MASTER group of two members under `rmq namesrv
--controller`. Timers are parked on the master; the ones due first are delivered by it, one is
recalled; then the master is killed with SIGKILL. The controller elects the slave, which delivers
every timer still pending exactly once, in time order — none the old master delivered is delivered
again — and honours the recall handles the old master gave out (signed under the group's
cluster secret)."""

from __future__ import annotations

import time
from contextlib import closing
from pathlib import Path

import pytest

from integration_tests.reliability.test_controller_failover import controlled_group, status, wait
from integration_tests.reliability.traffic import read_topic
from rmq import message_format as mf
from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.v1 import rmq_pb2

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TOPIC = "timed-failover"
EARLY = 60     # due two seconds from the send: delivered by the old master before the kill
LATE = 240     # due after the failover, over three seconds


def timer(body: bytes, deliver_ms: int) -> OutgoingMessage:
    return OutgoingMessage(body, queue_id=0, properties={mf.PROPERTY_TIMER_DELIVER_MS: str(deliver_ms)})


def test_a_promoted_slave_delivers_the_pending_timers_once_each_and_honours_the_old_masters_handles(
        tmp_path: Path) -> None:
    with controlled_group(tmp_path) as group:
        old, new = group.members
        with closing(RmqClient(group.namesrv.address)) as client:
            client.create_topic(TOPIC, queues=1)
            wait(lambda: status(new).commit_log_max_offset == status(old).commit_log_max_offset,
                 "the slave to hold the topic")
            now_ms = int(time.time() * 1000)
            client.send(TOPIC, [timer(b"early-%03d" % i, now_ms + 2000 + i) for i in range(EARLY)])
            late_from = now_ms + 25_000   # past the kill, the failover timeout and the election
            sent = client.send(TOPIC, [timer(b"late-%03d" % i, late_from + (i % 3) * 1000 + i)
                                       for i in range(LATE)])
            client.recall_message(sent.recall_handles[0])   # on the old master
            wait(lambda: len(read_topic(client, TOPIC)) >= EARLY, "the early timers delivered by id 0")
            group.wait_in_sync(master=0, slave=1)
        old.kill()
        wait(lambda: status(new).role == rmq_pb2.SYNC_MASTER, "id 1 to take over")
        with closing(RmqClient(group.namesrv.address)) as client:
            wait(lambda: client.recall_message(sent.recall_handles[1]) is None,   # a handle of id 0's
                 "a recall on the new master")
            assert time.time() * 1000 < late_from, "the failover outlasted the late timers' due time"
            expected = EARLY + LATE - 2
            wait(lambda: len(read_topic(client, TOPIC)) >= expected, f"{expected} timers delivered")
            client.send(TOPIC, [OutgoingMessage(b"sentinel", queue_id=0,
                                                properties={mf.PROPERTY_TIMER_DELAY_MS: "1500"})])
            wait(lambda: read_topic(client, TOPIC)[-1].body == b"sentinel",   # every earlier second read
                 "the sentinel delivered")
            read = read_topic(client, TOPIC)[:-1]
    bodies = [m.body for m in read]
    assert sorted(bodies) == sorted([b"early-%03d" % i for i in range(EARLY)]
                                    + [b"late-%03d" % i for i in range(2, LATE)])   # none lost, none twice
    late = [int(body[5:]) for body in bodies if body.startswith(b"late-")]
    due_seconds = [(late_from + (i % 3) * 1000 + i) // 1000 for i in late]
    assert due_seconds == sorted(due_seconds)   # second by second
