"""PullConsumer (lite pull) against a whole broker in this process: TV-18's loop, assign + seek + poll +
commit, pause/resume, two group members splitting 8 queues, and auto-commit across a
restart resuming with no gap."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from rmq.connector.client import MessageQueue, OutgoingMessage, PullStatus, RmqClient
from rmq.connector.message import MessageExt
from rmq.connector.pull_consumer import PullConsumer
from rmq.subscription import MessageSelector
from tests.broker_server.in_process_broker import InProcessBroker, running_broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    with running_broker(tmp_path_factory.mktemp("pull-consumer"), flush="sync") as server:
        yield server


@pytest.fixture
def client(broker: InProcessBroker) -> Iterator[RmqClient]:
    with RmqClient(broker.address) as rmq_client:
        yield rmq_client


def fill(client: RmqClient, topic: str, queues: int, per_queue: int) -> list[MessageQueue]:
    client.create_topic(topic, queues)
    for queue_id in range(queues):
        client.send(topic, [OutgoingMessage(f"{queue_id}-{i}".encode(), queue_id=queue_id)
                            for i in range(per_queue)])
    return list(client.query_route(topic).message_queues)


def poll_until(consumers: list[PullConsumer], count: int, rounds: int = 200) -> list[list[MessageExt]]:
    got: list[list[MessageExt]] = [[] for _ in consumers]
    for _ in range(rounds):
        for i, consumer in enumerate(consumers):
            got[i].extend(consumer.poll(0.05))
        if sum(map(len, got)) >= count:
            break
    return got


def test_tv18_pull_loop(client: RmqClient) -> None:
    """[B]'s DefaultMQPullConsumer loop over the client: 40 messages, 32 per pull."""
    [mq] = fill(client, "TV18", 1, 40)
    table: dict[MessageQueue, int] = {}
    statuses = []
    while True:
        result = client.pull(mq, table.get(mq, 0), 32, group="G18")
        table[mq] = result.next_begin_offset
        statuses.append((result.pull_status, result.next_begin_offset))
        if result.pull_status == PullStatus.NO_NEW_MSG:
            break
    assert statuses == [(PullStatus.FOUND, 32), (PullStatus.FOUND, 40), (PullStatus.NO_NEW_MSG, 40)]


def test_assign_seek_poll_commit(broker: InProcessBroker, client: RmqClient) -> None:
    [mq] = fill(client, "Assigned", 1, 40)
    consumer = PullConsumer("GA", broker.address, auto_commit=False)
    consumer.assign([mq])
    consumer.start()
    try:
        assert consumer.committed(mq) == -1
        consumer.seek(mq, 0)
        batches = [consumer.poll(5.0), consumer.poll(5.0), consumer.poll(0.3)]
        assert [[m.queue_offset for m in b] for b in batches] == [list(range(32)), list(range(32, 40)), []]
        consumer.commit()
        assert consumer.committed(mq) == 40
        consumer.seek(mq, 10)
        assert [m.queue_offset for m in consumer.poll(5.0)][:3] == [10, 11, 12]
        consumer.commit({mq: 12})
        assert consumer.committed(mq) == 12
        consumer.pause([mq])
        consumer.seek_to_begin(mq)
        assert consumer.poll(0.5) == []
        consumer.resume([mq])
        assert consumer.poll(5.0)[0].queue_offset == 0
        consumer.seek_to_end(mq)
        client.send("Assigned", [OutgoingMessage(b"late", queue_id=0)])
        assert [m.body for m in consumer.poll(5.0)] == [b"late"]
        with pytest.raises(ValueError, match="outside"):
            consumer.seek(mq, 1000)
    finally:
        consumer.shutdown()


