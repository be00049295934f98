"""The Arrow Flight data plane (docs/data-plane.md) of an in-process broker: a signed ticket reads
one queue range as source-schema batches with PullMessage's statuses; bad tickets get
PullMessage's refusals; the ACL applies as on the gRPC port; a reader that stops holds one batch."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.flight as flight
import pytest

from rmq import request_signing
from rmq.broker_server.config import BrokerConfig
from rmq.broker_server.errors import BrokerError, UserError
from rmq.broker_server.name_server.namesrv_controller import RouteInfoManager
from rmq.broker_server.rmq_v1.flight_service import FlightStreamSlots
from rmq.broker_server.security.acl_file import AclFile
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.broker_server.security.tls import ServerTls
from rmq.cli import main as cli
from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.connector.errors import RmqError, RmqUnavailable
from rmq.connector.flight_reader import FlightReader
from rmq.connector.pull_consumer import PullConsumer
from rmq.connector.pull_result import PullResult
from rmq.connector.remoting_client import RemotingCall
from rmq.connector.spark.message_decoder import SCHEMA, decode
from rmq.connector.transport import Transport
from rmq.message_queue import MessageQueue
from rmq.statuses import GetMessageStatus, PullStatus
from rmq.subscription import ExpressionType, MessageSelector
from rmq.v1 import rmq_pb2
from tests.acl_files import write_acl
from tests.broker_server.in_process_broker import InProcessBroker
from tests.tls_certs import make_tls_files
from tests.waiting import WAIT_S, wait_until

TOPIC = "flights"
COUNT = 300
MQ = MessageQueue(TOPIC, "broker-a", 0)
ACL = {"accounts": [
    {"accessKey": "admin1", "secretKey": "admin-secret", "admin": True},
    {"accessKey": "etl001", "secretKey": "etl-secret", "topicPerms": [f"{TOPIC}=SUB"],
     "groupPerms": ["etl=SUB"]},
    {"accessKey": "other1", "secretKey": "other-secret", "topicPerms": ["elsewhere=SUB"],
     "groupPerms": ["etl=SUB"]},
]}


def fill(client: RmqClient) -> None:
    client.create_topic(TOPIC, queues=2)
    client.send(TOPIC, [OutgoingMessage(b"m-%04d" % n, tags="TagA" if n % 3 == 0 else "TagB", queue_id=0)
                        for n in range(COUNT)])


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[InProcessBroker]:
    broker = InProcessBroker(tmp_path_factory.mktemp("store")).start()
    with RmqClient(broker.address) as client:
        fill(client)
    yield broker
    broker.stop()


def read(client: RmqClient, start: int, end: int, batch_rows: int = 64, mq: MessageQueue = MQ, **options):
    with FlightReader(client) as reader:
        return list(reader.read(mq, start, end, group="etl", batch_rows=batch_rows, **options))


def test_a_range_reads_as_the_pulls_would(broker: InProcessBroker) -> None:
    with RmqClient(broker.address) as client:
        chunks = read(client, 10, 250)
        assert all(chunk.batch.schema == SCHEMA for chunk in chunks)
        assert [len(chunk.batch) for chunk in chunks] == [64, 64, 64, 48]
        pulled = client.pull(MQ, 10, 64, group="etl")
        assert chunks[0].batch == decode(pulled.messages, "broker-a")
        assert chunks[0].result.next_begin_offset == pulled.next_begin_offset == 74
        assert (chunks[-1].result.pull_status, chunks[-1].result.next_begin_offset) == (PullStatus.FOUND, 250)
        rows = [o for chunk in chunks for o in chunk.batch.column("queue_offset").to_pylist()]
        assert rows == list(range(10, 250))


def test_a_packed_ticket_answers_each_read_as_the_pull_would(broker: InProcessBroker) -> None:
    """`packed`: batches without rows, each read's metadata PullMessage's whole answer, records
    included (the PullConsumer decodes them as pulls)."""
    with RmqClient(broker.address) as client:
        chunks = read(client, 10, 250, packed=True)
        assert [(len(c.batch), c.result.messages.count) for c in chunks] == [(0, 64)] * 3 + [(0, 48)]
        offset = 10
        for chunk in chunks:
            pulled = client.pull(MQ, offset, min(64, 250 - offset), group="etl")
            assert chunk.result == pulled
            offset = pulled.next_begin_offset


def test_filters_advance_like_pulls(broker: InProcessBroker) -> None:
    with RmqClient(broker.address) as client:
        tags = [o for chunk in read(client, 0, 30, sub_expression="TagA")
                for o in chunk.batch.column("queue_offset").to_pylist()]
        assert tags == list(range(0, 30, 3))
        none = read(client, 0, 30, sub_expression=MessageSelector("TAGS = 'TagC'", ExpressionType.SQL92))
        assert [(len(c.batch), c.result.pull_status, c.result.next_begin_offset) for c in none] == [
            (0, PullStatus.NO_MATCHED_MSG, 30)]


def test_past_the_end_is_offset_illegal_like_a_pull(broker: InProcessBroker) -> None:
    with RmqClient(broker.address) as client:
        [chunk] = read(client, COUNT + 5, COUNT + 10)
        pulled = client.pull(MQ, COUNT + 5, 64, group="etl")
        assert (chunk.result.pull_status, chunk.result.store_status, chunk.result.next_begin_offset) == (
            pulled.pull_status, pulled.store_status, pulled.next_begin_offset)
        assert chunk.result.pull_status is PullStatus.OFFSET_ILLEGAL
        assert chunk.result.store_status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and len(chunk.batch) == 0


@pytest.mark.parametrize(("mq", "code", "message"), [
    (MessageQueue("nope", "broker-a", 0), rmq_pb2.TOPIC_NOT_EXIST, "nope"),
    (MessageQueue(TOPIC, "broker-a", 7), rmq_pb2.ILLEGAL_ARGUMENT, "queue_id 7 is out of range"),
])
def test_bad_tickets_get_pullmessages_refusals(broker: InProcessBroker, mq, code, message) -> None:
    with RmqClient(broker.address) as client:
        with pytest.raises(RmqError) as pull_refusal:
            client.pull(mq, 0, 10, group="etl")
        with pytest.raises(RmqError, match=message) as refusal:
            read(client, 0, 10, mq=mq)
        assert refusal.value.code == pull_refusal.value.code == code


def test_a_ticket_naming_columns_streams_only_those_in_its_order(broker: InProcessBroker) -> None:
    """Spark's column projection (docs/data-plane.md "Columns"): the broker builds only the named
    columns, each as the full read would have it."""
    with RmqClient(broker.address) as client:
        full = read(client, 10, 250)
        narrow = read(client, 10, 250, columns=["body", "queue_offset", "tags"])
        assert [chunk.batch.schema.names for chunk in narrow] == [["body", "queue_offset", "tags"]] * 4
        for whole, part in zip(full, narrow, strict=True):
            assert part.batch == whole.batch.select(["body", "queue_offset", "tags"])
            assert part.result == whole.result
        [empty] = read(client, COUNT + 5, COUNT + 10, columns=["queue_id"])
        assert empty.batch.schema.names == ["queue_id"] and len(empty.batch) == 0


@pytest.mark.parametrize(("columns", "message"), [
    (["body", "nope"], "columns: unknown column 'nope': the columns are topic, broker_name"),
    (["body", "body"], "columns: column 'body' named twice"),
])
def test_a_ticket_naming_bad_columns_is_refused(broker: InProcessBroker, columns, message) -> None:
    with RmqClient(broker.address) as client:
        with pytest.raises(RmqError, match=message) as refusal:
            read(client, 0, 10, columns=columns)
        assert refusal.value.code == rmq_pb2.ILLEGAL_ARGUMENT


def client_flight_address(broker: InProcessBroker) -> str:
    return broker.controller.replication.member.flight_address


def test_routes_and_describe_advertise_the_data_plane(broker: InProcessBroker, capsys) -> None:
    address = client_flight_address(broker)
    assert address.startswith("127.0.0.1:") and address != broker.address
    with RmqClient(broker.address) as client:
        assert client.read_member(MQ).flight_address == address
    assert cli.main(["topic", "describe", TOPIC, "--json", "--endpoints", broker.address]) == 0
    [member] = json.loads(capsys.readouterr().out)["brokers"][0]["members"]
    assert member["flight_address"] == address


def test_a_garbled_ticket_is_refused(broker: InProcessBroker) -> None:
    client = flight.FlightClient(f"grpc://{client_flight_address(broker)}")
    with pytest.raises(flight.FlightServerError, match="ILLEGAL_ARGUMENT: the Flight ticket is not"):
        client.do_get(flight.Ticket(b"\xff\xff garbage")).read_all()
    client.close()


@pytest.mark.parametrize("listen", ["nope", "127.0.0.1:0", "127.0.0.1:70000"])
def test_a_bad_flight_listen_is_refused_naming_the_setting(listen: str) -> None:
    with pytest.raises(UserError, match=f"flight_listen must be HOST:PORT .*not '{listen}'"):
        BrokerConfig(flight_listen=listen).validate()


def test_flight_off(tmp_path: Path) -> None:
    broker = InProcessBroker(tmp_path, flight_listen="off").start()
    try:
        with RmqClient(broker.address) as client:
            fill(client)
            assert client.read_member(MQ).flight_address == "" and broker.controller.flight is None
    finally:
        broker.stop()


# ---------------------------------------------------------------- bounds


def test_a_reader_that_stops_holds_one_batch_and_streams_are_bounded(tmp_path: Path) -> None:
    """24 MB in one ticket of 16 reads of 1.5 MB: more than the transport buffers (about 8 MB on
    loopback), so a reader that stops leaves the stream open, the broker holding one batch."""
    broker = InProcessBroker(tmp_path, max_flight_streams_per_account=1).start()
    try:
        with RmqClient(broker.address) as client:
            client.create_topic(TOPIC, queues=1)
            for _ in range(16):
                client.send(TOPIC, [OutgoingMessage(b"x" * 30_000) for _ in range(50)])
            record = len(client.pull(MQ, 0, 1, group="etl").messages.records)
            budget, slots = broker.controller.pull_processor.budget, broker.controller.flight.slots
            with FlightReader(client) as reader:
                stalled = reader.read(MQ, 0, 800, group="etl", batch_rows=50, batch_bytes=50 * record)
                with contextlib.closing(stalled):
                    next(stalled)     # then stop reading
                    wait_until(lambda: budget.held == 50 * record and slots.open == 1,
                               lambda: f"the stalled stream holds one batch (held {budget.held})")
                    with pytest.raises(RmqError, match="max_flight_streams_per_account") as refusal:
                        read(client, 0, 10)
                    assert refusal.value.code == rmq_pb2.LIMIT_EXCEEDED
                    assert budget.held <= 50 * record and slots.open == 1   # one batch (or its grant)
            wait_until(lambda: budget.held == 0 and slots.open == 0,
                       lambda: f"the closed stream gives everything back (held {budget.held})")
    finally:
        broker.stop()


# ---------------------------------------------------------------- ACL


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory) -> Iterator[InProcessBroker]:
    directory = tmp_path_factory.mktemp("acl")
    acl = write_acl(directory / "acl.json", json.dumps(ACL))
    broker = InProcessBroker(directory / "store", ServerSecurity(AclFile(acl))).start()
    with RmqClient(broker.address, access_key="admin1", secret_key="admin-secret") as client:
        fill(client)
    yield broker
    broker.stop()


def signed_client(broker: InProcessBroker, access_key: str, secret_key: str) -> RmqClient:
    return RmqClient(broker.address, access_key=access_key, secret_key=secret_key)


def test_a_permitted_account_reads(acl_broker: InProcessBroker) -> None:
    with signed_client(acl_broker, "etl001", "etl-secret") as client:
        assert sum(len(chunk.batch) for chunk in read(client, 0, 100)) == 100


def test_an_account_without_the_topic_is_denied(acl_broker: InProcessBroker) -> None:
    with signed_client(acl_broker, "other1", "other-secret") as client:
        with pytest.raises(RmqError, match=f"PERMISSION_DENIED|UNAUTHORIZED.*{TOPIC}") as refusal:
            read(client, 0, 10)
        assert refusal.value.code == rmq_pb2.NO_PERMISSION


def pull_consumer_reads_all_through_flight(client: RmqClient, address: str) -> None:
    """A PullConsumer on `client` (its signing, its TLS) reads MQ's backlog through Flight."""
    consumer = PullConsumer("etl", address, client=client, transport="flight", auto_commit=False)
    consumer.assign([MQ])
    with consumer:
        consumer.seek(MQ, 0)
        got: list[bytes] = []
        wait_until(lambda: got.extend(m.body for m in consumer.poll(0.1)) or len(got) == COUNT,
                   lambda: f"the backlog read through Flight ({len(got)} of {COUNT})")
        assert got == [b"m-%04d" % n for n in range(COUNT)]
        assert consumer.transport_reads.get(Transport.FLIGHT, 0) > 0


