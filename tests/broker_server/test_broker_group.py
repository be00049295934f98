"""A broker's role in its group (docs/replication.md): the slave suggestion (spec
consumer-pull-rebalance §12.4, TV-6), read-only slaves, and the role settings."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.broker_server.config import BrokerConfig, load_config
from rmq.broker_server.errors import UserError
from rmq.broker_server.processors.topic_config_manager import TopicConfig
from rmq.store import BrokerRole, FlushDiskType, MessageStore, MessageStoreConfig
from rmq.store.message_reader import memory_threshold, suggest_pulling_from_slave
from rmq.v1 import rmq_pb2
from tests.broker_server.store_fixture import wait_dispatched
from tests.broker_server.test_processors import PEER, Broker
from tests.store.conftest import message

GiB = 1024**3


def test_tv6_slave_suggestion() -> None:
    memory = memory_threshold(16 * GiB, 40)
    assert memory == int(6.4 * GiB)
    assert suggest_pulling_from_slave(7 * GiB, 0, memory)
    assert not suggest_pulling_from_slave(6 * GiB, 0, memory)
    assert not suggest_pulling_from_slave(memory, 0, memory)     # strict >


def broker_on(path: Path, role: BrokerRole) -> Iterator[Broker]:
    """A broker whose whole CommitLog counts as "no longer in memory" (ratio 0)."""
    config = MessageStoreConfig(store_dir=path / "store", flush_disk_type=FlushDiskType.ASYNC,
                                mapped_file_size_commit_log=1 << 20, broker_role=role,
                                access_message_in_memory_max_ratio=0)
    store = MessageStore(config)
    store.start()
    broker = Broker(store, path)
    broker.topics.create(TopicConfig("T", 1, 1))
    try:
        yield broker
    finally:
        broker.executor.shutdown()
        store.shutdown()


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Broker]:
    yield from broker_on(tmp_path / "master", BrokerRole.ASYNC_MASTER)


@pytest.fixture
def slave(tmp_path: Path) -> Iterator[Broker]:
    yield from broker_on(tmp_path / "slave", BrokerRole.SLAVE)


def pull(broker: Broker, offset: int) -> rmq_pb2.PullMessageResponse:
    request = rmq_pb2.PullMessageRequest(consumer_group="G", topic="T", queue_id=0, queue_offset=offset,
                                         max_messages=1)
    return asyncio.run(broker.pull.process(request))


def test_a_master_sends_a_slow_reader_to_slave_1_and_a_slave_sends_it_back(master: Broker,
                                                                           slave: Broker) -> None:
    for _ in range(3):
        assert master.store.put_message(message(topic="T")).ok
    slave.store.append_replicated(0, master.store.ha_service.read(0))
    wait_dispatched(master.store, "T", 0, 3)
    wait_dispatched(slave.store, "T", 0, 3)
    assert pull(master, 0).suggest_which_broker_id == 1     # bytes still to read > 0 bytes in memory
    assert pull(slave, 0).suggest_which_broker_id == 0      # a slave always names the master
    assert pull(slave, 0).messages.count == 1


def test_a_slave_refuses_sends_clearly(slave: Broker) -> None:
    request = rmq_pb2.SendMessageRequest(topic="T", messages=[rmq_pb2.Message(body=b"x")])
    response = asyncio.run(slave.send.process(request, PEER))
    assert response.status.code == rmq_pb2.SERVICE_NOT_AVAILABLE
    assert "SLAVE (read-only)" in response.status.message
    assert slave.store.get_commit_log_max_offset() == 0


@pytest.mark.parametrize(("settings", "error"), [
    ({"broker_role": "SLAVE", "broker_id": 1}, "a SLAVE needs --master HOST:PORT"),
    ({"broker_role": "SLAVE", "master": "127.0.0.1:1"}, "a SLAVE needs a broker id of 1 or more, not 0"),
    ({"broker_role": "SYNC_MASTER", "broker_id": 2}, "a SYNC_MASTER has broker id 0 and no --master"),
    ({"broker_role": "MASTER"}, "role must be one of ASYNC_MASTER, SYNC_MASTER, SLAVE, not 'MASTER'"),
    ({"broker_role": "SLAVE", "broker_id": 1, "master": "nowhere"}, "master must be HOST:PORT"),
])
def test_role_settings_are_checked(settings: dict, error: str) -> None:
    with pytest.raises(UserError, match=error):
        load_config(BrokerConfig, None, settings)


def test_a_slave_config_loads() -> None:
    settings = {"broker_role": "SLAVE", "broker_id": 1, "master": "10.0.0.1:10911"}
    config = load_config(BrokerConfig, None, settings)
    assert (config.broker_id, config.broker_role, config.master) == (1, BrokerRole.SLAVE, "10.0.0.1:10911")
