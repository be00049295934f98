"""ACL for RocketMQ 5 clients (spec rocketmq-v2-protocol.md §6; proxy AuthenticationActivity /
AuthorizationContext for gRPC): every v2 call carries `authorization: MQv2-HMAC-SHA1
Credential=<access key>, SignedHeaders=x-mq-date-time, Signature=<hex HMAC-SHA1(secret key,
x-mq-date-time)>`, checked against rmq's ACL accounts (broker_server/security/acl.py: `--acl`), then the
permission the RPC needs: PUB on the topic to send or end a transaction, SUB on the group and
topic to receive, acknowledge, change invisibility, forward, pull or use offsets. The client id
a call names (`x-mq-client-id`) must belong to its account (client_id_owners), and the call then
runs as that account (rmq.broker_server.security.caller), for the checks of the data it reaches.

As Apache's proxy, the date is not checked against the clock (the Python client writes its
local time with a Z) and refusals are business statuses in the response (UNAUTHORIZED 40100,
FORBIDDEN 40300), which the official clients turn into exceptions, never gRPC errors.

As for rmq.v1 calls (auth_interceptor), a call whose signature fails is answered from its
metadata by a handler that never reads the request, so a caller without a secret cannot make
the broker receive a large message, and refusals go through the rate-limited RefusalLog. The
scheme signs only the date-time (to the second): a captured v2 call can be replayed (Apache's
proxy has the same weakness; SECURITY.md), so expose the v2 endpoint over TLS only."""

from __future__ import annotations

import hashlib
import hmac
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import grpc
from grpc import aio

from rmq.broker_server.grpc_aio import Context, Handler, text_metadata
from rmq.broker_server.grpc_aio import behaviour as aio_behaviour
from rmq.broker_server.offsets.client_id_owners import ClientIdOwners, ClientIdTaken
from rmq.broker_server.security.acl import AccessDenied, Acl, Need, Requirement, ResourceKind
from rmq.broker_server.security.caller import Caller, run_as
from rmq.broker_server.security.refusal_log import RefusalLog
from rmq.broker_server.security.request_auth import (
    CallRefused,
    admit_account,
    denied,
    key_label,
    peer_address,
    unauthenticated,
)
from rmq.rocketmq_v2 import METHOD_PREFIX, METHODS
from rmq.rocketmq_v2 import definition_pb2 as v2

log = logging.getLogger("rmq.auth")
AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
CLIENT_ID = "x-mq-client-id"
ALGORITHM = "MQv2-HMAC-SHA1"
TOPIC, GROUP = ResourceKind.TOPIC, ResourceKind.GROUP


# A refused call (request_auth.CallRefused, as for rmq.v1 calls) as the v2 status it answers.
V2_CODES: dict[grpc.StatusCode, v2.Code] = {
    grpc.StatusCode.UNAUTHENTICATED: v2.UNAUTHORIZED,
    grpc.StatusCode.PERMISSION_DENIED: v2.FORBIDDEN,
}


def _topic(name: str, need: Need) -> list[Requirement]:
    return [Requirement(TOPIC, name, need)] if name else []


def _group(request: Any) -> list[Requirement]:
    group = request.group.name if request.HasField("group") else ""
    return [Requirement(GROUP, group, Need.SUB)] if group else []


def _consume(request: Any) -> list[Requirement]:
    topic = request.message_queue.topic.name if hasattr(request, "message_queue") else request.topic.name
    return _group(request) + _topic(topic, Need.SUB)


RULES: dict[str, Callable[[Any], Iterable[Requirement]]] = {
    "QueryRoute": lambda r: _topic(r.topic.name, Need.ANY),
    "Heartbeat": _group,
    "NotifyClientTermination": _group,
    "Telemetry": lambda r: [],
    "SendMessage": lambda r: [q for m in r.messages for q in _topic(m.topic.name, Need.PUB)],
    "EndTransaction": lambda r: _topic(r.topic.name, Need.PUB),
    "RecallMessage": lambda r: _topic(r.topic.name, Need.PUB),
    "QueryAssignment": _consume,
    "ReceiveMessage": _consume,
    "AckMessage": _consume,
    "ChangeInvisibleDuration": _consume,
    "ForwardMessageToDeadLetterQueue": _consume,
    "PullMessage": _consume,
    "UpdateOffset": _consume,
    "GetOffset": _consume,
    "QueryOffset": lambda r: _topic(r.message_queue.topic.name, Need.SUB),
}


