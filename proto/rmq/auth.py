"""Client side of rmq security: account credentials that sign every call (scheme in
`rmq.request_signing`), TLS channel settings, and the RMQ_* environment variables that carry
them for the CLI and for the calls a server makes itself. Imports grpc and `rmq` only.

Secrets stay out of reprs, logs and error messages: `Credentials` prints as
`Credentials(access_key='ak1', secret_key=<redacted>)`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import grpc
from google.protobuf.message import Message

from rmq import request_signing
from rmq.v1 import rmq_pb2


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("accessKey and secretKey must both be non-empty")

    def __repr__(self) -> str:
        return f"Credentials(access_key={self.access_key!r}, secret_key=<redacted>)"

    __str__ = __repr__

    @classmethod
    def optional(cls, access_key: str | None, secret_key: str | None) -> Credentials | None:
        """Credentials when both are given, None when neither is; ValueError for only one."""
        if not access_key and not secret_key:
            return None
        if not access_key:
            raise ValueError("secretKey is set but accessKey is not: give both or neither")
        if not secret_key:
            raise ValueError("accessKey is set but secretKey is not: give both or neither")
        return cls(access_key, secret_key)


@dataclass(frozen=True)
class TlsSettings:
    """TLS for client channels: `ca_file` to verify the server (None: the system roots), and
    a client certificate and key for brokers that require mutual TLS."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("a TLS client certificate needs both a certificate file and a key file")

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Read the PEM files; ValueError naming the file when one cannot be read."""
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_file, "TLS CA file"),
            private_key=_read(self.key_file, "TLS client key file"),
            certificate_chain=_read(self.cert_file, "TLS client certificate file"),
        )


SECURITY_OPTION_NAMES = ("accessKey", "secretKey", "tls", "tlsCaFile", "tlsCertFile", "tlsKeyFile")
_BOOLEAN_WORDS = {"true": True, "false": False}


@dataclass(frozen=True)
class ClientSecurity:
    """Security settings of a client (Spark source/sink options, CLI flags): the keyword
    arguments of RmqClient. Picklable for Spark executors; the repr never shows the secret."""

    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    tls: bool = False
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None   # client certificate for servers that require mutual TLS
    tls_key_file: str | None = None

    def __post_init__(self) -> None:
        Credentials.optional(self.access_key, self.secret_key)   # both or neither
        if self.tls_ca_file and not self.tls:
            raise ValueError("tlsCaFile is set but tls is false: set tls to true or drop tlsCaFile")
        if (self.tls_cert_file or self.tls_key_file) and not self.tls:
            raise ValueError("a TLS client certificate is set but tls is false")

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ClientSecurity:
        """Read accessKey, secretKey, tls, tlsCaFile, tlsCertFile, tlsKeyFile (case-insensitive
        names) from data source options; any TLS file alone implies tls. ValueError names the
        option, never the secret."""
        values = {str(key).lower(): str(value).strip() for key, value in options.items()}
        tls_text = values.get("tls")
        ca_file = values.get("tlscafile") or None
        cert_file, key_file = _client_certificate_options(values)
        if tls_text is None:
            tls = (ca_file or cert_file) is not None
        elif tls_text.lower() in _BOOLEAN_WORDS:
            tls = _BOOLEAN_WORDS[tls_text.lower()]
        else:
            raise ValueError(f"Invalid value {tls_text!r} for option 'tls': expected true or false")
        _check_file("tlsCaFile", ca_file)
        return cls(values.get("accesskey") or None, values.get("secretkey") or None, tls, ca_file,
                   cert_file, key_file)

    def credentials(self) -> Credentials | None:
        return Credentials.optional(self.access_key, self.secret_key)

    def tls_settings(self) -> TlsSettings | None:
        if not self.tls:
            return None
        return TlsSettings(*(Path(f) if f else None for f in (self.tls_ca_file, self.tls_cert_file,
                                                               self.tls_key_file)))

    def client_kwargs(self) -> dict[str, Any]:
        return {"access_key": self.access_key, "secret_key": self.secret_key, "tls": self.tls,
                "tls_ca_file": self.tls_ca_file, "tls_cert_file": self.tls_cert_file,
                "tls_key_file": self.tls_key_file}


def _client_certificate_options(values: Mapping[str, str]) -> tuple[str | None, str | None]:
    """tlsCertFile and tlsKeyFile (lower-cased option names): both or neither, existing files."""
    cert_file, key_file = values.get("tlscertfile") or None, values.get("tlskeyfile") or None
    if (cert_file is None) != (key_file is None):
        raise ValueError("options 'tlsCertFile' and 'tlsKeyFile' go together: the client certificate "
                         "and its private key for brokers that require mutual TLS")
    _check_file("tlsCertFile", cert_file)
    _check_file("tlsKeyFile", key_file)
    return cert_file, key_file


def _check_file(option: str, path: str | None) -> None:
    if path is not None and not Path(path).is_file():
        raise ValueError(f"Invalid value {path!r} for option {option!r}: no such file")


ACCESS_KEY_ENV = "RMQ_ACCESS_KEY"
SECRET_KEY_ENV = "RMQ_SECRET_KEY"   # the secret key is read from here only, never from a flag or argv
TLS_ENV = "RMQ_TLS"
TLS_CA_FILE_ENV = "RMQ_TLS_CA_FILE"
TLS_CERT_FILE_ENV = "RMQ_TLS_CERT_FILE"
TLS_KEY_FILE_ENV = "RMQ_TLS_KEY_FILE"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


def security_from_environment(environ: Mapping[str, str] = os.environ, *, access_key: str | None = None,
                              tls: bool | None = None, tls_ca_file: str | None = None,
                              tls_cert_file: str | None = None,
                              tls_key_file: str | None = None) -> ClientSecurity:
    """The RMQ_* variables, overridden by the given values (the CLI's flags). ValueError names
    the flag or variable at fault, never the secret. A CA file or a client certificate implies TLS."""
    access_key = access_key or environ.get(ACCESS_KEY_ENV) or None
    secret_key = environ.get(SECRET_KEY_ENV) or None
    if access_key and not secret_key:
        raise ValueError(f"an access key is given but ${SECRET_KEY_ENV} is not set (the secret key is read "
                         f"from the environment only)")
    if secret_key and not access_key:
        raise ValueError(f"${SECRET_KEY_ENV} is set but no access key: give --access-key or "
                         f"${ACCESS_KEY_ENV}")
    ca_file = tls_ca_file or environ.get(TLS_CA_FILE_ENV) or None
    use_tls = tls if tls is not None else _env_flag(environ, TLS_ENV)
    if ca_file is not None:
        if not os.path.isfile(ca_file):
            raise ValueError(f"TLS CA file {ca_file} does not exist")
        use_tls = True
    cert_file = tls_cert_file or environ.get(TLS_CERT_FILE_ENV) or None
    key_file = tls_key_file or environ.get(TLS_KEY_FILE_ENV) or None
    if (cert_file is None) != (key_file is None):
        raise ValueError(f"a TLS client certificate needs both --tls-cert (${TLS_CERT_FILE_ENV}) and "
                         f"--tls-key (${TLS_KEY_FILE_ENV})")
    for path, what in ((cert_file, "TLS client certificate"), (key_file, "TLS client key")):
        if path is not None and not os.path.isfile(path):
            raise ValueError(f"{what} file {path} does not exist")
    use_tls = use_tls or cert_file is not None
    return ClientSecurity(access_key, secret_key, use_tls, ca_file, cert_file, key_file)


def _env_flag(environ: Mapping[str, str], name: str) -> bool:
    value = environ.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"${name} must be 1/true/yes or 0/false/no, not {value!r}")


class _CallDetails(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: Any
    compression: Any


class _ClientCallDetails(_CallDetails, grpc.ClientCallDetails):
    pass


HELLO_METHOD = "/rmq.v1.RouteService/ListBrokers"   # answered by brokers and name servers alike


class ServerTarget:
    """The id of the server one channel reaches, the `target` its calls are signed for
    (rmq.request_signing): learned from the `x-rmq-server` trailer of a refusal. None until
    known; "" for a server that checks no signatures."""

    def __init__(self) -> None:
        self.value: str | None = None

    @property
    def signing_value(self) -> str:
        return self.value or ""

    def learn(self, code: grpc.StatusCode | None, trailing_metadata: Any) -> bool:
        """Take the server's id from a refused call; True when the call should be signed again."""
        if code is grpc.StatusCode.OK and self.value is None:
            self.value = ""   # answered a call signed for no server: it checks no signatures
        if code is not grpc.StatusCode.UNAUTHENTICATED:
            return False
        server = dict(trailing_metadata or ()).get(request_signing.SERVER_HEADER)
        if server is None or server == self.signing_value:
            return False
        self.value = server
        return True


def _signing_headers(credentials: Credentials, target: str, method: str | bytes,
                     request: Any) -> tuple[tuple[str, str], ...]:
    method = method.decode() if isinstance(method, bytes) else method
    return request_signing.sign(credentials.access_key, credentials.secret_key, target, method,
                                request).as_metadata()


class SigningInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds the x-rmq-* signing headers (rmq.request_signing) to every call of one channel.

    Before the channel's first call it asks the server for its id (one refused ListBrokers on
    `channel`, the channel without this interceptor). A blocking unary call refused because it
    was signed for another server (the server behind the address changed) is signed again,
    once, for the id the refusal names; a call made with `.future()` is never waited for here,
    it only teaches the id to the calls after it."""

    def __init__(self, credentials: Credentials, channel: grpc.Channel) -> None:
        self._credentials = credentials
        self._target = ServerTarget()
        self._hello = channel.unary_unary(HELLO_METHOD, request_serializer=_serialize,
                                          response_deserializer=rmq_pb2.ListBrokersResponse.FromString)

    def _signed(self, details: grpc.ClientCallDetails, request: Any) -> _ClientCallDetails:
        headers = _signing_headers(self._credentials, self._target.signing_value, details.method, request)
        return _ClientCallDetails(details.method, details.timeout, tuple(details.metadata or ()) + headers,
                                  details.credentials, details.wait_for_ready,
                                  getattr(details, "compression", None))

    def intercept_unary_unary(self, continuation: Callable[[grpc.ClientCallDetails, Any], Any],
                              client_call_details: grpc.ClientCallDetails, request: Any) -> Any:
        if self._target.value is None:
            self._ask_server_id(client_call_details.timeout)
        outcome = continuation(self._signed(client_call_details, request), request)
        if not outcome.done():    # a future: learn from it when it ends, never block its caller
            outcome.add_done_callback(self._learn_from)
            return outcome
        if self._learn_from(outcome):
            outcome = continuation(self._signed(client_call_details, request), request)
        return outcome

    def intercept_unary_stream(self, continuation: Callable[[grpc.ClientCallDetails, Any], Any],
                               client_call_details: grpc.ClientCallDetails, request: Any) -> Any:
        if self._target.value is None:
            self._ask_server_id(client_call_details.timeout)
        return continuation(self._signed(client_call_details, request), request)

    def _learn_from(self, call: Any) -> bool:
        return self._target.learn(call.code(), call.trailing_metadata())

    def _ask_server_id(self, timeout: float | None) -> None:
        hello = rmq_pb2.ListBrokersRequest()
        headers = _signing_headers(self._credentials, "", HELLO_METHOD, hello)
        try:
            self._hello(hello, metadata=headers, timeout=timeout)
            self._target.learn(grpc.StatusCode.OK, None)
        except grpc.RpcError as error:
            self._target.learn(error.code(), error.trailing_metadata())


class AioSigningInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    """The same signing for grpc.aio channels (the broker's calls to name servers). A unary
    call learns the server id from its refusal and is signed again. Client streams are signed
    by AioStreamSigningInterceptor, which shares this one's server id (grpc.aio files each
    interceptor under one kind only)."""

    def __init__(self, credentials: Credentials, open_plain: Callable[[], grpc.aio.Channel]) -> None:
        self._credentials = credentials
        self._target = ServerTarget()
        self._open_plain = open_plain

    def _signed(self, details: grpc.aio.ClientCallDetails, request: Any) -> grpc.aio.ClientCallDetails:
        headers = _signing_headers(self._credentials, self._target.signing_value, details.method, request)
        metadata = grpc.aio.Metadata(*(details.metadata or ()), *headers)
        return grpc.aio.ClientCallDetails(details.method, details.timeout, metadata, details.credentials,
                                          details.wait_for_ready)

    async def intercept_unary_unary(
            self, continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
            client_call_details: grpc.aio.ClientCallDetails, request: Any) -> Any:
        call = await continuation(self._signed(client_call_details, request), request)
        if self._target.learn(await call.code(), await call.trailing_metadata()):
            call = await continuation(self._signed(client_call_details, request), request)
        return call

    async def ask_server_id_once(self, timeout: float | None) -> None:
        if self._target.value is None:
            await self._ask_server_id(timeout)

    def signed_stream(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        return self._signed(details, request_signing.STREAM_REQUEST)

    async def _ask_server_id(self, timeout: float | None) -> None:
        hello = rmq_pb2.ListBrokersRequest()
        headers = _signing_headers(self._credentials, "", HELLO_METHOD, hello)
        async with self._open_plain() as channel:
            call = channel.unary_unary(HELLO_METHOD, request_serializer=_serialize,
                                       response_deserializer=rmq_pb2.ListBrokersResponse.FromString)
            try:
                await call(hello, metadata=headers, timeout=timeout)
                self._target.learn(grpc.StatusCode.OK, None)
            except grpc.aio.AioRpcError as error:
                self._target.learn(error.code(), error.trailing_metadata())


class AioStreamSigningInterceptor(grpc.aio.StreamStreamClientInterceptor):
    """Signs a client stream (a slave's replication stream) with the empty message's digest
    (rmq.request_signing.STREAM_REQUEST): the server admits it once, when it opens. Before
    the id of the server is known it asks for it, on a channel without interceptors."""

    def __init__(self, unary: AioSigningInterceptor) -> None:
        self._unary = unary

    async def intercept_stream_stream(
            self, continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
            client_call_details: grpc.aio.ClientCallDetails,
            request_iterator: AsyncIterable[Any] | Iterable[Any]) -> Any:
        await self._unary.ask_server_id_once(client_call_details.timeout)
        return await continuation(self._unary.signed_stream(client_call_details), request_iterator)


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


def open_channel(address: str, *, credentials: Credentials | None = None, tls: TlsSettings | None = None,
                 options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
    """A channel to `address`: TLS when `tls` is given, signing every call when `credentials` are."""
    if tls is None:
        channel = grpc.insecure_channel(address, options=list(options))
    else:
        channel = grpc.secure_channel(address, tls.channel_credentials(), options=list(options))
    if credentials is not None:
        channel = grpc.intercept_channel(channel, SigningInterceptor(credentials, channel))
    return channel


def open_aio_channel(address: str, *, credentials: Credentials | None = None, tls: TlsSettings | None = None,
                     options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
    """`open_channel` for asyncio code."""
    interceptors = None
    if credentials is not None:
        unary = AioSigningInterceptor(credentials, functools.partial(open_aio_channel, address, tls=tls,
                                                                     options=options))
        interceptors = [unary, AioStreamSigningInterceptor(unary)]
    if tls is None:
        return grpc.aio.insecure_channel(address, options=list(options), interceptors=interceptors)
    return grpc.aio.secure_channel(address, tls.channel_credentials(), options=list(options),
                                   interceptors=interceptors)


def _read(path: Path | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise ValueError(f"cannot read {what} {path}: {error.strerror or error}") from None
