"""RmqClient without a broker: records, errors, request splitting, transport failures."""

from __future__ import annotations

import pickle
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from rmq.connector import client_sends as client_module
from rmq.connector.client import (
    MessageQueue,
    OutgoingMessage,
    RmqClient,
    RmqError,
    RmqUnavailable,
    TopicRoute,
)
from rmq.connector.endpoints import parse_endpoints
from rmq.v1 import rmq_pb2


def test_importing_the_client_never_imports_pyspark() -> None:
    code = ("import sys, rmq.connector.client, rmq.connector.spark.message_decoder, "
            "rmq.cli.client_commands; "
            "assert 'pyspark' not in sys.modules, sorted(m for m in sys.modules if 'pyspark' in m)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_message_queues_sort_by_topic_then_broker_then_queue() -> None:
    queues = [MessageQueue("b", "broker-a", 0), MessageQueue("a", "broker-b", 0),
              MessageQueue("a", "broker-a", 10), MessageQueue("a", "broker-a", 2)]

    assert sorted(queues) == [MessageQueue("a", "broker-a", 2), MessageQueue("a", "broker-a", 10),
                              MessageQueue("a", "broker-b", 0), MessageQueue("b", "broker-a", 0)]
    assert len({MessageQueue("a", "x", 1), MessageQueue("a", "x", 1)}) == 1


def test_route_lists_readable_queues_sorted_across_brokers() -> None:
    names = ("broker-c", "broker-b", "broker-a")
    response = rmq_pb2.QueryRouteResponse(
        brokers=[rmq_pb2.BrokerData(broker_name=n, address=f"{n}:1") for n in names],
        queue_datas=[
            rmq_pb2.QueueData(broker_name="broker-b", read_queue_nums=2, write_queue_nums=2, perm=6),
            rmq_pb2.QueueData(broker_name="broker-c", read_queue_nums=4, write_queue_nums=4, perm=2),  # -w
            rmq_pb2.QueueData(broker_name="broker-a", read_queue_nums=3, write_queue_nums=0, perm=4),  # r-
        ],
    )

    route = TopicRoute.from_proto("T", response)

    assert route.message_queues == (
        MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1), MessageQueue("T", "broker-a", 2),
        MessageQueue("T", "broker-b", 0), MessageQueue("T", "broker-b", 1),
    )
    assert list(route.brokers) == ["broker-a", "broker-b", "broker-c"]
    assert route.writable_brokers() == ["broker-b", "broker-c"]


def test_error_names_code_broker_and_queue_and_survives_pickling() -> None:
    mq = MessageQueue("T", "broker-a", 3)
    error = RmqError(rmq_pb2.TOPIC_NOT_EXIST, "no such topic", broker="broker-a at 127.0.0.1:10911", queue=mq)
    unavailable = RmqUnavailable("PullMessage failed: UNAVAILABLE", broker="127.0.0.1:1", queue=mq)

    assert str(error) == ("TOPIC_NOT_EXIST: no such topic "
                          "(broker broker-a at 127.0.0.1:10911, queue T:broker-a:3)")
    assert isinstance(unavailable, RmqError)
    assert unavailable.code == rmq_pb2.SERVICE_NOT_AVAILABLE
    for original in (error, unavailable):
        copy = pickle.loads(pickle.dumps(original))
        assert type(copy) is type(original)
        assert (copy.code, copy.message, copy.broker, copy.queue) == (
            original.code, original.message, original.broker, original.queue)


def test_big_batches_are_split_into_requests_under_the_limit_in_order() -> None:
    messages = [OutgoingMessage(bytes([i % 256]) * 1000, tags="T", properties={"i": str(i)}).to_proto()
                for i in range(100)]

    chunks = list(client_module._chunks(messages, 10_000))

    assert [m for chunk in chunks for m in chunk] == messages
    assert len(chunks) > 10
    assert all(rmq_pb2.SendMessageRequest(topic="T", messages=c).ByteSize() <= 10_000 for c in chunks)


def test_a_message_above_the_limit_travels_alone() -> None:
    small, big = OutgoingMessage(b"x").to_proto(), OutgoingMessage(b"y" * 5000).to_proto()

    assert list(client_module._chunks([small, big, small], 1000)) == [[small], [big], [small]]


def test_outgoing_message_sets_queue_id_only_when_given() -> None:
    assert not OutgoingMessage(b"x").to_proto().HasField("queue_id")
    proto = OutgoingMessage(b"x", tags="a", keys="k1 k2", properties={"p": "v"}, queue_id=0,
                            delay_level=3).to_proto()
    assert (proto.queue_id, proto.tags, proto.keys, dict(proto.properties), proto.delay_level) == (
        0, "a", "k1 k2", {"p": "v"}, 3)


@pytest.mark.parametrize(
    ("text", "named"),
    [("", "empty"), ("localhost", "'localhost'"), ("a:1,b", "'b'"), ("a:0", "'a:0'"), ("a:x", "'a:x'"),
     ("a:1,,b:2", "empty entry"), (":9876", "':9876'"), ("::1:9876", "'::1:9876'")],
)
def test_bad_endpoints_are_refused_naming_the_entry(text: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        RmqClient(text)


def test_endpoints_keep_order_and_drop_duplicates() -> None:
    assert parse_endpoints(" b:2, a:1,b:2,[::1]:9876") == ["b:2", "a:1", "[::1]:9876"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_endpoint_raises_unavailable_naming_the_address() -> None:
    address = f"127.0.0.1:{_closed_port()}"
    with RmqClient(address, timeout=5) as client, pytest.raises(RmqUnavailable) as caught:
        client.query_route("T")

    assert caught.value.broker == address
    assert address in str(caught.value)


def test_all_endpoints_unreachable_names_every_address() -> None:
    addresses = [f"127.0.0.1:{_closed_port()}", f"127.0.0.1:{_closed_port()}"]
    with RmqClient(",".join(addresses), timeout=5) as client, pytest.raises(RmqUnavailable) as caught:
        client.list_brokers()

    assert all(address in str(caught.value) for address in addresses)


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP listener that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for connection in accepted:
        connection.close()
    listener.close()


def test_a_call_that_gets_no_answer_times_out_as_unavailable(silent_server: str) -> None:
    with RmqClient(silent_server, timeout=0.5) as client, pytest.raises(RmqUnavailable, match=silent_server):
        client.list_brokers()


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout"):
        RmqClient("127.0.0.1:1", timeout=0)
