"""The 4.x remoting door held to the standard of the other doors (issue 39): a frame's header is
read, decoded within bounds and authenticated before anything is reserved for it; one address
cannot take every connection; field values are strict so a 4.x signature cannot be reused for
another request; a hostile cancel costs one bounded log line; a consumer's running info answers
its own account; a dead letter is read as its original topic."""

from __future__ import annotations

import contextlib
import json
import logging
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.broker_server.config import NameServerConfig
from rmq.broker_server.name_server.namesrv_controller import RouteInfoManager
from rmq.broker_server.remoting.remoting_acl import signed
from rmq.broker_server.remoting.remoting_server import (
    Admission,
    Channel,
    HeaderGate,
    RemotingLimits,
    RemotingServer,
)
from rmq.broker_server.remoting.service import build_name_server_remoting
from rmq.broker_server.security.acl_file import AclFile
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.remoting.remoting_command import RPC_ONEWAY, RemotingCommand
from rmq.remoting.request_code import CANCELLED_OPAQUE, RequestCode, ResponseCode
from tests.acl_files import write_acl
from tests.broker_server.in_process_broker import InProcessBroker
from tests.broker_server.remoting_client import RemotingTestClient, serving
from tests.broker_server.test_remoting_broker import (
    ACL,
    GROUP,
    MAX_FRAME,
    TOPIC,
    pull,
    records,
    request,
    send_v2,
    start_broker,
)
from tests.broker_server.test_remoting_read_bounds import Failing, Gate, serve
from tests.waiting import wait_until

FAIL_FAST_S = 5.0   # what a test waits for an answer that never comes on the code before the fix


@contextlib.contextmanager
def acl_remoting_broker(tmp_path: Path, acl: str = ACL, **settings: object) -> Iterator[InProcessBroker]:
    security = ServerSecurity(acl_file=AclFile(write_acl(tmp_path / "acl.yml", acl)))
    broker = start_broker(tmp_path / "store", security=security, **settings)
    try:
        yield broker
    finally:
        broker.stop()


def route(account: str = "consumer") -> RemotingCommand:
    return signed(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC), account, f"{account}-secret")


def answered_soon(address: str, command: RemotingCommand) -> RemotingCommand:
    with RemotingTestClient(address) as client:
        client.socket.settimeout(FAIL_FAST_S)
        return client.call(command)


