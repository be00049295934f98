"""RocketMQ 5 transactions, translated into the broker's EndTransactionProcessor
(processors/end_transaction_processor.py): EndTransaction's resolution, and the check of an open
transaction sent as a RecoverOrphanedTransactionCommand down the Telemetry stream of one of the
owner's producers of the topic (the protocol names no producer group: they are the group)."""

from __future__ import annotations

from rmq.broker_server.processors.end_transaction_processor import OpenTransaction, Resolution
from rmq.broker_server.rocketmq_v2 import messages
from rmq.broker_server.rocketmq_v2.status import V2Error
from rmq.broker_server.rocketmq_v2.telemetry import TelemetrySessions
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2 as pb
from rmq.stored_message import StoredMessage

RESOLUTIONS = {v2.COMMIT: Resolution.COMMIT, v2.ROLLBACK: Resolution.ROLLBACK}


def resolution_of(resolution: v2.TransactionResolution) -> Resolution:
    """BAD_REQUEST unless COMMIT or ROLLBACK."""
    if resolution not in RESOLUTIONS:
        raise V2Error(v2.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK")
    return RESOLUTIONS[resolution]


class TelemetryTransactionCheck:
    """The RocketMQ 5 TransactionCheck: the owner's producers of the topic, asked in turn."""

    def __init__(self, sessions: TelemetrySessions) -> None:
        self.sessions = sessions

    def ask(self, transaction_id: str, transaction: OpenTransaction, half: StoredMessage) -> bool:
        producers = self.sessions.producers_of(transaction.topic, transaction.owner)
        if not producers:
            return False
        recover = pb.RecoverOrphanedTransactionCommand(message=messages.to_v2(half, transaction.topic),
                                                       transaction_id=transaction_id)
        command = pb.TelemetryCommand(recover_orphaned_transaction_command=recover)
        producers[transaction.check_times % len(producers)].send(command)
        return True
