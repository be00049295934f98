"""The official RocketMQ 5 Python client (`rocketmq-python-client`, PyPI) against real `rmq broker`
processes speaking `apache.rocketmq.v2.MessagingService` (docs/manual/rocketmq-clients.md; spec
rocketmq-v2-protocol.md): what it sends is received exactly as sent, by itself and through
rmq.v1 pulls, and pop consumption (receive, ack, change of invisibility, redelivery with a
growing delivery attempt) survives broker restarts."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from integration_tests.rocketmq_clients import (
    FilterType,
    ForbiddenException,
    bounded,
    configuration,
    message,
    receive_until,
    rocketmq,
    started,
    wait_for,
)
from rmq.connector import Message, Producer
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.spark.message_decoder import decode
from rmq.rocketmq_v2 import MessagingServiceStub
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2 as pb
from testing import processes
from tests.acl_files import write_acl

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
TOPIC = "orders"


# One broker for the module (each test has its own topic and groups): retries 1 s apart, the DLQ
# after 3 deliveries, group g-fifo consuming in order, open transactions checked back after 1 s,
# receives may ask for an invisibility of 2 s (not 10 s: an expired invisibility is waited out).
MIN_INVISIBLE_S = 2
BROKER_CONFIG = (
    'message_delay_level: "' + " ".join(["1s"] * 18) + '"\n'
    "retry_max_times: 2\nfifo_consumer_groups: g-fifo\n"
    "transaction_timeout_ms: 1000\ntransaction_check_interval_ms: 1000\n"
    f"min_invisible_ms: {MIN_INVISIBLE_S * 1000}\n"
)
FORGOTTEN_S = 6   # the invisibility of a delivery never acknowledged: it comes back after it


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[processes.ServerProcess]:
    directory = tmp_path_factory.mktemp("v2-broker")
    config = directory / "broker.yaml"
    config.write_text(BROKER_CONFIG)
    server = processes.broker(directory, extra=["--config", str(config)]).start()
    yield server
    server.stop()


@pytest.fixture
def topic(broker: processes.ServerProcess, request: pytest.FixtureRequest) -> str:
    """A topic with 4 queues of the test's own."""
    readable = "".join(c if c.isalnum() else "-" for c in request.node.name.removeprefix("test_"))[:40]
    name = f"{readable}-{zlib.crc32(request.node.name.encode()):08x}"
    with RmqClient(broker.address) as client:
        client.create_topic(name, queues=4)
    return name


def simple_consumer(address: str, topic: str, group: str, expression: str = "*", await_s: int = 2):
    return rocketmq.SimpleConsumer(configuration(address), group,
                                   {topic: rocketmq.FilterExpression(expression)}, await_duration=await_s)


def send_all(address: str, messages: list) -> list:
    with started(rocketmq.Producer(configuration(address), tuple({m.topic for m in messages}))) as producer:
        return [bounded(lambda m=m: producer.send(m), what="send") for m in messages]


def pulled(address: str, topic: str, account: tuple[str, str] | None = None) -> list[dict]:
    """Every message of `topic` through rmq.v1 PullMessage, decoded as the Spark source does."""
    rows = []
    access_key, secret_key = account or (None, None)
    with RmqClient(address, access_key=access_key, secret_key=secret_key) as client:
        for queue_id in range(4):
            result = client.pull(MessageQueue(topic, "broker-a", queue_id), 0, 100, group="v1-reader")
            rows += decode(result.messages, "broker-a").to_pylist()
    return rows


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


@pytest.mark.parametrize("stop", ["sigterm", "kill"])
def test_pop_state_survives_a_broker_restart(broker, topic, stop):
    bodies = [f"m{i}".encode() for i in range(12)]
    send_all(broker.address, [message(topic, body) for body in bodies])
    with started(simple_consumer(broker.address, topic, "g-restart")) as consumer:
        first = receive_until(consumer, 6, ack=False, timeout=10)
        acked, held = first[:4], first[4:]
        for item in acked:
            bounded(lambda item=item: consumer.ack(item))
        for item in held:   # visible again one second after the restart's receive starts
            bounded(lambda item=item: consumer.change_invisible_duration(item, 1))
    if stop == "kill":
        broker.kill()
        broker.start()
    else:
        broker.restart()
    with started(simple_consumer(broker.address, topic, "g-restart")) as consumer:
        rest = receive_until(consumer, len(bodies) - len(acked), timeout=20)
        assert bounded(lambda: consumer.receive(32, 10)) == []
    assert sorted(m.body for m in rest) == sorted(set(bodies) - {m.body for m in acked})
    attempts = {m.body: m.delivery_attempt for m in rest}
    assert all(attempts[m.body] == 2 for m in held)
    with RmqClient(broker.address) as client:   # the pop group's progress is its consumer offset
        assert sum(client.query_consumer_offsets("g-restart", topic).values()) == len(bodies)


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


ADMIN = ("admin01", "admin-secret-0001")
PRODUCER = ("producer1", "producer-secret-01")   # PUB on orders
CONSUMER = ("consumer1", "consumer-secret-01")   # SUB on orders and on group g-acl
ACL = f"""\
accounts:
  - {{accessKey: {ADMIN[0]}, secretKey: "{ADMIN[1]}", admin: true}}
  - {{accessKey: {PRODUCER[0]}, secretKey: "{PRODUCER[1]}", topicPerms: ["{TOPIC}=PUB"]}}
  - {{accessKey: {CONSUMER[0]}, secretKey: "{CONSUMER[1]}", topicPerms: ["{TOPIC}=SUB"],
     groupPerms: ["g-acl=SUB"]}}
"""