# -- High 1: a header nesting deeper than Python recurses ------------------------------------------
def test_a_deeply_nested_header_closes_its_connection_and_keeps_no_bytes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    deep = b'{"a":' * 1200 + b"1" + b"}" * 1200
    body = b"\0" * (MAX_FRAME // 2)
    frame = struct.pack(">ii", 4 + len(deep) + len(body), len(deep)) + deep + body
    with acl_remoting_broker(tmp_path, remoting_max_request_bytes=2 * MAX_FRAME) as broker:
        address, remoting = broker.config.remoting_listen, broker.controller.remoting
        for _ in range(3):
            with RemotingTestClient(address) as hostile:
                with contextlib.suppress(OSError):   # closed once its header is read
                    hostile.socket.sendall(frame)
                assert hostile.closed_by_peer(FAIL_FAST_S)
        wait_until(lambda: remoting.request_bytes.held == 0,
                   lambda: f"{remoting.request_bytes.held} request bytes still held", timeout=FAIL_FAST_S)
        assert answered_soon(address, route()).code == ResponseCode.SUCCESS
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


def test_a_deeply_nested_json_body_is_refused_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A heartbeat's body is client JSON as well: bounded as the header is."""
    with acl_remoting_broker(tmp_path) as broker, RemotingTestClient(broker.config.remoting_listen) as client:
        beat = request(RequestCode.HEART_BEAT, body=b'{"clientID": ' + b"[" * 1200 + b"]" * 1200 + b"}")
        refused = client.call(signed(beat, "consumer", "consumer-secret"))
        assert refused.code == ResponseCode.SYSTEM_ERROR and "nests deeper than 32" in refused.remark
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


# -- High 2: slow frames from callers without an account -----------------------------------------
def test_slow_unauthenticated_frames_hold_nothing_and_a_signed_request_is_served(tmp_path: Path) -> None:
    with acl_remoting_broker(tmp_path, remoting_max_request_bytes=4 * MAX_FRAME) as broker:
        address, remoting = broker.config.remoting_listen, broker.controller.remoting
        with contextlib.ExitStack() as stack:
            slow = [stack.enter_context(RemotingTestClient(address)) for _ in range(12)]
            for client in slow:   # a whole frame announced; then one byte (of 1 per 10 s)
                client.socket.sendall(struct.pack(">i", MAX_FRAME) + b"\0")
            stranger = stack.enter_context(RemotingTestClient(address))
            stranger.socket.settimeout(FAIL_FAST_S)
            claimed = signed(send_v2(b"b" * (MAX_FRAME // 2), {}), "nobody", "guess").encode()
            stranger.socket.sendall(claimed[: -MAX_FRAME // 4])   # its header whole, its body not
            refused = stranger.read()   # answered from the header: the body is not waited for
            assert refused.code == ResponseCode.NO_PERMISSION and "signature not accepted" in refused.remark
            wait_until(lambda: len(remoting.channels) >= len(slow) + 1, "the slow connections accepted")
            assert answered_soon(address, route()).code == ResponseCode.SUCCESS
            wait_until(lambda: remoting.request_bytes.held == 0,   # released after the answer
                       lambda: f"{remoting.request_bytes.held} request bytes held", timeout=FAIL_FAST_S)


def test_the_name_servers_remoting_port_reads_a_header_before_anything_is_reserved(tmp_path: Path) -> None:
    """The name server runs the same reading: a header nested too deep closes its connection, and
    a frame announced by a caller without an account holds no bytes while a signed lookup is
    answered."""
    security = ServerSecurity(acl_file=AclFile(write_acl(tmp_path / "acl.yml", ACL)))
    config = NameServerConfig(listen="127.0.0.1:0", remoting_listen="127.0.0.1:0",
                              remoting_max_frame_bytes=MAX_FRAME)
    remoting = build_name_server_remoting(config, security, RouteInfoManager())
    assert remoting is not None
    deep = b"[" * 1200 + b"]" * 1200
    with serving(remoting) as address, RemotingTestClient(address) as hostile, \
            RemotingTestClient(address) as slow:
        hostile.socket.sendall(struct.pack(">ii", 4 + len(deep), len(deep)) + deep)
        assert hostile.closed_by_peer(FAIL_FAST_S)
        slow.socket.sendall(struct.pack(">i", MAX_FRAME) + b"\0")
        answer = answered_soon(address, route())
        assert answer.code == ResponseCode.TOPIC_NOT_EXIST, answer.remark   # answered: no broker holds it
        wait_until(lambda: remoting.request_bytes.held == 0,   # the lookup's bytes released after its answer
                   lambda: f"{remoting.request_bytes.held} request bytes held", timeout=FAIL_FAST_S)


@contextlib.contextmanager
def server(limits: RemotingLimits, gate: HeaderGate | None = None) -> Iterator[str]:
    """A remoting server answering every request at once (Failing), its address."""
    with serving(RemotingServer("127.0.0.1:0", Failing(), limits, gate=gate)) as address:
        yield address


def test_a_header_must_arrive_within_its_deadline() -> None:
    limits = RemotingLimits(header_timeout_s=0.3, idle_timeout_s=60)
    with server(limits) as address, RemotingTestClient(address) as slow, RemotingTestClient(address) as quick:
        slow.socket.sendall(struct.pack(">ii", 100, 90) + b"{")   # a header begun and never finished
        assert slow.closed_by_peer(FAIL_FAST_S)
        assert quick.call(RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC)).code == ResponseCode.SUCCESS
        assert not quick.closed_by_peer(0.5)   # admitted: the header deadline is each frame's only


def test_the_header_deadline_does_not_count_time_the_broker_stopped_reading() -> None:
    """Frames behind a request the connection may not run yet wait unparsed: not a slow header."""
    limits = RemotingLimits(max_requests_per_connection=1, header_timeout_s=0.3)
    with serve(limits, Gate()) as served, RemotingTestClient(served.address) as client:
        opaques = [client.send(RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC)) for _ in range(3)]
        wait_until(lambda: served.gate.started == 1, "the first request served")
        assert not client.closed_by_peer(1.0)   # past the header deadline, nothing answered yet
        served.open_gate()
        assert sorted(client.read().opaque for _ in opaques) == opaques


# -- Low 14: one address, every slot; connections that never authenticate ----------------------

def test_one_address_holds_at_most_its_share_of_connections() -> None:
    limits = RemotingLimits(max_connections_per_address=3)
    with server(limits) as address, contextlib.ExitStack() as stack:
        for _ in range(3):
            stack.enter_context(RemotingTestClient(address))
        with RemotingTestClient(address) as fourth:
            assert fourth.closed_by_peer(FAIL_FAST_S)
        elsewhere = stack.enter_context(RemotingTestClient(address, source="127.0.0.2"))
        answer = elsewhere.call(RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC))
        assert answer.code == ResponseCode.SUCCESS


def test_a_connection_without_a_request_admitted_is_closed_at_the_admission_deadline() -> None:
    limits = RemotingLimits(admission_timeout_s=0.5)
    with server(limits) as address, RemotingTestClient(address) as idle, RemotingTestClient(address) as busy:
        assert busy.call(RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC)).code == ResponseCode.SUCCESS
        assert idle.closed_by_peer(FAIL_FAST_S)
        assert not busy.closed_by_peer(0.5)


class Refusing:
    """A gate that admits nothing."""

    def admit_header(self, channel: Channel, header: RemotingCommand) -> Admission | RemotingCommand:
        return header.response(ResponseCode.NO_PERMISSION, "refused")


def test_a_connection_whose_requests_are_all_refused_is_closed_at_the_admission_deadline() -> None:
    limits = RemotingLimits(admission_timeout_s=0.5)
    with server(limits, Refusing()) as address, RemotingTestClient(address) as client:
        refused = client.call(RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC))
        assert refused.code == ResponseCode.NO_PERMISSION
        assert client.closed_by_peer(FAIL_FAST_S)


# -- Low 13: 4.x signatures cover values, not names ----------------------------------------------
def test_a_4x_signature_does_not_cover_values_moved_between_fields(tmp_path: Path) -> None:
    with acl_remoting_broker(tmp_path) as broker, RemotingTestClient(broker.config.remoting_listen) as client:
        captured = signed(send_v2(b"xbody", {"TAGS": "t", "KEYS": "k"}), "producer", "producer-secret")
        fields = captured.ext_fields
        moved = {**fields, "i": "", "j": fields["i"] + fields["j"]}   # TAGS and KEYS into reconsumeTimes
        moved_properties = RemotingCommand(captured.code, ext_fields=moved, body=captured.body)
        moved_body = RemotingCommand(captured.code, ext_fields={**fields, "m": fields["m"] + "x"},
                                     body=b"body")   # the body's first byte into batch
        for tampered in (moved_properties, moved_body):
            answer = client.call(tampered)
            assert answer.code == ResponseCode.NO_PERMISSION, answer.remark
            assert "malformed value" in answer.remark
        captured_pull = signed(pull(0, 0), "consumer", "consumer-secret")
        shifted_fields = {**captured_pull.ext_fields, "topic": TOPIC[:-1]}   # the topic's last byte as a body
        shifted = RemotingCommand(captured_pull.code, ext_fields=shifted_fields, body=TOPIC[-1:].encode())
        answer = client.call(shifted)
        assert answer.code == ResponseCode.NO_PERMISSION and "carries no body" in answer.remark, answer.remark
        assert client.call(captured).code == ResponseCode.SUCCESS
        pulled = client.call(signed(pull(0, 0), "consumer", "consumer-secret"))
        [stored] = records(pulled.body)
        assert (stored.body, stored.properties["TAGS"], stored.properties["KEYS"]) == (b"xbody", "t", "k")


# -- Medium 7: a cancel naming no request number -------------------------------------------------
def test_a_cancel_with_a_malformed_opaque_is_one_bounded_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cancel = request(RequestCode.CANCEL_REQUEST, **{CANCELLED_OPAQUE: "²"})   # str.isdigit, not int()
    cancel.flag |= RPC_ONEWAY
    with acl_remoting_broker(tmp_path) as broker, caplog.at_level(logging.INFO):
        with RemotingTestClient(broker.config.remoting_listen) as client:
            client.socket.sendall(cancel.encode() * 200)
            assert client.call(route()).code == ResponseCode.SUCCESS   # the connection is kept
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    lines = [r for r in caplog.records if "CANCEL_REQUEST" in r.getMessage()]
    assert 1 <= len(lines) <= 20 and all("not a request number" in r.getMessage() for r in lines)


# -- Medium 6: another account's consumer running info --------------------------------------------
def test_consumer_running_info_answers_the_account_that_registered_the_client(tmp_path: Path) -> None:
    with acl_remoting_broker(tmp_path) as broker, \
            RemotingTestClient(broker.config.remoting_listen) as consumer, \
            RemotingTestClient(broker.config.remoting_listen) as asker:
        data = {"clientID": "asked", "consumerDataSet": [{"groupName": GROUP, "messageModel": "CLUSTERING"}]}
        beat = request(RequestCode.HEART_BEAT, body=json.dumps(data).encode())
        assert consumer.call(signed(beat, "consumer", "consumer-secret")).code == ResponseCode.SUCCESS

        def info(account: str, group: str = GROUP) -> RemotingCommand:
            question = request(RequestCode.GET_CONSUMER_RUNNING_INFO, consumerGroup=group, clientId="asked",
                               jstackEnable="true")
            return signed(question, account, f"{account}-secret")

        asker.socket.settimeout(FAIL_FAST_S)
        refused = asker.call(info("intruder"))   # SUB on the same group, another account
        assert refused.code == ResponseCode.NO_PERMISSION and "another account" in refused.remark
        opaque = asker.send(info("consumer"))
        question = consumer.read()
        consumer.socket.sendall(question.response(ResponseCode.SUCCESS, body=b'{"properties":{}}').encode())
        assert asker.response(opaque).body == b'{"properties":{}}'
        remoting = broker.controller.remoting   # the client's answer, read as a frame, was let go
        wait_until(lambda: remoting.request_bytes.held == 0,
                   lambda: f"{remoting.request_bytes.held} request bytes held", timeout=FAIL_FAST_S)


# -- Medium 9: a dead letter of a topic the account may not read ---------------------------------
DLQ_ACL = """accounts:
  - {accessKey: admin1, secretKey: 'admin-secret', admin: true}
  - accessKey: reader
    secretKey: 'reader-secret'
    defaultTopicPerm: SUB
    topicPerms: ['secret=DENY']
    groupPerms: ['g=SUB']
"""


def test_a_dead_letter_is_read_as_its_original_topic(tmp_path: Path) -> None:
    security = ServerSecurity(acl_file=AclFile(write_acl(tmp_path / "acl.yml", DLQ_ACL)))
    broker = InProcessBroker(tmp_path / "store", security).start()
    name = broker.config.broker_name
    try:
        with RmqClient(broker.address, access_key="admin1", secret_key="admin-secret") as admin:
            admin.heartbeat("admin-client", "g", {"orders": "*"})   # the group exists
            for topic in ("secret", "orders"):
                admin.create_topic(topic, queues=1)
                sent = admin.send(topic, [OutgoingMessage(topic.encode(), keys="k1")]).msg_ids[0]
                admin.send_message_back("g", name, int(sent[-16:], 16), delay_level=-1)
            wait_until(lambda: admin.query_message_by_key("%DLQ%g", name, "k1").count == 2, "both letters")
        with RmqClient(broker.address, access_key="reader", secret_key="reader-secret") as reader:
            found = reader.query_message_by_key("%DLQ%g", name, "k1")
            assert found.count == 1 and b"orders" in found.records and b"secret" not in found.records
    finally:
        broker.stop()
