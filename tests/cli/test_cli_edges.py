"""CLI and SDK edges a new user meets (issue 32 item 9): `| head` on any command, properties in
`rmq consume --json`, SendResult.status as an enum, a plaintext client on a TLS-only port."""

from __future__ import annotations

import io
import json
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from rmq import __version__, retry
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.broker_server.security.tls import ServerTls
from rmq.cli import main as cli
from rmq.connector import Message, Producer, SendStatus
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.message import MessageExt, decode_messages
from rmq.connector.message_listener import ConsumeConcurrentlyStatus
from rmq.connector.push_consumer import PushConsumer
from tests.broker_server.in_process_broker import InProcessBroker
from tests.dead_broker import create_topic, name_server_and_broker_a, register_dead_broker
from tests.tls_certs import make_tls_files
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    broker = InProcessBroker(tmp_path_factory.mktemp("cli-edges") / "store").start()
    yield broker
    broker.stop()


def test_a_reader_that_goes_away_ends_the_command_quietly(broker: InProcessBroker,
                                                          capfd: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.main(["topic", "create", "piped", "--queues", "2", "--endpoints", broker.address]) == 0
    read_end, write_end = os.pipe()
    os.close(read_end)                                  # `| head` that already exited
    with os.fdopen(write_end, "w") as piped:
        monkeypatch.setattr("sys.stdout", piped)
        for argv in (["topic", "list", "--json"], ["topic", "describe", "piped"], ["group", "list"]):
            assert cli.main([*argv, "--endpoints", broker.address]) == 0
    assert "Traceback" not in capfd.readouterr().err


def test_consume_json_carries_the_properties_and_send_status_is_an_enum(
        broker: InProcessBroker, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["topic", "create", "props", "--queues", "1", "--endpoints", broker.address]) == 0
    with Producer(broker.address) as producer:
        result = producer.send(Message("props", b"x", tags="T", keys="k1", properties={"region": "eu"}))
    assert result.status is SendStatus.SEND_OK and result.status.name == "SEND_OK"
    capsys.readouterr()

    assert cli.main(["consume", "props", "--json", "--from", "first", "--max-messages", "1",
                     "--endpoints", broker.address]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["properties"]["region"] == "eu"
    assert (record["properties"]["TAGS"], record["properties"]["KEYS"]) == ("T", "k1")


def test_a_plaintext_client_on_a_tls_port_is_told_tls_is_required(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = make_tls_files(tmp_path / "tls")
    security = ServerSecurity(tls=ServerTls.from_args(str(files.server_cert), str(files.server_key), None))
    tls_broker = InProcessBroker(tmp_path / "store", security).start()
    try:
        code = cli.main(["topic", "list", "--endpoints", tls_broker.address])
    finally:
        tls_broker.stop()
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "the server requires TLS and this client connected without it (give --tls" in err


@pytest.fixture
def cluster_with_a_dead_broker(tmp_path: Path) -> Iterator[str]:
    """broker-a holds topic `watched` with group g's offsets; broker-b is registered for
    `watched` and g's retry topic but not answering (killed)."""
    with name_server_and_broker_a(tmp_path) as (namesrv_address, client):
        create_topic(client, "watched", queues=2)
        client.send("watched", [OutgoingMessage(b"x", queue_id=q) for q in (0, 0, 1)])
        client.heartbeat("cli-edges@1", "g", {"watched": "*"})   # creates %RETRY%g
        client.update_consumer_offsets("g", {MessageQueue("watched", "broker-a", 0): 1})
        register_dead_broker(namesrv_address, ["watched", retry.retry_topic("g")])
        yield namesrv_address


def test_admin_views_with_a_broker_down_say_so_and_exit_non_zero(
        cluster_with_a_dead_broker: str, capsys: pytest.CaptureFixture[str]) -> None:
    endpoints = ["--endpoints", cluster_with_a_dead_broker]

    assert cli.main(["group", "progress", "g", *endpoints]) == 1
    out, err = capsys.readouterr()
    assert "total lag: 2 (incomplete: without the queues of unreachable broker-b)" in out
    assert "broker broker-b is unreachable" in err

    assert cli.main(["group", "progress", "g", "--json", *endpoints]) == 1
    progress = json.loads(capsys.readouterr().out)
    assert progress["complete"] is False and list(progress["unreachable"]) == ["broker-b"]

    assert cli.main(["group", "list", *endpoints]) == 1
    out, err = capsys.readouterr()
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["g"]
    assert "broker broker-b is unreachable" in err

    assert cli.main(["group", "list", "--json", *endpoints]) == 1
    listing = json.loads(capsys.readouterr().out)
    assert listing["complete"] is False and [g["group"] for g in listing["groups"]] == ["g"]


def test_consume_from_last_on_a_young_topic_reads_what_it_holds(broker: InProcessBroker,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`--from last` (the default) for a group that never committed: RocketMQ serves a queue
    whose first message is still in the broker's memory from offset 0."""
    assert cli.main(["topic", "create", "young", "--queues", "1", "--endpoints", broker.address]) == 0
    with Producer(broker.address) as producer:
        producer.send([Message("young", body) for body in (b"a", b"b", b"c")])
    capsys.readouterr()
    assert cli.main(["consume", "young", "--max-messages", "3", "--idle-timeout", "10",
                     "--endpoints", broker.address]) == 0
    out, err = capsys.readouterr()
    assert [line.split()[-1] for line in out.splitlines()] == ["a", "b", "c"]
    assert err.splitlines()[0] == "QUEUE OFFSET TAGS KEYS BODY"     # the columns, not among the messages
    assert "consumed 3 messages" in err


def test_dlq_resend_to_the_group_only_keeps_the_original_id(broker: InProcessBroker,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """`rmq dlq resend GROUP --group-only` goes through the group's retry topic: the group's
    consumer gets the message again (original topic, the first copy's id as origin_msg_id),
    and nothing is published to the topic other groups read."""
    endpoints = ["--endpoints", broker.address]
    assert cli.main(["topic", "create", "lettered", "--queues", "1", *endpoints]) == 0
    with Producer(broker.address) as producer:
        producer.send(Message("lettered", b"letter"))
    deliveries: list[MessageExt] = []
    redelivered = threading.Event()

    def listener(messages: Sequence[MessageExt], context: object) -> ConsumeConcurrentlyStatus:
        deliveries.extend(messages)
        if len(deliveries) == 1:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER   # max_reconsume_times 0: to the DLQ
        redelivered.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def dead_letters() -> list[dict]:
        capsys.readouterr()
        assert cli.main(["dlq", "list", "lettered-g", "--json", *endpoints]) == 0
        return json.loads(capsys.readouterr().out)

    consumer = PushConsumer("lettered-g", broker.address, consume_from="first", max_reconsume_times=0)
    consumer.subscribe("lettered")
    consumer.register_message_listener(listener)
    with consumer:
        wait_until(lambda: len(dead_letters()) == 1, "the message in the DLQ")
        assert cli.main(["dlq", "resend", "lettered-g", "--group-only", *endpoints]) == 0
        assert "resent 1 dead letters of group lettered-g (to this group only)" in capsys.readouterr().out
        assert redelivered.wait(30)
    first, again = deliveries
    assert (again.topic, again.body) == ("lettered", b"letter")
    assert again.msg_id != first.msg_id and again.origin_msg_id == first.msg_id == first.origin_msg_id
    with RmqClient(broker.address) as client:
        assert client.queue_offsets(MessageQueue("lettered", "broker-a", 0)).max_offset == 1   # not re-sent



def test_produce_sets_user_properties(broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.main(["topic", "create", "user-props", "--queues", "1", "--endpoints", broker.address]) == 0
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"hello\n")))
    assert cli.main(["produce", "user-props", "--property", "region=eu", "--property", "tier=gold",
                     "--endpoints", broker.address]) == 0
    with RmqClient(broker.address) as client:
        mq = client.route("user-props").message_queues[0]
        [message] = decode_messages(client.browse_messages(mq, 0, 1).messages, mq)
    assert (message.properties["region"], message.properties["tier"]) == ("eu", "gold")


@pytest.mark.parametrize("value, says", [("noequals", "expected KEY=VALUE"), ("=x", "expected KEY=VALUE"),
                                         ("TAGS=x", "TAGS is set by rmq itself")])
def test_bad_properties_are_one_line(value: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["produce", "T", "--property", value]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1


def test_members_and_cluster_with_a_broker_down_say_so_and_exit_non_zero(
        cluster_with_a_dead_broker: str, capsys: pytest.CaptureFixture[str]) -> None:
    """#46 defect 6: `group members` does not answer "no live member" (exit 0) when a broker could
    not be asked, and `cluster` exits 1 without showing the dead member's registered role as its own."""
    endpoints = ["--endpoints", cluster_with_a_dead_broker]
    assert cli.main(["group", "members", "g", *endpoints]) == 1
    out, err = capsys.readouterr()
    assert "cli-edges@1" in out and "broker broker-b is unreachable" in err
    assert cli.main(["group", "members", "g", "--json", *endpoints]) == 1
    assert json.loads(capsys.readouterr().out)["complete"] is False

    assert cli.main(["cluster", *endpoints]) == 1
    out, err = capsys.readouterr()
    [dead] = [line.split(maxsplit=4) for line in out.splitlines() if line.startswith("broker-b")]
    assert dead[2] == "?" and "unreachable (registered as" in dead[4]
    assert "no status from broker-b id 0" in err


class _Stdin:
    """sys.stdin reading from a pipe the test writes to, as `tail -f app.log |` feeds rmq produce."""

    def __init__(self, read_end: int) -> None:
        self.buffer = os.fdopen(read_end, "rb")


def test_produce_sends_what_stdin_gave_after_the_linger(broker: InProcessBroker,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """#46 defect 4: one line of a slow source is sent within --linger-ms (50), not held until 256
    lines (or the end of stdin) came."""
    assert cli.main(["topic", "create", "tailed", "--queues", "1", "--endpoints", broker.address]) == 0
    read_end, write_end = os.pipe()
    monkeypatch.setattr("sys.stdin", _Stdin(read_end))
    exit_code: list[int] = []
    producing = threading.Thread(target=lambda: exit_code.append(
        cli.main(["produce", "tailed", "--endpoints", broker.address])))
    producing.start()
    with RmqClient(broker.address) as client, os.fdopen(write_end, "wb", buffering=0) as tail:
        tail.write(b"first line\n")
        wait_until(lambda: client.queue_offsets(MessageQueue("tailed", "broker-a", 0)).max_offset == 1,
                   "the first line sent while stdin stays open", timeout=10)
        tail.write(b"second line\n")
    producing.join(30)
    assert exit_code == [0] and "sent 2 messages (acknowledged 2)" in capsys.readouterr().out


def test_produce_retries_a_failed_send_on_another_broker(cluster_with_a_dead_broker: str,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """#46 defect 5: with broker-b (registered for `watched`) down, sends that go to it are retried
    on broker-a (RocketMQ's retryTimesWhenSendFailed); every line is acknowledged, exit 0."""
    lines = b"".join(b"line %d\n" % i for i in range(8))
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(lines)))
    argv = ["produce", "watched", "--batch-size", "1", "--endpoints", cluster_with_a_dead_broker]
    assert cli.main(argv) == 0
    assert "sent 8 messages (acknowledged 8)" in capsys.readouterr().out


def test_cluster_shows_each_brokers_version_uptime_and_todays_counts(
        broker: InProcessBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """#46: `rmq cluster` shows what mqadmin brokerStatus does (version, start, today's puts and
    gets): 3 sends and a pull of 2 count; the table has the columns."""
    def member() -> dict:
        assert cli.main(["cluster", "--json", "--endpoints", broker.address]) == 0
        [state] = json.loads(capsys.readouterr().out)["brokers"]["broker-a"]
        return state

    before = member()
    with RmqClient(broker.address) as client:
        client.create_topic("today", queues=1)
        client.send("today", [OutgoingMessage(b"x") for _ in range(3)])
        client.pull(MessageQueue("today", "broker-a", 0), 0, 2, group="today-group")
    after = member()
    assert after["version"] == __version__ and after["boot_timestamp"] == before["boot_timestamp"] > 0
    assert (after["put_today"] - before["put_today"], after["get_today"] - before["get_today"]) == (3, 2)
    assert cli.main(["cluster", "--endpoints", broker.address]) == 0
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert header.split()[8:12] == ["VERSION", "UP", "PUT_TODAY", "GET_TODAY"]
    cells = row.split()
    assert cells[8] == __version__ and cells[-3:] == [str(after["put_today"]), str(after["get_today"]), "ok"]
