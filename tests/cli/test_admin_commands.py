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
    answer = json.loads(out)
    assert code == 0 and [q["offset"] for q in answer["queues"]] == [2, 2]
    assert (answer["notified_clients"], answer["untold_clients"]) == ([], ["client-a"])
    with RmqClient(broker.address) as client:
        client.unregister("client-a", "g1")
    code, out, _ = rmq(broker, capsys, "group", "delete", "g1")
    assert code == 0 and "deleted consumer group g1" in out
    code, out, _ = rmq(broker, capsys, "group", "members", "g1")
    assert "no live member" in out


def test_message_query_names_the_topic_bounds_its_pages_and_knows_its_groups(
        broker: InProcessBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """#46 defect 7: --msg-id of another topic is refused and the table has a TOPIC column;
    --limit past a page and a negative --page are refused up front; --group prints yes/no and an
    unknown group is an error, as are reset-offset and delete of a group that never existed."""
    with RmqClient(broker.address) as client:
        client.create_topic("Other", queues=1)
        client.update_consumer_offsets("g1", {MessageQueue("Orders", "broker-a", 0): 1})
    code, out, _ = rmq(broker, capsys, "message", "query", "Orders", "--key", "k0", "--json")
    msg_id = json.loads(out)["messages"][0]["msg_id"]
    code, _, err = rmq(broker, capsys, "message", "query", "Other", "--msg-id", msg_id)
    assert code == 2 and f"message {msg_id} is in topic Orders, not Other" in err
    code, out, _ = rmq(broker, capsys, "message", "query", "Orders", "--msg-id", msg_id)
    assert code == 0 and out.splitlines()[0].split()[:2] == ["MSG_ID", "TOPIC"] and " Orders " in out
    for argv, says in [(["--limit", "501"], "at most 500 messages per page"),
                       (["--page", "-1"], "expected a non-negative integer")]:
        code, _, err = rmq(broker, capsys, "message", "query", "Orders", "--begin", "0", "--end", "9", *argv)
        assert code == 2 and says in err, argv
    code, out, _ = rmq(broker, capsys, "message", "query", "Orders", "--begin", "0", "--end", str(2**62),
                       "--group", "g1")
    assert code == 0 and "yes" in out and "no" in out and "True" not in out and "False" not in out
    for argv in (["message", "query", "Orders", "--key", "k0", "--group", "nobody"],
                 ["group", "reset-offset", "nobody", "--topic", "Orders", "--to", "latest"],
                 ["group", "delete", "nobody"]):
        code, out, err = rmq(broker, capsys, *argv)
        assert code == 2 and "consumer group nobody does not exist" in err and "deleted" not in out, argv
    with RmqClient(broker.address) as client:
        assert client.query_consumer_offsets("nobody", "Orders") == {}      # not created
