"""Client credentials, the signing interceptor, TLS settings and the RMQ_* variables (rmq.auth)."""

from __future__ import annotations

import pickle
from pathlib import Path

import grpc
import pytest

from rmq import request_signing
from rmq.auth import ClientSecurity, Credentials, SigningInterceptor, TlsSettings, security_from_environment
from rmq.v1 import rmq_pb2

METHOD = "/rmq.v1.MessagingService/PullMessage"


def test_credentials_never_show_the_secret() -> None:
    credentials = Credentials("consumer1", "consumer-secret")
    for text in (repr(credentials), str(credentials), f"{credentials}", repr([credentials])):
        assert "consumer-secret" not in text
        assert "<redacted>" in text and "consumer1" in text


def test_credentials_survive_pickling_for_spark_executors() -> None:
    credentials = Credentials("consumer1", "consumer-secret")
    assert pickle.loads(pickle.dumps(credentials)) == credentials


@pytest.mark.parametrize(("access_key", "secret_key", "message"), [
    ("ak1", None, "accessKey is set but secretKey is not"),
    (None, "s3cr3t-value", "secretKey is set but accessKey is not"),
    ("", "s3cr3t-value", "secretKey is set but accessKey is not"),
])
def test_credentials_need_both_halves(access_key, secret_key, message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        Credentials.optional(access_key, secret_key)
    assert "s3cr3t-value" not in str(raised.value)


def test_no_credentials_is_none() -> None:
    assert Credentials.optional(None, None) is None
    assert Credentials.optional("", "") is None


class Details:
    def __init__(self, method, metadata=None) -> None:
        self.method = method
        self.timeout = 5.0
        self.metadata = metadata
        self.credentials = None
        self.wait_for_ready = None
        self.compression = None


class Outcome:
    """What a continuation returns: the call's status and trailing metadata."""

    def __init__(self, code: grpc.StatusCode, trailing_metadata: tuple = ()) -> None:
        self._code = code
        self._trailing_metadata = trailing_metadata

    def code(self) -> grpc.StatusCode:
        return self._code

    def trailing_metadata(self) -> tuple:
        return self._trailing_metadata

    def done(self) -> bool:
        return True


@pytest.mark.parametrize("method", [METHOD, METHOD.encode()])
def test_interceptor_signs_for_the_server_the_refusal_names_and_tries_once_more(method) -> None:
    request = rmq_pb2.PullMessageRequest(topic="orders", consumer_group="etl", max_messages=32)
    refused = Outcome(grpc.StatusCode.UNAUTHENTICATED, (("x-rmq-server", "broker/broker-a"),))
    answers = [refused, Outcome(grpc.StatusCode.OK), Outcome(grpc.StatusCode.OK)]
    seen = []

    def continuation(details, forwarded):
        seen.append((details, forwarded))
        return answers.pop(0)

    with grpc.insecure_channel("127.0.0.1:1") as channel:
        interceptor = SigningInterceptor(Credentials("consumer1", "consumer-secret"), channel)
        first = interceptor.intercept_unary_unary(continuation, Details(method, [("x-trace", "1")]), request)
        second = interceptor.intercept_unary_unary(continuation, Details(method), request)
    assert first.code() is second.code() is grpc.StatusCode.OK
    targets = [request_signing.parse_headers(dict(details.metadata)).target for details, _ in seen]
    assert targets == ["", "broker/broker-a", "broker/broker-a"]   # learned once, then kept
    details = seen[1][0]
    assert seen[1][1] is request
    assert details.method == method and details.timeout == 5.0
    metadata = dict(details.metadata)
    assert metadata["x-trace"] == "1"
    assert "consumer-secret" not in repr(details.metadata)
    headers = request_signing.parse_headers(metadata)
    assert headers.access_key == "consumer1"
    assert request_signing.signature_matches(headers, "consumer-secret", METHOD)
    assert request_signing.content_matches(headers, request)
    assert isinstance(details, grpc.ClientCallDetails)


def test_interceptor_does_not_retry_other_refusals() -> None:
    calls = []

    def continuation(details, forwarded):
        calls.append(details)
        return Outcome(grpc.StatusCode.UNAUTHENTICATED, (("x-rmq-server", ""),))

    with grpc.insecure_channel("127.0.0.1:1") as channel:
        interceptor = SigningInterceptor(Credentials("consumer1", "consumer-secret"), channel)
        request = rmq_pb2.PullMessageRequest()
        outcome = interceptor.intercept_unary_unary(continuation, Details(METHOD), request)
    assert outcome.code() is grpc.StatusCode.UNAUTHENTICATED and len(calls) == 1


def test_tls_client_certificate_needs_its_key() -> None:
    with pytest.raises(ValueError, match="needs both a certificate file and a key file"):
        TlsSettings(cert_file=Path("client.pem"))


def test_unreadable_ca_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cannot read TLS CA file .*missing-ca.pem: No such file"):
        TlsSettings(ca_file=tmp_path / "missing-ca.pem").channel_credentials()


def test_system_roots_when_no_ca_file_is_given() -> None:
    assert isinstance(TlsSettings().channel_credentials(), grpc.ChannelCredentials)


def test_security_options_are_case_insensitive_and_redacted(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("pem")
    got = ClientSecurity.from_options({"ACCESSKEY": "user01", "secretkey": "topsecret1", "TLS": "True",
                                       "tlsCaFile": str(ca), "topic": "orders"})
    assert got == ClientSecurity("user01", "topsecret1", True, str(ca))
    assert "topsecret1" not in repr(got) and "topsecret1" not in str(got)
    assert got.client_kwargs() == {"access_key": "user01", "secret_key": "topsecret1", "tls": True,
                                   "tls_ca_file": str(ca), "tls_cert_file": None, "tls_key_file": None}


def test_tls_ca_file_alone_implies_tls(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("pem")
    assert ClientSecurity.from_options({"tlsCaFile": str(tmp_path / "ca.pem")}).tls


@pytest.mark.parametrize(("options", "message"), [
    ({"tls": "yes"}, "Invalid value 'yes' for option 'tls': expected true or false"),
    ({"tlsCaFile": "/nonexistent/ca.pem"}, "Invalid value '/nonexistent/ca.pem' for option 'tlsCaFile'"),
    ({"tls": "false", "tlsCaFile": __file__}, "tlsCaFile is set but tls is false"),
    ({"secretKey": "topsecret1"}, "secretKey is set but accessKey is not"),
    ({"accessKey": "user01"}, "accessKey is set but secretKey is not"),
])
def test_bad_security_options_name_the_option_not_the_secret(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        ClientSecurity.from_options(options)
    assert "topsecret1" not in str(raised.value)


def test_no_security_options_is_a_plain_client() -> None:
    assert ClientSecurity.from_options({"endpoints": "127.0.0.1:1"}) == ClientSecurity()


def test_security_builds_credentials_and_tls_settings(tmp_path: Path) -> None:
    assert ClientSecurity().credentials() is None and ClientSecurity().tls_settings() is None
    full = ClientSecurity("user01", "topsecret1", True, str(tmp_path / "ca.pem"))
    assert full.credentials() == Credentials("user01", "topsecret1")
    assert full.tls_settings() == TlsSettings(tmp_path / "ca.pem")
    assert ClientSecurity(tls=True).tls_settings() == TlsSettings()   # system roots


def test_security_from_environment_reads_only_the_environment() -> None:
    got = security_from_environment({"RMQ_ACCESS_KEY": "user01", "RMQ_SECRET_KEY": "topsecret1"})
    assert got.credentials().access_key == "user01"
    assert got.tls_settings() is None
    assert security_from_environment({}) == ClientSecurity()
