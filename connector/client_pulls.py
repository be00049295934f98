"""Pulling and offsets (MQClientAPIImpl#pullMessage, getMaxOffset/getMinOffset, searchOffset,
queryConsumerOffset / updateConsumerOffset): PullAPI's sync and async pulls (long polling; over
the member's remoting port where it serves one), the Flight data plane's tickets, queue offsets
and the group's committed offsets, each to the member of the broker group reads go to.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc

from rmq.connector.client_core import (
    ClientCore,
    Rpc,
    by_broker,
    call_each,
    unless_unreachable,
    when_answered,
)
from rmq.connector.errors import RequestCancelled, RmqError, RmqRefused, RmqUnavailable
from rmq.connector.pull_result import PullResult, pull_result
from rmq.connector.route_cache import BrokerMember
from rmq.message_queue import MessageQueue
from rmq.subscription import MessageSelector
from rmq.v1 import rmq_pb2

if TYPE_CHECKING:
    from rmq.connector.remoting_client import RemotingCall


@dataclass(frozen=True)
class QueueOffsets:
    min_offset: int
    max_offset: int
    last_store_timestamp: int                 # epoch ms of the newest message, 0 when empty


_GET_TOPIC_OFFSETS = Rpc("GetTopicOffsets", lambda c: c.messaging.GetTopicOffsets,
                         rmq_pb2.GetTopicOffsetsResponse)
_PULL_MESSAGE = Rpc("PullMessage", lambda c: c.messaging.PullMessage, rmq_pb2.PullMessageResponse)
_QUERY_CONSUMER_OFFSETS = Rpc("QueryConsumerOffsets", lambda c: c.messaging.QueryConsumerOffsets,
                              rmq_pb2.QueryConsumerOffsetsResponse)
_REMOVE_CONSUMER_OFFSETS = Rpc("RemoveConsumerOffsets", lambda c: c.messaging.RemoveConsumerOffsets,
                               rmq_pb2.RemoveConsumerOffsetsResponse)
_SEARCH_OFFSET = Rpc("SearchOffset", lambda c: c.messaging.SearchOffset, rmq_pb2.SearchOffsetResponse)
_UPDATE_CONSUMER_OFFSETS = Rpc("UpdateConsumerOffsets", lambda c: c.messaging.UpdateConsumerOffsets,
                               rmq_pb2.UpdateConsumerOffsetsResponse)


class PullAPI(ClientCore):
    """The client API's pulls and offsets (see ClientCore for the connection, deadline and error rules)."""

    def pull(self, mq: MessageQueue, offset: int, max_messages: int, *, group: str,
             sub_expression: str | MessageSelector = "*", suspend_timeout_ms: int = 0,
             commit_offset: int | None = None, max_bytes: int = 0, timeout: float | None = None
             ) -> PullResult:
        """One PullMessage. With `suspend_timeout_ms` > 0 the broker holds the request until a
        message arrives or the time runs out (long polling); the deadline adds that hold time
        to `timeout`. `sub_expression`: tags (`TagA || TagB`) or a MessageSelector (by_sql: the
        broker filters on properties). The messages stay packed: decode them with
        message_decoder.decode."""
        request, deadline = self._pull_request(mq, offset, max_messages, group, sub_expression,
                                                suspend_timeout_ms, commit_offset, max_bytes, timeout)
        response = self._read_call(mq.broker_name, _PULL_MESSAGE, request, queue=mq, timeout=deadline)
        self.routes.record_suggestion(mq, response.suggest_which_broker_id)
        return pull_result(response)

    def pull_async(self, mq: MessageQueue, offset: int, max_messages: int, *, group: str,
                   callback: Callable[[PullResult | None, RmqError | None], None],
                   sub_expression: str | MessageSelector = "*", suspend_timeout_ms: int = 0,
                   commit_offset: int | None = None
                   ) -> grpc.Future[rmq_pb2.PullMessageResponse] | RemotingCall:
        """`pull` without blocking (RocketMQ's async pull): `callback(result, None)` or
        `callback(None, error)` runs on a client thread when the answer arrives. An unknown
        broker raises RmqUnavailable at once. The returned call's `cancel()` ends the pull
        (the broker lets a held one go; the callback gets RmqUnavailable "... cancelled").
        Over the member's remoting port when it serves one (docs/client-behaviour.md "Transport")."""
        # a pull's wire form, over either port
        from rmq.connector.remoting_client import PullSpec

        pull = PullSpec.of(mq, offset, max_messages, group, sub_expression, suspend_timeout_ms, commit_offset)
        deadline = self._pull_deadline(None, suspend_timeout_ms)
        address = self._read_address(mq.broker_name, mq)
        label = f"{mq.broker_name} at {address}"

        def answered(result: PullResult | rmq_pb2.Status | None, failure: RmqError | None) -> None:
            if isinstance(failure, RequestCancelled):
                callback(None, RmqUnavailable("PullMessage cancelled", broker=label, queue=mq))
                return
            if isinstance(failure, RmqUnavailable):
                self.routes.mark_down(address)    # the next pull goes to another member of the group
                located = failure.broker is not None
                callback(None, failure if located else RmqUnavailable(f"PullMessage: {failure.message}",
                                                                       broker=label, queue=mq))
                return
            if failure is not None:
                callback(None, failure)
                return
            assert result is not None
            if isinstance(result, rmq_pb2.Status):
                callback(None, RmqRefused(result.code, result.message or "PullMessage refused", broker=label,
                                          queue=mq))
                return
            self.routes.record_suggestion(mq, result.suggest_which_broker_id)
            callback(result, None)

        remoting = functools.partial(self._remoting.pull_async, pull=pull, timeout=deadline, done=answered)
        pulling = self._over_remoting(mq.broker_name, address, remoting)
        if pulling is not None:
            return pulling
        future = self._connection(address).messaging.PullMessage.future(pull.to_request(), timeout=deadline)

        def grpc_answered(response: rmq_pb2.PullMessageResponse | None, failure: RmqError | None) -> None:
            if response is None:
                answered(None, failure)
            elif response.status.code != rmq_pb2.OK:
                answered(response.status, None)
            else:
                answered(pull_result(response), None)

        when_answered(future, "PullMessage", label, mq, grpc_answered)
        return future

    def _pull_request(self, mq: MessageQueue, offset: int, max_messages: int, group: str,
                      sub_expression: str | MessageSelector,
                      suspend_timeout_ms: int, commit_offset: int | None, max_bytes: int,
                      timeout: float | None) -> tuple[rmq_pb2.PullMessageRequest, float]:
        """The request (PullSysFlag.buildSysFlag, spec pull §10.3) and its deadline."""
        from rmq.connector.remoting_client import PullSpec

        pull = PullSpec.of(mq, offset, max_messages, group, sub_expression, suspend_timeout_ms, commit_offset)
        return pull.to_request(max_bytes), self._pull_deadline(timeout, suspend_timeout_ms)

    def _pull_deadline(self, timeout: float | None, suspend_timeout_ms: int) -> float:
        """A pull's deadline: the call's timeout plus the time the broker may hold it."""
        return (timeout or self.timeout) + max(suspend_timeout_ms, 0) / 1000.0

    # ------------------------------------------------------------ the Flight data plane (docs/data-plane.md)

    def read_member(self, mq: MessageQueue, refresh: bool = False) -> BrokerMember | None:
        """The member a pull of `mq` would go to (its flight_address: its data plane), None when
        the route lists no members. `refresh`: ask the endpoints for the members first (a
        restarted broker serves Flight on a new port)."""
        if refresh:
            self.list_brokers()
        address = self._read_address(mq.broker_name, mq)
        return next((m for m in self.routes.members(mq.broker_name) if m.address == address), None)

    def mark_down(self, member: BrokerMember) -> None:
        """Pass `member` over for reads for a while: it did not answer (a slave serves meanwhile)."""
        self.routes.mark_down(member.address)

    def flight_ticket(self, mq: MessageQueue, start: int, end: int, *, group: str, max_rows: int,
                      batch_rows: int, batch_bytes: int = 0, sub_expression: str | MessageSelector = "*",
                      packed: bool = False, columns: Sequence[str] = ()) -> rmq_pb2.FlightReadTicket:
        """A read of `mq`'s offsets [start, end), at most `max_rows` rows, in batches of at most
        `batch_rows` rows and `batch_bytes` record bytes (0: the broker's default) of the source
        schema's `columns` (empty: all); `packed`: the stored records in each batch's metadata
        instead of rows (docs/data-plane.md)."""
        pull, _ = self._pull_request(mq, start, batch_rows, group, sub_expression, 0, None, batch_bytes, None)
        return rmq_pb2.FlightReadTicket(pull=pull, end_offset=end, max_rows=max_rows, packed=packed,
                                        columns=columns)

    # ------------------------------------------------------------ offsets

    def topic_offsets(self, topic: str, unreachable: dict[str, RmqUnavailable] | None = None,
                      brokers: Collection[str] | None = None) -> dict[MessageQueue, QueueOffsets]:
        """Min/max offset and last store time of every queue of the topic (on `brokers` only,
        when given), sorted by queue. With `unreachable`, a broker that cannot be reached (killed,
        not yet evicted by the name server) is recorded there by name and skipped: the live
        brokers' queues are answered."""
        offsets: dict[MessageQueue, QueueOffsets] = {}
        for name in self._route(topic).brokers:
            if brokers is not None and name not in brokers:
                continue
            read = functools.partial(self._broker_topic_offsets, topic, name)
            offsets.update(unless_unreachable(read, name, unreachable) or {})
        return dict(sorted(offsets.items()))

    def pending_timers(self, topic: str, unreachable: dict[str, RmqUnavailable] | None = None) -> int:
        """Timer messages for the topic waiting on its brokers (docs/internals/timer.md); with
        `unreachable`, a broker that cannot be reached is recorded there and skipped."""
        def read(name: str) -> int:
            request = rmq_pb2.GetTopicOffsetsRequest(topic=topic)
            return int(self._topic_call(topic, name, _GET_TOPIC_OFFSETS, request).pending_timers)
        return sum(unless_unreachable(functools.partial(read, name), name, unreachable) or 0
                   for name in self._route(topic).brokers)

    def queue_offsets(self, mq: MessageQueue) -> QueueOffsets:
        """Min/max offset and last store time of one queue, from its broker only (the topic's
        other brokers may be down)."""
        offsets = self._broker_topic_offsets(mq.topic, mq.broker_name).get(mq)
        if offsets is None:
            raise RmqRefused(rmq_pb2.TOPIC_NOT_EXIST, f"broker {mq.broker_name} holds no queue {mq.queue_id} "
                             f"of topic {mq.topic}", broker=mq.broker_name, queue=mq)
        return offsets

    def _broker_topic_offsets(self, topic: str, broker_name: str) -> dict[MessageQueue, QueueOffsets]:
        request = rmq_pb2.GetTopicOffsetsRequest(topic=topic)
        response = self._topic_call(topic, broker_name, _GET_TOPIC_OFFSETS, request)
        return {MessageQueue(topic, broker_name, q.queue_id): QueueOffsets(q.min_offset, q.max_offset,
                                                                            q.last_store_timestamp)
                for q in response.queues}

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """Earliest offset stored at or after `timestamp_ms` (max offset when all are older)."""
        request = rmq_pb2.SearchOffsetRequest(topic=mq.topic, queue_id=mq.queue_id, timestamp=timestamp_ms)
        return self._read_call(mq.broker_name, _SEARCH_OFFSET, request, queue=mq).offset

    def query_consumer_offsets(self, group: str, topic: str = "",
                               unreachable: dict[str, RmqUnavailable] | None = None,
                               broker_name: str | None = None) -> dict[MessageQueue, int]:
        """The group's committed offsets (of one topic, or of all), sorted by queue; `unreachable`
        as for topic_offsets. With `broker_name`, only that broker is asked (fetchConsumeOffsetFromBroker)."""
        if broker_name:
            brokers: Iterable[str] = [broker_name]
        else:
            brokers = self._route(topic).brokers if topic else self.list_brokers()
        request = rmq_pb2.QueryConsumerOffsetsRequest(consumer_group=group, topic=topic)
        offsets: dict[MessageQueue, int] = {}
        for name in brokers:
            read = functools.partial(self._read_call, name, _QUERY_CONSUMER_OFFSETS, request,
                                     ok_codes=(rmq_pb2.QUERY_NOT_FOUND,))
            response = unless_unreachable(read, name, unreachable)
            if response is None:
                continue
            offsets.update((MessageQueue(o.topic, name, o.queue_id), o.offset) for o in response.offsets)
        return dict(sorted(offsets.items()))

    def update_consumer_offsets(self, group: str, offsets: Mapping[MessageQueue, int],
                                increase_only: bool = False,
                                unreachable: dict[str, RmqUnavailable] | None = None) -> None:
        """Write the offsets to their brokers, each broker even when another fails (then the
        first failure is raised); with `unreachable`, an unreachable broker is recorded there
        instead (its offsets not written), as for topic_offsets."""
        grouped = by_broker(offsets)

        def update(name: str) -> None:
            request = rmq_pb2.UpdateConsumerOffsetsRequest(
                consumer_group=group, increase_only=increase_only,
                offsets=[rmq_pb2.ConsumerOffset(topic=mq.topic, queue_id=mq.queue_id, offset=offsets[mq])
                         for mq in grouped[name]])
            # to the member the group reads from
            write = functools.partial(self._read_call, name, _UPDATE_CONSUMER_OFFSETS, request)
            unless_unreachable(write, name, unreachable)

        call_each(grouped, update)

    def remove_consumer_offsets(self, group: str, mqs: Iterable[MessageQueue]) -> None:
        for name, queues in by_broker(mqs).items():
            request = rmq_pb2.RemoveConsumerOffsetsRequest(
                consumer_group=group,
                offsets=[rmq_pb2.ConsumerOffset(topic=mq.topic, queue_id=mq.queue_id) for mq in queues])
            self._call(self._broker_address(name), _REMOVE_CONSUMER_OFFSETS, request, name)
