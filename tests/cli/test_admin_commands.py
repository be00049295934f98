"""`rmq message query` and `rmq group members|reset-offset|delete` against an in-process broker:
what an operator types, what they read back, and one clear line for bad input."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.cli.main import main
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from tests.broker_server.in_process_broker import InProcessBroker, running_broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    with running_broker(tmp_path) as server:
        with RmqClient(server.address) as client:
            client.create_topic("Orders", queues=2)
            client.send("Orders", [OutgoingMessage(f"order {i}".encode(), tags="paid", keys=f"k{i}",
                                                   properties={"region": "eu"}, queue_id=i % 2)
                                   for i in range(4)])
        yield server


def rmq(broker: InProcessBroker, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--endpoints", broker.address])
    out, err = capsys.readouterr()
    return code, out, err


def test_query_by_key_then_by_the_id_it_printed(broker: InProcessBroker,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = rmq(broker, capsys, "message", "query", "Orders", "--key", "k2", "--json")
    assert code == 0
    [found] = json.loads(out)["messages"]
    assert (found["body"], found["tags"], found["properties"]["region"]) == ("order 2", "paid", "eu")
    code, out, _ = rmq(broker, capsys, "message", "query", "Orders", "--msg-id", found["msg_id"])
    assert code == 0 and found["msg_id"] in out and "order 2" in out


def test_query_by_time_with_consume_state(broker: InProcessBroker,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    with RmqClient(broker.address) as client:
        client.update_consumer_offsets("g1", {MessageQueue("Orders", "broker-a", 0): 1})
    code, out, _ = rmq(broker, capsys, "message", "query", "Orders", "--begin", "0", "--end", str(2**62),
                       "--group", "g1", "--json")
    assert code == 0
    consumed = {(m["queue_id"], m["queue_offset"]): m["consumed"]["g1"] for m in json.loads(out)["messages"]}
    assert consumed == {(0, 0): True, (0, 1): False, (1, 0): False, (1, 1): False}


@pytest.mark.parametrize("argv, message", [
    (["message", "query", "Orders", "--begin", "5"], "--begin needs --end"),
    (["message", "query", "Orders", "--msg-id", "zz"], "is not a message id"),
    (["group", "reset-offset", "g1", "--topic", "Orders", "--to", "yesterday"],
     "use earliest, latest or timestamp:<epoch-ms>"),
])
def test_bad_input_is_one_line(broker: InProcessBroker, capsys: pytest.CaptureFixture[str], argv: list[str],
                               message: str) -> None:
    code, out, err = rmq(broker, capsys, *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_members_reset_and_delete(broker: InProcessBroker, capsys: pytest.CaptureFixture[str]) -> None:
    with RmqClient(broker.address) as client:
        client.heartbeat("client-a", "g1", {"Orders": "*"})
    code, out, _ = rmq(broker, capsys, "group", "members", "g1", "--json")
    [member] = json.loads(out)["members"]
    assert (member["client_id"], member["protocol"], len(member["queues"])) == ("client-a", "rmq", 2)
    code, _, err = rmq(broker, capsys, "group", "reset-offset", "g1", "--topic", "Orders", "--to", "latest")
    assert code == 2 and "live member" in err
    code, out, _ = rmq(broker, capsys, "group", "reset-offset", "g1", "--topic", "Orders", "--to", "latest",
                       "--force", "--json")
    assert code == 0 and [q["offset"] for q in json.loads(out)["queues"]] == [2, 2]
    with RmqClient(broker.address) as client:
        client.unregister("client-a", "g1")
    code, out, _ = rmq(broker, capsys, "group", "delete", "g1")
    assert code == 0 and "deleted consumer group g1" in out
    code, out, _ = rmq(broker, capsys, "group", "members", "g1")
    assert "no live member" in out
