"""grpc.aio server interceptor that admits every call through a RequestAuthenticator. An aio
interceptor sees the method and metadata before the request is read, so it checks there
everything the metadata proves (RequestAuthenticator.admit_metadata): a refused call is
answered by a handler that never reads the request, so gRPC grants the caller no more than its
first flow-control window, whatever message size it announces. An admitted call runs in a
wrapper that gets the deserialized request and the caller's address, finishes the checks
(admit_request) and then runs the real behaviour as that account (rmq.broker_server.security.caller). A
client-streaming call (HAService.Transfer) is admitted once, when it opens: its signature
covers the empty message (rmq.request_signing.STREAM_REQUEST) and its permission is that of its
method.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from grpc import aio

from rmq import request_signing
from rmq.broker_server.grpc_aio import Context, Handler, text_metadata
from rmq.broker_server.grpc_aio import behaviour as aio_behaviour
from rmq.broker_server.security.caller import run_as
from rmq.broker_server.security.refusal_log import RefusalLog
from rmq.broker_server.security.request_auth import Admission, CallRefused, RequestAuthenticator
from rmq.rocketmq_v2 import METHOD_PREFIX as ROCKETMQ_V2_METHOD_PREFIX


class AuthInterceptor(aio.ServerInterceptor):
    def __init__(self, authenticator: RequestAuthenticator, refusals: RefusalLog | None = None) -> None:
        self._authenticator = authenticator
        self._refusals = refusals or RefusalLog()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is not None and handler_call_details.method.startswith(ROCKETMQ_V2_METHOD_PREFIX):
            return handler   # RocketMQ 5 calls: RocketMQv2AuthInterceptor (MQv2-HMAC-SHA1) checks them
        if handler is None:
            return None   # unknown method: UNIMPLEMENTED
        method = handler_call_details.method
        metadata = text_metadata(handler_call_details)
        try:
            admission = self._authenticator.admit_metadata(method, metadata)
        except CallRefused as refusal:
            return self._refusing_handler(method, refusal, handler)
        if handler.unary_unary is not None:
            return self._unary_handler(method, admission, handler)
        if handler.unary_stream is not None:
            return self._stream_handler(method, admission, handler)
        return self._client_stream_handler(method, admission, handler)

    async def _refuse(self, method: str, refusal: CallRefused, context: Context) -> None:
        if not refusal.routine:
            self._refusals.record(method, context.peer(), refusal.code.name, refusal.message)
        if refusal.trailing_metadata:
            context.set_trailing_metadata(refusal.trailing_metadata)
        await context.abort(refusal.code, refusal.message)

    def _refusing_handler(self, method: str, refusal: CallRefused,
                          handler: Handler) -> Handler:
        """A client-streaming handler that answers at once and never reads the request (on the
        wire a unary call is a stream of one message)."""

        async def refuse(_requests: AsyncIterator[Any], context: Context) -> None:
            await self._refuse(method, refusal, context)

        serializer = handler.response_serializer

        if not handler.response_streaming:
            return grpc.stream_unary_rpc_method_handler(refuse, response_serializer=serializer)
        return grpc.stream_stream_rpc_method_handler(refuse, response_serializer=serializer)

    async def _admit_request(self, method: str, admission: Admission, request: Any,
                             context: Context) -> None:
        try:
            self._authenticator.admit_request(admission, method, request, context.peer())
        except CallRefused as refusal:
            await self._refuse(method, refusal, context)
        run_as(self._authenticator.caller(admission.access_key))   # this call's task only

    def _unary_handler(self, method: str, admission: Admission,
                       handler: Handler) -> Handler:
        behaviour = aio_behaviour(handler.unary_unary)

        async def admitted(request: Any, context: Context) -> Any:
            await self._admit_request(method, admission, request, context)
            result = behaviour(request, context)
            return await result if inspect.isawaitable(result) else result

        return grpc.unary_unary_rpc_method_handler(
            admitted, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)

    def _stream_handler(self, method: str, admission: Admission,
                        handler: Handler) -> Handler:
        behaviour = aio_behaviour(handler.unary_stream)

        async def admitted(request: Any, context: Context) -> AsyncIterator[Any]:
            await self._admit_request(method, admission, request, context)
            async for response in _responses(behaviour(request, context)):
                yield response

        return grpc.unary_stream_rpc_method_handler(
            admitted, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)

    def _client_stream_handler(self, method: str, admission: Admission,
                               handler: Handler) -> Handler:
        options = {"request_deserializer": handler.request_deserializer,
                   "response_serializer": handler.response_serializer}
        if handler.stream_unary is not None:
            single = aio_behaviour(handler.stream_unary)

            async def admitted_unary(requests: AsyncIterator[Any], context: Context) -> Any:
                await self._admit_request(method, admission, request_signing.STREAM_REQUEST, context)
                result = single(requests, context)
                return await result if inspect.isawaitable(result) else result

            return grpc.stream_unary_rpc_method_handler(admitted_unary, **options)
        streaming = aio_behaviour(handler.stream_stream)

        async def admitted(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
            await self._admit_request(method, admission, request_signing.STREAM_REQUEST, context)
            async for response in _responses(streaming(requests, context)):
                yield response

        return grpc.stream_stream_rpc_method_handler(admitted, **options)


async def _responses(responses: Any) -> AsyncIterator[Any]:
    """The responses of a streaming behaviour: an async generator, a coroutine that writes
    with context.write, or an iterable."""
    if inspect.isasyncgen(responses):
        async for response in responses:
            yield response
    elif inspect.isawaitable(responses):
        await responses
    else:
        for response in responses or ():
            yield response
