"""Apache RocketMQ 5's gRPC protocol (`apache.rocketmq.v2.MessagingService`, spec
rocketmq-v2-protocol.md): the generated messages (`definition_pb2`, `service_pb2`, from the
.proto files beside this module) and the service's method table, from which the broker builds
its handlers and a test or tool builds a client stub.

The .proto files keep apache/rocketmq-apis' wire schema under the protobuf package
`rmq.apache.rocketmq.v2` (see their header): the RPC paths, which are the only place a package
name travels on the wire, are the official ones (`SERVICE_NAME`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from rmq.rocketmq_v2 import definition_pb2, service_pb2

SERVICE_NAME = "apache.rocketmq.v2.MessagingService"
METHOD_PREFIX = f"/{SERVICE_NAME}/"   # every RPC path starts so
_SERVICE = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]


@dataclass(frozen=True)
class Method:
    """One RPC of the service: its name, streaming shape and message classes."""

    name: str
    client_streaming: bool
    server_streaming: bool
    request_class: Any
    response_class: Any

    @property
    def path(self) -> str:
        return f"/{SERVICE_NAME}/{self.name}"


def _message_class(descriptor: Any) -> Any:
    module = service_pb2 if descriptor.file is service_pb2.DESCRIPTOR else definition_pb2
    return getattr(module, descriptor.name)


METHODS: dict[str, Method] = {
    method.name: Method(
        method.name,
        method.client_streaming,
        method.server_streaming,
        _message_class(method.input_type),
        _message_class(method.output_type),
    )
    for method in _SERVICE.methods
}

_HANDLER_FACTORIES: dict[tuple[bool, bool], Callable[..., grpc.RpcMethodHandler[Any, Any]]] = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def add_messaging_service(servicer: object, server: grpc.aio.Server) -> None:
    """Serve every method `servicer` defines (same name as the RPC) under SERVICE_NAME; the
    others are answered UNIMPLEMENTED by gRPC."""
    handlers = {
        method.name: _HANDLER_FACTORIES[method.client_streaming, method.server_streaming](
            getattr(servicer, method.name),
            request_deserializer=method.request_class.FromString,
            response_serializer=method.response_class.SerializeToString,
        )
        for method in METHODS.values()
        if hasattr(servicer, method.name)
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))


class MessagingServiceStub:
    """A client stub: one callable attribute per RPC (sync or aio, as the channel is)."""

    def __init__(self, channel: grpc.Channel | grpc.aio.Channel) -> None:
        for method in METHODS.values():
            factory = {
                (False, False): channel.unary_unary,
                (False, True): channel.unary_stream,
                (True, False): channel.stream_unary,
                (True, True): channel.stream_stream,
            }[method.client_streaming, method.server_streaming]
            setattr(
                self,
                method.name,
                factory(
                    method.path,
                    request_serializer=method.request_class.SerializeToString,
                    response_deserializer=method.response_class.FromString,
                ),
            )

    def __getattr__(self, name: str) -> Any:  # typed access for the per-RPC attributes
        raise AttributeError(name)
