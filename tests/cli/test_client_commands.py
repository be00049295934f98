"""`rmq topic|produce|consume|group` argument handling and errors, without a broker."""

from __future__ import annotations

import pytest

from rmq.cli import client_commands, consume_command
from rmq.cli import main as cli
from tests.dead_broker import closed_address


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["topic", "create", "T", "--queues", "0"], "argument --queues: expected a positive integer, got 0"),
        (["topic", "create", "T", "--queues", "many"], "expected a positive integer, got 'many'"),
        (["topic", "create", "T"], "the following arguments are required: --queues"),
        (["topic", "create", "T", "--queues", "2", "--perm", "5"], "argument --perm: invalid choice: 5"),
        (["topic", "describe"], "the following arguments are required: name"),
        (["topic", "frob"], "invalid choice: 'frob'"),
        (["produce"], "the following arguments are required: topic"),
        (["produce", "T", "--count", "-3"], "argument --count: expected a positive integer, got -3"),
        (["produce", "T", "--size", "10"], "--size needs --count"),
        (["produce", "T", "--batch-size", "0"], "argument --batch-size"),
        (["produce", "T", "--deliver-at", "tomorrow"], "--deliver-at: expected epoch ms or an ISO 8601 time"),
        (["produce", "T", "--deliver-at", "2026-12-01T09:00:00"], "with its zone (2026-12-01T09:00:00Z)"),
        (["produce", "T", "--delay", "30x"], "--delay: expected a duration such as 500ms, 30s"),
        (["produce", "T", "--delay", "30s", "--deliver-at", "0"], "not allowed with argument --delay"),
        (["message", "recall", "not-a-handle"], "'not-a-handle' is not a recall handle"),
        (["consume", "T", "--from", "middle"], "--from: expected first, last or timestamp:MS, got 'middle'"),
        (["consume", "T", "--idle-timeout", "0"], "--idle-timeout: expected a positive number, got 0"),
        (["consume", "T", "--sub", "A || "], "invalid subscription expression 'A || '"),
        (["consume", "T", "--sql", "(" * 200 + "a = 1" + ")" * 200],
         "--sql: invalid SQL92 filter at position 64: parentheses nested deeper than 64 levels"),
        (["consume", "T", "--sql", "amount > 5 AND 'x'"],
         "--sql: invalid SQL92 filter at position 15: type error: the literal 'x' is not a condition"),
        (["group", "progress"], "the following arguments are required: group"),
        (["topic", "list", "--endpoints", "localhost"], "invalid endpoints 'localhost'"),
        (["topic", "list", "--endpoints", "127.0.0.1:70000"], "invalid port '70000'"),
        (["topic", "list", "--endpoints", ""], "endpoints is empty"),
    ],
)
def test_bad_arguments_give_one_line_and_a_non_zero_exit(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                         message: str) -> None:
    endpoints = [] if "--endpoints" in argv else ["--endpoints", closed_address()]
    code, out, err = run(capsys, *argv, *endpoints)

    assert code != 0
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("rmq: error: ")
    assert message in err


@pytest.mark.parametrize(
    "argv",
    [["topic", "list"], ["topic", "describe", "T"], ["topic", "create", "T", "--queues", "2"],
     ["topic", "delete", "T"], ["consume", "T"], ["group", "progress", "g"],
     ["produce", "T", "--count", "1"]],
)
def test_unreachable_broker_gives_one_line_naming_it(capsys: pytest.CaptureFixture[str],
                                                     argv: list[str]) -> None:
    address = closed_address()
    code, out, err = run(capsys, *argv, "--endpoints", address)

    assert code != 0
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("rmq: error: cannot reach ") and address in err
    assert "Traceback" not in err


def test_endpoints_default_to_the_environment_then_the_default_broker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RMQ_ENDPOINTS", "10.0.0.1:9876")
    assert cli.build_parser().parse_args(["topic", "list"]).endpoints == "10.0.0.1:9876"
    monkeypatch.delenv("RMQ_ENDPOINTS")
    assert cli.build_parser().parse_args(["topic", "list"]).endpoints == "127.0.0.1:10911"


def test_generated_bodies_have_exactly_the_requested_size_and_differ() -> None:
    bodies = list(client_commands._generated(12, 5))

    assert len(bodies) == 12
    assert {len(body) for body in bodies} == {5}
    assert len(set(bodies)) == 12
    assert list(client_commands._generated(2, 1)) == [b"0", b"1"]


def test_batches_keep_order_and_the_short_tail() -> None:
    batches = list(client_commands._batched([b"a", b"b", b"c", b"d", b"e"], 2))
    assert batches == [[b"a", b"b"], [b"c", b"d"], [b"e"]]


def test_bodies_are_printed_on_one_line() -> None:
    assert consume_command.one_line("a\nb\r\n✓".encode() + b"\xff") == "a\\nb\\r\\n✓\ufffd"
