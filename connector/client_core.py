"""The client API's core (RocketMQ's MQClientAPIImpl plumbing and its name-server calls): gRPC
channels cached per address, one unary call with its deadline and error mapping, the routes and
broker lists from the endpoints, the read-side member choice of a broker group and the remoting
port where a member serves one. client_sends (SendAPI) and client_pulls (PullAPI) build on it;
client_api.ClientAPI joins them with the membership calls.

Business outcomes arrive as a `Status` in each response and become `RmqRefused`; transport
failures (broker down, deadline exceeded) become `RmqUnavailable`, which callers retry with
backoff.
"""

from __future__ import annotations

import functools
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

import grpc
from google.protobuf.message import Message

from rmq.auth import Credentials, TlsSettings, open_channel
from rmq.connector.endpoints import parse_endpoints
from rmq.connector.errors import (
    ConfigError,
    RequestCancelled,
    RmqError,
    RmqRefused,
    RmqUnavailable,
    config_errors,
)
from rmq.connector.route_cache import BrokerMember, RouteCache, TopicRoute, group_members, newest_masters
from rmq.connector.tls_probe import speaks_tls
from rmq.message_queue import MessageQueue
from rmq.request_signing import broker_server_id
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

if TYPE_CHECKING:   # the remoting client is imported where a member's remoting port is used
    from rmq.connector.remoting_client import RemotingClient, RemotingTarget

MAX_GRPC_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_SEND_REQUEST_BYTES = 4 * 1024 * 1024      # one SendMessage request stays under this
# gRPC waits up to 120 s between reconnect attempts to a server that was down; a broker back
# after a restart is reached again within this (the Spark source retries for 2 min).
MAX_RECONNECT_BACKOFF_MS = 2000
_UNAVAILABLE_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
TLS_ONLY_HINT = "Socket closed"   # what grpc reports when a TLS-only server drops a plaintext connection


@dataclass
class Connection:
    channel: grpc.Channel
    messaging: rmq_pb2_grpc.MessagingServiceStub
    admin: rmq_pb2_grpc.AdminServiceStub
    route: rmq_pb2_grpc.RouteServiceStub


ResponseT = TypeVar("ResponseT", bound=Message)
AnswerT = TypeVar("AnswerT")


@dataclass(frozen=True)
class Rpc(Generic[ResponseT]):
    """One unary method of the rmq.v1 contract as the client calls it: its name (for error
    messages), its stub method on a connection and the response it answers with."""

    name: str
    method: Callable[[Connection], Callable[..., Any]]
    response: type[ResponseT]

    def invoke(self, connection: Connection, request: Message, timeout: float) -> ResponseT:
        response: ResponseT = self.method(connection)(request, timeout=timeout)
        return response


_LIST_BROKERS = Rpc("ListBrokers", lambda c: c.route.ListBrokers, rmq_pb2.ListBrokersResponse)
_QUERY_ROUTE = Rpc("QueryRoute", lambda c: c.route.QueryRoute, rmq_pb2.QueryRouteResponse)


