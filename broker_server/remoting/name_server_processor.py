"""The name server's remoting requests (docs/remoting-protocol.md, "Route data"): route lookup for
4.x clients, naming each broker group's members at the remoting addresses they registered. A
group none of whose live members serves remoting is left out (4.x clients could not reach it);
a topic no such group holds is TOPIC_NOT_EXIST. Everything else is REQUEST_CODE_NOT_SUPPORTED."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmq.broker_server.processors.names import check_topic_name
from rmq.broker_server.remoting import headers
from rmq.broker_server.remoting.dispatch import Call, Refusal, RequestDispatcher
from rmq.broker_server.remoting.remoting_acl import RemotingAuthenticator
from rmq.broker_server.remoting.remoting_server import CallContext
from rmq.broker_server.remoting.topic_route_data import BrokerData, encode_topic_route
from rmq.remoting.remoting_command import RemotingCommand
from rmq.remoting.request_code import RequestCode, ResponseCode
from rmq.topic_config import PERM_WRITE, QueueData
from rmq.v1 import rmq_pb2

if TYPE_CHECKING:  # name_server starts this processor
    from rmq.broker_server.name_server.namesrv_controller import RouteInfoManager

QUERY_ROUTE = "/rmq.v1.RouteService/QueryRoute"


class NameServerRemotingProcessor:
    def __init__(self, routes: RouteInfoManager, authenticator: RemotingAuthenticator | None) -> None:
        self.routes = routes
        self.dispatcher = RequestDispatcher({RequestCode.GET_ROUTEINFO_BY_TOPIC: self._route}, authenticator)

    async def process(self, context: CallContext, request: RemotingCommand) -> RemotingCommand | None:
        return await self.dispatcher.process(context, request)

    async def _route(self, call: Call) -> RemotingCommand:
        topic = headers.text(call.request, "topic")
        check_topic_name(topic)
        self.dispatcher.authorize(call, QUERY_ROUTE, rmq_pb2.QueryRouteRequest(topic=topic))
        brokers, queues = [], []
        for group, config in self.routes.pick_topic_route(topic):
            addresses = {m.broker_id: m.remoting_address for m in group.members if m.remoting_address}
            if not addresses:
                continue
            brokers.append(BrokerData(group.broker_name, addresses, group.cluster_name))
            perm = config.perm if group.has_master else config.perm & ~PERM_WRITE
            queues.append(QueueData(group.broker_name, config.read_queue_nums, config.write_queue_nums, perm))
        if not brokers:
            raise Refusal(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic} "
                f"(no live broker serving 4.x clients holds it)",
            )
        return call.request.response(ResponseCode.SUCCESS, body=encode_topic_route(brokers, queues))
