"""The broker's request pipeline: every request kind's processor, built once by the
BrokerController and handed to every protocol adapter (rmq.v1, RocketMQ 5, remoting, Flight),
which only translates its protocol's requests into these calls and their answers back
(ARCHITECTURE.md, "Requests")."""

from __future__ import annotations

from dataclasses import dataclass

from rmq.broker_server.processors.ack_message_processor import AckMessageProcessor
from rmq.broker_server.processors.admin_broker_processor import AdminBrokerProcessor
from rmq.broker_server.processors.change_invisible_time_processor import ChangeInvisibleTimeProcessor
from rmq.broker_server.processors.client_manage_processor import ClientManageProcessor
from rmq.broker_server.processors.consumer_manage_processor import ConsumerManageProcessor
from rmq.broker_server.processors.consumer_send_msg_back import ConsumerSendMsgBackProcessor
from rmq.broker_server.processors.end_transaction_processor import EndTransactionProcessor
from rmq.broker_server.processors.pop_message_processor import PopMessageProcessor
from rmq.broker_server.processors.pull_message_processor import PullMessageProcessor
from rmq.broker_server.processors.query_message_processor import QueryMessageProcessor
from rmq.broker_server.processors.recall_message_processor import RecallMessageProcessor
from rmq.broker_server.processors.send_message_processor import SendMessageProcessor
from rmq.broker_server.processors.subscription_group_processor import SubscriptionGroupProcessor
from rmq.broker_server.processors.topic_route_processor import TopicRouteProcessor


@dataclass(frozen=True)
class BrokerProcessors:
    send: SendMessageProcessor
    pull: PullMessageProcessor
    send_back: ConsumerSendMsgBackProcessor
    consumer_manage: ConsumerManageProcessor
    client_manage: ClientManageProcessor
    admin: AdminBrokerProcessor
    query: QueryMessageProcessor
    end_transaction: EndTransactionProcessor
    pop: PopMessageProcessor
    ack: AckMessageProcessor
    change_invisible: ChangeInvisibleTimeProcessor
    subscription_group: SubscriptionGroupProcessor
    route: TopicRouteProcessor
    recall: RecallMessageProcessor
