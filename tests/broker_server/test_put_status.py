"""Every store PutMessageStatus but PUT_OK is answered with its own Code (keyed by member)."""

from __future__ import annotations

import pytest

from rmq.broker_server.errors import BrokerError
from rmq.broker_server.processors.put_status import check_put_status
from rmq.statuses import PutMessageStatus
from rmq.v1 import rmq_pb2

STORED = (PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_SLAVE_TIMEOUT, PutMessageStatus.SLAVE_NOT_AVAILABLE)


@pytest.mark.parametrize("status", [s for s in PutMessageStatus if s not in STORED])
def test_every_refused_put_is_answered_with_its_code(status: PutMessageStatus) -> None:
    expected = {
        PutMessageStatus.FLUSH_DISK_TIMEOUT: rmq_pb2.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.MESSAGE_ILLEGAL: rmq_pb2.MESSAGE_ILLEGAL,
        PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: rmq_pb2.PROPERTIES_SIZE_EXCEEDED,
        PutMessageStatus.MESSAGE_SIZE_EXCEEDED: rmq_pb2.MESSAGE_SIZE_EXCEEDED,
        PutMessageStatus.SERVICE_NOT_AVAILABLE: rmq_pb2.SERVICE_NOT_AVAILABLE,
        PutMessageStatus.UNKNOWN_ERROR: rmq_pb2.SYSTEM_ERROR,
    }
    with pytest.raises(BrokerError) as refused:
        check_put_status(status)
    assert refused.value.code == expected[status]
    assert refused.value.message.endswith(f"({status.name})")


@pytest.mark.parametrize("status", STORED)
def test_stored_batches_pass(status: PutMessageStatus) -> None:
    """SYNC_MASTER's FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE: stored on the master only."""
    check_put_status(status)
