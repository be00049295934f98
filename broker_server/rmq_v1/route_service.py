"""RouteService on a broker: routes for its own topics, so a single broker without a name
server is a complete embedded default (docs/manual/cli.md). The lookups are
TopicRouteProcessor's; this renders them as rmq.v1 messages."""

from __future__ import annotations

from rmq.broker_server.grpc_aio import Context
from rmq.broker_server.processors.topic_route_processor import TopicRouteProcessor
from rmq.broker_server.status import OK, answers_with_status
from rmq.v1 import rmq_pb2, rmq_pb2_grpc


class BrokerRouteService(rmq_pb2_grpc.RouteServiceServicer):
    def __init__(self, routes: TopicRouteProcessor, member: rmq_pb2.BrokerMember | None = None) -> None:
        self.routes = routes
        self.broker = rmq_pb2.BrokerData(broker_name=routes.broker_name, address=routes.broker_address,
                                         members=[member] if member is not None else [])

    @answers_with_status(rmq_pb2.QueryRouteResponse)
    async def QueryRoute(self, request: rmq_pb2.QueryRouteRequest,
                         context: Context) -> rmq_pb2.QueryRouteResponse:
        config = self.routes.own_route(request.topic)   # TopicRouteNotFound: TOPIC_NOT_EXIST, its own words
        queue_data = rmq_pb2.QueueData(
            broker_name=self.broker.broker_name,
            read_queue_nums=config.read_queue_nums,
            write_queue_nums=config.write_queue_nums,
            perm=config.perm,
        )
        return rmq_pb2.QueryRouteResponse(status=OK, brokers=[self.broker], queue_datas=[queue_data])

    @answers_with_status(rmq_pb2.ListTopicsResponse)
    async def ListTopics(self, request: rmq_pb2.ListTopicsRequest,
                         context: Context) -> rmq_pb2.ListTopicsResponse:
        return rmq_pb2.ListTopicsResponse(
            status=OK, topics=[config.to_proto() for config in self.routes.all_topics()]
        )

    @answers_with_status(rmq_pb2.ListBrokersResponse)
    async def ListBrokers(self, request: rmq_pb2.ListBrokersRequest,
                          context: Context) -> rmq_pb2.ListBrokersResponse:
        return rmq_pb2.ListBrokersResponse(status=OK, brokers=[self.broker])
