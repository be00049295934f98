"""The aio interceptor and server TLS on a real grpc.aio server (in-process, loopback), called
through the client's signing channel (rmq.auth): status codes and messages as clients
see them."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc import aio

from rmq import request_signing
from rmq.auth import Credentials, TlsSettings, open_aio_channel, open_channel
from rmq.broker_server.errors import UserError
from rmq.broker_server.security.acl import parse_acl
from rmq.broker_server.security.auth_interceptor import AuthInterceptor
from rmq.broker_server.security.caller import account_key
from rmq.broker_server.security.request_auth import RequestAuthenticator
from rmq.broker_server.security.tls import ServerTls, add_port
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from tests.tls_certs import TlsFiles, make_tls_files

ACL = parse_acl({"accounts": [
    {"accessKey": "producer1", "secretKey": "producer-secret", "topicPerms": ["orders=PUB"]},
    {"accessKey": "consumer1", "secretKey": "consumer-secret", "topicPerms": ["orders=SUB"],
     "groupPerms": ["etl=SUB"]},
    {"accessKey": "admin01", "secretKey": "admin-secret", "admin": True},
]}, "test")
ADMIN = Credentials("admin01", "admin-secret")
PRODUCER = Credentials("producer1", "producer-secret")
SERVER_ID = "broker/test"
CONSUMER = Credentials("consumer1", "consumer-secret")


class Messaging(rmq_pb2_grpc.MessagingServiceServicer):
    """Accepts every send: what reaches it is what the interceptor let through."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.callers: list[str] = []

    async def SendMessage(self, request, context):
        self.sent.append(request.topic)
        self.callers.append(account_key())
        return rmq_pb2.SendMessageResponse(status=rmq_pb2.Status(code=rmq_pb2.OK))

    async def WatchConsumerIds(self, request, context):
        yield rmq_pb2.ConsumerIdsChanged(client_ids=[request.client_id])


class HA(rmq_pb2_grpc.HAServiceServicer):
    """A master's replication stream that answers each report with its offset."""

    async def Transfer(self, request_iterator, context):
        async for report in request_iterator:
            yield rmq_pb2.HATransfer(offset=report.max_offset)


class Route(rmq_pb2_grpc.RouteServiceServicer):
    def ListBrokers(self, request, context):   # a plain function handler is supported too
        return rmq_pb2.ListBrokersResponse(brokers=[rmq_pb2.BrokerData(broker_name="b", address="a")])


class Server:
    """A grpc.aio server on its own event loop thread."""

    def __init__(self, interceptors: list, tls: ServerTls | None = None) -> None:
        self.messaging = Messaging()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.address = f"127.0.0.1:{s.getsockname()[1]}"
        self._run(self._start(interceptors, tls))

    async def _start(self, interceptors: list, tls: ServerTls | None) -> None:
        self.server = aio.server(interceptors=interceptors)
        rmq_pb2_grpc.add_MessagingServiceServicer_to_server(self.messaging, self.server)
        rmq_pb2_grpc.add_RouteServiceServicer_to_server(Route(), self.server)
        rmq_pb2_grpc.add_HAServiceServicer_to_server(HA(), self.server)
        add_port(self.server, self.address, tls)
        await self.server.start()

    def _run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=30)

    def stop(self) -> None:
        self._run(self.server.stop(None))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture
def server() -> Iterator[Server]:
    authenticator = RequestAuthenticator(lambda: ACL, SERVER_ID)
    running = Server([AuthInterceptor(authenticator)])
    yield running
    running.stop()


def send(channel: grpc.Channel, topic: str = "orders", timeout: float = 10.0) -> rmq_pb2.SendMessageResponse:
    request = rmq_pb2.SendMessageRequest(topic=topic, messages=[rmq_pb2.Message(body=b"x")])
    return rmq_pb2_grpc.MessagingServiceStub(channel).SendMessage(request, timeout=timeout)


