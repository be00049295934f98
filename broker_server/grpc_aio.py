"""grpc.aio as the broker's servers use it, typed. grpc's type stubs describe an RpcMethodHandler's
behaviours as the thread-pool server calls them (a grpc.ServicerContext, plain request
iterators); grpc.aio calls the same slots with an aio.ServicerContext and async request
iterators, and awaits what they return. The interceptors of rmq.v1 and RocketMQ 5 calls read
handlers through `behaviour` and `text_metadata`; servicers take a `Context`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias, cast

import grpc
from grpc import aio

# the context of a call on a grpc.aio server (request and response types: the servicer's signature)
Context: TypeAlias = aio.ServicerContext[Any, Any]
# a method handler (grpc's class is not subscriptable at run time)
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
# (request or async request iterator, context) -> response, awaitable or async iterator
AioBehaviour = Callable[[Any, Context], Any]


def behaviour(slot: object) -> AioBehaviour:
    """One behaviour slot of a handler (`handler.unary_unary`, ...), typed as grpc.aio calls it;
    the slot must be set."""
    assert slot is not None
    return cast(AioBehaviour, slot)


def text_metadata(details: grpc.HandlerCallDetails) -> dict[str, str]:
    """The call's text metadata by key (binary `-bin` values are not headers either side signs)."""
    return {key: value for key, value in details.invocation_metadata or () if isinstance(value, str)}
