"""Receipt handles name one delivery (#26 stale-ack bug, #25 item 10): a handle superseded by a
later delivery of the same message is refused with INVALID_RECEIPT_HANDLE, and the later
delivery stays in flight for the consumer that holds it."""

from __future__ import annotations

from pathlib import Path

import grpc

from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.rocketmq_v2 import definition_pb2 as v2
from tests.broker_server.in_process_broker import InProcessBroker
from tests.broker_server.v2_calls import V2Client


def test_a_late_ack_with_a_superseded_handle_is_refused_and_the_current_delivery_stays_in_flight(
        tmp_path: Path):
    broker = InProcessBroker(tmp_path).start()
    try:
        with RmqClient(broker.address) as client:
            client.create_topic("orders", queues=1)
            client.send("orders", [OutgoingMessage(b"once")])
        with grpc.insecure_channel(broker.address) as channel:
            a, b, c = (V2Client(channel, name) for name in ("consumer-a", "consumer-b", "consumer-c"))
            [first] = a.receive("g", "orders", wait_ms=5_000)
            changed = a.change_invisible("g", first, 0)   # visible again at once, as if A were slow
            assert changed.status.code == v2.OK
            [again] = b.receive("g", "orders")
            assert (again.body, again.system_properties.delivery_attempt) == (b"once", 2)
            assert a.ack("g", first) == v2.INVALID_RECEIPT_HANDLE                            # attempt 1
            assert a.ack("g", first, changed.receipt_handle) == v2.INVALID_RECEIPT_HANDLE    # its change
            assert c.receive("g", "orders") == []       # B's delivery is still in flight ...
            assert b.change_invisible("g", again, 0).status.code == v2.OK   # ... and B still holds it
            [third] = c.receive("g", "orders")
            assert third.system_properties.delivery_attempt == 3
            assert c.ack("g", third) == v2.OK
            assert c.ack("g", third) == v2.OK   # acknowledging what is done stays idempotent
    finally:
        broker.stop()
