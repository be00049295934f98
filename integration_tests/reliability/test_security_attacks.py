"""The attacks of the security probe (issue 21), each run against real `--acl` brokers and name
servers on loopback, bounded in time and size, and shown to fail:

1. lockout through the nonce cache, 2. unauthenticated memory exhaustion, 3. silent HTTP/2
connections, 4. replay on another server, 5. replay after a restart, 6. refusal-log flooding,
7. an ACL file other users may write.

Each test records its figures (security_report.py); `make reliability` writes them to
SECURITY.md.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from integration_tests import http2_client
from integration_tests.reliability.security_report import SecurityReport
from rmq import request_signing
from rmq.connector.client import OutgoingMessage, RmqClient, RmqError
from rmq.rocketmq_v2 import METHOD_PREFIX as ROCKETMQ_V2_METHOD_PREFIX
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from testing import processes
from testing.processes import ServerProcess, free_port
from tests.acl_files import write_acl
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

ADMIN = ("admin01", "admin-secret-0001")
PRODUCER = ("producer1", "producer-secret-01")
NOBODY = ("nobody01", "nobody-secret-001")      # an account with no permission at all
ACL = f"""\
globalWhiteRemoteAddresses: ["127.0.0.1"]
accounts:
  - {{accessKey: {ADMIN[0]}, secretKey: "{ADMIN[1]}", admin: true}}
  - {{accessKey: {PRODUCER[0]}, secretKey: "{PRODUCER[1]}", topicPerms: ["orders=PUB|SUB"]}}
  - {{accessKey: {NOBODY[0]}, secretKey: "{NOBODY[1]}"}}
