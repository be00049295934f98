"""The SDK's error tree is closed (docs/manual/sdk.md "Errors"): every documented bad argument
of the public API raises the documented leaf of RmqError (never a bare ValueError, never the
root itself), and no SDK module raises the root or a bare builtin where a leaf is meant."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rmq.connector import (
    ConfigError,
    Message,
    MessageSelector,
    Producer,
    PullConsumer,
    PushConsumer,
    RmqError,
    RmqRefused,
    RmqUnavailable,
    StateError,
)
from rmq.connector.admin import MQAdmin
from rmq.connector.client import PERM_READ, MessageQueue, RmqClient
from tests.broker_server.in_process_broker import InProcessBroker, running_broker
from tests.dead_broker import closed_address

REPO_ROOT = Path(__file__).resolve().parents[2]
EP = "127.0.0.1:1"   # never connected to: every case below fails before any call


def _push(**kwargs: object) -> PushConsumer:
    return PushConsumer("g1", EP, **kwargs)


def _pull(**kwargs: object) -> PullConsumer:
    return PullConsumer("g1", EP, **kwargs)


def _started_push_without_listener() -> None:
    consumer = _push()
    consumer.subscribe("T")
    consumer.start()


def _subscribe_then_assign() -> None:
    consumer = _pull()
    consumer.subscribe("T")
    consumer.assign([MessageQueue("T", "broker-a", 0)])


# (what the user does, the documented class)
WITHOUT_A_BROKER: dict[str, tuple[Callable[[], object], type[RmqError]]] = {
    "empty endpoints": (lambda: RmqClient(""), ConfigError),
    "endpoint without a port": (lambda: RmqClient("localhost"), ConfigError),
    "endpoint port out of range": (lambda: RmqClient("localhost:70000"), ConfigError),
    "non-positive timeout": (lambda: RmqClient(EP, timeout=0), ConfigError),
    "access key without a secret": (lambda: RmqClient(EP, access_key="ak"), ConfigError),
    "secret without an access key": (lambda: RmqClient(EP, secret_key="sk"), ConfigError),
    "missing TLS CA file": (lambda: RmqClient(EP, tls_ca_file="/nonexistent/ca.pem"), ConfigError),
    "client certificate without its key": (lambda: RmqClient(EP, tls=True, tls_cert_file="/x.pem"),
                                           ConfigError),
    "negative send retries": (lambda: Producer(EP, retry_times_when_send_failed=-1), ConfigError),
    "non-positive max message size": (lambda: Producer(EP, max_message_size=0), ConfigError),
    "send before start": (lambda: Producer(EP).send(Message("T", b"x")), StateError),
    "empty message": (lambda: Producer(EP, client=RmqClient(EP)).send(Message("T", b"")), ConfigError),
    "empty topic": (lambda: Producer(EP, client=RmqClient(EP)).send(Message("", b"x")), ConfigError),
    "oversized message": (lambda: Producer(EP, client=RmqClient(EP), max_message_size=4).send(
        Message("T", b"12345")), ConfigError),
    "empty list": (lambda: Producer(EP, client=RmqClient(EP)).send([]), ConfigError),
    "illegal group name": (lambda: PushConsumer("bad group!", EP), ConfigError),
    "unknown message model": (lambda: _push(message_model="sideways"), ConfigError),
    "unknown allocation": (lambda: _push(allocate_strategy="random"), ConfigError),
    "unknown consume_from": (lambda: _push(consume_from="middle"), ConfigError),
    "non-positive pull batch": (lambda: _push(pull_batch_size=0), ConfigError),
    "negative reconsume times": (lambda: _push(max_reconsume_times=-1), ConfigError),
    "negative pull interval": (lambda: _push(pull_interval_ms=-1), ConfigError),
    "a pull batch that is not a number": (lambda: _push(pull_batch_size="32"), ConfigError),
    "unknown consumer keyword": (lambda: _push(pull_batch=32), ConfigError),
    "pull consumer: a PushConsumer-only keyword": (lambda: _pull(consume_thread_max=4), ConfigError),
    "pull consumer: non-positive auto-commit interval": (lambda: _pull(auto_commit_interval_s=0),
                                                         ConfigError),
    "subscribe to no topic": (lambda: _push().subscribe("", "*"), ConfigError),
    "malformed tag expression": (lambda: _push().subscribe("T", "a || "), ConfigError),
    "star among tags": (lambda: _push().subscribe("T", "* || TagA"), ConfigError),
    "start without a listener": (_started_push_without_listener, ConfigError),
    "pull consumer: malformed tags": (lambda: _pull().subscribe("T", "TagA ||"), ConfigError),
    "pull consumer: poll before start": (lambda: _pull().poll(timeout=0), StateError),
    "pull consumer: subscribe and assign": (_subscribe_then_assign, StateError),
    "pull consumer: assign nothing": (lambda: _pull().assign([]), ConfigError),
    "selector: malformed tags": (lambda: MessageSelector.by_tag("a || "), ConfigError),
    "selector: malformed SQL92": (lambda: MessageSelector.by_sql("a >"), ConfigError),
    "admin: not a message id": (lambda: MQAdmin(RmqClient(EP)).view("not-an-id"), ConfigError),
}


@pytest.mark.parametrize("case", list(WITHOUT_A_BROKER))
def test_each_documented_bad_argument_raises_its_documented_leaf(case: str) -> None:
    call, expected = WITHOUT_A_BROKER[case]
    with pytest.raises(RmqError) as raised:
        call()
    assert type(raised.value) is expected, f"{case}: {type(raised.value).__name__}: {raised.value}"
    assert str(raised.value)   # a message that says what is wrong


@pytest.mark.parametrize(("make", "named"), [
    (lambda: _push(pull_interval_ms=-1), "pull_interval_ms must be at least 0, not -1"),
    (lambda: _push(await_termination_s=-1), "await_termination_s must be at least 0"),
    (lambda: _push(pull_batch_size="32"), "pull_batch_size must be a number, not '32'"),
    (lambda: _push(pull_batch=32), "unknown setting 'pull_batch'; accepted: allocate_strategy, "),
    (lambda: _pull(consume_thread_max=4), "unknown setting 'consume_thread_max'"),
    (lambda: _pull(transport="udp"), "transport must be one of auto, flight, grpc, not 'udp'"),
])
def test_a_bad_consumer_keyword_is_named_once_at_construction(make: Callable[[], object], named: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        make()


def test_a_malformed_tag_expression_names_itself_and_the_accepted_form() -> None:
    expected = r"invalid subscription expression 'a \|\| ': expected '\*' or tags"
    with pytest.raises(ConfigError, match=expected):
        _push().subscribe("T", "a || ")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    with running_broker(tmp_path_factory.mktemp("errors")) as server:
        yield server


def test_refusals_are_rmq_refused_with_their_code(broker: InProcessBroker) -> None:
    with RmqClient(broker.address) as client, Producer(broker.address, client=client) as producer:
        client.create_topic("ReadOnlyT", queues=1, perm=PERM_READ)
        cases: dict[str, tuple[Callable[[], object], str]] = {
            "send to a read-only topic": (lambda: producer.send(Message("ReadOnlyT", b"x")), "NO_PERMISSION"),
            "send to an unknown topic": (lambda: producer.send(Message("NoSuchT", b"x")), "TOPIC_NOT_EXIST"),
            "offsets of a queue the broker lacks": (
                lambda: client.queue_offsets(MessageQueue("ReadOnlyT", "broker-a", 7)), "TOPIC_NOT_EXIST"),
            "a message id of another cluster": (
                lambda: MQAdmin(client).view("0A0000010000270F0000000000000000"), "QUERY_NOT_FOUND"),
        }
        for case, (call, code) in cases.items():
            with pytest.raises(RmqError) as raised:
                call()
            assert (type(raised.value), raised.value.code_name) == (RmqRefused, code), case


def test_an_unreachable_broker_is_rmq_unavailable() -> None:
    with RmqClient(closed_address(), timeout=1) as client, pytest.raises(RmqError) as raised:
        client.query_route("T")
    assert type(raised.value) is RmqUnavailable


def _raised_roots_and_builtins(path: Path) -> list[str]:
    """`raise RmqError(...)`, `return RmqError(...)` and `raise ValueError(...)` in a module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Raise | ast.Return):
            continue
        value = node.exc if isinstance(node, ast.Raise) else node.value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and \
                value.func.id in ("RmqError", "ValueError", "RuntimeError", "TypeError"):
            found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}: {value.func.id}")
    return found


def test_the_sdk_raises_leaves_never_the_root_nor_a_bare_builtin() -> None:
    modules = [p for p in sorted((REPO_ROOT / "connector").rglob("*.py")) if "spark" not in p.parts]
    assert [hit for path in modules for hit in _raised_roots_and_builtins(path)] == []