class ClientCore:
    """Client for the brokers and name servers named by `endpoints` ("host:port[,host:port]").

    Every call carries a deadline (`timeout` seconds, plus the hold time for long polling).
    Thread-safe: channels are cached per address and shared. With `access_key`/`secret_key`
    every call is signed; with `tls` (or a `tls_ca_file`) channels use TLS (ARCHITECTURE §5).
    """

    def __init__(self, endpoints: str | Sequence[str], timeout: float = 10.0,
                 max_request_bytes: int = MAX_SEND_REQUEST_BYTES, *, access_key: str | None = None,
                 secret_key: str | None = None, tls: bool = False, tls_ca_file: str | None = None,
                 tls_cert_file: str | None = None, tls_key_file: str | None = None) -> None:
        text = endpoints if isinstance(endpoints, str) else ",".join(endpoints)
        self.endpoints = parse_endpoints(text)
        if timeout <= 0:
            raise ConfigError(f"timeout must be positive, got {timeout}")
        self.timeout = timeout
        self.max_request_bytes = max_request_bytes
        tls_files = (tls_ca_file, tls_cert_file, tls_key_file)   # a client certificate for mutual TLS
        use_tls = tls or any(tls_files)
        with config_errors():   # ConfigError naming the missing key or the unreadable file
            self._credentials = Credentials.optional(access_key, secret_key)
            self._tls = TlsSettings(*(Path(f) if f else None for f in tls_files)) if use_tls else None
            if self._tls is not None:
                self._tls.channel_credentials()
        self._lock = threading.Lock()
        self._connections: dict[str, Connection] = {}
        self.routes = RouteCache()
        self._remoting_client: RemotingClient | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, {}
            remoting, self._remoting_client = self._remoting_client, None
        for connection in connections.values():
            connection.channel.close()
        if remoting is not None:
            remoting.close()

    @property
    def _remoting(self) -> RemotingClient:
        """The 4.x remoting client, created (and its module imported) on the first send or pull: a
        process that only looks up routes and offsets (Spark's per-query source runner) loads none
        of it."""
        with self._lock:
            if self._remoting_client is None:
                from rmq.connector.remoting_client import RemotingClient
                self._remoting_client = RemotingClient(self._credentials, self._tls, self.timeout)
            return self._remoting_client

    @property
    def credentials(self) -> Credentials | None:
        return self._credentials

    @property
    def tls(self) -> TlsSettings | None:
        return self._tls

    # ------------------------------------------------------------ routes and topics

    def query_route(self, topic: str) -> TopicRoute:
        """The topic's route from the first endpoint that knows it (name server or broker); after a
        send to it failed (`RouteCache.doubt`), from every endpoint, each group as the one naming its
        newest master (a name server a new master could not reach still names the old one)."""
        request = rmq_pb2.QueryRouteRequest(topic=topic)
        if self.routes.doubted(topic) and len(self.endpoints) > 1:
            response = newest_masters(self._ask_all_endpoints(_QUERY_ROUTE, request,
                                                              skip_on=(rmq_pb2.TOPIC_NOT_EXIST,)))
        else:
            response = self._ask_endpoints(_QUERY_ROUTE, request, try_next_on=(rmq_pb2.TOPIC_NOT_EXIST,))
        route = TopicRoute.from_proto(topic, response)
        self.routes.store(route)
        return route

    def route(self, topic: str) -> TopicRoute:
        """The topic's route, cached for ROUTE_CACHE_SECONDS (dropped when a send to it fails)."""
        return self._route(topic)

    def list_brokers(self) -> dict[str, str]:
        """Every broker known to the endpoints: name -> address, sorted by name."""
        brokers: dict[str, str] = {}
        members: dict[str, tuple[BrokerMember, ...]] = {}
        for response in self._ask_all_endpoints(_LIST_BROKERS, rmq_pb2.ListBrokersRequest()):
            brokers.update((b.broker_name, b.address) for b in response.brokers)
            members.update((b.broker_name, group_members(b)) for b in response.brokers)
        self.routes.learn(brokers, members)
        return dict(sorted(brokers.items()))

    def list_broker_groups(self) -> dict[str, tuple[BrokerMember, ...]]:
        """Every broker group the endpoints know: name -> its live members by id, sorted by name."""
        return self.routes.groups(list(self.list_brokers()))

    # ------------------------------------------------------------ plumbing

    def _connection(self, address: str) -> Connection:
        with self._lock:
            connection = self._connections.get(address)
            if connection is None:
                channel = open_channel(address, credentials=self._credentials, tls=self._tls, options=[
                    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_BYTES),
                    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_BYTES),
                    ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
                    # this client's own connection state: gRPC otherwise shares a subchannel per
                    # address across the process, and a new client's first call failed at once
                    # while another client's connection to a restarted broker waited out its backoff
                    ("grpc.use_local_subchannel_pool", 1),
                ])
                connection = Connection(channel, rmq_pb2_grpc.MessagingServiceStub(channel),
                                         rmq_pb2_grpc.AdminServiceStub(channel),
                                         rmq_pb2_grpc.RouteServiceStub(channel))
                self._connections[address] = connection
            return connection

    def _call(self, address: str, rpc: Rpc[ResponseT], request: Message, broker_name: str | None = None,
              *, queue: MessageQueue | None = None, timeout: float | None = None,
              ok_codes: tuple[int, ...] = ()) -> ResponseT:
        """One unary call; non-OK Status -> RmqError, transport failure -> RmqUnavailable."""
        label = f"{broker_name} at {address}" if broker_name else address
        try:
            response = rpc.invoke(self._connection(address), request, timeout or self.timeout)
        except grpc.RpcError as error:
            raise self._explained(transport_error(error, rpc.name, label, queue), address) from None
        return checked(response, rpc.name, label, queue, ok_codes)

    def _explained(self, failure: RmqError, address: str) -> RmqError:
        """A plaintext connection the server closed at once: say so when the server speaks TLS."""
        plaintext_refused = isinstance(failure, RmqUnavailable) and TLS_ONLY_HINT in failure.message
        if self._tls is not None or not plaintext_refused or not speaks_tls(address):
            return failure
        method = failure.message.split(":")[0]
        return RmqUnavailable(f"{method}: the server requires TLS and this client connected without it "
                              f"(give --tls or $RMQ_TLS=1, or RmqClient(tls=True) with tls_ca_file)",
                              broker=failure.broker, queue=failure.queue)

    def _topic_call(self, topic: str, broker_name: str, rpc: Rpc[ResponseT], request: Message) -> ResponseT:
        """A read-side call located through a cached route: a stale route is dropped when it fails."""
        try:
            return self._read_call(broker_name, rpc, request)
        except RmqError as error:
            if isinstance(error, RmqUnavailable) or error.code == rmq_pb2.TOPIC_NOT_EXIST:
                self.routes.forget(topic)
            raise

    def _ask_endpoints(self, rpc: Rpc[ResponseT], request: Message,
                       try_next_on: tuple[int, ...]) -> ResponseT:
        """The first OK answer among the endpoints, in order. An unreachable endpoint, or one
        answering a `try_next_on` code, passes the question on to the next."""
        refusal: RmqError | None = None
        failures: list[RmqUnavailable] = []
        for address in self.endpoints:
            try:
                return self._call(address, rpc, request)
            except RmqUnavailable as error:
                failures.append(error)
            except RmqError as error:
                if error.code not in try_next_on:
                    raise
                refusal = refusal or error
        if refusal is not None:
            raise refusal
        raise all_unreachable(failures)

    def _ask_all_endpoints(self, rpc: Rpc[ResponseT], request: Message,
                           skip_on: tuple[int, ...] = ()) -> list[ResponseT]:
        """The answers of every reachable endpoint (brokers named directly each know only
        themselves), passing over those answering a `skip_on` code; RmqUnavailable when none
        answers (the first such refusal when one did)."""
        answers: list[ResponseT] = []
        failures: list[RmqUnavailable] = []
        refusal: RmqError | None = None
        for address in self.endpoints:
            try:
                answers.append(self._call(address, rpc, request))
            except RmqUnavailable as error:
                failures.append(error)
            except RmqError as error:
                if error.code not in skip_on:
                    raise
                refusal = refusal or error
        if not answers:
            raise refusal or all_unreachable(failures)
        return answers

    def _on_each_broker(self, brokers: Mapping[str, str], call: Callable[[str, str], object]) -> None:
        """Call every broker even when one fails; then raise the first failure."""
        call_each(brokers, lambda name: call(name, brokers[name]))

    def _on_each_member(self, call: Callable[[str, str], object],
                        unreachable: dict[str, RmqUnavailable] | None = None) -> None:
        """Call every member of every broker group; then raise the first failure of a group
        none of whose members answered (a dead master's slave still counts). With
        `unreachable`, such a group that could not be reached is recorded there instead."""
        groups = self.list_broker_groups()

        def on_group(name: str) -> None:
            failures: list[RmqError] = []
            for member in groups[name]:
                try:
                    call(name, member.address)
                except RmqError as error:
                    failures.append(error)
            if failures and len(failures) == len(groups[name]):
                raise failures[0]

        call_each(groups, lambda name: unless_unreachable(functools.partial(on_group, name), name,
                                                          unreachable))

    def _route(self, topic: str) -> TopicRoute:
        """The topic's route, cached for ROUTE_CACHE_SECONDS (like RocketMQ's periodic refresh)."""
        return self.routes.cached(topic) or self.query_route(topic)

    def _over_remoting(self, broker_name: str, address: str, call: Callable[[RemotingTarget], AnswerT]
                       ) -> AnswerT | None:
        """`call` on the remoting port of the member at `address` (docs/client-behaviour.md
        "Transport"); None when the member serves none or it cannot be reached (then gRPC is
        used for it for REMOTING_DOWN_SECONDS)."""
        member = self.routes.remoting_member(broker_name, address)
        if member is None:
            return None
        from rmq.connector.remoting_client import ConnectionBusy, PortUnreachable, RemotingTarget
        target = RemotingTarget(member.remoting_address, broker_server_id(broker_name, member.broker_id),
                                f"{broker_name} at {member.remoting_address}")
        try:
            return call(target)
        except ConnectionBusy:
            return None
        except PortUnreachable:
            self.routes.mark_remoting_down(member.remoting_address)
            return None

    # ------------------------------------------------------------ broker groups (docs/replication.md)

    def _read_call(self, broker_name: str, rpc: Rpc[ResponseT], request: Message, *,
                   queue: MessageQueue | None = None, timeout: float | None = None,
                   ok_codes: tuple[int, ...] = ()) -> ResponseT:
        """A read-side call (pull, offsets) to the member `_read_address` picks; a member that
        does not answer is passed over for a while and the call goes once to the next one (a
        slave while the master is down)."""
        address = self._read_address(broker_name, queue)
        try:
            return self._call(address, rpc, request, broker_name, queue=queue, timeout=timeout,
                              ok_codes=ok_codes)
        except RmqUnavailable:
            self.routes.mark_down(address)
            other = self._read_address(broker_name, queue)
            if other == address:
                raise
        return self._call(other, rpc, request, broker_name, queue=queue, timeout=timeout, ok_codes=ok_codes)

    def _read_address(self, broker_name: str, mq: MessageQueue | None = None) -> str:
        """findBrokerAddressInSubscribe: the member the broker suggested for `mq` (spec pull
        §12.4), else the master, else a slave, passing over members that did not answer lately."""
        fallback = self._broker_address(broker_name)     # learns the members when they are unknown
        return self.routes.read_address(broker_name, mq) or fallback

    def _broker_address(self, broker_name: str) -> str:
        address = self.routes.address(broker_name)
        if address is None:
            address = self.list_brokers().get(broker_name)
        if address is None:
            # RocketMQ "The broker[...] not exist": handled like an unreachable broker.
            raise RmqUnavailable(f"broker {broker_name} is not known to endpoints {','.join(self.endpoints)}",
                                 broker=broker_name)
        return address


