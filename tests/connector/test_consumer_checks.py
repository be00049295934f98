"""Consumers fail fast on refusals that will not go away (issue 32 item 2): an illegal group,
no SUB permission on the group, an SQL92 filter the broker does not support. The SDK raises
from start(), `rmq consume` prints one line and exits 2 at once (not at --idle-timeout)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from rmq.broker_server.security.acl_file import AclFile
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.cli import main as cli
from rmq.connector.client import MessageQueue, RmqClient, RmqError
from rmq.connector.pull_consumer import PullConsumer
from rmq.connector.push_consumer import PushConsumer
from rmq.subscription import MessageSelector
from rmq.v1 import rmq_pb2
from tests.acl_accounts import ADMIN, CONSUMER, acl_text
from tests.acl_files import write_acl
from tests.broker_server.in_process_broker import InProcessBroker


def ok(messages: object, context: object) -> None:
    raise AssertionError("no message is expected")


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    directory = tmp_path_factory.mktemp("acl-broker")
    acl = AclFile(write_acl(directory / "acl.yml", acl_text()))
    broker = InProcessBroker(directory / "store", ServerSecurity(acl)).start()
    with RmqClient(broker.address, access_key=ADMIN[0], secret_key=ADMIN[1]) as admin:
        admin.create_topic("orders", queues=2)
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def no_sql_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    store = tmp_path_factory.mktemp("no-sql") / "store"
    broker = InProcessBroker(store, enable_property_filter=False).start()
    with RmqClient(broker.address) as admin:
        admin.create_topic("orders", queues=2)
    yield broker
    broker.stop()


@pytest.mark.parametrize(("group", "message"), [("", "consumer group is empty"),
                                                ("my group", "may only contain letters")])
def test_an_illegal_group_is_refused_before_anything_starts(group: str, message: str) -> None:
    for consumer in (PushConsumer, PullConsumer):
        with pytest.raises(ValueError, match=message):
            consumer(group, "127.0.0.1:1")


@pytest.mark.parametrize(("group", "message"), [("", "--group: consumer group is empty"),
                                                ("my group", "--group: consumer group 'my group' may only")])
def test_rmq_consume_with_an_illegal_group_is_one_line(capsys: pytest.CaptureFixture[str], group: str,
                                                       message: str) -> None:
    code = cli.main(["consume", "orders", "--group", group, "--endpoints", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"rmq: error: {message}")


def test_start_raises_without_sub_permission_on_the_group(acl_broker: InProcessBroker) -> None:
    with RmqClient(acl_broker.address, access_key=CONSUMER[0], secret_key=CONSUMER[1]) as client:
        push = PushConsumer("other", client.endpoints, client=client)
        push.subscribe("orders")
        push.register_message_listener(ok)
        with pytest.raises(RmqError) as refused:
            push.start()
        assert refused.value.code == rmq_pb2.NO_PERMISSION and "other" in str(refused.value)
        assert not push.running

        pull = PullConsumer("other", client.endpoints, client=client)
        pull.subscribe("orders")
        with pytest.raises(RmqError, match="other"):
            pull.start()
        assert not pull.running

        allowed = PushConsumer("etl", client.endpoints, client=client)   # the same account may join etl
        allowed.subscribe("orders")
        allowed.register_message_listener(ok)
        with allowed:
            assert allowed.running


def test_rmq_consume_without_permission_exits_2_at_once(acl_broker: InProcessBroker,
                                                        capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RMQ_SECRET_KEY", CONSUMER[1])
    code = cli.main(["consume", "orders", "--group", "other", "--idle-timeout", "20",
                     "--endpoints", acl_broker.address, "--access-key", CONSUMER[0]])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("rmq: error: NO_PERMISSION")


def test_start_raises_when_the_broker_does_not_filter_by_sql92(no_sql_broker: InProcessBroker) -> None:
    with RmqClient(no_sql_broker.address) as client:
        for consumer in (PushConsumer("etl", client.endpoints, client=client),
                         PullConsumer("etl", client.endpoints, client=client)):
            consumer.subscribe("orders", MessageSelector.by_sql("amount > 5"))
            if isinstance(consumer, PushConsumer):
                consumer.register_message_listener(ok)
            with pytest.raises(RmqError) as refused:
                consumer.start()
            assert refused.value.code == rmq_pb2.FILTER_NOT_SUPPORTED


def test_rmq_consume_sql_on_a_broker_without_sql92_exits_2_at_once(
        no_sql_broker: InProcessBroker, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["consume", "orders", "--sql", "amount > 5", "--idle-timeout", "20",
                     "--endpoints", no_sql_broker.address])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("rmq: error: FILTER_NOT_SUPPORTED")


def test_a_pull_refused_for_good_stops_the_consumer(no_sql_broker: InProcessBroker,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal that appears after start() (here: the start-up check passed over) stops the
    consumer: PushConsumer.failure is set, PullConsumer.poll() raises it."""
    monkeypatch.setattr("rmq.connector.pull_consumer.check_client_in_broker", lambda *args: None)
    with RmqClient(no_sql_broker.address) as client:
        pull = PullConsumer("etl", client.endpoints, client=client)
        pull.subscribe("orders", MessageSelector.by_sql("amount > 5"))
        with pull:
            deadline = time.monotonic() + 30
            with pytest.raises(RmqError) as refused:
                while time.monotonic() < deadline:
                    pull.poll(0.1)
            assert refused.value.code == rmq_pb2.FILTER_NOT_SUPPORTED


def test_a_pull_with_an_sql92_selector_is_refused_by_a_broker_without_property_filters(
        no_sql_broker: InProcessBroker) -> None:
    with RmqClient(no_sql_broker.address) as client:
        with pytest.raises(RmqError, match="does not support filtering messages by SQL92"):
            client.pull(MessageQueue("orders", "broker-a", 0), 0, 32, group="g",
                        sub_expression=MessageSelector.by_sql("region = 'eu' AND amount BETWEEN 100 AND 500"))
