"""Telemetry sessions (spec rocketmq-v2-protocol.md §2, §3.9; proxy ClientActivity#telemetry):
one bidirectional stream per client and broker. Every `settings` command the client writes is
answered with the server's settings (status OK): a producer gets `publishing.max_body_size`,
a consumer its group's `fifo` flag, `long_polling_timeout` and a customized backoff whose
`max_attempts` is the group's; `metric.on` is always false. The broker writes server
commands (a transaction check) to a producer's open session.

A session belongs to the account that opened it, and settings claim only what that account
holds: PUB on each topic a producer says it publishes, SUB on a consumer's group and topics
(else the command is answered FORBIDDEN and the session stays what it was), so an account cannot
declare itself a producer of another's topic to be sent its transactions. One account holds a
share of the broker's sessions (docs/security-model.md: Telemetry).

A consumer's session is its membership: its settings register it in the broker's one
ConsumerManager (through ClientManageProcessor, like an rmq.v1 or 4.x heartbeat, within the same
bounds), and it leaves when its last stream for the group ends. Its queues are the broker's to
assign (pop), so it is listed with its group but not in the consumer list other protocols'
clients rebalance by (offsets/consumer_manager.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.duration_pb2 import Duration

from rmq.broker_server.errors import BrokerError
from rmq.broker_server.long_polling.fair_shares import adjust_count
from rmq.broker_server.processors.client_manage_processor import ClientManageProcessor
from rmq.broker_server.rocketmq_v2.status import V2Error, v2_status
from rmq.broker_server.security import caller
from rmq.broker_server.security.acl import Need, ResourceKind
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2
from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)
OUTBOX_SIZE = 1024


@dataclass(frozen=True)
class ServerSettings:
    max_body_size: int
    long_polling_timeout_s: int
    receive_batch_size: int
    max_attempts: int
    retry_delays_ms: list[int]
    fifo_groups: frozenset[str]


def _duration_ms(ms: int) -> Duration:
    duration = Duration()
    duration.FromMilliseconds(ms)
    return duration


def unheld_claim(settings: v2.Settings) -> str | None:
    """What the calling account claims in `settings` without holding it, or None."""
    claims: list[tuple[ResourceKind, str, Need]] = []
    if settings.HasField("publishing"):
        claims += [(ResourceKind.TOPIC, topic.name, Need.PUB) for topic in settings.publishing.topics]
    if settings.HasField("subscription"):
        subscription = settings.subscription
        if subscription.HasField("group"):
            claims.append((ResourceKind.GROUP, subscription.group.name, Need.SUB))
        claims += [(ResourceKind.TOPIC, entry.topic.name, Need.SUB) for entry in subscription.subscriptions]
    for kind, name, need in claims:
        if not caller.may(kind, name, need):
            return f"these settings claim {need.value} on {kind.value} {name[:100]!r}, which it lacks"
    return None


def answer_settings(client: v2.Settings, server: ServerSettings) -> v2.Settings:
    """The settings reply to `client`'s settings command."""
    reply = v2.Settings()
    reply.CopyFrom(client)
    reply.metric.Clear()
    reply.metric.on = False
    if client.HasField("publishing"):
        reply.publishing.max_body_size = server.max_body_size
        reply.publishing.validate_message_type = client.publishing.validate_message_type
        reply.backoff_policy.CopyFrom(v2.RetryPolicy(
            max_attempts=3,
            exponential_backoff=v2.ExponentialBackoff(initial=_duration_ms(10), max=_duration_ms(1000),
                                                      multiplier=2.0)))
    elif client.HasField("subscription"):
        group = client.subscription.group.name
        reply.subscription.fifo = group in server.fifo_groups
        reply.subscription.receive_batch_size = server.receive_batch_size
        reply.subscription.long_polling_timeout.CopyFrom(_duration_ms(server.long_polling_timeout_s * 1000))
        reply.backoff_policy.CopyFrom(v2.RetryPolicy(
            max_attempts=server.max_attempts,
            customized_backoff=v2.CustomizedBackoff(
                next=[_duration_ms(ms) for ms in server.retry_delays_ms])))
    return reply


@dataclass(eq=False)
class TelemetrySession:
    """One client's open stream: what it said it is, and the commands waiting to be written."""

    client_id: str
    account: str = ""   # the access key that opened it ("" on a broker without --acl)
    address: str = ""   # the client's address as the broker sees it
    settings: v2.Settings | None = None
    outbox: asyncio.Queue[Any] = field(default_factory=lambda: asyncio.Queue[Any](OUTBOX_SIZE))

    def send(self, command: service_pb2.TelemetryCommand | None) -> bool:
        """Queue a command (None ends the stream); False when the client is not reading."""
        try:
            self.outbox.put_nowait(command)
            return True
        except asyncio.QueueFull:
            return False

    def publishes(self, topic: str) -> bool:
        return (self.settings is not None and self.settings.HasField("publishing")
                and any(t.name == topic for t in self.settings.publishing.topics))


