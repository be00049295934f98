"""`rmq namesrv --remoting-listen` and `rmq broker --namesrv ... --remoting-listen` as processes, used
by the official RocketMQ 4.x C++ client through the name server (docs/remoting-protocol.md, "Route
data"): the name server names the broker at the remoting address it registered; a broker that
serves no remoting port is left out of 4.x routes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.connector.client import RmqClient
from rmq.remoting.remoting_command import RemotingCommand
from rmq.remoting.request_code import RequestCode, ResponseCode
from testing import processes
from tests.broker_server.cpp_client_runner import cpp_client_problem, run_client
from tests.broker_server.remoting_client import RemotingTestClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def route(address: str, topic: str) -> RemotingCommand:
    with RemotingTestClient(address) as client:
        return client.call(RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic}))


def wait_for_route(address: str, topic: str, timeout: float = 60.0) -> RemotingCommand:
    deadline = time.monotonic() + timeout
    while (answer := route(address, topic)).code != ResponseCode.SUCCESS:
        assert time.monotonic() < deadline, f"no route for {topic}: {answer.remark}"
        time.sleep(0.1)
    return answer


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """(name server gRPC address, name server remoting address, broker remoting address)."""
    namesrv_remoting = f"127.0.0.1:{processes.free_port()}"
    broker_remoting = f"127.0.0.1:{processes.free_port()}"
    namesrv = processes.namesrv(tmp_path, ["--remoting-listen", namesrv_remoting]).start()
    brokers = [
        processes.broker(
            tmp_path,
            "broker-a",
            namesrv.address,
            extra=["--remoting-listen", broker_remoting, "--config", str(tmp_path / "fast.yml")],
        ),
        # gRPC only: left out of the 4.x routes
        processes.broker(tmp_path, "broker-b", namesrv.address, extra=["--remoting-listen", "off"]),
    ]
    (tmp_path / "fast.yml").write_text("register_broker_interval_ms: 1000\n")
    for broker in brokers:
        broker.start()
    try:
        yield namesrv.address, namesrv_remoting, broker_remoting
    finally:
        for broker in brokers:
            broker.stop()
        namesrv.stop()


def test_a_name_server_routes_4x_clients_to_brokers_remoting_ports(cluster: tuple[str, str, str]) -> None:
    namesrv_address, namesrv_remoting, broker_remoting = cluster
    client = RmqClient(namesrv_address)
    try:
        client.create_topic("both", 2)  # on broker-a and broker-b
    finally:
        client.close()
    answer = wait_for_route(namesrv_remoting, "both")
    body = answer.body.decode()
    assert f'"brokerAddrs":{{0:"{broker_remoting}"}}' in body and "broker-b" not in body
    assert route(namesrv_remoting, "no-such-topic").code == ResponseCode.TOPIC_NOT_EXIST
    if cpp_client_problem() is not None:
        pytest.skip(str(cpp_client_problem()))
    messages = [{"body": f"via-namesrv-{n}", "tags": "ns"} for n in range(3)]
    assert run_client(do="produce", address=namesrv_remoting, topic="both", group="ns-pg", messages=messages)[
        "ok"
    ]
    consumed = run_client(do="consume", address=namesrv_remoting, topic="both", group="ns-cg", expect=3)
    assert sorted(m["body"] for m in consumed["received"]) == [m["body"] for m in messages]
