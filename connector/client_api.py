"""The client API (RocketMQ's MQClientAPIImpl): every call the SDK makes of brokers and name
servers, in three parts along MQClientAPIImpl's lines: the core (client_core.ClientCore:
channels, calls, routes, the member choice), sends (client_sends.SendAPI) and pulls and offsets
(client_pulls.PullAPI); ClientAPI joins them and adds the membership calls (heartbeat,
unregister, consumer list, queue locks, send-back, the membership push). Where a call goes is
decided by the route cache (route_cache.RouteCache); the admin calls are RmqClient's
(client.py), which adds them to this.

Business outcomes arrive as a `Status` in each response and become `RmqRefused`; transport
failures (broker down, deadline exceeded) become `RmqUnavailable`, which callers retry with
backoff. Pulled messages are returned packed (`rmq.v1.PackedMessages`); decode them with
`rmq.connector.message.decode_messages`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from rmq.connector.client_core import MAX_SEND_REQUEST_BYTES as MAX_SEND_REQUEST_BYTES
from rmq.connector.client_core import Rpc, by_broker, mq_proto
from rmq.connector.client_pulls import PullAPI
from rmq.connector.client_pulls import QueueOffsets as QueueOffsets
from rmq.connector.client_sends import OutgoingMessage as OutgoingMessage
from rmq.connector.client_sends import SendAPI
from rmq.connector.client_sends import SendResult as SendResult
from rmq.connector.errors import RmqRefused, RmqUnavailable
from rmq.message_queue import MessageQueue
from rmq.v1 import rmq_pb2

_CONSUMER_SEND_MSG_BACK = Rpc("ConsumerSendMsgBack", lambda c: c.messaging.ConsumerSendMsgBack,
                              rmq_pb2.ConsumerSendMsgBackResponse)
_GET_CONSUMER_LIST = Rpc("GetConsumerList", lambda c: c.messaging.GetConsumerList,
                         rmq_pb2.GetConsumerListResponse)
_REPORT_RUNNING_INFO = Rpc("ReportRunningInfo", lambda c: c.messaging.ReportRunningInfo,
                           rmq_pb2.ReportRunningInfoResponse)
_HEARTBEAT = Rpc("Heartbeat", lambda c: c.messaging.Heartbeat, rmq_pb2.HeartbeatResponse)
_LOCK_BATCH_MQ = Rpc("LockBatchMQ", lambda c: c.messaging.LockBatchMQ, rmq_pb2.LockBatchResponse)
_UNLOCK_BATCH_MQ = Rpc("UnlockBatchMQ", lambda c: c.messaging.UnlockBatchMQ, rmq_pb2.UnlockBatchResponse)
_UNREGISTER_CLIENT = Rpc("UnregisterClient", lambda c: c.messaging.UnregisterClient,
                         rmq_pb2.UnregisterClientResponse)


class ClientAPI(SendAPI, PullAPI):
    """Client for the brokers and name servers named by `endpoints` ("host:port[,host:port]"):
    sends, pulls and offsets, and the membership calls below (ClientCore: every call carries a
    deadline, channels are cached per address and shared, calls are signed with
    `access_key`/`secret_key`, channels use TLS with `tls` or a `tls_ca_file`)."""

    # ------------------------------------------------------------ membership and locks

    def heartbeat(self, client_id: str, group: str, subscriptions: Mapping[str, str],
                  broadcasting: bool = False, unreachable: dict[str, RmqUnavailable] | None = None) -> None:
        """Heartbeat to every member of every broker group (RocketMQ sendHeartbeatToAllBroker);
        `unreachable` as for topic_offsets."""
        request = rmq_pb2.HeartbeatRequest(
            client_id=client_id, consumer_group=group,
            message_model=rmq_pb2.BROADCASTING if broadcasting else rmq_pb2.CLUSTERING,
            subscriptions=[rmq_pb2.Subscription(topic=t, sub_expression=s) for t, s in subscriptions.items()])
        self._on_each_member(lambda name, address: self._call(address, _HEARTBEAT, request, name),
                             unreachable)

    def unregister(self, client_id: str, group: str) -> None:
        request = rmq_pb2.UnregisterClientRequest(client_id=client_id, consumer_group=group)
        self._on_each_member(lambda name, address: self._call(address, _UNREGISTER_CLIENT, request, name))

    def consumer_list(self, group: str, topic: str) -> list[str]:
        """The group's live client ids, sorted, from the first reachable broker holding the topic."""
        request = rmq_pb2.GetConsumerListRequest(consumer_group=group)
        unavailable: RmqUnavailable | None = None
        for name in self._route(topic).brokers:
            try:
                return sorted(self._read_call(name, _GET_CONSUMER_LIST, request).client_ids)
            except RmqUnavailable as error:
                unavailable = error
        raise unavailable or RmqRefused(rmq_pb2.TOPIC_NOT_EXIST, f"no broker holds topic {topic}")

    def lock_batch(self, group: str, client_id: str, mqs: Iterable[MessageQueue],
                   unreachable: set[str] | None = None) -> set[MessageQueue]:
        """Lock the queues on their brokers; returns those locked for `client_id`. Queues of
        an unreachable broker are simply not locked (RocketMQ lockAll carries on); that
        broker's name is added to `unreachable` when given, so a caller can tell "refused"
        from "not asked"."""
        locked: set[MessageQueue] = set()
        for name, queues in by_broker(mqs).items():
            request = rmq_pb2.LockBatchRequest(consumer_group=group, client_id=client_id,
                                               queues=[mq_proto(mq) for mq in queues])
            try:
                response = self._call(self._broker_address(name), _LOCK_BATCH_MQ, request, name)
            except RmqUnavailable:
                if unreachable is not None:
                    unreachable.add(name)
                continue
            locked.update(MessageQueue(q.topic, q.broker_name, q.queue_id) for q in response.locked_queues)
        return locked

    def unlock_batch(self, group: str, client_id: str, mqs: Iterable[MessageQueue]) -> None:
        grouped = by_broker(mqs)
        self._on_each_broker(
            {name: self._broker_address(name) for name in grouped},
            lambda name, address: self._call(
                address, _UNLOCK_BATCH_MQ,
                rmq_pb2.UnlockBatchRequest(consumer_group=group, client_id=client_id,
                                           queues=[mq_proto(mq) for mq in grouped[name]]),
                name))

    # ------------------------------------------------------------ retry and dead letters

    def send_message_back(self, group: str, broker_name: str, commit_log_offset: int, *, delay_level: int = 0,
                          origin_msg_id: str = "", origin_topic: str = "",
                          max_reconsume_times: int | None = None) -> rmq_pb2.ConsumerSendMsgBackResponse:
        """CONSUMER_SEND_MSG_BACK to the broker that stores the message (spec pull §18)."""
        request = rmq_pb2.ConsumerSendMsgBackRequest(
            consumer_group=group, commit_log_offset=commit_log_offset, delay_level=delay_level,
            origin_msg_id=origin_msg_id, origin_topic=origin_topic, max_reconsume_times=max_reconsume_times)
        return self._call(self._broker_address(broker_name), _CONSUMER_SEND_MSG_BACK, request,
                          broker_name)

    def report_running_info(self, broker_name: str, group: str, client_id: str, request_id: str,
                            info: rmq_pb2.ConsumerRunningInfo) -> None:
        """Answer a broker's running-info question (asked on the membership watch to that member)."""
        request = rmq_pb2.ReportRunningInfoRequest(client_id=client_id, consumer_group=group,
                                                   request_id=request_id, info=info)
        self._call(self._read_address(broker_name), _REPORT_RUNNING_INFO, request, broker_name)

    def watch_consumer_ids(self, broker_name: str, group: str, client_id: str,
                           adopts_offset_resets: bool = False) -> Iterator[rmq_pb2.ConsumerIdsChanged]:
        """The broker's membership push: the group's client ids now and after each change (and,
        with `adopts_offset_resets`, an admin's offset resets). The returned stream is also a
        grpc.Call: `cancel()` ends it (and, on the broker, unregisters the client). Iteration
        raises grpc.RpcError when the stream breaks."""
        request = rmq_pb2.WatchConsumerIdsRequest(consumer_group=group, client_id=client_id,
                                                  adopts_offset_resets=adopts_offset_resets)
        stream: Iterator[rmq_pb2.ConsumerIdsChanged] = self._connection(
            self._read_address(broker_name)).messaging.WatchConsumerIds(request)
        return stream
