"""One pull loop per client instance (docs/internals/pull.md §5, §6): a PushConsumer and a
PullConsumer of one client id share the ClientInstance's one PullMessageService (one pull thread)
and both receive what they subscribed to, through the same shared pull-answer handling."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.message import MessageExt
from rmq.connector.message_listener import ConsumeConcurrentlyStatus
from rmq.connector.process_queue import ProcessQueue
from rmq.connector.pull_consumer import PullConsumer
from rmq.connector.pull_message_service import PullMessageService
from rmq.connector.push_consumer import PushConsumer
from rmq.connector.rebalance_impl import PullRequest
from tests.broker_server.in_process_broker import InProcessBroker, running_broker
from tests.waiting import wait_until

INSTANCE = "one-pull-loop"
PER_QUEUE = 20


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    with running_broker(tmp_path_factory.mktemp("one-pull-loop"), flush="sync") as server:
        yield server


def fill(client: RmqClient, topic: str) -> None:
    client.create_topic(topic, 2)
    for queue_id in range(2):
        client.send(topic, [OutgoingMessage(f"{topic}-{queue_id}-{i}".encode(), queue_id=queue_id)
                            for i in range(PER_QUEUE)])


def pull_threads(client_id: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"rmq-pull-{client_id}"]


def test_push_and_pull_consumers_of_one_client_id_share_one_pull_service(broker: InProcessBroker) -> None:
    with RmqClient(broker.address) as client:
        fill(client, "PushedTopic")
        fill(client, "PolledTopic")
    pushed: list[MessageExt] = []
    lock = threading.Lock()

    def listener(messages: list[MessageExt], context: object) -> ConsumeConcurrentlyStatus:
        with lock:
            pushed.extend(messages)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    push = PushConsumer("one-loop-push", broker.address, consume_from="first", instance_name=INSTANCE)
    push.subscribe("PushedTopic")
    push.register_message_listener(listener)
    pull = PullConsumer("one-loop-pull", broker.address, consume_from="first", instance_name=INSTANCE)
    pull.subscribe("PolledTopic")
    push.start()
    pull.start()
    try:
        service = push._instance.pull_message_service
        assert pull._instance is push._instance
        assert push._pull_service is service and pull._pull_service is service
        assert service.serves(push) and service.serves(pull)
        polled: list[MessageExt] = []
        wait_until(lambda: polled.extend(pull.poll(0.1)) or len(polled) >= 2 * PER_QUEUE,
                   "the PullConsumer polled its topic")
        wait_until(lambda: len(pushed) >= 2 * PER_QUEUE, "the PushConsumer consumed its topic")
        assert sorted(m.body for m in polled) == sorted(f"PolledTopic-{q}-{i}".encode()
                                                        for q in range(2) for i in range(PER_QUEUE))
        assert sorted(m.body for m in pushed) == sorted(f"PushedTopic-{q}-{i}".encode()
                                                        for q in range(2) for i in range(PER_QUEUE))
        assert len(pull_threads(push.client_id)) == 1   # one pull thread for both consumers
    finally:
        pull.shutdown()
        assert not service.serves(pull) and service.serves(push)   # the other consumer pulls on
        push.shutdown()
    assert not service.serves(push)
    wait_until(lambda: not pull_threads(push.client_id), "the instance's pull thread ended")


class Recorder:
    def __init__(self, name: str, ran: list[str]) -> None:
        self.name, self.ran = name, ran

    def pull_message(self, request: PullRequest) -> None:
        self.ran.append(self.name)


def test_a_consumer_that_shut_down_is_pulled_no_more_while_the_others_pull_on() -> None:
    service = PullMessageService("rmq-pull-test-unregister")
    ran: list[str] = []
    gone, staying = Recorder("gone", ran), Recorder("staying", ran)
    service.register(gone)
    service.register(staying)
    try:
        service.unregister(gone)
        request = PullRequest("G", MessageQueue("T", "broker-a", 0), ProcessQueue(), 0)
        service.execute_pull_request_immediately(gone, request)
        service.execute_pull_request_immediately(staying, request)   # one thread, in order: after gone's
        wait_until(lambda: "staying" in ran, "the registered consumer's request ran")
        assert ran == ["staying"]
    finally:
        service.shutdown()