def parse_authorization(value: str) -> tuple[str, str]:
    """(access key, signature) of an `authorization` header; CallRefused when malformed."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise unauthenticated(f"authorization must use {ALGORITHM}")
    fields = {}
    for part in rest.split(","):
        name, _, field_value = part.strip().partition("=")
        fields[name] = field_value
    if DATE_TIME not in fields.get("SignedHeaders", "").split(";") or "Signature" not in fields:
        raise unauthenticated(f"authorization must sign {DATE_TIME} and carry a Signature")
    return fields.get("Credential", ""), fields["Signature"]


def signature(secret_key: str, date_time: str) -> str:
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


class V2Authenticator:
    def __init__(self, acl: Callable[[], Acl], client_ids: ClientIdOwners | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        """`client_ids`: who owns each client id (shared with rmq.v1 calls): a v2 client id
        (`x-mq-client-id`, its Telemetry session, its in-flight receives) belongs to the account
        that first used it."""
        self._acl = acl
        self._client_ids = client_ids or ClientIdOwners()
        self._clock = clock

    def authenticate(self, metadata: dict[str, str]) -> str:
        """The access key whose secret signed this call."""
        access_key, given = parse_authorization(metadata.get(AUTHORIZATION, ""))
        account = self._acl().account(access_key)
        date_time = metadata.get(DATE_TIME, "")
        if account is None or not date_time or not hmac.compare_digest(
                signature(account.secret_key, date_time), given.lower()):
            raise unauthenticated(f"signature not accepted for access key {key_label(access_key)}: "
                                           f"unknown access key or wrong secret key")
        return access_key

    def authorize(self, access_key: str, method: str, request: Any, peer: str, client_id: str = "") -> None:
        """The account may make this call from `peer`, and owns `client_id` (its header)."""
        acl = self._acl()
        account = admit_account(acl, access_key, peer_address(peer))
        rule = RULES.get(method)
        try:
            if rule is None:
                if not account.admin:
                    raise AccessDenied(f"access key {key_label(access_key)} is not an admin account, "
                                       f"which {method} needs")
                return
            acl.check_all(access_key, rule(request))
            if client_id:
                self._client_ids.claim(access_key, client_id, int(self._clock() * 1000))
        except (AccessDenied, ClientIdTaken) as error:
            raise denied(str(error)) from None

    def caller(self, access_key: str) -> Caller:
        """The account an admitted call runs as (rmq.broker_server.security.caller)."""
        return Caller(access_key, self._acl)


class RocketMQv2AuthInterceptor(aio.ServerInterceptor):
    """Admits v2 calls through a V2Authenticator; other calls pass untouched (rmq.v1's own
    AuthInterceptor checks them and passes v2 calls on to this one)."""

    def __init__(self, authenticator: V2Authenticator, refusals: RefusalLog | None = None) -> None:
        self._authenticator = authenticator
        self._refusals = refusals or RefusalLog()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(details)
        if handler is None or not details.method.startswith(METHOD_PREFIX):
            return handler
        name = details.method[len(METHOD_PREFIX):]
        metadata = text_metadata(details)
        try:
            access_key = self._authenticator.authenticate(metadata)
        except CallRefused as refusal:
            return _refusing(handler, name, refusal, self._refusals)
        return _wrap(handler, name, self._check(name, access_key, metadata.get(CLIENT_ID, "")))

    def _check(self, name: str, access_key: str,
               client_id: str) -> Callable[[Any, Context], CallRefused | None]:
        def check(request: Any, context: Context) -> CallRefused | None:
            try:
                self._authenticator.authorize(access_key, name, request, context.peer(), client_id)
                run_as(self._authenticator.caller(access_key))   # this call's task only
                return None
            except CallRefused as error:
                self._refusals.record(name, context.peer(), v2.Code.Name(V2_CODES[error.code]), error.message)
                return error
        return check


def _refused_command(name: str, refusal: CallRefused) -> Any:
    status = v2.Status(code=V2_CODES[refusal.code], message=refusal.message)
    return METHODS[name].response_class(status=status)


def _refusing(handler: Handler, name: str, refusal: CallRefused,
              refusals: RefusalLog) -> Handler:
    """A client-streaming handler that answers the refusal at once and never reads the request."""

    def refused(context: Context) -> Any:
        refusals.record(name, context.peer(), v2.Code.Name(V2_CODES[refusal.code]), refusal.message)
        return _refused_command(name, refusal)

    async def unary(_requests: AsyncIterator[Any], context: Context) -> Any:
        return refused(context)

    async def streaming(_requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
        yield refused(context)

    serializer = handler.response_serializer
    if handler.unary_unary is not None or handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(unary, response_serializer=serializer)
    return grpc.stream_stream_rpc_method_handler(streaming, response_serializer=serializer)


def _wrap(handler: Handler, name: str,
          check: Callable[[Any, Context], CallRefused | None]) -> Handler:
    def refused_command(refusal: CallRefused) -> Any:
        return _refused_command(name, refusal)

    options = {"request_deserializer": handler.request_deserializer,
               "response_serializer": handler.response_serializer}
    if handler.unary_unary is not None:
        behaviour = aio_behaviour(handler.unary_unary)

        async def unary(request: Any, context: Context) -> Any:
            refusal = check(request, context)
            if refusal is not None:
                return refused_command(refusal)
            result = behaviour(request, context)
            return await result if inspect.isawaitable(result) else result

        return grpc.unary_unary_rpc_method_handler(unary, **options)
    if handler.unary_stream is not None:
        streaming = aio_behaviour(handler.unary_stream)

        async def server_stream(request: Any, context: Context) -> AsyncIterator[Any]:
            refusal = check(request, context)
            if refusal is not None:
                yield refused_command(refusal)
                return
            async for response in streaming(request, context):
                yield response

        return grpc.unary_stream_rpc_method_handler(server_stream, **options)
    bidirectional = aio_behaviour(handler.stream_stream)

    async def both_streams(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
        refusal = check(None, context)
        if refusal is not None:
            yield refused_command(refusal)
            return
        async for response in bidirectional(requests, context):
            yield response

    return grpc.stream_stream_rpc_method_handler(both_streams, **options)
