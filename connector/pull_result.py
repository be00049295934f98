"""PullResult: what one pull (or one Flight batch) answered, as the consumers take it (RocketMQ
PullResult; docs/internals/pull.md §15): its status, the next offset to pull, the queue's
bounds, the packed records and the member the broker suggests reading from next."""

from __future__ import annotations

from dataclasses import dataclass

from rmq.mix_all import MASTER_ID
from rmq.statuses import GetMessageStatus, PullStatus
from rmq.v1 import rmq_pb2


@dataclass(frozen=True)
class PullResult:
    pull_status: PullStatus
    store_status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: rmq_pb2.PackedMessages
    suggest_which_broker_id: int = MASTER_ID   # not MASTER_ID: what was read has left the broker's memory


def pull_result(response: rmq_pb2.PullMessageResponse) -> PullResult:
    """A PullMessage answer (or a Flight batch's metadata, rmq.flight) as a PullResult."""
    return PullResult(PullStatus(response.pull_status), GetMessageStatus(response.store_status),
                      response.next_begin_offset, response.min_offset, response.max_offset, response.messages,
                      response.suggest_which_broker_id)
