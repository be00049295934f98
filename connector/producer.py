"""Producer: RocketMQ's DefaultMQProducer for Python services (docs/manual/sdk.md; spec
consumer-pull-rebalance §17.1, TV-21).

    with Producer("127.0.0.1:9876") as producer:
        result = producer.send(Message("Orders", b"order 1", tags="TagA", keys="o-1"))
        results = producer.send([Message("Orders", b"a"), Message("Orders", b"b")])   # one batch
        ordered = producer.send(Message("Orders", b"x"), selector=select_message_queue_by_hash,
                                arg="customer-42")

Every message is checked (topic, body, size) and every topic's route looked up before
anything is sent, so bad input fails whole. A send that fails on a broker is retried on
another broker of the topic up to `retry_times_when_send_failed` more times
(retryTimesWhenSendFailed, 2). A list is sent as one batch per topic, one broker each. A
`selector(queues, message, arg)` picks the queue itself (per-key order); such sends are not
moved to another broker.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import repeat
from typing import Any, overload

from rmq.connector.client import (
    PERM_WRITE,
    MessageQueue,
    OutgoingMessage,
    RmqClient,
    RmqError,
    RmqUnavailable,
    TopicRoute,
    send_which_queue_start,
)
from rmq.connector.client import SendResult as ClientSendResult
from rmq.connector.client_instance import ClientInstance, client_id_of
from rmq.connector.errors import ConfigError, RmqRefused, StateError
from rmq.connector.latency_fault_tolerance import LatencyFaultTolerance
from rmq.connector.message import DEFAULT_MAX_MESSAGE_SIZE, Message
from rmq.connector.message_batch import MessageBatch
from rmq.connector.remoting_client import MAX_IN_FLIGHT
from rmq.message_format import tags_hash_code
from rmq.statuses import SendStatus as SendStatus  # part of the producer's API
from rmq.v1 import rmq_pb2

logger = logging.getLogger(__name__)

RETRY_TIMES_WHEN_SEND_FAILED = 2
ASYNC_SENDS_IN_FLIGHT = MAX_IN_FLIGHT   # send_async's bound: one remoting connection's calls
# Broker answers after which another broker may take the message (MQProducer's retryResponseCodes).
_RETRIED_CODES = frozenset({rmq_pb2.SERVICE_NOT_AVAILABLE, rmq_pb2.SYSTEM_ERROR, rmq_pb2.NO_PERMISSION,
                            rmq_pb2.TOPIC_NOT_EXIST})


def retriable(error: RmqError) -> bool:
    """Whether a failed send may be tried again (on another broker, or later): the broker could not
    be reached or answered a code RocketMQ retries (retryResponseCodes)."""
    return isinstance(error, RmqUnavailable) or error.code in _RETRIED_CODES


def send_may_be_retried(error: RmqError, attempt: int,
                        retry_times: int = RETRY_TIMES_WHEN_SEND_FAILED) -> bool:
    """MQProducer's one retry rule (the Producer's sync and async sends, the Spark sink's
    batches): after attempt `attempt` (0: the first) failed with `error`, another is made while
    attempts remain (retryTimesWhenSendFailed) and the failure is `retriable`. The caller sends
    again only what the broker did not acknowledge (`error.acknowledged`)."""
    return attempt < retry_times and retriable(error)


@dataclass(frozen=True, slots=True)
class SendResult:
    """A stored message: its id, queue and queue offset (-1 for a delayed message, whose
    offset is assigned when it is delivered). `status` is SEND_OK, or FLUSH_SLAVE_TIMEOUT /
    SLAVE_NOT_AVAILABLE when a SYNC_MASTER stored it without a slave confirming it (RocketMQ
    SendStatus: stored on the master only, not retried)."""

    msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    status: SendStatus = SendStatus.SEND_OK
    recall_handle: str = ""   # a timer message's: Producer.recall(handle) cancels it before its time


def send_results(topic: str, sent: ClientSendResult) -> list[SendResult]:
    """One SendResult per stored message of one broker's answer (one MessageQueue per queue)."""
    queues = {queue_id: MessageQueue(topic, sent.broker_name, queue_id) for queue_id in set(sent.queue_ids)}
    if not len(sent.msg_ids) == len(sent.queue_ids) == len(sent.queue_offsets):
        raise RmqRefused(rmq_pb2.SYSTEM_ERROR, f"the broker answered {len(sent.msg_ids)} message ids, "
                         f"{len(sent.queue_ids)} queues and {len(sent.queue_offsets)} offsets",
                         broker=sent.broker_name)
    handles = sent.recall_handles or [""] * len(sent.msg_ids)
    return list(map(SendResult, sent.msg_ids, map(queues.__getitem__, sent.queue_ids), sent.queue_offsets,
                    repeat(sent.status), handles))


MessageQueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]


def select_message_queue_by_hash(queues: Sequence[MessageQueue], message: Message, arg: Any) -> MessageQueue:
    """SelectMessageQueueByHash: queue `abs(hash(arg)) % len(queues)`, Java's hash (an int is
    its own hash, a string its String.hashCode), so the same key always lands on the same
    queue (TV-21: message i with arg i % 10 over 10 queues goes to queue i % 10). A None arg
    hashes the message's keys."""
    key = message.keys_text if arg is None else arg
    value = key if isinstance(key, int) else tags_hash_code(str(key))
    return queues[abs(value) % len(queues)]