# ---------------------------------------------------------------- helpers


def checked(response: ResponseT, method: str, label: str, queue: MessageQueue | None,
            ok_codes: tuple[int, ...]) -> ResponseT:
    """The response, or RmqRefused for a non-OK Status (other than `ok_codes`)."""
    status = response.status  # type: ignore[attr-defined]  # every rmq.v1 unary response has one
    if status.code != rmq_pb2.OK and status.code not in ok_codes:
        raise RmqRefused(status.code, status.message or f"{method} refused", broker=label, queue=queue)
    return response


def transport_error(error: grpc.RpcError, method: str, label: str, queue: MessageQueue | None) -> RmqError:
    code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = error.details() if isinstance(error, grpc.Call) else str(error)
    if code in _UNAVAILABLE_CODES:
        return RmqUnavailable(f"{method} failed: {code.name}: {details}", broker=label, queue=queue)
    rmq_code = rmq_pb2.NO_PERMISSION if code == grpc.StatusCode.PERMISSION_DENIED else rmq_pb2.SYSTEM_ERROR
    return RmqRefused(rmq_code, f"{method} failed: gRPC {code.name}: {details}", broker=label, queue=queue)


def when_answered(call: grpc.Future[ResponseT], method: str, label: str, queue: MessageQueue | None,
                  answered: Callable[[ResponseT | None, RmqError | None], None]) -> None:
    """`answered(response, None)`, or `answered(None, error)` (RequestCancelled when the call was
    cancelled), once the gRPC call completes, on grpc's thread."""
    def done(future: grpc.Future[ResponseT]) -> None:
        try:
            response = future.result()
        except grpc.RpcError as error:
            answered(None, transport_error(error, method, label, queue))
            return
        except grpc.FutureCancelledError:
            answered(None, RequestCancelled(f"{method} cancelled", broker=label, queue=queue))
            return
        answered(response, None)

    call.add_done_callback(done)


