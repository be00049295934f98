"""getMessage with a record filter (MessageFilter#isMatchedByCommitLog, spec
consumption-longpolling-offsets §9 and §10 "SQL92"): filtered-out messages advance nextBeginOffset
exactly like tag misses, and records past a full batch are never evaluated."""

from __future__ import annotations

from rmq import message_format as mf
from rmq.sql92 import compile_sql92
from rmq.store import GetMessageStatus
from tests.store.conftest import message, wait_dispatched
from tests.store.test_get_message import queue_offsets

S = GetMessageStatus


def sql(expression: str):
    compiled = compile_sql92(expression)
    return lambda record: compiled.matches(mf.record_properties(record))


def regions(open_store, *names: str):
    store = open_store()
    store.put_messages([message(body=b"x" * n, region=name, TAGS=f"T{n % 2}")
                        for n, name in enumerate(names)])
    wait_dispatched(store)
    return store


def test_record_properties_reads_only_the_properties_field() -> None:
    from tests.spec_vectors import TV2_RECORD
    assert mf.record_properties(TV2_RECORD) == {}


def test_filtered_messages_advance_next_begin_offset(open_store) -> None:
    store = regions(open_store, "us", "eu", "us", "eu", "eu", "us")
    result = store.get_message("g", "TopicTest", 0, 0, 32, record_filter=sql("region = 'eu'"))
    assert (result.status, queue_offsets(result), result.next_begin_offset) == (S.FOUND, [1, 3, 4], 6)


def test_nothing_matched_is_no_matched_message_past_the_scanned_entries(open_store) -> None:
    store = regions(open_store, "us", "us", "us")
    result = store.get_message("g", "TopicTest", 0, 1, 32, record_filter=sql("region = 'eu'"))
    assert (result.status, result.message_count, result.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 0, 3)


def test_full_batch_stops_before_the_next_entry_unevaluated(open_store) -> None:
    store = regions(open_store, "eu", "us", "eu", "eu", "us", "eu")
    seen: list[dict[str, str]] = []
    compiled = compile_sql92("region = 'eu'")

    def recording(record: bytes) -> bool:
        seen.append(mf.record_properties(record))
        return compiled.matches(seen[-1])

    result = store.get_message("g", "TopicTest", 0, 0, 2, record_filter=recording)
    assert (queue_offsets(result), result.next_begin_offset) == ([0, 2], 3)   # breaks before entry 3
    assert len(seen) == 3


def test_tag_filter_applies_before_the_record_filter(open_store) -> None:
    store = regions(open_store, "eu", "eu", "eu", "eu")
    result = store.get_message("g", "TopicTest", 0, 0, 32, tag_codes={mf.tags_hash_code("T1")},
                               record_filter=sql("region = 'eu'"))
    assert (queue_offsets(result), result.next_begin_offset) == ([1, 3], 4)
