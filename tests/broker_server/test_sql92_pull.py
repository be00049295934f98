"""PullMessage with an SQL92 subscription over a real store (spec consumption-longpolling-offsets
§9-§10): broker-side filtering with tag-filter offset semantics, clear refusals, and long polling
that answers a held pull only for a matching message."""

from __future__ import annotations

import asyncio

import numpy as np

from rmq.sql92 import MAX_NESTING_DEPTH
from rmq.stored_message import decode_records
from rmq.v1 import rmq_pb2
from tests.broker_server import test_processors
from tests.broker_server.store_fixture import wait_dispatched
from tests.broker_server.test_processors import PEER, Broker, pull, send
from tests.waiting import wait_until_async

broker = test_processors.broker   # the fixture: processors wired as the broker wires them, on a real store
EU_MID = "region = 'eu' AND amount BETWEEN 100 AND 500"


def order(region: str, amount: int) -> rmq_pb2.Message:
    return rmq_pb2.Message(body=f"{region}-{amount}".encode(), queue_id=0,
                           properties={"region": region, "amount": str(amount)})


def bodies(response: rmq_pb2.PullMessageResponse) -> list[bytes]:
    sizes = np.frombuffer(response.messages.sizes, dtype="<i4")
    return [m.body for m in decode_records(response.messages.records, sizes)]


def sql_pull(broker: Broker, offset: int, expression: str = EU_MID, **fields
             ) -> rmq_pb2.PullMessageResponse:
    return pull(broker, 0, offset, sub_expression=expression, expression_type=rmq_pb2.SQL92, **fields)


def test_only_matching_messages_and_next_begin_offset_past_the_filtered(broker: Broker) -> None:
    send(broker, order("eu", 50), order("eu", 150), order("us", 200), order("eu", 500), order("apac", 300))
    wait_dispatched(broker.store, "T", 0, 5)
    response = sql_pull(broker, 0)
    assert (response.pull_status, bodies(response), response.next_begin_offset) == (
        rmq_pb2.FOUND, [b"eu-150", b"eu-500"], 5)
    nothing = sql_pull(broker, 4)
    assert (nothing.pull_status, nothing.next_begin_offset) == (rmq_pb2.NO_MATCHED_MSG, 5)


def test_a_tag_expression_is_not_read_as_sql(broker: Broker) -> None:
    send(broker, order("eu", 150))
    wait_dispatched(broker.store, "T", 0, 1)
    assert pull(broker, 0, 0, sub_expression="region = 'eu'").pull_status == rmq_pb2.NO_MATCHED_MSG


def test_malformed_expression_is_refused_with_its_position(broker: Broker) -> None:
    response = sql_pull(broker, 0, "region = 'eu' AND amount >")
    assert response.status.code == rmq_pb2.SUBSCRIPTION_PARSE_FAILED
    assert "at position 26: expected a property name, literal or '('" in response.status.message


def test_disabled_property_filter_refuses_sql92(broker: Broker) -> None:
    broker.pull.enable_property_filter = False
    response = sql_pull(broker, 0)
    assert response.status.code == rmq_pb2.FILTER_NOT_SUPPORTED
    assert "enable_property_filter" in response.status.message


def test_held_pull_is_answered_only_for_a_matching_message(broker: Broker) -> None:
    async def scenario() -> tuple[bool, rmq_pb2.PullMessageResponse]:
        broker.hold.start()
        held = asyncio.ensure_future(broker.pull.process(rmq_pb2.PullMessageRequest(
            consumer_group="G", topic="T", queue_id=0, queue_offset=0, max_messages=32,
            sys_flag=rmq_pb2.FLAG_SUSPEND, suspend_timeout_ms=10_000,
            sub_expression=EU_MID, expression_type=rmq_pb2.SQL92)))
        await wait_until_async(lambda: broker.hold.held_count() == 1, "the pull held")
        await broker.send.process(rmq_pb2.SendMessageRequest(topic="T", messages=[order("us", 150)]), PEER)
        await wait_until_async(lambda: broker.store.get_max_offset_in_queue("T", 0) == 1,
                               "the arrival dispatched")
        await asyncio.sleep(0.2)   # an absence window, not an event: a pull woken by it would be answered
        answered_early = held.done()
        await broker.send.process(rmq_pb2.SendMessageRequest(topic="T", messages=[order("eu", 150)]), PEER)
        response = await asyncio.wait_for(held, 5)
        broker.hold.shutdown()
        return answered_early, response

    answered_early, response = asyncio.run(scenario())
    assert not answered_early, "a non-matching arrival answered the held SQL92 pull"
    assert (response.pull_status, bodies(response), response.next_begin_offset) == (
        rmq_pb2.FOUND, [b"eu-150"], 2)


def test_deep_nesting_is_a_parse_failure_with_its_position_and_no_log(broker: Broker, caplog) -> None:
    """Issue #25 item 6: 1,000 NOTs or 800 parentheses overflowed the recursion limit (SYSTEM_ERROR and
    a traceback per call); now the parentheses past the shared depth limit are refused where they
    start, a run of NOTs is fine, and the broker logs nothing for either."""
    send(broker, order("eu", 150))
    wait_dispatched(broker.store, "T", 0, 1)
    deep = sql_pull(broker, 0, "(" * 800 + "region = 'eu'" + ")" * 800)
    assert deep.status.code == rmq_pb2.SUBSCRIPTION_PARSE_FAILED
    assert f"at position {MAX_NESTING_DEPTH}: parentheses nested deeper than" in deep.status.message
    assert len(deep.status.message) < 400
    negations = sql_pull(broker, 0, "NOT " * 1000 + "region = 'eu'")
    assert (negations.status.code, bodies(negations)) == (rmq_pb2.OK, [b"eu-150"])
    assert caplog.records == []