def writable_queues(route: TopicRoute) -> list[MessageQueue]:
    """topicRouteData2TopicPublishInfo: every writable queue of every broker, in order."""
    return [MessageQueue(route.topic, q.broker_name, queue_id)
            for q in route.queue_datas if q.perm & PERM_WRITE for queue_id in range(q.write_queue_nums)]


class SendFuture(Future[SendResult]):
    """What `Producer.send_async` answers: a concurrent.futures.Future of the SendResult that
    asyncio code can also await (`await producer.send_async(message)`)."""

    def __await__(self) -> Generator[Any, None, SendResult]:
        return asyncio.wrap_future(self).__await__()


class Producer:
    def __init__(self, endpoints: str | Sequence[str], group: str | None = None, *,
                 retry_times_when_send_failed: int = RETRY_TIMES_WHEN_SEND_FAILED,
                 max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE, client: RmqClient | None = None,
                 instance_name: str | None = None) -> None:
        if retry_times_when_send_failed < 0:
            raise ConfigError(
                f"retry_times_when_send_failed must not be negative, not {retry_times_when_send_failed}")
        if max_message_size <= 0:
            raise ConfigError(f"max_message_size must be positive, not {max_message_size}")
        self.group = group
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.max_message_size = max_message_size
        self._endpoints = endpoints
        self._client = client
        self._instance: ClientInstance | None = None
        self.client_id = client_id_of(instance_name)
        self._lock = threading.Lock()
        self._next_broker: dict[str, int] = {}
        self._retries: ThreadPoolExecutor | None = None
        self._async_slots = threading.BoundedSemaphore(ASYNC_SENDS_IN_FLIGHT)
        self.fault_tolerance = LatencyFaultTolerance()

    def start(self) -> None:
        """Without a `client`: take the client of the process's ClientInstance for this client id
        and endpoints (MQClientInstance), so producers and consumers of one client id share its
        routes and connections."""
        if self._client is None:
            self._instance = ClientInstance.acquire(self.client_id, endpoints=self._endpoints)
            self._client = self._instance.client

    def shutdown(self) -> None:
        with self._lock:
            retries, self._retries = self._retries, None
        if retries is not None:
            retries.shutdown(wait=True)
        if self._instance is not None:
            self._instance.release()   # the last user closes the client
            self._instance, self._client = None, None

    def __enter__(self) -> Producer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def client(self) -> RmqClient:
        if self._client is None:
            raise StateError("the producer is not started (call start() or use it as a context manager)")
        return self._client

    @overload
    def send(self, message: Message, selector: MessageQueueSelector | None = None, arg: Any = None
             ) -> SendResult: ...

    @overload
    def send(self, message: Sequence[Message], selector: None = None, arg: Any = None
             ) -> list[SendResult]: ...

    def send(self, message: Message | Sequence[Message], selector: MessageQueueSelector | None = None,
             arg: Any = None) -> SendResult | list[SendResult]:
        """Send one message (or a list as batches) synchronously; raises ConfigError (a
        ValueError) for bad input, RmqRefused when the brokers refuse and RmqUnavailable when
        they cannot be reached after the retries."""
        if isinstance(message, Message):
            message.check(self.max_message_size)
            if selector is not None:
                return self._send_selected(message, selector, arg)
            return self._send_batch(message.topic, [message])[0]
        if selector is not None:
            raise ConfigError("a selector applies to one message, not to a list")
        messages = list(message)
        if not messages:
            raise ConfigError("no messages to send")
        batch = MessageBatch.generate_from_list(self.client, messages, self.max_message_size)
        if batch is not None:   # the usual list: encoded once, sent (and retried) as it is
            return self._send_with_retries(
                batch.topic, lambda broker: self.client.send_requests(batch.topic, batch.requests, broker))
        by_topic: dict[str, list[int]] = {}
        for index, item in enumerate(messages):
            if not isinstance(item, Message):
                raise ConfigError(f"message {index} is a {type(item).__name__}, not a Message")
            item.check(self.max_message_size)
            by_topic.setdefault(item.topic, []).append(index)
        for topic in by_topic:
            self.client.route(topic)   # an unknown topic fails before anything is sent
        if len(by_topic) == 1:   # the usual list: one topic, results in the messages' order
            return self._send_batch(messages[0].topic, messages)
        results: list[SendResult | None] = [None] * len(messages)
        for topic, indexes in by_topic.items():
            sent = self._send_batch(topic, [messages[i] for i in indexes])
            for index, result in zip(indexes, sent, strict=True):
                results[index] = result
        return [r for r in results if r is not None]

    def recall(self, recall_handle: str) -> None:
        """Cancel a timer message before its time by the `recall_handle` its SendResult carries
        (RocketMQ 5 Producer.recallMessage): the producer's account or an admin may; raises
        RmqError when the broker refuses (altered handle, another account's, delivered already)."""
        self.client.recall_message(recall_handle)

    def _send_batch(self, topic: str, messages: list[Message]) -> list[SendResult]:
        """One batch to one broker, moved to the next broker when that one fails."""
        outgoing = [m.to_outgoing() for m in messages]
        return self._send_with_retries(topic, lambda broker: self.client.send(topic, outgoing, broker))

    def _send_with_retries(self, topic: str, send: Callable[[str], ClientSendResult]) -> list[SendResult]:
        """send(broker) to one broker, then to the next when that one fails (retryTimesWhenSendFailed)."""
        last_error: RmqError | None = None
        failed_broker: str | None = None
        for attempt in range(1 + self.retry_times_when_send_failed):
            broker = self._choose_broker(topic, avoid=failed_broker)
            try:
                sent = send(broker)
            except RmqError as error:
                if not self._may_retry(broker, attempt, error):
                    raise
                last_error, failed_broker = error, broker
                continue
            return send_results(topic, sent)
        assert last_error is not None
        raise last_error

    def _may_retry(self, broker: str, attempt: int, error: RmqError) -> bool:
        """`send_may_be_retried`, for sync and async sends alike, when nothing of the send was
        stored (a batch's results are all or none); a broker that did not answer is isolated
        for a while (latency fault tolerance)."""
        if error.acknowledged or not send_may_be_retried(error, attempt, self.retry_times_when_send_failed):
            return False
        logger.warning("send to %s failed (attempt %d): %s", broker, attempt + 1, error)
        if isinstance(error, RmqUnavailable):
            self.fault_tolerance.isolate(broker)
        return True

    def send_async(self, message: Message) -> SendFuture:
        """Send one message without blocking (RocketMQ's sendAsync): the future's result is its
        SendResult, or the RmqError the sync `send` would raise, after the same retries on
        other brokers. `await producer.send_async(m)` in asyncio code; `.result()` elsewhere.
        Up to ASYNC_SENDS_IN_FLIGHT sends are in flight at once (what one remoting connection
        carries); past that the call waits for one to be answered. Bad input raises ConfigError
        here, before anything is sent."""
        message.check(self.max_message_size)
        self._async_slots.acquire()   # back pressure (RocketMQ's semaphoreAsyncSendNum)
        future = SendFuture()
        future.add_done_callback(self._release_async_slot)
        self._send_async_attempt(future, message.topic, message.to_outgoing(), 0, None)
        return future

    def _release_async_slot(self, _: object) -> None:
        self._async_slots.release()

    def _send_async_attempt(self, future: SendFuture, topic: str, outgoing: OutgoingMessage, attempt: int,
                            avoid: str | None) -> None:
        broker = ""

        def answered(sent: ClientSendResult | None, error: RmqError | None) -> None:
            if error is None:
                assert sent is not None
                future.set_result(SendResult(sent.msg_ids[0], MessageQueue(topic, broker, sent.queue_ids[0]),
                                             sent.queue_offsets[0], sent.status))
            elif self._may_retry(broker, attempt, error):   # off the reader thread: the route may be asked
                self._retry_executor().submit(self._send_async_attempt, future, topic, outgoing, attempt + 1,
                                              broker)
            else:
                future.set_exception(error)

        try:
            broker = self._choose_broker(topic, avoid=avoid)
            self.client.send_async(topic, outgoing, broker, answered)
        except RmqError as error:
            answered(None, error)
        except BaseException as error:   # a bug must reach the caller, not vanish in a thread
            future.set_exception(error)

    def _retry_executor(self) -> ThreadPoolExecutor:
        """DefaultMQProducerImpl's async sender executor, for retries only (made on first need)."""
        with self._lock:
            if self._retries is None:
                self._retries = ThreadPoolExecutor(1, thread_name_prefix="rmq-send-retry")
            return self._retries

    def _choose_broker(self, topic: str, avoid: str | None) -> str:
        """Round-robin over the topic's writable brokers, skipping the one that just failed and
        those isolated after failing to answer (latency fault tolerance)."""
        brokers = self.client.route(topic).writable_brokers()
        if not brokers:
            raise RmqRefused(rmq_pb2.NO_PERMISSION, f"topic {topic} has no writable queue")
        candidates = self.fault_tolerance.choose_from([b for b in brokers if b != avoid] or brokers)
        with self._lock:
            position = self._next_broker.get(topic, send_which_queue_start())
            self._next_broker[topic] = position + 1
        return candidates[position % len(candidates)]

    def _send_selected(self, message: Message, selector: MessageQueueSelector, arg: Any) -> SendResult:
        queues = writable_queues(self.client.route(message.topic))
        if not queues:
            raise RmqRefused(rmq_pb2.NO_PERMISSION, f"topic {message.topic} has no writable queue")
        mq = selector(queues, message, arg)
        if mq not in queues:
            raise ConfigError(f"the selector chose {mq}, which is not a writable queue of {message.topic}")
        sent = self.client.send(message.topic, [message.to_outgoing(queue_id=mq.queue_id)],
                                broker_name=mq.broker_name)
        return SendResult(sent.msg_ids[0], mq, sent.queue_offsets[0], sent.status)