"""
SEND = "/rmq.v1.MessagingService/SendMessage"
MIB = 1 << 20
OUTSIDE_ALLOW_LIST = "127.0.0.2"   # a loopback source address globalWhiteRemoteAddresses does not list

REPORT = SecurityReport()


@pytest.fixture(scope="module", autouse=True)
def security_report() -> Iterator[SecurityReport]:
    yield REPORT
    REPORT.write_if_asked()


def acl_broker(tmp_path: Path, *flags: str, name: str = "broker-a", **env: str) -> ServerProcess:
    acl = tmp_path / "acl.yml"
    if not acl.exists():
        write_acl(acl, ACL)
    return processes.broker(tmp_path, name, extra=["--acl", str(acl), *flags], **env).start()


def client(address: str, account: tuple[str, str]) -> RmqClient:
    return RmqClient(address, timeout=10.0, access_key=account[0], secret_key=account[1])


def send_request(body: bytes = b"captured") -> rmq_pb2.SendMessageRequest:
    return rmq_pb2.SendMessageRequest(topic="orders", messages=[rmq_pb2.Message(body=body)])


def signed(account: tuple[str, str], target: str, method: str, request, **overrides) -> tuple:
    return request_signing.sign(*account, target, method, request, **overrides).as_metadata()


def raw_call(address: str, method: str, request, metadata: tuple) -> tuple[grpc.StatusCode, str]:
    """One call with exactly the given metadata (a captured or forged call): its status and
    details (the response itself is not decoded)."""
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(method, request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=bytes)
        try:
            call(request, metadata=metadata, timeout=10)
        except grpc.RpcError as error:
            return error.code(), error.details() or ""
    return grpc.StatusCode.OK, ""


def proc_status(pid: int, field: str) -> int:
    """A /proc/<pid>/status figure in KiB (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def messages_in(address: str, topic: str = "orders") -> int:
    with client(address, ADMIN) as admin:
        return sum(o.max_offset for o in admin.topic_offsets(topic).values())


def until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    wait_until(condition, what, timeout_s, interval=0.05)


# ---------------------------------------------------------------- 1. lockout


FLOOD_S = 4.0
NONCE_BUDGET = 300


def test_1_an_account_without_permissions_cannot_lock_the_admin_out(tmp_path: Path) -> None:
    broker = acl_broker(tmp_path, "--nonce-budget", str(NONCE_BUDGET))
    stop = threading.Event()
    flood: Counter[str] = Counter()
    request = send_request(b"flood")

    def flooder() -> None:
        with grpc.insecure_channel(broker.address) as channel:
            stub = rmq_pb2_grpc.MessagingServiceStub(channel)
            ahead_s = (4.9, 59.0)   # the most the server allows, and what the original attack used
            while not stop.is_set():
                for seconds in ahead_s:
                    stamp = int((time.time() + seconds) * 1000)
                    metadata = signed(NOBODY, "broker/broker-a", SEND, request, timestamp_ms=stamp)
                    try:
                        stub.SendMessage(request, metadata=metadata, timeout=5)
                        flood["OK"] += 1
                    except grpc.RpcError as error:
                        flood[error.code().name] += 1

    try:
        with client(broker.address, ADMIN) as admin:
            admin.create_topic("orders", queues=1)
            threads = [threading.Thread(target=flooder) for _ in range(2)]
            for thread in threads:
                thread.start()
            admin_ok, admin_refused = 0, []
            deadline = time.monotonic() + FLOOD_S
            while time.monotonic() < deadline:
                try:
                    admin.send("orders", [OutgoingMessage(b"admin")])
                    admin_ok += 1
                except RmqError as error:
                    admin_refused.append(str(error))
                time.sleep(0.02)   # the behaviour under test: a steady admin client beside the flood
            stop.set()
            for thread in threads:
                thread.join(10)
            own = signed(NOBODY, "broker/broker-a", SEND, request)
            flooder_after, flooder_details = raw_call(broker.address, SEND, request, own)
    finally:
        stop.set()
        broker.stop()
    flood_calls = sum(flood.values())
    REPORT.record("1 lockout via nonce cache",
                  f"{flood_calls} calls in {FLOOD_S:g} s by a no-permission account "
                  f"signed +4.9 s / +59 s ahead (budget {NONCE_BUDGET} nonces per account)",
                  f"admin {admin_ok} calls ok, {len(admin_refused)} refused; flood {dict(flood)}")
    assert flood_calls > 3 * NONCE_BUDGET     # the flooder overflowed its own budget several times
    assert flood["OK"] == 0 and flood["PERMISSION_DENIED"] > 0 and flood["UNAUTHENTICATED"] > 0
    assert admin_refused == [] and admin_ok > 20
    # Only the flooder's own window narrowed: its calls signed now fall below its own floor.
    assert flooder_after is grpc.StatusCode.UNAUTHENTICATED and "replayed" in flooder_details


# ---------------------------------------------------------------- 2. memory


REQUEST_MIB = 60
V2_SEND = f"{ROCKETMQ_V2_METHOD_PREFIX}SendMessage"
V2_FORGED = (("authorization", "MQv2-HMAC-SHA1 Credential=producer1, SignedHeaders=x-mq-date-time, "
                               "Signature=0123456789abcdef0123456789abcdef01234567"),
             ("x-mq-date-time", "20261122T120000Z"))


def test_2_unauthenticated_60_mib_requests_are_refused_before_they_are_read(tmp_path: Path) -> None:
    broker = acl_broker(tmp_path)
    pid = broker.process.pid
    prefix, zeros = http2_client.send_message_prefix("orders", REQUEST_MIB * MIB)
    forged = signed(("producer1", "guessed-secret"), "broker/broker-a", SEND, send_request())
    unauthenticated = grpc.StatusCode.UNAUTHENTICATED.value[0]
    callers = ([(SEND, (), None, unauthenticated)] * 6 + [(SEND, (), OUTSIDE_ALLOW_LIST, unauthenticated)] * 4
               + [(SEND, forged, None, unauthenticated)] * 4
               + [(V2_SEND, V2_FORGED, None, 0)] * 4)   # RocketMQ 5: refused in the response status
    try:
        with client(broker.address, ADMIN) as admin:
            admin.create_topic("orders", queues=1)
        baseline_kib = proc_status(pid, "VmRSS")
        Path(f"/proc/{pid}/clear_refs").write_text("5")    # restart the peak (VmHWM) from here

        def attack(caller: tuple) -> http2_client.CallOutcome:
            method, metadata, source, _status = caller
            return http2_client.RawCall(broker.address, method, metadata, prefix, zeros, source).run(30)

        with ThreadPoolExecutor(len(callers)) as pool:
            outcomes = list(pool.map(attack, callers))
        peak_kib = proc_status(pid, "VmHWM")
        after_kib = proc_status(pid, "VmRSS")
        with client(broker.address, PRODUCER) as producer:
            assert producer.send("orders", [OutgoingMessage(b"still served")]).msg_ids
    finally:
        broker.stop()
    most_sent = max(o.bytes_sent for o in outcomes)
    REPORT.record("2 unauthenticated memory",
                  f"{len(callers)} concurrent {REQUEST_MIB} MiB SendMessage: 6 unsigned, "
                  f"4 unsigned from {OUTSIDE_ALLOW_LIST} (outside the allow-list), 4 with a forged "
                  f"signature, "
                  f"4 to the RocketMQ 5 endpoint with a forged MQv2-HMAC-SHA1 signature",
                  f"all refused; at most {most_sent / MIB:.1f} MiB of a request received; broker RSS "
                  f"{baseline_kib // 1024} MiB -> peak {peak_kib // 1024} MiB -> "
                  f"{after_kib // 1024} MiB after "
                  f"(test process peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB)")
    assert [o.grpc_status for o in outcomes] == [status for *_, status in callers]
    # Never the message: at most the flow-control window gRPC grants before the refusal reaches the
    # caller, 4 MiB at first; gRPC's BDP probe may grow it on a loaded machine (11.9 MiB seen in CI).
    assert most_sent < REQUEST_MIB * MIB // 2
    assert (peak_kib - baseline_kib) < 160 * 1024   # was 3.1 GiB with 24 callers
    assert (after_kib - baseline_kib) < 64 * 1024


# ---------------------------------------------------------------- 3. connections


SILENT_CONNECTIONS = 300
MUTE_CONNECTIONS = 20    # TCP connections that never send the HTTP/2 preface
MAX_CONNECTIONS = 100
IDLE_S = 2


def test_3_silent_connections_are_closed_and_cannot_take_the_stores_files(tmp_path: Path) -> None:
    broker = acl_broker(tmp_path, "--idle-timeout", str(IDLE_S), "--max-connections", str(MAX_CONNECTIONS))
    pid = broker.process.pid
    busy = threading.Event()
    served: list[int] = []
    failures: list[str] = []

    def keep_producing(producer: RmqClient) -> None:   # a client connected before the flood
        while not busy.is_set():
            try:
                served.append(len(producer.send("orders", [OutgoingMessage(b"during the flood")]).msg_ids))
            except RmqError as error:
                failures.append(str(error))
            time.sleep(0.2)   # the behaviour under test: a steady producer beside the flood

    sockets = []
    try:
        with client(broker.address, ADMIN) as admin, client(broker.address, PRODUCER) as producer:
            admin.create_topic("orders", queues=1)
            producer.send("orders", [OutgoingMessage(b"before")])
            limit = open_fds(pid) + MAX_CONNECTIONS + 60          # the store keeps 60 descriptors spare
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limit))
            worker = threading.Thread(target=keep_producing, args=(producer,))
            worker.start()
            host, _, port = broker.address.rpartition(":")
            mute = [socket.create_connection((host, int(port))) for _ in range(MUTE_CONNECTIONS)]
            with ThreadPoolExecutor(32) as pool:
                sockets = list(pool.map(lambda _: http2_client.silent_connection(broker.address, 1.0),
                                        range(SILENT_CONNECTIONS)))
            sockets += [(sock, False) for sock in mute]
            accepted = sum(1 for _, settings in sockets if settings)
            most_fds = open_fds(pid)
            started = time.monotonic()
            open_sockets = [sock for sock, _ in sockets]
            closed = [http2_client.closed_by_server(sock, 30) for sock in open_sockets]
            all_closed_s = time.monotonic() - started
            busy.set()
            worker.join(10)
        with client(broker.address, PRODUCER) as newcomer:
            assert newcomer.send("orders", [OutgoingMessage(b"after")]).msg_ids
        fds_after = open_fds(pid)
    finally:
        busy.set()
        for sock, _ in sockets:
            sock.close()
        broker.stop()
    REPORT.record("3 silent HTTP/2 connections",
                  f"{SILENT_CONNECTIONS} connections that finish the preface and "
                  f"stay silent and {MUTE_CONNECTIONS} that never send it, broker open-file limit {limit}, "
                  f"--max-connections {MAX_CONNECTIONS}, "
                  f"--idle-timeout {IDLE_S}",
                  f"{accepted} served at once, all closed by the server within {all_closed_s:.1f} s; "
                  f"broker fds "
                  f"at most {most_fds}, {fds_after} after; client connected before: {len(served)} sends ok, "
                  f"{len(failures)} failed")
    assert all(closed)
    assert accepted <= MAX_CONNECTIONS
    assert failures == [] and len(served) >= 5
    assert "Too many open files" not in broker.log()


