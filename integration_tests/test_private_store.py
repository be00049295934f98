"""`rmq broker` keeps its store to its user: every file 0600 and directory 0700 even when it
is started with the usual umask 022 (SECURITY.md), the broker's config files included."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from rmq.v1 import rmq_pb2
from testing import processes
from tests.rmq_stubs import Stubs


def test_the_broker_store_is_readable_by_its_user_only(tmp_path: Path) -> None:
    previous = os.umask(0o022)   # inherited by the broker process
    try:
        server = processes.broker(tmp_path).start()
    finally:
        os.umask(previous)
    rmq = Stubs.connect(server.address)
    try:
        rmq.create_topic("private", queues=1)
        assert rmq.send("private", rmq_pb2.Message(body=b"secret", queue_id=0)).status.code == rmq_pb2.OK
        update = rmq_pb2.UpdateConsumerOffsetsRequest(
            consumer_group="g", offsets=[rmq_pb2.ConsumerOffset(topic="private", queue_id=0, offset=1)])
        assert rmq.messaging.UpdateConsumerOffsets(update).status.code == rmq_pb2.OK
    finally:
        rmq.close()
        assert server.stop() == 0
    root = tmp_path / "broker-a"
    found = {str(path.relative_to(root)): stat.S_IMODE(path.stat().st_mode) for path in root.rglob("*")}
    assert {"commitlog", "consumequeue/private/0", "config/topics.json",
            "config/consumerOffset.json"} <= set(found)
    assert {name: f"{mode:04o}" for name, mode in found.items() if mode & 0o077} == {}
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
