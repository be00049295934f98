"""The remoting port's single-message send path (issue 41, docs/remoting-protocol.md "A single
send"): a plain SEND_MESSAGE / SEND_MESSAGE_V2 is answered on the read itself
(BrokerRemotingProcessor.immediate -> SendMessageProcessor.send_one_now), any other send by the
general path (a coroutine per request, RemotingServer.handle), and each check of a send refuses on
the single-message path as it does on the general one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq import message_format as mf
from rmq.broker_server.processors.topic_config_manager import TopicConfig
from rmq.broker_server.remoting.remoting_acl import signed
from rmq.broker_server.security.acl_file import AclFile
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.remoting.remoting_command import RemotingCommand, SerializeType
from rmq.remoting.request_code import RequestCode, ResponseCode
from rmq.topic_config import PERM_READ
from tests.acl_files import write_acl
from tests.broker_server.in_process_broker import InProcessBroker
from tests.broker_server.remoting_client import RemotingTestClient
from tests.broker_server.test_remoting_broker import ACL, TOPIC, pull, records, request, send_v2, start_broker
from tests.waiting import wait_until

SENDS = frozenset({RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE})
MAX_MESSAGE_SIZE = 4096
ADMIN_ACL = ACL + "  - {accessKey: operator, secretKey: 'operator-secret', admin: true}\n"
DELAYED = {mf.PROPERTY_DELAY_TIME_LEVEL: "1"}   # not plain: stored by the general path


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    acl_file = write_acl(tmp_path_factory.mktemp("acl") / "acl.yml", ADMIN_ACL)
    security = ServerSecurity(acl_file=AclFile(acl_file))
    broker = start_broker(tmp_path_factory.mktemp("send-path") / "store", security=security,
                          max_message_size=MAX_MESSAGE_SIZE)
    first_file(broker, "producer")
    yield broker
    broker.stop()


def first_file(broker: InProcessBroker, account: str | None = None) -> None:
    """A first send: the CommitLog's first file is created on a store thread (the general path)."""
    command = send_v2(b"first", {})
    with RemotingTestClient(broker.config.remoting_listen) as client:
        sent = client.call(command if account is None else signed(command, account, f"{account}-secret"))
    assert sent.code == ResponseCode.SUCCESS, sent.remark