def unless_unreachable(call: Callable[[], AnswerT], broker_name: str,
                       unreachable: dict[str, RmqUnavailable] | None) -> AnswerT | None:
    """call(); None when the broker is unreachable and the caller collects those in `unreachable`."""
    try:
        return call()
    except RmqUnavailable as error:
        if unreachable is None:
            raise
        unreachable[broker_name] = error
        return None


def call_each(names: Iterable[str], call: Callable[[str], object]) -> None:
    """call(name) for every name even when one fails; then raise the first failure."""
    first: RmqError | None = None
    for name in names:
        try:
            call(name)
        except RmqError as error:
            first = first or error
    if first is not None:
        raise first


def all_unreachable(failures: list[RmqUnavailable]) -> RmqUnavailable:
    if len(failures) == 1:
        return failures[0]
    return RmqUnavailable("no endpoint answered: " + "; ".join(f"{f.broker}: {f.message}" for f in failures),
                          broker=",".join(str(f.broker) for f in failures))


def by_broker(mqs: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
    grouped: dict[str, list[MessageQueue]] = defaultdict(list)
    for mq in sorted(mqs):
        grouped[mq.broker_name].append(mq)
    return dict(grouped)


def mq_proto(mq: MessageQueue) -> rmq_pb2.MessageQueue:
    return rmq_pb2.MessageQueue(topic=mq.topic, broker_name=mq.broker_name, queue_id=mq.queue_id)