class TelemetrySessions:
    def __init__(self, server: ServerSettings, max_sessions: int, max_per_account: int,
                 members: ClientManageProcessor) -> None:
        """At most `max_sessions` streams, `max_per_account` of them one account's
        (BrokerConfig max_telemetry_sessions, max_telemetry_sessions_per_account); consumers
        join their groups through `members`."""
        self.server = server
        self.members = members
        self.max_sessions = max_sessions
        self.max_per_account = max_per_account
        self.sessions: set[TelemetrySession] = set()
        self._streams_per_client: dict[str, int] = {}
        self._per_account: dict[str, int] = {}

    def _refusal(self, account: str) -> str | None:
        """Why a new session of `account` is refused, or None (no share without an ACL)."""
        if len(self.sessions) >= self.max_sessions:
            return f"this broker holds {self.max_sessions} telemetry sessions (max_telemetry_sessions)"
        if account and self._per_account.get(account, 0) >= self.max_per_account:
            return (f"this account holds {self.max_per_account} telemetry sessions, its share of this broker "
                    f"(max_telemetry_sessions_per_account)")
        return None

    async def serve(self, client_id: str, address: str, commands: AsyncIterator[service_pb2.TelemetryCommand]
                    ) -> AsyncIterator[service_pb2.TelemetryCommand]:
        account = caller.account_key()
        refusal = self._refusal(account)
        if refusal is not None:
            yield service_pb2.TelemetryCommand(status=v2.Status(code=v2.TOO_MANY_REQUESTS, message=refusal))
            return
        session = TelemetrySession(client_id, account, address)
        self.sessions.add(session)
        adjust_count(self._streams_per_client, client_id, 1)
        adjust_count(self._per_account, account, 1)
        reader = asyncio.get_running_loop().create_task(self._read(session, commands))
        try:
            while True:
                command = await session.outbox.get()
                if command is None:
                    return
                yield command
        finally:
            reader.cancel()
            self.sessions.discard(session)
            self._leave(session, _consumer_group(session))
            adjust_count(self._streams_per_client, client_id, -1)
            adjust_count(self._per_account, account, -1)

    async def _read(self, session: TelemetrySession,
                    commands: AsyncIterator[service_pb2.TelemetryCommand]) -> None:
        try:
            async for command in commands:
                if command.HasField("settings"):
                    unheld = unheld_claim(command.settings)
                    if unheld is not None:
                        session.send(service_pb2.TelemetryCommand(
                            status=v2.Status(code=v2.FORBIDDEN, message=unheld)))
                        continue
                    try:
                        self._join(session, command.settings)
                    except BrokerError as error:   # a bad group name, the consumer table's bounds
                        session.send(service_pb2.TelemetryCommand(status=v2_status(error)))
                        continue
                    session.settings = command.settings
                    session.send(service_pb2.TelemetryCommand(
                        status=v2.Status(code=v2.OK, message="OK"),
                        settings=answer_settings(command.settings, self.server)))
        except Exception as error:  # the client went away
            log.debug("telemetry stream of %s ended: %s", session.client_id, error)
        session.send(None)

    def _join(self, session: TelemetrySession, settings: v2.Settings) -> None:
        """Register a consumer's settings in its group (leaving the group its earlier settings named)."""
        group = settings.subscription.group.name if settings.HasField("subscription") else ""
        if group:
            subscriptions = {entry.topic.name: entry.expression.expression
                             for entry in settings.subscription.subscriptions}
            self.members.heartbeat(session.client_id, group, rmq_pb2.CLUSTERING, subscriptions,
                                   rmq_pb2.CLIENT_PROTOCOL_ROCKETMQ_V2, session.address)
        before = _consumer_group(session)
        if before != group:
            self._leave(session, before)

    def _leave(self, session: TelemetrySession, group: str) -> None:
        """`session` no longer consumes for `group`: its client leaves the group unless another of
        its streams still consumes for it."""
        if group and not any(other is not session and other.client_id == session.client_id
                             and _consumer_group(other) == group for other in self.sessions):
            self.members.unregister(session.client_id, group)

    def heartbeat(self, client_id: str) -> None:
        """A Heartbeat (proxy ClientActivity#heartbeat): the client, as its Telemetry settings
        describe it, registered or refreshed through ClientManageProcessor: a producer in each
        topic it publishes (the proxy's producer group of a RocketMQ 5 producer), a consumer in
        the group its settings name (the one they were authorized for) with its subscriptions.
        UNRECOGNIZED_CLIENT_TYPE when it has sent no settings."""
        session = next((s for s in self.sessions if s.client_id == client_id and s.settings is not None),
                       None)
        if session is None or session.settings is None:
            raise V2Error(v2.UNRECOGNIZED_CLIENT_TYPE, f"client {client_id!r} has sent no settings "
                                                       "(its Telemetry stream first)")
        settings = session.settings
        if settings.HasField("publishing"):
            for topic in settings.publishing.topics:
                self.members.producer_heartbeat(
                    topic.name, client_id, rmq_pb2.CLIENT_PROTOCOL_ROCKETMQ_V2, session.address,
                    v2.Language.Name(settings.user_agent.language), 0)
        else:
            self._join(session, settings)   # the same settings again: refreshed in the same group

    def connected(self, client_id: str) -> bool:
        """Whether the client has a Telemetry stream open here."""
        return client_id in self._streams_per_client

    def producers_of(self, topic: str, account: str) -> list[TelemetrySession]:
        """The sessions of `account` that publish `topic`."""
        return [s for s in self.sessions if s.account == account and s.publishes(topic)]

    def end_all(self) -> None:
        """Shutdown: close every stream so the server need not wait for them."""
        for session in list(self.sessions):
            session.send(None)


def _consumer_group(session: TelemetrySession) -> str:
    """The group a consumer session's settings name; "" for a producer (or no settings yet)."""
    settings = session.settings
    if settings is None or not settings.HasField("subscription"):
        return ""
    return settings.subscription.group.name
