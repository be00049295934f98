"""grpc.aio server interceptor that admits every call through a RequestAuthenticator.

An aio interceptor sees the method and metadata but not the request, and the signature
covers the request, so the check runs inside a wrapped handler: the wrapper gets the
deserialized request, admits the call or aborts it, then runs the real behaviour. Every
rmq.v1 RPC is unary-unary; a streaming method is answered UNIMPLEMENTED, never run unchecked.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable

import grpc
from grpc import aio

from rmq.broker_server.request_auth import CallRefused, RequestAuthenticator

log = logging.getLogger("rmq.auth")


class AuthInterceptor(aio.ServerInterceptor):
    def __init__(self, authenticator: RequestAuthenticator) -> None:
        self._authenticator = authenticator

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return None   # unknown or streaming method: UNIMPLEMENTED, never unchecked
        method = handler_call_details.method
        metadata = {m.key: m.value for m in handler_call_details.invocation_metadata or ()}
        behaviour = handler.unary_unary

        async def admitted(request, context: aio.ServicerContext):
            try:
                self._authenticator.admit(method, metadata, request, context.peer())
            except CallRefused as refusal:
                log.info("refused %s from %s: %s", method, context.peer(), refusal.message)
                await context.abort(refusal.code, refusal.message)
            result = behaviour(request, context)
            return await result if inspect.isawaitable(result) else result

        return grpc.unary_unary_rpc_method_handler(
            admitted,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