# ---------------------------------------------------------------- 4. another server


def test_4_a_call_captured_on_one_server_is_refused_by_every_other(tmp_path: Path) -> None:
    acl = write_acl(tmp_path / "acl.yml", ACL)
    namesrv = processes.namesrv(tmp_path, extra=["--acl", str(acl)]).start()
    broker_a = acl_broker(tmp_path, name="broker-a")
    broker_b = acl_broker(tmp_path, name="broker-b")
    try:
        for broker in (broker_a, broker_b):
            with client(broker.address, ADMIN) as admin:
                admin.create_topic("orders", queues=1)
        send = send_request()
        captured_send = signed(PRODUCER, "broker/broker-a", SEND, send)
        delete_method = "/rmq.v1.AdminService/DeleteTopic"
        delete = rmq_pb2.DeleteTopicRequest(topic="orders")
        captured_delete = signed(ADMIN, "broker/broker-a", delete_method, delete)
        assert raw_call(broker_a.address, SEND, send, captured_send)[0] is grpc.StatusCode.OK
        list_method, list_request = "/rmq.v1.RouteService/ListTopics", rmq_pb2.ListTopicsRequest()
        captured_list = signed(ADMIN, "broker/broker-a", list_method, list_request)
        assert raw_call(broker_a.address, list_method, list_request, captured_list)[0] is grpc.StatusCode.OK
        replays = {
            "SendMessage on broker-b": raw_call(broker_b.address, SEND, send, captured_send),
            "DeleteTopic on broker-b": raw_call(broker_b.address, delete_method, delete, captured_delete),
            "ListTopics on the name server": raw_call(namesrv.address, list_method, list_request,
                                                      captured_list),
        }
        b_messages = messages_in(broker_b.address)
    finally:
        for server in (broker_b, broker_a, namesrv):
            server.stop()
    REPORT.record("4 replay on another server", "a SendMessage and an admin DeleteTopic captured on broker-a "
                  "replayed to broker-b, a call to broker-a replayed to the name server",
                  "; ".join(f"{what}: {code.name}" for what, (code, _) in replays.items())
                  + f"; broker-b still has topic orders with {b_messages} messages")
    for code, details in replays.values():
        assert code is grpc.StatusCode.UNAUTHENTICATED
        assert "call signed for server 'broker/broker-a'" in details
    assert b_messages == 0


