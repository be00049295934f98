"""`processes.ServerProcess.start()` waits until the server answers, also for servers that
refuse unsigned calls (--acl) or speak TLS only (--tls-cert, --tls-client-ca); a broker
process prints its ready line and outlives garbage on its port."""

from __future__ import annotations

import socket
from pathlib import Path

import grpc
import pytest

from rmq.auth import TlsSettings
from rmq.connector.client import RmqClient, RmqError
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from testing import processes
from tests.acl_files import write_acl
from tests.rmq_stubs import Stubs
from tests.tls_certs import make_tls_files

pytestmark = pytest.mark.integration

ACL = """\
accounts:
  - accessKey: admin1
    secretKey: admin-secret
    admin: true
"""


def acl_flags(tmp_path: Path) -> list[str]:
    write_acl(tmp_path / "acl.yml", ACL)
    return ["--acl", str(tmp_path / "acl.yml")]


def test_a_broker_with_an_acl_is_ready_although_it_refuses_unsigned_calls(tmp_path: Path) -> None:
    server = processes.broker(tmp_path, extra=acl_flags(tmp_path)).start()
    try:
        with RmqClient(server.address) as unsigned, pytest.raises(RmqError, match="UNAUTHENTICATED"):
            unsigned.list_brokers()
        with RmqClient(server.address, access_key="admin1", secret_key="admin-secret") as admin:
            assert admin.list_brokers() == {"broker-a": server.address}
    finally:
        assert server.stop() == 0


def test_a_mutual_tls_broker_is_ready_through_the_given_channel_credentials(tmp_path: Path) -> None:
    tls = make_tls_files(tmp_path / "tls")
    flags = ["--tls-cert", str(tls.server_cert), "--tls-key", str(tls.server_key),
             "--tls-client-ca", str(tls.ca)] + acl_flags(tmp_path)
    credentials = TlsSettings(tls.ca, tls.client_cert, tls.client_key).channel_credentials()
    server = processes.broker(tmp_path, extra=flags, channel_credentials=credentials).start()
    try:
        with grpc.insecure_channel(server.address) as plaintext:
            with pytest.raises(grpc.RpcError) as refused:
                rmq_pb2_grpc.RouteServiceStub(plaintext).ListBrokers(rmq_pb2.ListBrokersRequest(), timeout=3)
            assert refused.value.code() is grpc.StatusCode.UNAVAILABLE    # only TLS gets an answer
        with grpc.secure_channel(server.address, credentials) as channel:
            with pytest.raises(grpc.RpcError) as unsigned:
                rmq_pb2_grpc.RouteServiceStub(channel).ListBrokers(rmq_pb2.ListBrokersRequest(), timeout=3)
            assert unsigned.value.code() is grpc.StatusCode.UNAUTHENTICATED
    finally:
        assert server.stop() == 0


def test_garbage_and_malformed_requests_never_crash_the_broker(broker: processes.ServerProcess) -> None:
    rmq = Stubs.connect(broker.address)
    host, _, port = broker.address.rpartition(":")
    for garbage in (b"\x00" * 64, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", bytes(range(256)) * 8):
        with socket.create_connection((host, int(port)), timeout=5) as connection:
            connection.sendall(garbage)
            connection.settimeout(2)
            try:
                connection.recv(1024)
            except (TimeoutError, ConnectionError):
                pass
    raw = rmq.channel.unary_unary(
        "/rmq.v1.MessagingService/PullMessage",
        request_serializer=lambda data: data,
        response_deserializer=lambda data: data,
    )
    with pytest.raises(grpc.RpcError) as error:
        raw(b"\xff\xff\xff\xff not a protobuf", timeout=5)
    assert "Error parsing message with type 'rmq.v1.PullMessageRequest'" in error.value.details()
    wrong_type = rmq_pb2.ListTopicsResponse(topics=[rmq_pb2.TopicConfig(topic_name="t")]).SerializeToString()
    assert raw(wrong_type, timeout=5) is not None  # decodes as some PullMessageRequest: a clear status
    assert broker.process.poll() is None
    assert rmq.route.ListBrokers(rmq_pb2.ListBrokersRequest(), timeout=5).status.code == rmq_pb2.OK
    rmq.close()


def test_the_ready_line_names_the_broker_and_its_address(broker: processes.ServerProcess) -> None:
    assert "rmq broker broker-a listening on " + broker.address in broker.log()
