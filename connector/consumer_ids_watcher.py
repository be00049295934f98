"""The client side of the broker's membership push (RocketMQ NOTIFY_CONSUMER_IDS_CHANGED):
one `WatchConsumerIds` stream per broker, on a daemon thread each.

The broker answers with the group's client ids at once and after every change, and `on_change`
runs for each answer (the ClientInstance wakes its RebalanceService). The open stream is also
this client's connection: when the process dies the broker sees the stream end and
unregisters the client at once, so the group's other members rebalance without waiting for
the heartbeat expiry. A broken stream is reopened after a heartbeat (the broker unregistered
the client when it broke, releasing its queue locks: `on_lost` tells the consumer, and
`on_restored` when the broker answers again); a broker without the RPC, or refusing it, is just
not watched. The same stream brings an admin's offset reset (RESET_CONSUMER_CLIENT_OFFSET), which
`on_reset` hands to the consumer with the broker's queues, and its running-info questions
(GET_CONSUMER_RUNNING_INFO), answered with ReportRunningInfo.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import cast

import grpc

from rmq.connector.client import MessageQueue, RmqClient, RmqError
from rmq.v1 import rmq_pb2

logger = logging.getLogger(__name__)

RETRY_S = 1.0
_NOT_WATCHABLE = (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.PERMISSION_DENIED)


class ConsumerIdsWatcher:
    def __init__(self, client: RmqClient, group: str, client_id: str, on_change: Callable[[], None],
                 heartbeat: Callable[[], None], on_lost: Callable[[str], None] = lambda broker: None,
                 on_restored: Callable[[str], None] = lambda broker: None,
                 on_reset: Callable[[dict[MessageQueue, int]], None] | None = None,
                 running_info: Callable[[], rmq_pb2.ConsumerRunningInfo] | None = None) -> None:
        """`on_lost(broker)` runs when an answering stream ends other than by `stop` (the
        broker has unregistered this client and released its queue locks), `on_restored(broker)`
        when a stream answers again after that, `on_reset(offsets)` when an admin reset the
        group's offsets on a broker (without it the brokers count this client as one that cannot
        be told of a reset); `running_info()` answers a broker's GET_CONSUMER_RUNNING_INFO."""
        self._client = client
        self._group = group
        self._client_id = client_id
        self._on_change = on_change
        self._heartbeat = heartbeat
        self._on_lost = on_lost
        self._on_restored = on_restored
        self._on_reset = on_reset
        self._running_info = running_info
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._watched: set[str] = set()                # brokers with a watch thread
        self._streams: dict[str, grpc.Call] = {}      # their open streams

    def watch(self, broker_names: Iterable[str]) -> None:
        """Start a watch on each broker not watched yet (call again as brokers appear)."""
        for broker_name in broker_names:
            with self._lock:
                if broker_name in self._watched or self._stopped.is_set():
                    continue
                self._watched.add(broker_name)
            threading.Thread(target=self._run, args=(broker_name,), name=f"rmq-watch-{broker_name}",
                             daemon=True).start()

    def stop(self) -> None:
        """Cancel every stream (the brokers then unregister this client)."""
        with self._lock:
            self._stopped.set()
            streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            stream.cancel()

    def _answer_running_info(self, broker_name: str, request_id: str) -> None:
        if self._running_info is None:
            return   # the broker's question times out
        try:
            self._client.report_running_info(broker_name, self._group, self._client_id, request_id,
                                             self._running_info())
        except RmqError as error:
            logger.info("running info for %s not reported: %s", broker_name, error)

    def _run(self, broker_name: str) -> None:
        connected = lost = False
        while not self._stopped.is_set():
            try:
                stream = self._client.watch_consumer_ids(broker_name, self._group, self._client_id,
                                                         adopts_offset_resets=self._on_reset is not None)
                call = cast(grpc.Call, stream)
                with self._lock:
                    if self._stopped.is_set():
                        call.cancel()
                        return
                    self._streams[broker_name] = call
                for event in stream:
                    if event.status.code != rmq_pb2.OK:
                        logger.warning("membership watch on %s refused: %s", broker_name,
                                       event.status.message)
                        break
                    if lost:
                        self._on_restored(broker_name)
                    connected, lost = True, False
                    if event.running_info_request:
                        self._answer_running_info(broker_name, event.running_info_request)
                    elif event.reset_offsets and self._on_reset is not None:
                        self._on_reset({MessageQueue(o.topic, broker_name, o.queue_id): o.offset
                                        for o in event.reset_offsets})
                    else:
                        self._on_change()
            except grpc.RpcError as error:
                code = error.code() if isinstance(error, grpc.Call) else None
                if code == grpc.StatusCode.CANCELLED or self._stopped.is_set():
                    return
                if code in _NOT_WATCHABLE:
                    logger.info("broker %s does not push membership changes (%s)", broker_name, code)
                    return
            except RmqError as error:
                logger.debug("membership watch on %s: %s", broker_name, error)
            if connected and not self._stopped.is_set():
                connected, lost = False, True
                self._on_lost(broker_name)
            if self._stopped.wait(RETRY_S):
                return
            try:
                self._heartbeat()
            except RmqError:
                pass