# ---------------------------------------------------------------- 5. restart


def test_5_a_call_accepted_before_a_restart_is_refused_after_it(tmp_path: Path) -> None:
    broker = acl_broker(tmp_path)
    try:
        with client(broker.address, ADMIN) as admin:
            admin.create_topic("orders", queues=1)
        send = send_request()
        captured = signed(PRODUCER, "broker/broker-a", SEND, send)
        first, _ = raw_call(broker.address, SEND, send, captured)
        before_restart, _ = raw_call(broker.address, SEND, send, captured)
        broker.restart()
        after_restart, details = raw_call(broker.address, SEND, send, captured)
        stored = messages_in(broker.address)
    finally:
        broker.stop()
    REPORT.record("5 replay after a restart", "a captured SendMessage replayed before and after the broker "
                  "restarts", f"first {first.name}, replay {before_restart.name}, replay after restart "
                  f"{after_restart.name}; {stored} message stored")
    assert first is grpc.StatusCode.OK
    assert before_restart is after_restart is grpc.StatusCode.UNAUTHENTICATED
    assert details == "request signed before this server started: refused as a possible replay"
    assert stored == 1


# ---------------------------------------------------------------- 6. log flooding


LOG_FLOOD_S = 3.0


def test_6_refusals_cannot_flood_the_log(tmp_path: Path) -> None:
    broker = acl_broker(tmp_path)
    long_key = "k" * 7000
    request = send_request()
    stop = threading.Event()
    calls = Counter()

    def flooder(account: tuple[str, str]) -> None:
        with grpc.insecure_channel(broker.address) as channel:
            stub = rmq_pb2_grpc.MessagingServiceStub(channel)
            while not stop.is_set():
                try:
                    stub.SendMessage(request, metadata=signed(account, "broker/broker-a", SEND, request),
                                     timeout=5)
                except grpc.RpcError as error:
                    calls[error.code().name] += 1

    log_before = broker.log_path.stat().st_size
    threads = [threading.Thread(target=flooder, args=(account,))
               for account in ((long_key, "whatever-secret"), ("u" * 100, "whatever-secret"))]
    try:
        for thread in threads:
            thread.start()
        time.sleep(LOG_FLOOD_S)   # the behaviour under test: a flood this long (log bound per interval)
        stop.set()
        for thread in threads:
            thread.join(10)
        log = broker.log()
    finally:
        stop.set()
        broker.stop()
    grown = len(log.encode()) - log_before
    refusal_lines = log.count("refused /rmq.v1.")
    REPORT.record("6 refusal-log flooding",
                  f"{sum(calls.values())} refused calls in {LOG_FLOOD_S:g} s with a "
                  f"7,000-character and a 100-character unknown access key",
                  f"log grew {grown} bytes ({refusal_lines} refusal lines, no key beyond a "
                  f"24-character prefix)")
    assert sum(calls.values()) > 200 and set(calls) == {"UNAUTHENTICATED"}
    assert refusal_lines <= 20 and grown < 16 * 1024
    assert "k" * 25 not in log and "u" * 25 not in log


