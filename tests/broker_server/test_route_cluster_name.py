"""The cluster a 4.x route names (TopicRouteData brokerDatas[].cluster): the broker's
cluster_name (brokerClusterName), on the broker's own remoting port and through a name server it
registered with; it was DefaultCluster whatever the broker was told."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from rmq.broker_server.config import DEFAULT_CLUSTER_NAME, NameServerConfig
from rmq.broker_server.name_server.namesrv_controller import NameServerService, RouteInfoManager
from rmq.broker_server.remoting.service import build_name_server_remoting
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.connector.client import RmqClient
from rmq.remoting.remoting_command import RemotingCommand
from rmq.remoting.request_code import RequestCode
from rmq.v1 import rmq_pb2
from tests.broker_server.in_process_broker import start_remoting_broker
from tests.broker_server.remoting_client import RemotingTestClient, serving

TOPIC = "clustered"


def route(address: str) -> RemotingCommand:
    with RemotingTestClient(address) as client:
        return client.call(RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": TOPIC}))


def clusters(answer: RemotingCommand) -> list[str]:
    assert answer.body, answer.remark
    body = answer.body.decode().replace("{0:", '{"0":')   # broker ids are bare integers (Java's JSON)
    return [broker["cluster"] for broker in json.loads(body)["brokerDatas"]]


def name_server_route(registration: rmq_pb2.RegisterBrokerRequest) -> RemotingCommand:
    """The route a name server's remoting port answers once a broker registered with `registration`."""
    routes = RouteInfoManager()
    answer = asyncio.run(NameServerService(routes).RegisterBroker(registration, None))
    assert answer.status.code == rmq_pb2.OK, answer.status.message
    config = NameServerConfig(listen="127.0.0.1:0", remoting_listen="127.0.0.1:0")
    remoting = build_name_server_remoting(config, ServerSecurity(), routes)
    assert remoting is not None
    with serving(remoting) as address:
        return route(address)


def test_4x_routes_name_the_brokers_cluster(tmp_path: Path) -> None:
    broker = start_remoting_broker(tmp_path / "store", cluster_name="ClusterB")
    try:
        with RmqClient(broker.address) as client:
            client.create_topic(TOPIC, queues=1)
        assert clusters(route(broker.config.remoting_listen)) == ["ClusterB"]
        registration = broker.controller.outer_api.registration()   # what it sends its name servers
    finally:
        broker.stop()
    assert clusters(name_server_route(registration)) == ["ClusterB"]
    registration.broker.ClearField("cluster_name")   # a broker from before the field
    assert clusters(name_server_route(registration)) == [DEFAULT_CLUSTER_NAME]