def test_a_signed_pull_consumer_reads_its_backlog_through_flight(acl_broker: InProcessBroker) -> None:
    with signed_client(acl_broker, "etl001", "etl-secret") as client:
        pull_consumer_reads_all_through_flight(client, acl_broker.address)


def raw_do_get(broker: InProcessBroker, ticket: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    client = flight.FlightClient(f"grpc://{client_flight_address(broker)}")
    try:
        client.do_get(flight.Ticket(ticket), flight.FlightCallOptions(headers=headers)).read_all()
    finally:
        client.close()


def a_ticket(start: int = 0) -> rmq_pb2.FlightReadTicket:
    pull = rmq_pb2.PullMessageRequest(consumer_group="etl", topic=TOPIC, queue_id=0, queue_offset=start,
                                      max_messages=10, sub_expression="*")
    return rmq_pb2.FlightReadTicket(pull=pull, end_offset=start + 10)


def signing_headers(ticket: rmq_pb2.FlightReadTicket, nonce: str | None = None) -> list[tuple[bytes, bytes]]:
    signed = request_signing.sign("etl001", "etl-secret", "broker/broker-a", "/rmq.v1.Flight/DoGet", ticket,
                                  nonce=nonce)
    return [(key.encode(), value.encode()) for key, value in signed.as_metadata()]


def test_unsigned_altered_and_replayed_tickets_are_refused(acl_broker: InProcessBroker) -> None:
    ticket = a_ticket()
    with pytest.raises(flight.FlightUnauthenticatedError, match="request is not signed"):
        raw_do_get(acl_broker, ticket.SerializeToString(), [])
    altered = a_ticket(start=50)
    with pytest.raises(flight.FlightUnauthenticatedError, match="does not match its x-rmq-content-sha256"):
        raw_do_get(acl_broker, altered.SerializeToString(), signing_headers(ticket))
    headers = signing_headers(ticket, nonce="ab" * 16)
    raw_do_get(acl_broker, ticket.SerializeToString(), headers)
    with pytest.raises(flight.FlightUnauthenticatedError, match="nonce already used"):
        raw_do_get(acl_broker, ticket.SerializeToString(), headers)


# ---------------------------------------------------------------- TLS


def test_mutual_tls_as_on_the_grpc_port(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path / "tls")
    security = ServerSecurity(tls=ServerTls(files.server_cert, files.server_key, files.ca))
    broker = InProcessBroker(tmp_path / "store", security).start()
    try:
        with RmqClient(broker.address, tls_ca_file=str(files.ca), tls_cert_file=str(files.client_cert),
                       tls_key_file=str(files.client_key)) as client:
            fill(client)
            assert sum(len(chunk.batch) for chunk in read(client, 0, 100)) == 100
            pull_consumer_reads_all_through_flight(client, broker.address)
            with RmqClient(broker.address, tls_ca_file=str(files.ca)) as no_certificate:
                no_certificate.read_member = client.read_member   # type: ignore[method-assign]
                with pytest.raises(RmqUnavailable):
                    read(no_certificate, 0, 10, timeout=3)
        plaintext = flight.FlightClient(f"grpc://{client_flight_address(broker)}")
        with pytest.raises(flight.FlightUnavailableError):
            plaintext.do_get(flight.Ticket(a_ticket().SerializeToString()),
                             flight.FlightCallOptions(timeout=3)).read_all()
        plaintext.close()
    finally:
        broker.stop()


def test_the_name_server_passes_each_members_data_plane_on() -> None:
    routes = RouteInfoManager()
    routes.register_broker("broker-a", "10.0.0.1:10911", [], 0, rmq_pb2.ASYNC_MASTER, "10.0.0.1:41000")
    routes.register_broker("broker-a", "10.0.0.2:10911", [], 1, rmq_pb2.SLAVE)   # Flight off
    [group] = routes.broker_groups()
    assert [m.flight_address for m in group.to_proto().members] == ["10.0.0.1:41000", ""]


# ---------------------------------------------------------------- shares (issue 39)


def test_a_ticket_signed_with_a_wrong_secret_is_refused_at_the_door(acl_broker: InProcessBroker) -> None:
    ticket = a_ticket()
    signed = request_signing.sign("etl001", "not-the-secret", "broker/broker-a", "/rmq.v1.Flight/DoGet",
                                  ticket)
    headers = [(key.encode(), value.encode()) for key, value in signed.as_metadata()]
    with pytest.raises(flight.FlightUnauthenticatedError, match="signature not accepted for access key 'etl"):
        raw_do_get(acl_broker, ticket.SerializeToString(), headers)


def fill_large(client: RmqClient) -> int:
    """800 messages of 30 KB in queue 0 (more than the transport buffers: a reader that stops
    leaves its stream holding a batch); the size of one record."""
    client.create_topic(TOPIC, queues=1)
    for _ in range(16):
        client.send(TOPIC, [OutgoingMessage(b"x" * 30_000) for _ in range(50)])
    return len(client.pull(MQ, 0, 1, group="etl").messages.records)


def stall(streams: list[Iterator[object]]) -> None:
    """Take each stream's first batch, then read no more (a stream refused is left out)."""
    for stream in streams:
        with contextlib.suppress(RmqError):
            next(stream)


def remoting_pull(client: RmqClient, offset: int, count: int) -> PullResult:
    """A pull over the broker's remoting port (RmqClient.pull_async's transport when served)."""
    answer: concurrent.futures.Future[PullResult] = concurrent.futures.Future()
    call = client.pull_async(MQ, offset, count, group="etl",
                             callback=lambda result, error: answer.set_exception(error) if error
                             else answer.set_result(result))
    assert isinstance(call, RemotingCall)
    return answer.result(WAIT_S)


def test_one_accounts_unread_streams_leave_other_accounts_their_pulls(tmp_path: Path) -> None:
    """Issue 39 High 3: one account's Flight streams that are never read hold at most its share of
    the pull answers' budget (max_inflight_pull_bytes_per_account), so another account's pulls
    are answered in full while they stay open."""
    acl = write_acl(tmp_path / "acl.json", json.dumps(ACL))
    broker = InProcessBroker(tmp_path / "store", ServerSecurity(AclFile(acl))).start()
    try:
        with signed_client(broker, "admin1", "admin-secret") as admin, \
                signed_client(broker, "etl001", "etl-secret") as etl, FlightReader(etl) as reader:
            record = fill_large(admin)
            budget = broker.controller.pull_processor.budget
            budget.max_bytes = budget.max_bytes_per_connection = 100 * record
            budget.max_bytes_per_account = 50 * record
            streams = [reader.read(MQ, 0, 800, group="etl", batch_rows=50, batch_bytes=50 * record)
                       for _ in range(3)]
            with contextlib.ExitStack() as open_streams:
                for stream in streams:
                    open_streams.enter_context(contextlib.closing(stream))
                stall(streams)
                wait_until(lambda: budget.held >= 50 * record, "the unread streams hold their batches")
                for start in (0, 40, 80):    # every pull while the streams stay open: gRPC
                    assert admin.pull(MQ, start, 40, group="etl", max_bytes=40 * record).messages.count == 40
                assert remoting_pull(admin, 120, 40).messages.count == 40   # and the remoting port
            wait_until(lambda: budget.held == 0, lambda: f"the closed streams give back (held {budget.held})")
    finally:
        broker.stop()


SQL_TAG_A = MessageSelector("TAGS = 'TagA'", ExpressionType.SQL92)
LOOPBACK = "127.0.0.1"   # the account of a caller without an ACL: its IP


@contextlib.contextmanager
def busy_filter_threads(broker: InProcessBroker) -> Iterator[threading.Event]:
    """The broker's one filter thread runs another account's slice until the event is set."""
    filters = broker.controller.filters
    running, release = threading.Event(), threading.Event()

    def hold() -> None:
        running.set()
        release.wait(WAIT_S)

    held = broker.submit(filters.run("another account", hold))
    try:
        wait_until(running.is_set, "the other account's slice runs on the filter thread")
        yield release
    finally:
        release.set()
        held.result(WAIT_S)


def test_an_sql92_flight_read_waits_its_turn_on_the_filter_executor(broker: InProcessBroker) -> None:
    """Issue 39 High 4: Flight's SQL92 reads are FilterExecutor slices, in the stream's account's
    queue (its share of filter_threads), not work on the Flight threads beside them."""
    filters = broker.controller.filters
    with RmqClient(broker.address) as client, busy_filter_threads(broker) as release:
        with concurrent.futures.ThreadPoolExecutor(1) as reader:
            rows = reader.submit(lambda: [o for chunk in read(client, 0, 30, sub_expression=SQL_TAG_A)
                                          for o in chunk.batch.column("queue_offset").to_pylist()])
            wait_until(lambda: filters.pending(LOOPBACK) == 1,
                       lambda: f"the Flight read waits in its account's queue (rows: {rows.done()})",
                       timeout=10)
            assert not rows.done()
            release.set()
            assert rows.result(WAIT_S) == list(range(0, 30, 3))


def test_a_cancelled_sql92_stream_stops_its_filter_work(tmp_path: Path, monkeypatch) -> None:
    """Issue 39 High 4: a stream cancelled while its slice waits for the filter thread ends at
    once (its slot given back) and its slice never runs."""
    broker = InProcessBroker(tmp_path).start()
    try:
        with RmqClient(broker.address) as client:
            fill(client)
        reads: list[int] = []
        store = broker.controller.store
        range_read = store.get_queue_range
        monkeypatch.setattr(store, "get_queue_range", lambda *a, **k: reads.append(1) or range_read(*a, **k))
        ticket = a_ticket()
        ticket.pull.expression_type, ticket.pull.sub_expression = rmq_pb2.SQL92, SQL_TAG_A.expression
        flight_client = flight.FlightClient(f"grpc://{client_flight_address(broker)}")
        slots, filters = broker.controller.flight.slots, broker.controller.filters
        with contextlib.closing(flight_client), busy_filter_threads(broker):
            stream = flight_client.do_get(flight.Ticket(ticket.SerializeToString()))
            wait_until(lambda: filters.pending(LOOPBACK) == 1 and slots.open == 1,
                       "the stream's first slice waits for the filter thread", timeout=10)
            stream.cancel()
            wait_until(lambda: slots.open == 0, "the cancelled stream ends while its slice waits",
                       timeout=10)
        wait_until(lambda: filters.pending(LOOPBACK) == 0, "the cancelled slice leaves the queue")
        assert reads == []
    finally:
        broker.stop()


# ---------------------------------------------------------------- ticket and stream bounds (issue 40)


@pytest.mark.parametrize("end", [0, 5])
def test_a_ticket_whose_end_is_not_above_its_start_is_refused(broker: InProcessBroker, end: int) -> None:
    ticket = a_ticket(start=5)
    ticket.end_offset = end
    with pytest.raises(flight.FlightServerError,
                       match=f"ILLEGAL_ARGUMENT: end_offset {end} must be above the start offset 5"):
        raw_do_get(broker, ticket.SerializeToString(), [])


def test_the_broker_wide_stream_cap_counts_every_accounts_streams() -> None:
    """max_flight_streams bounds the streams of all accounts together, each account within its
    own max_flight_streams_per_account; a full broker gives an account holding fewer streams the
    place of the largest holder's oldest (issue 39 Low 12)."""
    slots = FlightStreamSlots(max_streams=3, max_per_account=2)
    a1, a2 = slots.acquire("a", "ipv4:10.0.0.1:1"), slots.acquire("a", "ipv4:10.0.0.1:1")
    with pytest.raises(BrokerError, match=r"reads 2 Flight streams \(max_flight_streams_per_account\)"):
        slots.acquire("a", "ipv4:10.0.0.1:1")
    b1 = slots.acquire("b", "ipv4:10.0.0.2:1")
    c1 = slots.acquire("c", "ipv4:10.0.0.3:1")                      # full: a's oldest gives way
    assert (a1.displaced, a2.displaced, b1.displaced, c1.displaced) == (True, False, False, False)
    assert slots.open == 3
    with pytest.raises(BrokerError, match=r"serves 3 Flight streams \(max_flight_streams\)") as refusal:
        slots.acquire("c", "ipv4:10.0.0.3:1")                       # 1, 1, 1: nobody holds more
    assert refusal.value.code == rmq_pb2.LIMIT_EXCEEDED
    with pytest.raises(BrokerError, match="max_flight_streams_per_account"):
        slots.acquire("a", "ipv4:10.0.0.1:1")                       # its displaced stream runs until it ends
    slots.release(a1)
    slots.release(b1)
    assert slots.open == 2 and not slots.acquire("a", "ipv4:10.0.0.1:1").displaced


def test_a_full_broker_gives_another_account_a_stream_in_place_of_the_largest_holders(tmp_path: Path) -> None:
    """Issue 39 Low 12: one account holding every Flight stream does not lock the others out; its
    displaced stream ends at its next batch, saying where to read on."""
    acl = write_acl(tmp_path / "acl.json", json.dumps(ACL))
    broker = InProcessBroker(tmp_path / "store", ServerSecurity(AclFile(acl)), max_flight_streams=2,
                             max_flight_streams_per_account=2).start()
    try:
        with signed_client(broker, "admin1", "admin-secret") as admin, \
                signed_client(broker, "etl001", "etl-secret") as etl, FlightReader(etl) as reader:
            record = fill_large(admin)
            streams = [reader.read(MQ, 0, 800, group="etl", batch_rows=50, batch_bytes=50 * record)
                       for _ in range(2)]
            with contextlib.ExitStack() as open_streams:
                for stream in streams:
                    open_streams.enter_context(contextlib.closing(stream))
                first_batches = [next(stream) for stream in streams]
                assert broker.controller.flight.slots.open == 2
                assert sum(len(chunk.batch) for chunk in read(admin, 0, 100)) == 100
                displaced = [first_batches[0], *streams[0]]     # read to its end
                assert sum(len(chunk.batch) for chunk in displaced) < 800
                assert displaced[-1].result.next_begin_offset == sum(len(chunk.batch) for chunk in displaced)
    finally:
        broker.stop()


def test_a_stream_whose_client_stopped_reading_ends_after_the_idle_timeout(tmp_path: Path) -> None:
    """Issue 39 High 3: a stream whose client takes no batch for --idle-timeout loses its connection
    (FlightConnectionGuard), which gives back its batch's bytes and its slot."""
    broker = InProcessBroker(tmp_path, ServerSecurity(idle_timeout_s=1.0)).start()
    try:
        with RmqClient(broker.address) as client, FlightReader(client) as reader:
            record = fill_large(client)
            budget, slots = broker.controller.pull_processor.budget, broker.controller.flight.slots
            stalled = reader.read(MQ, 0, 800, group="etl", batch_rows=50, batch_bytes=50 * record)
            with contextlib.closing(stalled):
                next(stalled)     # then stop reading
                wait_until(lambda: slots.open == 0 and budget.held == 0,
                           lambda: f"the stalled stream ended (open {slots.open}, held {budget.held})",
                           timeout=10)
            rows = 0
            for chunk in reader.read(MQ, 0, 800, group="etl", batch_rows=50, batch_bytes=50 * record):
                rows += len(chunk.batch)
                time.sleep(0.2)   # a slow reader (the behaviour under test): 3 s in all, past the timeout
            assert rows == 800
    finally:
        broker.stop()
