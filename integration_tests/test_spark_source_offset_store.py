"""RemoteBrokerOffsetStore (clustering) against a real broker (spec consumption §14.4, pull TV-17)."""

from __future__ import annotations

import pytest

from rmq.connector.client import MessageQueue, RmqClient
from rmq.connector.offset_store import ReadOffsetType, RemoteBrokerOffsetStore

pytestmark = pytest.mark.integration


def test_remote_store_writes_the_broker_only_on_persist_all(broker):
    with RmqClient(broker.address) as client:
        client.create_topic("progress", queues=2)
        q0, q1 = (MessageQueue("progress", "broker-a", q) for q in (0, 1))
        store = RemoteBrokerOffsetStore(client, "g-remote")
        assert store.read_offset(q0, ReadOffsetType.READ_FROM_STORE) == -1          # nothing saved
        store.update_offset(q0, 42, increase_only=True)
        store.update_offset(q0, 40, increase_only=True)                             # never backwards
        assert store.read_offset(q0, ReadOffsetType.READ_FROM_MEMORY) == 42
        assert client.query_consumer_offsets("g-remote", "progress") == {}          # memory only
        store.persist_all([q0, q1])                                                 # q1 has no offset
        assert client.query_consumer_offsets("g-remote", "progress") == {q0: 42}
        # Another consumer of the group sees it from the broker.
        other = RemoteBrokerOffsetStore(client, "g-remote")
        assert other.read_offset(q0, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 42
        store.remove_offset(q0)
        assert store.read_offset(q0, ReadOffsetType.READ_FROM_MEMORY) == -1
        assert client.query_consumer_offsets("g-remote", "progress") == {q0: 42}    # removal is local


def test_remote_store_reports_an_unreachable_broker_as_read_failed(broker):
    with RmqClient(broker.address, timeout=1.0) as client:
        client.create_topic("gone", queues=1)
        mq = MessageQueue("gone", "broker-a", 0)
        store = RemoteBrokerOffsetStore(client, "g-gone")
        broker.stop()
        assert store.read_offset(mq, ReadOffsetType.READ_FROM_STORE) == -2
