"""The remoting listeners of the broker and the name server, assembled from their parts (called
once by BrokerController / serve_name_server when `remoting_listen` is set)."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING

from rmq.broker_server.config import BrokerConfig, NameServerConfig
from rmq.broker_server.errors import UserError
from rmq.broker_server.offsets.consumer_manager import ConsumerManager
from rmq.broker_server.processors.pipeline import BrokerProcessors
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.broker_server.remoting.broker_processor import BrokerIdentity, BrokerRemotingProcessor
from rmq.broker_server.remoting.name_server_processor import NameServerRemotingProcessor
from rmq.broker_server.remoting.remoting_acl import RemotingAuthenticator
from rmq.broker_server.remoting.remoting_server import (
    HeaderGate,
    Immediate,
    RemotingLimits,
    RemotingProcessor,
    RemotingServer,
)
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.request_signing import broker_server_id

if TYPE_CHECKING:  # name_server calls build_name_server_remoting
    from rmq.broker_server.name_server.namesrv_controller import RouteInfoManager


def authenticator(security: ServerSecurity, server_id: str = "",
                  rocketmq_signing: bool = True) -> RemotingAuthenticator | None:
    """The ACL check of a remoting listener; `server_id`: the target rmq-signed requests name
    (rmq.request_signing; "" on a name server, where only RocketMQ 4's signing is accepted);
    `rocketmq_signing`: RocketMQ 4's replayable signing accepted too (RemotingAuthenticator)."""
    acl_file = security.acl_file
    if acl_file is None:
        return None
    rmq_signing = security.request_authenticator(server_id, security.client_ids) if server_id else None
    return RemotingAuthenticator(lambda: acl_file.acl, security.client_ids, rmq_signing, rocketmq_signing)


def remoting_server(
    listen: str, security: ServerSecurity, processor: RemotingProcessor, gate: HeaderGate,
    limits: RemotingLimits, sock: socket.socket | None = None,
    immediate: Mapping[int, Immediate] | None = None,
) -> RemotingServer:
    """`gate`: the processor's dispatcher, which admits each request's header before its body is
    read; `immediate`: the processor's answers on the read (RemotingServer)."""
    security.check_listen(listen)
    return RemotingServer(listen, processor, limits, security.tls, sock, gate, immediate)


def bind_remoting_port(config: BrokerConfig,
                       security: ServerSecurity) -> tuple[BrokerConfig, socket.socket | None]:
    """The broker's remoting port bound before anything names it (its address goes into routes and
    the store host of records): `config` with remoting_listen the bound HOST:PORT (an ephemeral
    port resolved), and the listening socket; `config` and None when the port is off."""
    listen = config.remoting_bind_address
    if listen is None:
        return config, None
    security.check_listen(listen)
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    try:
        info = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(info[0], info[1], info[2])
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
    except OSError as error:
        raise UserError(f"cannot serve remoting on {listen} (--remoting-listen): {error.strerror}") from None
    sock.listen(1024)
    sock.setblocking(False)
    bound = f"{listen.rpartition(':')[0]}:{sock.getsockname()[1]}"
    return dataclasses.replace(config, remoting_listen=bound), sock


def build_broker_remoting(
    config: BrokerConfig,
    security: ServerSecurity,
    processors: BrokerProcessors,
    topics: TopicConfigManager,
    consumers: ConsumerManager,
    sock: socket.socket | None,
    fixed_port: bool,
) -> RemotingServer | None:
    """The broker's remoting port serving on `sock` (bind_remoting_port); None when it is off.
    `fixed_port`: given with --remoting-listen HOST:PORT, for 4.x clients, whose replayable
    AccessKey/Signature is accepted there only (the default port is the SDK's, signed with rmq's
    scheme)."""
    if sock is None:
        return None
    processor = BrokerRemotingProcessor(
        BrokerIdentity(config.broker_name, config.broker_id, config.remoting_address, config.cluster_name),
        processors,
        topics,
        consumers,
        authenticator(security, broker_server_id(config.broker_name, config.broker_id), fixed_port),
        config.max_message_size,
    )
    limits = RemotingLimits(
        max_frame_bytes=config.remoting_max_frame_bytes,
        max_connections=config.remoting_max_connections,
        max_request_bytes=config.remoting_max_request_bytes,
        max_request_bytes_per_connection=config.remoting_max_request_bytes_per_connection,
        max_request_bytes_per_account=config.remoting_max_request_bytes_per_account,
        max_connections_per_address=config.remoting_max_connections_per_address,
    )
    return remoting_server(config.remoting_listen, security, processor, processor.dispatcher, limits, sock,
                           processor.immediate())


def build_name_server_remoting(
    config: NameServerConfig, security: ServerSecurity, routes: RouteInfoManager
) -> RemotingServer | None:
    if not config.remoting_listen:
        return None
    limits = RemotingLimits(
        max_frame_bytes=config.remoting_max_frame_bytes, max_connections=config.remoting_max_connections
    )
    processor = NameServerRemotingProcessor(routes, authenticator(security))
    return remoting_server(config.remoting_listen, security, processor, processor.dispatcher, limits)
