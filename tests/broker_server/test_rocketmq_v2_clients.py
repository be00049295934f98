"""The official RocketMQ 5 Python client (`rocketmq-python-client`, PyPI) against a whole broker
in this test process speaking `apache.rocketmq.v2.MessagingService` over gRPC
(docs/manual/rocketmq-clients.md; spec rocketmq-v2-protocol.md): what it sends is received exactly as
sent, by itself and through rmq.v1 pulls; pop consumption (receive, ack, change of
invisibility, redelivery with a growing delivery attempt), push and FIFO consumers' retries
and dead letters, delay messages, transactions, offset-based RPCs and bad requests. Across
broker restarts, with an ACL, through the name server and with Spark:
integration_tests/test_rocketmq_v2_clients.py."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from rmq.connector import Message, Producer
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.rocketmq_v2 import MessagingServiceStub
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2 as pb
from testing import processes
from tests.broker_server.in_process_broker import InProcessBroker, running_broker
from tests.rocketmq_clients import (
    BROKER_SETTINGS,
    FORGOTTEN_S,
    MIN_INVISIBLE_S,
    FilterType,
    bounded,
    configuration,
    message,
    pulled,
    receive_until,
    rocketmq,
    send_all,
    simple_consumer,
    started,
    topic_of_the_test,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    with running_broker(tmp_path_factory.mktemp("v2-broker"), flush="sync", **BROKER_SETTINGS) as server:
        yield server


@pytest.fixture
def topic(broker: InProcessBroker, request: pytest.FixtureRequest) -> str:
    return topic_of_the_test(broker.address, request)


def test_producer_messages_are_received_exactly_as_sent_and_readable_through_rmq_v1(broker, topic):
    sent = [
        message(topic, b"plain"),
        message(topic, b"tagged", tag="TagA", keys=("order-1", "customer-7"),
                properties={"region": "eu", "priority": "high"}),
        *[message(topic, f"bulk-{i}".encode(), tag="TagB") for i in range(10)],
    ]
    receipts = send_all(broker.address, sent)
    assert [r.message_id for r in receipts] == [m.message_id for m in sent]   # the producer's ids

    with started(simple_consumer(broker.address, topic, "g-exact")) as consumer:
        received = receive_until(consumer, len(sent))
    by_body = {m.body: m for m in received}
    assert sorted(by_body) == sorted(m.body for m in sent)   # each once
    tagged = by_body[b"tagged"]
    assert tagged.tag == "TagA"
    assert tagged.keys == {"order-1", "customer-7"}
    assert tagged.properties == {"region": "eu", "priority": "high"}
    assert tagged.message_id == sent[1].message_id
    assert tagged.delivery_attempt == 1
    assert by_body[b"plain"].tag is None and by_body[b"plain"].properties == {}

    rows = {row["body"]: row for row in pulled(broker.address, topic)}
    assert sorted(rows) == sorted(m.body for m in sent)
    row = rows[b"tagged"]
    assert row["tags"] == "TagA"
    assert set(row["keys"].split(" ")) == {"order-1", "customer-7"}
    properties = dict(row["properties"])
    assert properties["region"] == "eu" and properties["UNIQ_KEY"] == sent[1].message_id


def test_rmq_producer_messages_reach_the_official_simple_consumer_filtered_by_tag(broker, topic):
    with Producer(broker.address) as producer:   # rmq's own SDK, over rmq.v1
        producer.send([Message(topic, f"a{i}".encode(), tags="TagA", keys=f"k{i}") for i in range(5)]
                      + [Message(topic, f"b{i}".encode(), tags="TagB") for i in range(5)]
                      + [Message(topic, b"c", tags="TagC", properties={"x": "1"})])
    with started(simple_consumer(broker.address, topic, "g-filter", "TagA || TagC")) as consumer:
        received = receive_until(consumer, 6)
        assert bounded(lambda: consumer.receive(32, 20)) == []   # the TagB ones are not for this group
    assert sorted(m.body for m in received) == [b"a0", b"a1", b"a2", b"a3", b"a4", b"c"]
    assert {m.tag for m in received} == {"TagA", "TagC"}
    assert next(m for m in received if m.body == b"a3").keys == {"k3"}
    assert next(m for m in received if m.body == b"c").properties == {"x": "1"}
    assert all(len(m.message_id) == 32 for m in received)   # rmq's offset message ids
    sql = rocketmq.SimpleConsumer(configuration(broker.address), "g-sql", {topic: rocketmq.FilterExpression(
        "TAGS = 'TagB' OR x = '1'", FilterType.SQL)}, await_duration=2)
    with started(sql):
        by_sql = receive_until(sql, 6)
    assert sorted(m.body for m in by_sql) == [b"b0", b"b1", b"b2", b"b3", b"b4", b"c"]


def test_change_invisible_duration_and_expired_invisibility_redeliver_with_the_next_attempt(broker, topic):
    send_all(broker.address, [message(topic, body) for body in (b"ack-me", b"nack-me", b"forget-me")])
    with started(simple_consumer(broker.address, topic, "g-redeliver")) as consumer:
        first = {m.body: m for m in receive_until(consumer, 3, invisible_s=FORGOTTEN_S, ack=False)}
        assert sorted(first) == [b"ack-me", b"forget-me", b"nack-me"]
        bounded(lambda: consumer.ack(first[b"ack-me"]))
        bounded(lambda: consumer.change_invisible_duration(first[b"nack-me"], 1))
        again = receive_until(consumer, 1, invisible_s=10, timeout=8, ack=False)
        assert [(m.body, m.delivery_attempt) for m in again] == [(b"nack-me", 2)]
        bounded(lambda: consumer.ack(again[0]))
        # forget-me was never acknowledged: back once its invisibility ends
        late = receive_until(consumer, 1, invisible_s=10, timeout=20, ack=True)
        assert [(m.body, m.delivery_attempt) for m in late] == [(b"forget-me", 2)]
        assert bounded(lambda: consumer.receive(32, 10)) == []


ALWAYS = -1


class Listener(rocketmq.MessageListener):
    """Records every delivery; fails each body of `failing` that many times (ALWAYS: every time)."""

    def __init__(self, failing: dict[bytes, int]) -> None:
        self.failing = failing
        self.deliveries: list[tuple[bytes, int, str]] = []
        self.lock = threading.Lock()

    def fails(self, body: bytes, delivery: int) -> bool:
        """Whether the listener fails `body` on its `delivery`-th delivery (from 1)."""
        times = self.failing.get(body, 0)
        return times == ALWAYS or delivery <= times

    def consume(self, message):
        with self.lock:
            self.deliveries.append((message.body, message.delivery_attempt, message.message_group or ""))
            delivery = sum(1 for body, _, _ in self.deliveries if body == message.body)
        return rocketmq.ConsumeResult.FAILURE if self.fails(message.body, delivery) else \
            rocketmq.ConsumeResult.SUCCESS

    def succeeded(self) -> list[bytes]:
        """Bodies consumed successfully, in the order it happened."""
        with self.lock:
            counts: dict[bytes, int] = {}
            done = []
            for body, _, _ in self.deliveries:
                counts[body] = counts.get(body, 0) + 1
                if not self.fails(body, counts[body]):
                    done.append(body)
            return done


def dead_letters(address: str, group: str) -> list[dict]:
    result = subprocess.run([*processes.RMQ, "dlq", "list", group, "--json", "--endpoints", address],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_push_consumer_retries_a_failing_message_with_growing_attempts_then_dead_letters_it(broker, topic):
    address = broker.address
    send_all(address, [message(topic, f"ok-{i}".encode()) for i in range(20)]
             + [message(topic, b"poison", tag="TagP", keys=("bad-1",))])
    listener = Listener(failing={b"poison": ALWAYS})
    consumer = rocketmq.PushConsumer(configuration(address), "g-push", listener,
                                     {topic: rocketmq.FilterExpression("*")})
    with started(consumer):
        assert wait_for(lambda: len(dead_letters(address, "g-push")) == 1, timeout=40)
        time.sleep(1.5)   # an absence window, not an event: a further delivery of the dead message would show
    poison = [attempt for body, attempt, _ in listener.deliveries if body == b"poison"]
    assert poison == [1, 2, 3]
    assert sorted(listener.succeeded()) == sorted(f"ok-{i}".encode() for i in range(20))   # each once
    [letter] = dead_letters(address, "g-push")
    assert letter["body"] == "poison" and letter["tags"] == "TagP" and letter["keys"] == "bad-1"


def test_fifo_push_consumer_keeps_message_group_order_through_retries_and_dead_letters(broker, topic):
    address = broker.address

    def messages(first: int) -> list:
        return [message(topic, f"{group}-{i}".encode(), group=group) for i in range(first, first + 8)
                for group in "abc"]

    send_all(address, messages(0))
    # b-3 fails twice (local retries 1 s apart), c-5 every time: forwarded to the DLQ after 3 attempts
    listener = Listener(failing={b"b-3": 2, b"c-5": ALWAYS})
    consumer = rocketmq.PushConsumer(configuration(address), "g-fifo", listener,
                                     {topic: rocketmq.FilterExpression("*")})
    with started(consumer):
        # more of every group arrives while b-3 is still in flight: not handed out before it is done
        assert wait_for(lambda: any(body == b"b-3" for body, _, _ in listener.deliveries), timeout=20)
        send_all(address, messages(8))
        assert wait_for(lambda: len(listener.succeeded()) == 47, timeout=40)
        assert wait_for(lambda: len(dead_letters(address, "g-fifo")) == 1, timeout=10)
    for group in "abc":
        order = [body for body in listener.succeeded() if body.startswith(group.encode())]
        assert order == [f"{group}-{i}".encode() for i in range(16) if f"{group}-{i}" != "c-5"]
    assert [attempt for body, attempt, _ in listener.deliveries if body == b"b-3"] == [1, 1, 1]
    assert [attempt for body, attempt, _ in listener.deliveries if body == b"c-5"] == [1, 1, 1]
    assert [letter["body"] for letter in dead_letters(address, "g-fifo")] == ["c-5"]


def test_delay_messages_are_delivered_at_their_timestamp_in_seconds_or_milliseconds(broker, topic):
    due_s = int(time.time()) + 3
    sent = [message(topic, b"in-seconds", delivery_timestamp=due_s),
            message(topic, b"in-millis", delivery_timestamp=due_s * 1000),
            message(topic, b"now")]
    send_all(broker.address, sent)
    with started(simple_consumer(broker.address, topic, "g-delay")) as consumer:
        early = receive_until(consumer, 1, timeout=5)
        assert [m.body for m in early] == [b"now"]   # the delayed ones are not visible yet
        late = receive_until(consumer, 2, timeout=10)
        arrived = time.time()
    assert sorted(m.body for m in late) == [b"in-millis", b"in-seconds"]
    assert arrived >= due_s
    assert all(m.delivery_timestamp == due_s * 1000 for m in late)


class Checker(rocketmq.TransactionChecker):
    """Answers from the local transaction state, as a real checker does: a check may also come
    for a transaction whose own commit or rollback is still on its way (open > 1 s here)."""

    OUTCOME = {b"committed": rocketmq.TransactionResolution.COMMIT,
               b"rolled-back": rocketmq.TransactionResolution.ROLLBACK,
               b"unresolved": rocketmq.TransactionResolution.COMMIT}

    def __init__(self) -> None:
        self.checked: list[bytes] = []

    def check(self, message):
        self.checked.append(message.body)
        return self.OUTCOME[message.body]


def test_transactions_commit_rollback_and_an_unresolved_one_resolved_by_the_checker(broker, topic):
    address = broker.address
    checker = Checker()
    with started(rocketmq.Producer(configuration(address), (topic,), checker)) as producer:
        for body, end in ((b"committed", "commit"), (b"rolled-back", "rollback"), (b"unresolved", None)):
            transaction = producer.begin_transaction()
            bounded(lambda t=transaction, b=body: producer.send(message(topic, b), t))
            if end:
                bounded(getattr(transaction, end))
        with started(simple_consumer(address, topic, "g-tx")) as consumer:
            received = receive_until(consumer, 2, timeout=30)
            # nothing twice, no rolled-back one
            assert [m.body for m in bounded(lambda: consumer.receive(32, 10))] == []
    assert sorted(m.body for m in received) == [b"committed", b"unresolved"]
    assert b"unresolved" in checker.checked


def send_to_queue_0(address: str, topic: str, body: bytes) -> None:
    with RmqClient(address) as client:
        client.send(topic, [OutgoingMessage(body, queue_id=0)])


def test_offset_based_rpcs_read_and_commit_on_the_queues_and_offsets_rmq_v1_uses(broker, topic):
    with RmqClient(broker.address) as client:
        client.send(topic, [OutgoingMessage(f"q0-{i}".encode(), tags="TagA" if i % 2 else "TagB", queue_id=0)
                            for i in range(6)])
    queue = v2.MessageQueue(topic=v2.Resource(name=topic), id=0)
    group = v2.Resource(name="g-offsets")
    with grpc.insecure_channel(broker.address) as channel:
        stub = MessagingServiceStub(channel)

        def query(policy, **timestamp):
            return stub.QueryOffset(pb.QueryOffsetRequest(message_queue=queue, query_offset_policy=policy,
                                                          **timestamp), timeout=5)

        def pull(offset, expression="*", wait_s=0):
            responses = list(stub.PullMessage(pb.PullMessageRequest(
                group=group, message_queue=queue, offset=offset, batch_size=3,
                filter_expression=v2.FilterExpression(type=v2.TAG, expression=expression),
                long_polling_timeout=Duration(seconds=wait_s)), timeout=wait_s + 5))
            assert responses[0].HasField("status") and responses[-1].HasField("next_offset")
            return (responses[0].status.code, [r.message.body for r in responses[1:-1]],
                    responses[-1].next_offset)

        assert query(v2.BEGINNING).offset == 0 and query(v2.END).offset == 6
        assert query(v2.TIMESTAMP).status.code == v2.BAD_REQUEST
        assert query(v2.TIMESTAMP, timestamp=Timestamp(seconds=int(time.time()) + 3600)).offset == 6
        assert pull(0) == (v2.OK, [b"q0-0", b"q0-1", b"q0-2"], 3)
        assert pull(0, "TagA") == (v2.OK, [b"q0-1", b"q0-3", b"q0-5"], 6)
        assert pull(6) == (v2.MESSAGE_NOT_FOUND, [], 6)
        assert pull(99)[0] == v2.ILLEGAL_OFFSET
        late = threading.Timer(0.5, send_to_queue_0, (broker.address, topic, b"late"))
        late.start()
        assert pull(6, wait_s=15)[:2] == (v2.OK, [b"late"])   # held until it arrived (long polling)
        late.join()

        get = pb.GetOffsetRequest(group=group, message_queue=queue)
        assert stub.GetOffset(get, timeout=5).status.code == v2.OFFSET_NOT_FOUND
        assert stub.UpdateOffset(pb.UpdateOffsetRequest(group=group, message_queue=queue, offset=3),
                                 timeout=5).status.code == v2.OK
        assert stub.GetOffset(get, timeout=5).offset == 3
    with RmqClient(broker.address) as client:
        assert client.query_consumer_offsets("g-offsets", topic) == {MessageQueue(topic, "broker-a", 0): 3}


def test_a_receive_retried_with_its_attempt_id_gets_the_same_deliveries_again(broker, topic):
    send_all(broker.address, [message(topic, b"once")])
    with grpc.insecure_channel(broker.address) as channel:
        stub = MessagingServiceStub(channel)

        def receive(attempt_id: str) -> list:
            request = pb.ReceiveMessageRequest(
                group=v2.Resource(name="g-attempt"), batch_size=32, auto_renew=True, attempt_id=attempt_id,
                message_queue=v2.MessageQueue(topic=v2.Resource(name=topic), id=-1),
                long_polling_timeout=Duration(seconds=1))
            return [r.message for r in stub.ReceiveMessage(request, timeout=10) if r.HasField("message")]

        [first] = receive("attempt-1")
        [again] = receive("attempt-1")
        assert (again.body, again.system_properties.receipt_handle) == \
            (b"once", first.system_properties.receipt_handle)
        assert receive("attempt-2") == []   # still invisible for any other receive


def test_bad_requests_get_the_specific_v2_status(broker, topic):
    resource = v2.Resource(name=topic)
    group = v2.Resource(name="g-bad")

    def outgoing(body: bytes = b"x", **system) -> v2.Message:
        built = v2.Message(topic=resource, body=body)
        built.system_properties.message_id = "01BAD"
        for name, value in system.items():
            if name == "delivery_s":
                built.system_properties.delivery_timestamp.seconds = value
            else:
                setattr(built.system_properties, name, value)
        return built

    with grpc.insecure_channel(broker.address) as channel:
        stub = MessagingServiceStub(channel)

        def send(message: v2.Message) -> int:
            return stub.SendMessage(pb.SendMessageRequest(messages=[message]), timeout=5).status.code

        assert stub.QueryRoute(pb.QueryRouteRequest(topic=v2.Resource(name="no-such-topic")),
                               timeout=5).status.code == v2.TOPIC_NOT_FOUND
        assert send(outgoing(b"")) == v2.MESSAGE_BODY_EMPTY
        assert send(outgoing(b"x" * (5 << 20))) == v2.MESSAGE_BODY_TOO_LARGE
        reserved = outgoing()
        reserved.user_properties["UNIQ_KEY"] = "forged"
        assert send(reserved) == v2.ILLEGAL_MESSAGE_PROPERTY_KEY
        assert send(outgoing(message_type=v2.FIFO)) == v2.ILLEGAL_MESSAGE_GROUP
        a_year_ahead = int(time.time()) + 365 * 86400
        assert send(outgoing(message_type=v2.DELAY, delivery_s=a_year_ahead)) == v2.ILLEGAL_DELIVERY_TIME
        assert send(outgoing(message_type=v2.PRIORITY)) == v2.UNSUPPORTED
        assert stub.EndTransaction(pb.EndTransactionRequest(topic=resource, message_id="01BAD",
                                                            transaction_id="nope", resolution=v2.COMMIT),
                                   timeout=5).status.code == v2.INVALID_TRANSACTION_ID
        receive = pb.ReceiveMessageRequest(group=group, message_queue=v2.MessageQueue(topic=resource, id=-1),
                                           batch_size=1,
                                           invisible_duration=Duration(seconds=MIN_INVISIBLE_S - 1))
        [answer] = stub.ReceiveMessage(receive, timeout=5)
        assert answer.status.code == v2.ILLEGAL_INVISIBLE_TIME
        bad_sql = v2.FilterExpression(type=v2.SQL, expression="a =")   # does not parse
        receive = pb.ReceiveMessageRequest(group=group, message_queue=v2.MessageQueue(topic=resource, id=-1),
                                           batch_size=1, filter_expression=bad_sql)
        [answer] = stub.ReceiveMessage(receive, timeout=5)
        assert answer.status.code == v2.ILLEGAL_FILTER_EXPRESSION
        pull = pb.PullMessageRequest(group=group, message_queue=v2.MessageQueue(topic=resource, id=0),
                                     batch_size=1, filter_expression=bad_sql)
        assert next(iter(stub.PullMessage(pull, timeout=5))).status.code == v2.ILLEGAL_FILTER_EXPRESSION
        ack = pb.AckMessageRequest(group=group, topic=resource,
                                   entries=[pb.AckMessageEntry(message_id="01BAD", receipt_handle="garbage")])
        assert stub.AckMessage(ack, timeout=5).status.code == v2.INVALID_RECEIPT_HANDLE
        stale = pb.ChangeInvisibleDurationRequest(group=group, topic=resource,
                                                  invisible_duration=Duration(seconds=5),
                                                  receipt_handle=f"0:0:1:{topic}")
        assert stub.ChangeInvisibleDuration(stale, timeout=5).status.code == v2.INVALID_RECEIPT_HANDLE
        [refused] = stub.Telemetry(iter([pb.TelemetryCommand()]), timeout=5)   # no x-mq-client-id
        assert refused.status.code == v2.CLIENT_ID_REQUIRED


def test_the_official_client_recalls_a_delay_message_by_its_handle_and_far_delays_are_refused(broker, topic):
    due_s = int(time.time()) + 3
    with started(rocketmq.Producer(configuration(broker.address), (topic,))) as producer:
        kept = bounded(lambda: producer.send(message(topic, b"kept", delivery_timestamp=due_s)), what="send")
        recalled = bounded(lambda: producer.send(message(topic, b"recalled", delivery_timestamp=due_s)),
                           what="send")
        assert kept.recall_handle and recalled.recall_handle
        with pytest.raises(Exception, match="recall handle is not valid"):
            producer.recall_message(topic, recalled.recall_handle[:-4] + "AAAA")
        producer.recall_message(topic, recalled.recall_handle)
        ten_years = int(time.time()) + 10 * 365 * 86_400
        with pytest.raises(Exception, match="timer_max_delay_s"):
            producer.send(message(topic, b"too far", delivery_timestamp=ten_years))
    with started(simple_consumer(broker.address, topic, "g-recall")) as consumer:
        late = receive_until(consumer, 1, timeout=10)
        assert [m.body for m in late] == [b"kept"]
        assert receive_until(consumer, 1, timeout=2) == []   # the recalled one never comes
