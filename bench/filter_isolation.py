"""Issue #25 item 3, reproduced: does one account's expensive SQL92 filtering delay another account?

    .venv/bin/python -m bench.filter_isolation [--held 800] [--broker-pythonpath DIR]

A broker with --acl and two accounts. The noisy one holds `--held` long-polling pulls whose filter
is a ~900-literal IN list (about 1 ms per record here), spread over 8 queues, then sends 32
messages to each queue: every held pull wakes and filters 32 records, tens of seconds of filter
CPU. Meanwhile the quiet account, on its own topic, sends one message at a time and reads it back
with a held tag pull and a held SQL92 pull (`region = 'eu'`); the script prints how long those
took while the noisy filters ran, against the same figures measured before (idle broker), and
how long the noisy pulls took to be answered. `--broker-pythonpath` runs the broker from another
checkout's link tree (for a before/after comparison; see bench/NOTES.md for how one is made).
Not a test: figures depend on the machine and its load; docs/filtering-and-bounds.md keeps them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc

from rmq.auth import Credentials, open_channel
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from testing import processes

NOISY = Credentials("noisy-tenant", "noisy-tenant-secret")
QUIET = Credentials("quiet-tenant", "quiet-tenant-secret")
NOISY_TOPIC, QUIET_TOPIC = "noisy", "quiet"
QUEUES = 8
MESSAGES_PER_QUEUE = 32
IN_LIST = "region IN (" + ",".join(str(n) for n in range(900)) + ")"   # under the 4,096-character limit
QUIET_ROUNDS = 20
SUSPEND_MS = 60_000
QUIET_TIMEOUT_S = 120
PULL_MAX_BYTES = 64 * 1024   # 800 of them stay under a connection's 64 MiB of pull answers in flight


def _acl() -> dict:
    return {"accounts": [
        {"accessKey": NOISY.access_key, "secretKey": NOISY.secret_key, "admin": True},
        {"accessKey": QUIET.access_key, "secretKey": QUIET.secret_key, "admin": True},
    ]}


@contextmanager
def _broker(directory: Path, pythonpath: str | None) -> Iterator[tuple[str, str]]:
    acl = directory / "acl.json"
    acl.touch(mode=0o600)
    acl.write_text(json.dumps(_acl()))
    metrics = f"127.0.0.1:{processes.free_port()}"
    env = {"PYTHONPATH": pythonpath} if pythonpath else {}
    extra = ["--acl", str(acl), "--metrics-listen", metrics]
    server = processes.broker(directory, flush="async", extra=extra, **env)
    server.start()
    try:
        yield server.address, metrics
    finally:
        server.stop()


def _held_pulls(metrics: str) -> int:
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("rmq_held_pulls{"):
                return int(float(line.rsplit(" ", 1)[1]))
    return 0


def _wait(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def _pull(offset: int, topic: str, group: str, queue_id: int, sql: str | None) -> rmq_pb2.PullMessageRequest:
    return rmq_pb2.PullMessageRequest(
        consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=offset, max_messages=32,
        max_bytes=PULL_MAX_BYTES,
        sys_flag=rmq_pb2.FLAG_SUSPEND, suspend_timeout_ms=SUSPEND_MS, sub_expression=sql or "*",
        expression_type=rmq_pb2.SQL92 if sql else rmq_pb2.TAG)


def _message(region: str) -> rmq_pb2.Message:
    return rmq_pb2.Message(body=b"x" * 100, properties={"region": region}, queue_id=0)


def quiet_round(messaging: rmq_pb2_grpc.MessagingServiceStub, offset: int) -> tuple[float, float, float]:
    """(send, tag pull woken, SQL92 pull woken) in ms: both pulls held, then one message sent."""
    tag = messaging.PullMessage.future(_pull(offset, QUIET_TOPIC, "quiet-tags", 0, None),
                                       timeout=QUIET_TIMEOUT_S)
    sql = messaging.PullMessage.future(_pull(offset, QUIET_TOPIC, "quiet-sql", 0, "region = 'eu'"),
                                       timeout=QUIET_TIMEOUT_S)
    time.sleep(0.2)   # let both be held (a pull answered at once would only be faster)
    started = time.monotonic()
    sent = messaging.SendMessage(rmq_pb2.SendMessageRequest(topic=QUIET_TOPIC, messages=[_message("eu")]),
                                 timeout=QUIET_TIMEOUT_S)
    send_ms = (time.monotonic() - started) * 1000
    assert sent.status.code == rmq_pb2.OK, sent.status
    tag.result()
    tag_ms = (time.monotonic() - started) * 1000
    answer = sql.result()
    sql_ms = (time.monotonic() - started) * 1000
    assert answer.messages.count == 1, answer
    return send_ms, tag_ms, sql_ms


def summary(name: str, samples: list[float]) -> str:
    return f"{name}: median {statistics.median(samples):.1f} ms, max {max(samples):.1f} ms"


def run(held: int, pythonpath: str | None) -> None:
    with tempfile.TemporaryDirectory() as scratch, _broker(Path(scratch), pythonpath) as (address, metrics):
        own_connection = [("grpc.use_local_subchannel_pool", 1)]   # two tenants: two connections
        with open_channel(address, credentials=NOISY, options=own_connection) as noisy_channel, \
                open_channel(address, credentials=QUIET, options=own_connection) as quiet_channel:
            admin = rmq_pb2_grpc.AdminServiceStub(noisy_channel)
            for topic, queues in ((NOISY_TOPIC, QUEUES), (QUIET_TOPIC, 1)):
                config = rmq_pb2.TopicConfig(topic_name=topic, read_queue_nums=queues,
                                             write_queue_nums=queues, perm=6)
                created = admin.CreateTopic(rmq_pb2.CreateTopicRequest(config=config), timeout=30)
                assert created.status.code == rmq_pb2.OK, created.status
            noisy, quiet = (rmq_pb2_grpc.MessagingServiceStub(c) for c in (noisy_channel, quiet_channel))
            idle = [quiet_round(quiet, n) for n in range(5)]
            pulls = [noisy.PullMessage.future(_pull(0, NOISY_TOPIC, "noisy", n % QUEUES, IN_LIST),
                                              timeout=300) for n in range(held)]
            _wait(lambda: _held_pulls(metrics) >= held, f"{held} noisy pulls held")
            storm_started = time.monotonic()
            answered: list[float] = []
            outcomes: Counter[str] = Counter()

            def collect() -> None:
                for pull in pulls:
                    answer = pull.result()
                    answered.append(time.monotonic() - storm_started)
                    outcomes[rmq_pb2.Code.Name(answer.status.code) if answer.status.code
                             else rmq_pb2.PullStatus.Name(answer.pull_status)] += 1

            collector = threading.Thread(target=collect)
            collector.start()
            batch = [rmq_pb2.Message(body=b"y" * 100, properties={"region": "nowhere"}, queue_id=q)
                     for q in range(QUEUES) for _ in range(MESSAGES_PER_QUEUE)]
            answered_send: list[float] = []
            sent = noisy.SendMessage.future(rmq_pb2.SendMessageRequest(topic=NOISY_TOPIC, messages=batch),
                                            timeout=600)
            sent.add_done_callback(lambda _: answered_send.append(time.monotonic() - storm_started))
            during: list[tuple[float, float, float]] = []
            failure = ""
            while collector.is_alive() and len(during) < QUIET_ROUNDS and not failure:
                try:
                    during.append(quiet_round(quiet, 5 + len(during)))
                except grpc.RpcError as error:   # the quiet account's call was not answered in time
                    failure = f"a call failed: {error.code().name} (timeout {QUIET_TIMEOUT_S} s)"
            collector.join()
            storm_s = time.monotonic() - storm_started
            assert sent.result().status.code == rmq_pb2.OK
            _wait(lambda: bool(answered_send), "the noisy send's callback", 10)
            noisy_send_ms = answered_send[0] * 1000
    where = f"from {pythonpath}" if pythonpath else "from this checkout"
    print(f"broker {where}, load {os.getloadavg()[0]:.1f}")
    print(f"noisy: {held} held SQL92 pulls ({len(IN_LIST)}-character IN list), woken by "
          f"{len(batch)} messages; send answered in {noisy_send_ms:.0f} ms; "
          f"its pulls answered within {storm_s:.1f} s (median {statistics.median(answered):.1f} s): "
          f"{dict(outcomes)}")
    if failure:
        print(f"quiet, while the noisy filters ran: {failure} after {len(during)} rounds")
    for label, rounds in (("idle broker", idle), ("while the noisy filters ran", during)):
        if not rounds:
            continue
        sends, tags, sqls = zip(*rounds, strict=True)
        print(f"quiet, {label} ({len(rounds)} rounds): {summary('send', list(sends))}; "
              f"{summary('held tag pull woken', list(tags))}; {summary('held SQL92 pull woken', list(sqls))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--held", type=int, default=800, help="held noisy SQL92 pulls (default 800)")
    parser.add_argument("--broker-pythonpath", help="run the broker with this PYTHONPATH (another checkout)")
    args = parser.parse_args()
    run(args.held, args.broker_pythonpath)


if __name__ == "__main__":
    main()
