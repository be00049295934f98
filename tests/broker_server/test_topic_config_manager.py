import json
from pathlib import Path

import pytest

from rmq.broker_server.errors import BrokerError
from rmq.broker_server.processors import topic_config_manager
from rmq.broker_server.processors.topic_config_manager import TopicConfig, TopicConfigManager
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
        with pytest.raises(BrokerError) as error:
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
    with pytest.raises(BrokerError, match="topic 'orders' cannot shrink from 4 to 2 write_queue_nums: "
                                           "queues holding messages cannot be removed") as error:
        topics.update(TopicConfig("orders", 4, 2))
    assert error.value.code == rmq_pb2.ILLEGAL_ARGUMENT
    for config, code in ((TopicConfig("missing", 8, 8), rmq_pb2.TOPIC_NOT_EXIST),
                         (TopicConfig("orders", 8, 1025), rmq_pb2.ILLEGAL_ARGUMENT),
                         (TopicConfig("orders", 8, 8, 0), rmq_pb2.ILLEGAL_ARGUMENT)):
        with pytest.raises(BrokerError) as error:
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


def loaded(path: Path) -> TopicConfigManager:
    topics = TopicConfigManager(path)
    topics.load()
    return topics


def test_each_change_appends_one_journal_line_and_load_compacts(tmp_path: Path) -> None:
    loaded(tmp_path).create(TopicConfig("first", 1, 1))
    topics = loaded(tmp_path)
    snapshot = topics.path.read_bytes()
    topics.create(TopicConfig("orders", 4, 4))
    topics.update(TopicConfig("orders", 8, 8, 4))
    topics.delete("first")
    assert topics.path.read_bytes() == snapshot            # the table is not rewritten per change
    assert topics.journal_path.read_text().splitlines() == [
        '{"put": {"perm": 6, "read_queue_nums": 4, "topic_name": "orders", "write_queue_nums": 4}}',
        '{"put": {"perm": 4, "read_queue_nums": 8, "topic_name": "orders", "write_queue_nums": 8}}',
        '{"delete": "first"}',
    ]
    again = loaded(tmp_path)
    assert again.all() == [TopicConfig("orders", 8, 8, 4)]
    assert again.journal_path.read_bytes() == b""
    assert json.loads(again.path.read_text())["topicConfigTable"] == {
        "orders": {"perm": 4, "read_queue_nums": 8, "topic_name": "orders", "write_queue_nums": 8}}


def test_journal_replayed_over_its_own_compaction_changes_nothing(tmp_path: Path) -> None:
    """A crash after a compaction wrote the snapshot but before it emptied the journal."""
    topics = loaded(tmp_path)
    topics.create(TopicConfig("a", 1, 1))
    topics.delete("a")
    topics.create(TopicConfig("a", 2, 2))
    topics.create(TopicConfig("b", 1, 1))
    journal = topics.journal_path.read_bytes()
    expected = loaded(tmp_path).all()
    topics.journal_path.write_bytes(journal)
    assert loaded(tmp_path).all() == expected == [TopicConfig("a", 2, 2), TopicConfig("b", 1, 1)]


def test_torn_last_journal_line_is_dropped_and_a_corrupt_one_refused(tmp_path: Path) -> None:
    topics = loaded(tmp_path)
    topics.create(TopicConfig("kept", 1, 1))
    with open(topics.journal_path, "ab") as journal:
        journal.write(b'{"put": {"perm": 6, "read_qu')          # killed in the middle of an append
    assert loaded(tmp_path).all() == [TopicConfig("kept", 1, 1)]
    topics.journal_path.write_bytes(b'{"delete": "kept"}\nnot json\n{"delete": "x"}\n')
    with pytest.raises(ValueError, match="topics.journal line 2 is not valid JSON"):
        loaded(tmp_path)
    topics.journal_path.write_bytes(b'{"rename": "kept"}\n')
    with pytest.raises(ValueError, match="topics.journal line 1 is not a topic record"):
        loaded(tmp_path)


def test_a_journal_longer_than_the_table_is_compacted(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(topic_config_manager, "JOURNAL_COMPACT_MIN_RECORDS", 4)
    topics = loaded(tmp_path)
    topics.create(TopicConfig("a", 1, 1))
    topics.create(TopicConfig("b", 1, 1))
    for n in range(9):
        topics.update(TopicConfig("a", 1 + n, 1 + n))
    # 11 records: compacted after the 5th and the 10th, one left, the rest in the snapshot
    assert len(topics.journal_path.read_text().splitlines()) == 1
    assert json.loads(topics.path.read_text())["topicConfigTable"]["a"]["read_queue_nums"] == 8
    assert loaded(tmp_path).all() == [TopicConfig("a", 9, 9), TopicConfig("b", 1, 1)]