def test_two_members_split_eight_queues(broker: InProcessBroker, client: RmqClient) -> None:
    fill(client, "Split", 8, 10)
    members = [PullConsumer("GS", broker.address, consume_from="first", instance_name=f"m{i}",
                            rebalance_interval_s=1.0) for i in range(2)]
    for member in members:
        member.subscribe("Split", "*")
        member.start()
    try:
        got = poll_until(members, 80)
        assert [len(m.assignment()) for m in members] == [4, 4]
        assert not set(members[0].assignment()) & set(members[1].assignment())
        bodies = Counter(m.body for batch in got for m in batch)
        assert len(bodies) == 80
        for member, batch in zip(members, got, strict=True):
            assert {m.message_queue for m in batch} <= set(member.assignment())
    finally:
        for member in members:
            member.shutdown()


def test_auto_commit_resumes_after_a_restart_with_no_gap(broker: InProcessBroker,
                                                         client: RmqClient) -> None:
    fill(client, "Resume", 2, 100)
    first = PullConsumer("GR", broker.address, consume_from="first", auto_commit_interval_s=0.1,
                         pull_batch_size=8)
    first.subscribe("Resume")
    first.start()
    seen: list[bytes] = []
    while len(seen) < 60:
        seen.extend(m.body for m in first.poll(5.0))
    first.shutdown()                # commits what poll returned
    second = PullConsumer("GR", broker.address, consume_from="first")
    second.subscribe("Resume")
    second.start()
    try:
        again = [m.body for batch in poll_until([second], 200 - len(seen)) for m in batch]
    finally:
        second.shutdown()
    assert not set(seen) & set(again)             # nothing replayed after a clean stop
    assert set(seen) | set(again) == {f"{q}-{i}".encode() for q in range(2) for i in range(100)}


def test_subscribe_with_an_sql92_selector(broker: InProcessBroker, client: RmqClient) -> None:
    client.create_topic("Selected", 2)
    client.send("Selected", [OutgoingMessage(f"m{i}".encode(), properties={"amount": str(i)})
                             for i in range(10)])
    consumer = PullConsumer("GQ", broker.address, consume_from="first")
    consumer.subscribe("Selected", MessageSelector.by_sql("amount >= 7"))
    with consumer:
        got = poll_until([consumer], 3, rounds=100)[0]
        got += consumer.poll(0.3)
    assert sorted(m.body for m in got) == [b"m7", b"m8", b"m9"]
    with pytest.raises(ValueError, match="position"):
        PullConsumer("GQ2", broker.address).subscribe("Selected", MessageSelector.by_sql("amount >"))


class CountingClient(RmqClient):
    """The real client, counting the committed-offset queries it makes."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.offset_queries: list[tuple[str, str | None]] = []

    def query_consumer_offsets(self, group: str, topic: str = "", unreachable=None,
                               broker_name: str | None = None) -> dict[MessageQueue, int]:
        self.offset_queries.append((topic, broker_name))
        return super().query_consumer_offsets(group, topic, unreachable, broker_name)


def test_a_member_reads_the_committed_offsets_of_its_new_queues_in_one_query(
        broker: InProcessBroker, client: RmqClient) -> None:
    """A rebalance that adds many queues starts each at the group's committed offset, asking each
    broker once per topic (one QueryConsumerOffsets answers every queue), not once per queue."""
    queues = fill(client, "ManyQueues", 8, 10)
    committed = {mq: mq.queue_id for mq in queues}     # queue i resumes at offset i
    client.update_consumer_offsets("GM", committed)
    counting = CountingClient(broker.address)
    consumer = PullConsumer("GM", broker.address, consume_from="first", client=counting)
    consumer.subscribe("ManyQueues")
    consumer.start()
    try:
        first: dict[MessageQueue, int] = {}
        for batch in poll_until([consumer], sum(10 - offset for offset in committed.values())):
            for message in batch:
                first.setdefault(message.message_queue, message.queue_offset)
    finally:
        consumer.shutdown()
        counting.close()
    assert first == committed
    assert counting.offset_queries.count(("ManyQueues", "broker-a")) == 1
