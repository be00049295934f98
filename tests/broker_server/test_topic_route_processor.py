"""One route lookup for every protocol (issue 42): rmq.v1 QueryRoute / ListTopics, RocketMQ 5
QueryRoute / QueryAssignment and 4.x GET_ROUTEINFO_BY_TOPIC all answer from TopicRouteProcessor, so
they agree on a topic's queues, and each refuses a topic the broker does not hold in its own code
and words."""

from __future__ import annotations

import json
from pathlib import Path

import grpc

from rmq.connector.client import RmqClient
from rmq.remoting.remoting_command import RemotingCommand
from rmq.remoting.request_code import RequestCode, ResponseCode
from rmq.rocketmq_v2 import MessagingServiceStub
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2 as pb
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from tests.broker_server.in_process_broker import start_remoting_broker
from tests.broker_server.remoting_client import RemotingTestClient

TOPIC = "routed"


def remoting_route(address: str, topic: str) -> RemotingCommand:
    with RemotingTestClient(address) as client:
        return client.call(RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic}))


def test_every_protocol_routes_alike_and_refuses_a_missing_topic_in_its_own_words(tmp_path: Path) -> None:
    broker = start_remoting_broker(tmp_path / "store")
    try:
        remoting = broker.config.remoting_listen
        with grpc.insecure_channel(broker.address) as channel:
            v1 = rmq_pb2_grpc.RouteServiceStub(channel)
            v5 = MessagingServiceStub(channel)
            missing_v1 = v1.QueryRoute(rmq_pb2.QueryRouteRequest(topic="nope"), timeout=5).status
            assert (missing_v1.code, missing_v1.message) == (
                rmq_pb2.TOPIC_NOT_EXIST, f"no route for topic 'nope': broker {broker.config.broker_name} "
                                         "does not hold it")
            missing_v5 = v5.QueryRoute(pb.QueryRouteRequest(topic=v2.Resource(name="nope")), timeout=5).status
            assert (missing_v5.code, missing_v5.message) == (v2.TOPIC_NOT_FOUND,
                                                             "topic 'nope' does not exist")
            missing_4x = remoting_route(remoting, "nope")
            assert missing_4x.code == ResponseCode.TOPIC_NOT_EXIST
            assert missing_4x.remark == ("No topic route info in name server for the topic: nope "
                                         f"(broker {broker.config.broker_name} does not hold it)")

            with RmqClient(broker.address) as client:
                client.create_topic(TOPIC, queues=3)
            [queues] = v1.QueryRoute(rmq_pb2.QueryRouteRequest(topic=TOPIC), timeout=5).queue_datas
            assert (queues.read_queue_nums, queues.write_queue_nums) == (3, 3)
            listed = v1.ListTopics(rmq_pb2.ListTopicsRequest(), timeout=5).topics
            assert TOPIC in [config.topic_name for config in listed]
            v5_route = v5.QueryRoute(pb.QueryRouteRequest(topic=v2.Resource(name=TOPIC)), timeout=5)
            assert sorted(mq.id for mq in v5_route.message_queues) == [0, 1, 2]
            assignment = v5.QueryAssignment(pb.QueryAssignmentRequest(
                topic=v2.Resource(name=TOPIC), group=v2.Resource(name="g")), timeout=5)
            assigned = [a.message_queue.broker.name for a in assignment.assignments]
            assert assigned == [broker.config.broker_name]
        body = remoting_route(remoting, TOPIC).body.decode().replace("{0:", '{"0":')
        [queue_data] = json.loads(body)["queueDatas"]
        assert (queue_data["readQueueNums"], queue_data["writeQueueNums"]) == (3, 3)
    finally:
        broker.stop()
