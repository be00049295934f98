"""PullRequestHoldService on a real event loop (spec TV-17, longpolling TV-14)."""

from __future__ import annotations

import asyncio
import threading

from rmq.broker_server.long_polling.pull_request_hold_service import PullRequestHoldService, build_key
from rmq.message_format import tags_hash_code
from tests.waiting import wait_until_async

TAG_A = tags_hash_code("TagA")
TAG_B = tags_hash_code("TagB")


class QueueHeads:
    """max offset per queue, as the store reports it."""

    def __init__(self) -> None:
        self.max_offsets: dict[tuple[str, int], int] = {}

    def __call__(self, topic: str, queue_id: int) -> int:
        return self.max_offsets.get((topic, queue_id), 0)


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 10))


def test_key_format() -> None:
    assert build_key("TopicTest", 3) == "TopicTest@3"


def test_arrival_past_the_offset_wakes_matching_requests_only() -> None:
    heads = QueueHeads()
    heads.max_offsets[("T", 0)] = 50

    async def scenario() -> list[str]:
        service = PullRequestHoldService(heads, check_interval_ms=60000)
        service.start()
        woken: list[str] = []

        async def hold(name: str, tag_codes) -> None:
            await service.suspend("T", 0, 50, tag_codes, 15000)
            woken.append(name)

        tasks = [
            asyncio.create_task(hold("all", None)),
            asyncio.create_task(hold("tag-a", frozenset({TAG_A}))),
        ]
        await wait_until_async(lambda: service.held_count() == 2, "both pulls held")
        service.notify_message_arriving("T", 0, 50, TAG_A)  # maxOffset 50 == offset: not new
        service.on_dispatch("T", 1, 50, TAG_A)  # another queue
        await asyncio.sleep(0.01)   # an absence window, not an event: a pull woken here would have run
        assert woken == []
        # dispatch thread: consumeQueueOffset 50 -> maxOffset 51 > 50, tag B
        thread = threading.Thread(target=service.on_dispatch, args=("T", 0, 50, TAG_B))
        thread.start()
        thread.join()
        await wait_until_async(lambda: woken, "a pull woken by the arrival")
        assert woken == ["all"]
        service.on_dispatch("T", 0, 51, TAG_A)
        await asyncio.gather(*tasks)
        service.shutdown()
        return woken

    assert run(scenario()) == ["all", "tag-a"]


def test_timeout_releases_at_the_suspend_time() -> None:
    async def scenario() -> float:
        service = PullRequestHoldService(QueueHeads(), check_interval_ms=60000)
        service.start()
        loop = asyncio.get_running_loop()
        started = loop.time()
        await service.suspend("T", 0, 5, None, 200)
        service.shutdown()
        return loop.time() - started

    assert 0.19 <= run(scenario()) < 5


def test_short_polling_uses_the_short_polling_time() -> None:
    async def scenario() -> float:
        service = PullRequestHoldService(QueueHeads(), long_polling_enable=False, short_polling_time_ms=100)
        assert service.check_interval_ms == 100
        service.start()
        loop = asyncio.get_running_loop()
        started = loop.time()
        await service.suspend("T", 0, 5, None, 15000)
        service.on_dispatch("T", 0, 10, TAG_A)  # no arrival notification without long polling
        service.shutdown()
        return loop.time() - started

    assert run(scenario()) < 5


def test_periodic_check_and_suspend_time_recheck_catch_missed_arrivals() -> None:
    heads = QueueHeads()

    async def scenario() -> None:
        service = PullRequestHoldService(heads, check_interval_ms=50)
        service.start()
        heads.max_offsets[("T", 0)] = 8  # arrived before the pull was held
        await service.suspend("T", 0, 7, frozenset({TAG_A}), 15000)
        held = asyncio.create_task(service.suspend("T", 0, 8, frozenset({TAG_A}), 15000))
        await wait_until_async(lambda: service.held_count() == 1, "the pull held")
        assert not held.done()
        heads.max_offsets[("T", 0)] = 9  # no notification: the 50 ms check finds it
        await held
        service.shutdown()

    run(scenario())


def test_shutdown_and_topic_deletion_release_everything() -> None:
    async def scenario() -> None:
        service = PullRequestHoldService(QueueHeads(), check_interval_ms=60000)
        service.start()
        doomed = [asyncio.create_task(service.suspend("gone", q, 0, None, 60000)) for q in range(3)]
        others = [asyncio.create_task(service.suspend("stays", 0, 0, None, 60000)) for _ in range(3)]
        await wait_until_async(lambda: service.held_count() == 6, "the six pulls held")
        service.wake_topic("gone")
        await asyncio.gather(*doomed)
        assert not any(task.done() for task in others)
        service.shutdown()
        await asyncio.gather(*others)
        await service.suspend("stays", 0, 0, None, 60000)  # after shutdown: not held at all

    run(scenario())