@pytest.fixture
def acl_broker(tmp_path: Path) -> Iterator[processes.ServerProcess]:
    server = processes.broker(tmp_path, extra=["--acl", str(write_acl(tmp_path / "acl.yml", ACL))]).start()
    with RmqClient(server.address, access_key=ADMIN[0], secret_key=ADMIN[1]) as client:
        client.create_topic(TOPIC, queues=4)
    yield server
    server.stop()


def acl_consumer(address: str, account: tuple[str, str]):
    return rocketmq.SimpleConsumer(configuration(address, *account), "g-acl",
                                   {TOPIC: rocketmq.FilterExpression("*")}, await_duration=2)


def test_acl_broker_admits_signed_clients_with_the_permission_and_refuses_the_others(acl_broker):
    address = acl_broker.address
    with started(rocketmq.Producer(configuration(address, *PRODUCER), (TOPIC,))) as producer:
        bounded(lambda: producer.send(message(TOPIC, b"signed")))
    with started(acl_consumer(address, CONSUMER)) as consumer:
        assert [m.body for m in receive_until(consumer, 1, timeout=10)] == [b"signed"]
    impostor = configuration(address, PRODUCER[0], "not-the-secret")
    with started(rocketmq.Producer(impostor, (TOPIC,))) as producer:
        with pytest.raises(Exception, match="failed to fetch topic:orders route"):   # refused already
            bounded(lambda: producer.send(message(TOPIC, b"forged")))
    assert "signature not accepted for access key 'producer1'" in acl_broker.log()
    with started(rocketmq.Producer(configuration(address, *CONSUMER), (TOPIC,))) as producer:
        with pytest.raises(ForbiddenException, match="lacks PUB"):
            bounded(lambda: producer.send(message(TOPIC, b"sub-only")))
    with started(acl_consumer(address, PRODUCER)) as consumer:
        with pytest.raises(ForbiddenException, match="lacks SUB"):
            bounded(lambda: consumer.receive(32, 20))
    # nothing refused was stored
    assert [row["body"] for row in pulled(address, TOPIC, ADMIN)] == [b"signed"]


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


@pytest.mark.spark
def test_official_producer_messages_read_by_the_spark_source_with_tags_keys_and_properties(broker, topic,
                                                                                          spark):
    sent = [message(topic, f"spark-{i}".encode(), tag=f"T{i % 2}", keys=(f"key-{i}",),
                    properties={"n": str(i)}) for i in range(6)]
    receipts = send_all(broker.address, sent)
    rows = (spark.read.format("rmq").option("endpoints", broker.address).option("topic", topic).load()
            .select("body", "tags", "keys", "properties").collect())
    read = {bytes(row.body): row for row in rows}
    assert sorted(read) == sorted(m.body for m in sent)
    for i, receipt in enumerate(receipts):
        row = read[f"spark-{i}".encode()]
        assert (row.tags, row.keys) == (f"T{i % 2}", f"key-{i}")
        assert row.properties["n"] == str(i) and row.properties["UNIQ_KEY"] == receipt.message_id


def test_route_names_every_broker_of_the_topic_through_the_name_server(tmp_path: Path):
    namesrv = processes.namesrv(tmp_path).start()
    brokers = [processes.broker(tmp_path, name, namesrv_address=namesrv.address).start()
               for name in ("broker-a", "broker-b")]
    try:
        with RmqClient(namesrv.address) as client:
            assert wait_for(lambda: len(client.list_brokers()) == 2, timeout=30)
            client.create_topic(TOPIC, queues=2)
            assert wait_for(lambda: len(client.query_route(TOPIC).brokers) == 2, timeout=30)
        # the client knows broker-a only: the route it gets there names broker-b too
        sent = [message(TOPIC, f"m{i}".encode()) for i in range(8)]
        send_all(brokers[0].address, sent)
        stored = {"broker-a": 0, "broker-b": 0}
        with RmqClient(namesrv.address) as client:
            for mq, offsets in client.topic_offsets(TOPIC).items():
                stored[mq.broker_name] += offsets.max_offset
        assert stored["broker-a"] > 0 and stored["broker-b"] > 0 and sum(stored.values()) == len(sent)
        with started(simple_consumer(brokers[0].address, TOPIC, "g-route")) as consumer:
            received = receive_until(consumer, len(sent), timeout=30)
        assert sorted(m.body for m in received) == sorted(m.body for m in sent)
    finally:
        for server in [*brokers, namesrv]:
            server.stop()


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
        ack = pb.AckMessageRequest(group=group, topic=resource,
                                   entries=[pb.AckMessageEntry(message_id="01BAD", receipt_handle="garbage")])
        assert stub.AckMessage(ack, timeout=5).status.code == v2.INVALID_RECEIPT_HANDLE
        stale = pb.ChangeInvisibleDurationRequest(group=group, topic=resource,
                                                  invisible_duration=Duration(seconds=5),
                                                  receipt_handle=f"0:0:1:{topic}")
        assert stub.ChangeInvisibleDuration(stale, timeout=5).status.code == v2.INVALID_RECEIPT_HANDLE
        [refused] = stub.Telemetry(iter([pb.TelemetryCommand()]), timeout=5)   # no x-mq-client-id
        assert refused.status.code == v2.CLIENT_ID_REQUIRED