# ---------------------------------------------------------------- 7. ACL file


def test_7_an_acl_file_others_may_write_is_refused_at_start_and_on_reload(tmp_path: Path) -> None:
    unsafe = write_acl(tmp_path / "unsafe.yml", ACL)
    os.chmod(unsafe, 0o666)
    refused = subprocess.run(
        [*processes.RMQ, "broker", "--listen", f"127.0.0.1:{free_port()}", "--store-dir", str(tmp_path / "s"),
         "--acl", str(unsafe)], capture_output=True, text=True, timeout=60)
    broker = acl_broker(tmp_path)
    acl = tmp_path / "acl.yml"
    intruder = ("intruder", "intruder-secret")
    try:
        os.chmod(acl, 0o666)     # now anyone may add an account
        with open(acl, "a") as file:
            file.write(f"  - {{accessKey: {intruder[0]}, secretKey: \"{intruder[1]}\", admin: true}}\n")
        broker.process.send_signal(signal.SIGHUP)
        until(lambda: "ACL not reloaded" in broker.log(), 10, "the unsafe edit was not examined")
        with client(broker.address, intruder) as sneaky:
            with pytest.raises(RmqError) as raised:
                sneaky.list_topics()
        with client(broker.address, ADMIN) as admin:
            admin.list_topics()
    finally:
        broker.stop()
    REPORT.record("7 ACL file permissions", "broker started on a mode 0666 ACL file; a running broker's file "
                  "made 0666 and given an admin account, then SIGHUP",
                  f"start refused (exit {refused.returncode}); reload refused, the added account "
                  f"{'refused' if 'signature not accepted' in str(raised.value) else 'ADMITTED'}")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "writable by others" in refused.stderr and "chmod 600" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "signature not accepted for access key 'intruder'" in str(raised.value)
    assert "chmod 600" in broker.log()