def rpc_error(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return raised.value


def test_signed_permitted_call_goes_through(server: Server) -> None:
    with open_channel(server.address, credentials=PRODUCER) as channel:
        assert send(channel).status.code == rmq_pb2.OK
        route = rmq_pb2_grpc.RouteServiceStub(channel).ListBrokers(rmq_pb2.ListBrokersRequest(), timeout=10)
        assert route.brokers[0].broker_name == "b"
    assert server.messaging.sent == ["orders"]
    assert server.messaging.callers == ["producer1"]    # the account per-account shares count against


def test_unsigned_call_is_unauthenticated(server: Server) -> None:
    with open_channel(server.address) as channel:
        error = rpc_error(lambda: send(channel))
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "request is not signed" in error.details()
    assert server.messaging.sent == []


def test_wrong_secret_is_unauthenticated_and_the_secret_is_not_echoed(server: Server) -> None:
    with open_channel(server.address, credentials=Credentials("producer1", "wrong-secret")) as channel:
        error = rpc_error(lambda: send(channel))
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "wrong-secret" not in error.details() and "producer-secret" not in error.details()


def test_account_without_the_permission_is_denied_with_its_name(server: Server) -> None:
    with open_channel(server.address, credentials=CONSUMER) as channel:
        error = rpc_error(lambda: send(channel))
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED
    assert error.details() == "access key 'consumer1' lacks PUB on topic 'orders'"
    assert server.messaging.sent == []


def test_replayed_metadata_is_refused(server: Server) -> None:
    request = rmq_pb2.SendMessageRequest(topic="orders", messages=[rmq_pb2.Message(body=b"x")])
    metadata = request_signing.sign("producer1", "producer-secret", SERVER_ID,
                                    "/rmq.v1.MessagingService/SendMessage", request).as_metadata()
    with open_channel(server.address) as channel:
        stub = rmq_pb2_grpc.MessagingServiceStub(channel)
        stub.SendMessage(request, metadata=metadata, timeout=10)
        error = rpc_error(lambda: stub.SendMessage(request, metadata=metadata, timeout=10))
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "replayed" in error.details()
    assert server.messaging.sent == ["orders"]


def test_aio_channel_signs_too(server: Server) -> None:
    async def list_brokers(credentials: Credentials | None) -> grpc.StatusCode:
        async with open_aio_channel(server.address, credentials=credentials) as channel:
            stub = rmq_pb2_grpc.RouteServiceStub(channel)
            try:
                await stub.ListBrokers(rmq_pb2.ListBrokersRequest(), timeout=10, metadata=(("x-trace", "1"),))
            except grpc.RpcError as error:
                return error.code()
            return grpc.StatusCode.OK

    assert asyncio.run(list_brokers(PRODUCER)) is grpc.StatusCode.OK
    assert asyncio.run(list_brokers(None)) is grpc.StatusCode.UNAUTHENTICATED


def test_the_client_learns_the_server_id_from_one_refusal(server: Server) -> None:
    request = rmq_pb2.SendMessageRequest(topic="orders", messages=[rmq_pb2.Message(body=b"x")])
    unknown = request_signing.sign("producer1", "producer-secret", "", "/rmq.v1.MessagingService/SendMessage",
                                   request).as_metadata()
    with open_channel(server.address) as channel:
        error = rpc_error(lambda: rmq_pb2_grpc.MessagingServiceStub(channel).SendMessage(
            request, metadata=unknown, timeout=10))
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert dict(error.trailing_metadata())["x-rmq-server"] == SERVER_ID
    with open_channel(server.address, credentials=PRODUCER) as channel:
        for _ in range(3):
            assert send(channel).status.code == rmq_pb2.OK
    assert server.messaging.sent == ["orders"] * 3    # the refused first try never reached the service


def test_a_future_call_is_signed_for_the_server_from_the_first_call(server: Server) -> None:
    request = rmq_pb2.SendMessageRequest(topic="orders", messages=[rmq_pb2.Message(body=b"x")])
    with open_channel(server.address, credentials=PRODUCER) as channel:
        future = rmq_pb2_grpc.MessagingServiceStub(channel).SendMessage.future(request, timeout=10)
        assert future.result().status.code == rmq_pb2.OK
    assert server.messaging.sent == ["orders"]


def test_asking_for_the_server_id_is_not_logged_but_refusals_are(server: Server, caplog) -> None:
    caplog.set_level(logging.INFO, logger="rmq.auth")
    with open_channel(server.address, credentials=PRODUCER) as channel:
        assert send(channel).status.code == rmq_pb2.OK
    assert "refused" not in caplog.text
    with open_channel(server.address, credentials=CONSUMER) as channel:
        rpc_error(lambda: send(channel))
    assert "PERMISSION_DENIED access key 'consumer1' lacks PUB on topic 'orders'" in caplog.text


def test_server_streaming_calls_are_admitted_and_checked(server: Server) -> None:
    def watch(credentials: Credentials) -> list:
        with open_channel(server.address, credentials=credentials) as channel:
            stub = rmq_pb2_grpc.MessagingServiceStub(channel)
            request = rmq_pb2.WatchConsumerIdsRequest(client_id="c1", consumer_group="etl")
            return list(stub.WatchConsumerIds(request, timeout=10))

    assert [list(event.client_ids) for event in watch(CONSUMER)] == [["c1"]]
    error = rpc_error(lambda: watch(PRODUCER))
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED
    assert error.details() == "access key 'producer1' lacks SUB on group 'etl'"
    with open_channel(server.address) as unsigned:
        stub = rmq_pb2_grpc.MessagingServiceStub(unsigned)
        request = rmq_pb2.WatchConsumerIdsRequest(client_id="c1", consumer_group="etl")
        error = rpc_error(lambda: list(stub.WatchConsumerIds(request, timeout=10)))
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED


def test_a_client_stream_is_admitted_once_when_it_opens(server: Server) -> None:
    """A slave's replication stream (HAService.Transfer, admin only) through the aio signing channel."""
    async def transfer(credentials: Credentials | None, offsets: tuple[int, ...] = (10, 20, 30)
                       ) -> list[int] | grpc.StatusCode:
        """The offsets answered, each report written once the previous one was answered (a
        write racing the refusal of the stream would fail on the client as INTERNAL)."""
        async with open_aio_channel(server.address, credentials=credentials) as channel:
            answered: asyncio.Queue[int] = asyncio.Queue()

            async def reports():
                for offset in offsets:
                    yield rmq_pb2.HAReport(max_offset=offset)
                    await answered.get()

            try:
                stream = rmq_pb2_grpc.HAServiceStub(channel).Transfer(reports(), timeout=10)
                transferred = []
                async for transfer in stream:
                    transferred.append(transfer.offset)
                    answered.put_nowait(transfer.offset)
                return transferred
            except grpc.RpcError as error:
                return error.code()

    assert asyncio.run(transfer(ADMIN)) == [10, 20, 30]
    assert asyncio.run(transfer(PRODUCER, offsets=())) is grpc.StatusCode.PERMISSION_DENIED
    assert asyncio.run(transfer(None, offsets=())) is grpc.StatusCode.UNAUTHENTICATED


def test_unimplemented_method_stays_unimplemented(server: Server) -> None:
    with open_channel(server.address, credentials=PRODUCER) as channel:
        stub = rmq_pb2_grpc.AdminServiceStub(channel)
        error = rpc_error(lambda: stub.CreateTopic(rmq_pb2.CreateTopicRequest(), timeout=10))
    assert error.code() is grpc.StatusCode.UNIMPLEMENTED


# ---------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def tls_server(files: TlsFiles, mutual: bool = False) -> Server:
    tls = ServerTls(files.server_cert, files.server_key, files.ca if mutual else None)
    return Server([AuthInterceptor(RequestAuthenticator(lambda: ACL, SERVER_ID))], tls)


def test_tls_with_signing(tls_files: TlsFiles) -> None:
    server = tls_server(tls_files)
    try:
        with open_channel(server.address, credentials=PRODUCER, tls=TlsSettings(tls_files.ca)) as channel:
            assert send(channel).status.code == rmq_pb2.OK
        with open_channel(server.address, credentials=PRODUCER) as plaintext:
            assert rpc_error(lambda: send(plaintext, timeout=3)).code() is grpc.StatusCode.UNAVAILABLE
        wrong_ca = TlsSettings(tls_files.other_ca)
        with open_channel(server.address, credentials=PRODUCER, tls=wrong_ca) as untrusted:
            assert rpc_error(lambda: send(untrusted, timeout=3)).code() is grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop()


def test_aio_channel_with_tls(tls_files: TlsFiles) -> None:
    server = tls_server(tls_files)

    async def send_over_tls() -> int:
        tls = TlsSettings(tls_files.ca)
        async with open_aio_channel(server.address, credentials=PRODUCER, tls=tls) as channel:
            request = rmq_pb2.SendMessageRequest(topic="orders", messages=[rmq_pb2.Message(body=b"x")])
            response = await rmq_pb2_grpc.MessagingServiceStub(channel).SendMessage(request, timeout=10)
            return response.status.code

    try:
        assert asyncio.run(send_over_tls()) == rmq_pb2.OK
    finally:
        server.stop()


def test_mutual_tls_requires_a_client_certificate(tls_files: TlsFiles) -> None:
    server = tls_server(tls_files, mutual=True)
    try:
        with_cert = TlsSettings(tls_files.ca, tls_files.client_cert, tls_files.client_key)
        with open_channel(server.address, credentials=PRODUCER, tls=with_cert) as channel:
            assert send(channel).status.code == rmq_pb2.OK
        with open_channel(server.address, credentials=PRODUCER, tls=TlsSettings(tls_files.ca)) as no_cert:
            assert rpc_error(lambda: send(no_cert, timeout=3)).code() is grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop()


def test_server_tls_flags_must_come_as_a_set() -> None:
    assert ServerTls.from_args(None, None, None) is None
    with pytest.raises(UserError, match="TLS needs both --tls-cert and --tls-key"):
        ServerTls.from_args("cert.pem", None, None)
    with pytest.raises(UserError, match="TLS needs both --tls-cert and --tls-key"):
        ServerTls.from_args(None, None, "ca.pem")


def test_unreadable_or_wrong_pem_files_are_named(tmp_path: Path, tls_files: TlsFiles) -> None:
    missing = ServerTls(tmp_path / "nope.pem", tls_files.server_key)
    with pytest.raises(UserError, match=r"--tls-cert .*nope.pem: No such file"):
        missing.credentials()
    swapped = ServerTls(tls_files.server_key, tls_files.server_cert)
    with pytest.raises(UserError, match=r"--tls-cert .*server.key: not a PEM file with a CERTIFICATE"):
        swapped.credentials()