def general_path(broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The codes of the sends the general path serves from now on (RemotingServer.handle, counted)."""
    server = broker.controller.remoting
    assert server is not None
    served: list[int] = []
    handle = server.handle

    def counted(channel: Any, command: RemotingCommand, admission: Any) -> Any:
        if command.code in SENDS:
            served.append(command.code)
        return handle(channel, command, admission)

    monkeypatch.setattr(server, "handle", counted)
    return served


@pytest.fixture
def general(broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    return general_path(broker, monkeypatch)


def call(broker: InProcessBroker, command: RemotingCommand, account: str = "producer") -> RemotingCommand:
    with RemotingTestClient(broker.config.remoting_listen) as client:
        return client.call(signed(command, account, f"{account}-secret"))


def send_v1(body: bytes, properties: dict[str, str], queue_id: int = 0) -> RemotingCommand:
    """SEND_MESSAGE (SendMessageRequestHeader's long names), in RocketMQ's binary header."""
    return request(RequestCode.SEND_MESSAGE, SerializeType.ROCKETMQ, body, producerGroup="pg", topic=TOPIC,
                   defaultTopic="TBW102", defaultTopicQueueNums=4, queueId=queue_id, sysFlag=0,
                   bornTimestamp=1, flag=0, properties=mf.encode_properties(properties))


@pytest.mark.parametrize("make", [send_v2, send_v1], ids=["SEND_MESSAGE_V2", "SEND_MESSAGE"])
def test_a_plain_send_is_answered_on_the_read_and_any_other_by_the_general_path(
    broker: InProcessBroker, general: list[int], make: Callable[..., RemotingCommand]
) -> None:
    plain = call(broker, make(b"plain", {"TAGS": "a", "KEYS": "k", "UNIQ_KEY": "U1", "color": "blue"}))
    assert plain.code == ResponseCode.SUCCESS, plain.remark
    assert general == []   # answered on the read: no coroutine, no dispatcher round
    pulled = call(broker, pull(0, int(plain.ext_fields["queueOffset"])), "consumer")
    message = records(pulled.body)[0]
    assert message.body == b"plain" and message.properties["color"] == "blue"
    assert mf.message_id(message.store_host, message.physical_offset) == plain.ext_fields["msgId"]
    timer = {mf.PROPERTY_TIMER_DELAY_SEC: "60"}
    for properties in (DELAYED, timer):
        assert call(broker, make(b"later", properties)).code == ResponseCode.SUCCESS
    assert len(general) == 2
    prepared = call(broker, send_v2(b"half", {}, sys_flag=4))   # a transaction's half message
    batch = send_v2(b"", {})
    batch.ext_fields["m"] = "true"
    call(broker, batch)
    assert prepared.code == ResponseCode.SUCCESS and len(general) == 4


def refuses_alike(broker: InProcessBroker, general: list[int],
                  command: Callable[[dict[str, str]], RemotingCommand], account: str = "producer"
                  ) -> RemotingCommand:
    """The answer of the single-message path to a plain send, nothing stored, checked against the
    general path's to the same send with a delay level (which takes it): the same refusal."""
    end = broker.controller.store.commit_log.get_max_offset()
    plain = call(broker, command({}), account)
    assert plain.code != ResponseCode.SUCCESS and general == []
    delayed = call(broker, command(DELAYED), account)
    assert delayed.code == plain.code and len(general) == 1
    assert delayed.remark.split(" ")[:2] == plain.remark.split(" ")[:2], (delayed.remark, plain.remark)
    assert broker.controller.store.commit_log.get_max_offset() == end
    return plain


def test_the_acl_refuses_on_the_single_message_path(broker: InProcessBroker, general: list[int]) -> None:
    """An account without PUB on the topic is refused on the read, before anything is stored
    (authorization comes before every check of the message, on either path)."""
    end = broker.controller.store.commit_log.get_max_offset()
    for account in ("consumer", "intruder"):
        refused = call(broker, send_v2(b"x", {}), account)
        assert refused.code == ResponseCode.NO_PERMISSION and TOPIC in refused.remark, refused.remark
    forged = call(broker, send_v2(b"x", {}), "producer")
    assert forged.code == ResponseCode.SUCCESS   # the same send, signed by the writer
    tampered = signed(send_v2(b"x", {}), "producer", "producer-secret")
    tampered.body = b"y"
    with RemotingTestClient(broker.config.remoting_listen) as client:
        assert client.call(tampered).code == ResponseCode.NO_PERMISSION   # the signature covers the body
    assert general == [] and broker.controller.store.commit_log.get_max_offset() > end


def test_an_oversize_message_is_refused_on_the_single_message_path(
    broker: InProcessBroker, general: list[int]
) -> None:
    body = b"x" * MAX_MESSAGE_SIZE
    refused = refuses_alike(broker, general, lambda properties: send_v2(body, properties))
    assert refused.code == ResponseCode.MESSAGE_ILLEGAL
    assert f"the maximum is {MAX_MESSAGE_SIZE}" in refused.remark


@pytest.mark.parametrize("case", ["empty body", "queue out of range", "no such topic", "topic not writeable"])
def test_the_message_and_topic_checks_refuse_on_the_single_message_path(
    broker: InProcessBroker, general: list[int], case: str
) -> None:
    if broker.controller.topics.get("read-only") is None:
        broker.controller.topics.create(TopicConfig("read-only", 1, 1, PERM_READ))

    def command(properties: dict[str, str]) -> RemotingCommand:
        queue_id = 7 if case == "queue out of range" else 0
        sent = send_v2(b"" if case == "empty body" else b"x", properties, queue_id)
        topics = {"no such topic": "nowhere", "topic not writeable": "read-only"}
        sent.ext_fields["b"] = topics.get(case, TOPIC)
        return sent

    refused = refuses_alike(broker, general, command, "operator")
    expected = {"empty body": ResponseCode.MESSAGE_ILLEGAL, "queue out of range": ResponseCode.SYSTEM_ERROR,
                "no such topic": ResponseCode.TOPIC_NOT_EXIST,
                "topic not writeable": ResponseCode.NO_PERMISSION}
    assert refused.code == expected[case], refused.remark


def test_a_fenced_master_refuses_a_send_on_the_single_message_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A master fenced (the controller elected a newer one: its role is SLAVE from then on) refuses a
    plain send on the single-message path as a slave does, and writes nothing."""
    broker = start_broker(tmp_path / "store")
    try:
        first_file(broker)
        general = general_path(broker, monkeypatch)
        store = broker.controller.store
        with RemotingTestClient(broker.config.remoting_listen) as client:
            assert client.call(send_v2(b"before", {})).code == ResponseCode.SUCCESS and general == []
            end = store.commit_log.get_max_offset()
            store.fence()
            refused = client.call(send_v2(b"after", {}))
            assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, refused.remark
            assert "SLAVE" in refused.remark
            assert general == []
            delayed = client.call(send_v2(b"after", DELAYED))
        assert (delayed.code, delayed.remark) == (refused.code, refused.remark) and len(general) == 1
        assert store.commit_log.get_max_offset() == end
    finally:
        broker.stop()


def test_under_sync_flush_a_send_is_answered_only_after_the_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SYNC flush acknowledges only what is on disk: a plain send is not answered on the read (whose
    put never waits) but by the general path, after the group commit flushed it."""
    broker = start_broker(tmp_path / "store", flush="sync")
    try:
        first_file(broker)
        general = general_path(broker, monkeypatch)
        store = broker.controller.store
        with RemotingTestClient(broker.config.remoting_listen) as client:
            sent = client.call(send_v2(b"durable", {}))
        assert sent.code == ResponseCode.SUCCESS and general == [RequestCode.SEND_MESSAGE_V2]
        last = store.commit_log.mapped_file_queue.files[-1]
        assert last.flushed_position == last.wrote_position   # on disk before it was answered
    finally:
        broker.stop()


def test_a_delayed_send_is_delivered_when_its_level_comes_due(broker: InProcessBroker) -> None:
    """The broker's dispatch listener wakes the schedule service's idle delay level when a
    delayed message enters its queue (only SCHEDULE_TOPIC's records reach it): the message
    reaches its own topic and queue once the level's 1 s has passed, not never."""
    sent = call(broker, send_v2(b"delayed-wake", DELAYED, queue_id=1))
    assert sent.code == ResponseCode.SUCCESS, sent.remark

    def delivered() -> bool:
        pulled = call(broker, pull(1, 0), "consumer")
        return pulled.code == ResponseCode.SUCCESS and any(
            message.body == b"delayed-wake" for message in records(pulled.body))

    wait_until(delivered, "the delayed message in queue 1 of its topic")
