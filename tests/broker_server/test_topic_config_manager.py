from pathlib import Path

import pytest

from rmq.broker_server.status import RequestError
from rmq.broker_server.topic_config_manager import TopicConfig, TopicConfigManager
from rmq.v1 import rmq_pb2


def test_create_persist_reload_delete(tmp_path: Path) -> None:
    topics = TopicConfigManager(tmp_path)
    topics.create(TopicConfig("orders", 8, 4, 6))
    topics.create(TopicConfig("audit", 1, 1, 4))
    reloaded = TopicConfigManager(tmp_path)
    reloaded.load()
    assert reloaded.all() == [TopicConfig("audit", 1, 1, 4), TopicConfig("orders", 8, 4, 6)]
    assert reloaded.delete("orders") == TopicConfig("orders", 8, 4, 6)
    again = TopicConfigManager(tmp_path)
    again.load()
    assert [config.topic_name for config in again.all()] == ["audit"]


def test_refusals(tmp_path: Path) -> None:
    topics = TopicConfigManager(tmp_path)
    topics.create(TopicConfig("orders", 8, 8))

    def code_of(action) -> int:
        with pytest.raises(RequestError) as error:
            action()
        return error.value.code

    assert code_of(lambda: topics.create(TopicConfig("orders", 8, 8))) == rmq_pb2.TOPIC_ALREADY_EXISTS
    assert code_of(lambda: topics.create(TopicConfig("bad name", 8, 8))) == rmq_pb2.TOPIC_ILLEGAL
    assert code_of(lambda: topics.create(TopicConfig("%DLQ%g", 8, 8))) == rmq_pb2.TOPIC_ILLEGAL
    assert code_of(lambda: topics.create(TopicConfig("t", 0, 8))) == rmq_pb2.ILLEGAL_ARGUMENT
    assert code_of(lambda: topics.create(TopicConfig("t", 8, 1025))) == rmq_pb2.ILLEGAL_ARGUMENT
    assert code_of(lambda: topics.create(TopicConfig("t", 8, 8, 0))) == rmq_pb2.ILLEGAL_ARGUMENT
    assert code_of(lambda: topics.create(TopicConfig("t", 8, 8, 16))) == rmq_pb2.ILLEGAL_ARGUMENT
    assert code_of(lambda: topics.require("missing")) == rmq_pb2.TOPIC_NOT_EXIST
    assert code_of(lambda: topics.delete("missing")) == rmq_pb2.TOPIC_NOT_EXIST


def test_update_grows_queues_and_changes_perm_persistently(tmp_path: Path) -> None:
    topics = TopicConfigManager(tmp_path)
    topics.create(TopicConfig("orders", 4, 4, 6))
    topics.update(TopicConfig("orders", 8, 8, 4))
    reloaded = TopicConfigManager(tmp_path)
    reloaded.load()
    assert reloaded.get("orders") == TopicConfig("orders", 8, 8, 4)


def test_update_refuses_shrinking_unknown_topics_and_bad_configs(tmp_path: Path) -> None:
    topics = TopicConfigManager(tmp_path)
    topics.create(TopicConfig("orders", 4, 4))
    with pytest.raises(RequestError, match="topic 'orders' cannot shrink from 4 to 2 write_queue_nums: "
                                           "queues holding messages cannot be removed") as error:
        topics.update(TopicConfig("orders", 4, 2))
    assert error.value.code == rmq_pb2.ILLEGAL_ARGUMENT
    for config, code in ((TopicConfig("missing", 8, 8), rmq_pb2.TOPIC_NOT_EXIST),
                         (TopicConfig("orders", 8, 1025), rmq_pb2.ILLEGAL_ARGUMENT),
                         (TopicConfig("orders", 8, 8, 0), rmq_pb2.ILLEGAL_ARGUMENT)):
        with pytest.raises(RequestError) as error:
            topics.update(config)
        assert error.value.code == code
    assert topics.get("orders") == TopicConfig("orders", 4, 4)


def test_auto_create_when_enabled(tmp_path: Path) -> None:
    topics = TopicConfigManager(tmp_path, auto_create=True, default_queue_nums=3)
    assert topics.require("fresh") == TopicConfig("fresh", 3, 3, 6)


def test_corrupt_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "topics.json").write_text("{not json")
    with pytest.raises(ValueError, match="topics.json is not valid JSON"):
        TopicConfigManager(tmp_path).load()
