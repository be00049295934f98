"""The shared status words (rmq.statuses) carry their wire numbers: every member has one and
every wire number has a member."""

from __future__ import annotations

from rmq.statuses import GetMessageStatus, PullStatus
from rmq.v1 import rmq_pb2


def test_get_message_status_values_are_the_wire_numbers() -> None:
    assert {member.name: member.value for member in GetMessageStatus} == {
        name.removeprefix("GMS_"): number for name, number in rmq_pb2.GetMessageStatus.items()
    }


def test_pull_status_values_are_the_wire_numbers() -> None:
    assert {member.name: member.value for member in PullStatus} == dict(rmq_pb2.PullStatus.items())
