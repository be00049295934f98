import json
from pathlib import Path

from rmq.broker_server.offsets.consumer_offset_manager import ConsumerOffsetManager, OffsetKey


def test_commit_query_persist_restore(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager(tmp_path)
    offsets.commit_offset("TopicTest-Consumer", "TopicTest", 0, 335)  # TV-12
    offsets.commit_offset("TopicTest-Consumer", "TopicTest", 2, 333)
    offsets.commit_offset("other", "TopicTest", 0, 1)
    offsets.persist()
    content = json.loads((tmp_path / "config" / "consumerOffset.json").read_text())
    assert content == {
        "offsetTable": {"TopicTest@TopicTest-Consumer": {"0": 335, "2": 333}, "TopicTest@other": {"0": 1}}
    }
    restored = ConsumerOffsetManager(tmp_path)
    restored.load()
    assert restored.query_offset("TopicTest-Consumer", "TopicTest", 2) == 333
    assert restored.query_offsets("TopicTest-Consumer") == {
        OffsetKey("TopicTest-Consumer", "TopicTest", 0): 335,
        OffsetKey("TopicTest-Consumer", "TopicTest", 2): 333,
    }


def test_commit_overwrites_unless_increase_only(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager(tmp_path)
    offsets.commit_offset("g", "t", 0, 335)
    offsets.commit_offset("g", "t", 0, 300)  # TV-12: overwrite
    assert offsets.query_offset("g", "t", 0) == 300
    offsets.commit_offset("g", "t", 0, 200, increase_only=True)
    assert offsets.query_offset("g", "t", 0) == 300
    offsets.commit_offset("g", "t", 0, 400, increase_only=True)
    assert offsets.query_offset("g", "t", 0) == 400


def test_remove_and_topic_cleanup(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager(tmp_path)
    for queue_id in range(3):
        offsets.commit_offset("g", "t", queue_id, 10)
    offsets.commit_offset("g", "u", 0, 5)
    offsets.remove_offset("g", "t", 1)
    assert offsets.query_offset("g", "t", 1) is None
    offsets.remove_topic("t")
    assert offsets.query_offsets("g") == {OffsetKey("g", "u", 0): 5}
    offsets.persist()
    restored = ConsumerOffsetManager(tmp_path)
    restored.load()
    assert restored.query_offsets("g") == {OffsetKey("g", "u", 0): 5}


def test_persist_skips_unchanged_table(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager(tmp_path)
    offsets.persist()
    assert not (tmp_path / "config" / "consumerOffset.json").exists()
