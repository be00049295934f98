"""Transactional messages (RocketMQ TransactionalMessageService / EndTransactionProcessor /
TransactionalMessageCheckService; spec rocketmq-v2-protocol.md §1 EndTransaction, §3.9).

A TRANSACTION message is stored as a half message in queue 0 of `rmq_sys_trans_half`, invisible
to consumers, with its real topic and queue in properties. EndTransaction COMMIT stores it in
its real queue (once: the transaction is then closed), ROLLBACK drops it. A transaction still
open `transaction_timeout_ms` after the half message was stored (or after the producer's
CHECK_IMMUNITY_TIME_IN_SECONDS) is checked back: a RecoverOrphanedTransactionCommand goes to a
producer of the topic through its Telemetry stream, every `check_interval_ms`, at most
`check_max` times (then it is rolled back, as RocketMQ discards it).

Open transactions are kept in `<store>/config/transactions.json`, written (fsynced) before the
half message is acknowledged and whenever one closes, so a restart forgets none."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from rmq.broker_server.json_file import read_json, write_json_atomically
from rmq.broker_server.names import SYSTEM_TOPIC_PREFIX
from rmq.broker_server.rocketmq_v2 import messages
from rmq.broker_server.rocketmq_v2.status import V2Error
from rmq.broker_server.rocketmq_v2.telemetry import TelemetrySessions
from rmq.broker_server.schedule_message_service import message_timeup
from rmq.broker_server.send_message_processor import check_put_status
from rmq.broker_server.store_executor import StoreExecutor
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2 as pb
from rmq.rocketmq_v2.properties import PROPERTY_CHECK_IMMUNITY_TIME, PROPERTY_TRANSACTION_PREPARED
from rmq.store import MessageStore
from rmq.stored_message import StoredMessage, decode_record

log = logging.getLogger(__name__)
HALF_TOPIC = SYSTEM_TOPIC_PREFIX + "trans_half"
HALF_GROUP = SYSTEM_TOPIC_PREFIX + "trans_check"
MAX_OPEN_TRANSACTIONS = 100_000


@dataclass
class OpenTransaction:
    topic: str
    message_id: str
    half_offset: int          # queue offset in HALF_TOPIC queue 0
    check_after_ms: int       # first check time (store time + timeout or immunity)
    check_times: int = 0


@dataclass(frozen=True)
class TransactionSettings:
    timeout_ms: int = 6_000          # RocketMQ transactionTimeOut
    check_interval_ms: int = 30_000  # RocketMQ transactionCheckInterval
    check_max: int = 15              # RocketMQ transactionCheckMax


class TransactionService:
    def __init__(self, store: MessageStore, executor: StoreExecutor, sessions: TelemetrySessions,
                 store_path: Path, settings: TransactionSettings) -> None:
        self.store = store
        self.executor = executor
        self.sessions = sessions
        self.settings = settings
        self.path = store_path / "config" / "transactions.json"
        self.open: dict[str, OpenTransaction] = {}
        self._lock = asyncio.Lock()
        self._task: asyncio.Task | None = None
        # producers of other protocols (4.x remoting): each sends the check and says True, or False
        self.checkers: list[Callable[[str, OpenTransaction, StoredMessage], bool]] = []

    def load(self) -> None:
        content = read_json(self.path) or {}
        self.open = {tid: OpenTransaction(**fields) for tid, fields in content.get("open", {}).items()}

    def _snapshot(self) -> dict:
        return {"open": {tid: asdict(t) for tid, t in self.open.items()}}

    async def _persist(self) -> None:
        await self.executor.run(write_json_atomically, self.path, self._snapshot())

    # -- half messages -------------------------------------------------------------------
    async def opened(self, topic: str, message_id: str, half_offset: int, properties: dict[str, str]) -> str:
        """Register a stored half message; returns its transaction id."""
        if len(self.open) >= MAX_OPEN_TRANSACTIONS:
            raise V2Error(v2.TOO_MANY_REQUESTS, f"{MAX_OPEN_TRANSACTIONS} transactions are open")
        delay_ms = self.settings.timeout_ms
        immunity = properties.get(PROPERTY_CHECK_IMMUNITY_TIME, "")
        if immunity.isdigit():
            delay_ms = max(delay_ms, int(immunity) * 1000)
        transaction_id = uuid.uuid4().hex.upper()
        self.open[transaction_id] = OpenTransaction(topic, message_id, half_offset,
                                                    int(time.time() * 1000) + delay_ms)
        await self._persist()
        return transaction_id

    async def end(self, transaction_id: str, message_id: str, resolution: int) -> None:
        """COMMIT: the message enters its real queue (once); ROLLBACK: it never does."""
        if resolution not in (v2.COMMIT, v2.ROLLBACK):
            raise V2Error(v2.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK")
        async with self._lock:
            transaction = self.open.get(transaction_id)
            if transaction is None:
                raise V2Error(v2.INVALID_TRANSACTION_ID,
                              f"transaction {transaction_id!r} is unknown or already ended")
            if transaction.message_id != message_id:
                raise V2Error(v2.INVALID_TRANSACTION_ID,
                              f"transaction {transaction_id!r} is not for message {message_id!r}")
            if resolution == v2.COMMIT:
                half = await self._read_half(transaction.half_offset)
                if half is not None:
                    committed = message_timeup(half)
                    committed.properties.pop(PROPERTY_TRANSACTION_PREPARED, None)
                    check_put_status((await self.executor.run(self.store.put_message, committed)).status)
            del self.open[transaction_id]
            await self._persist()

    async def _read_half(self, offset: int) -> StoredMessage | None:
        result = await self.executor.run(self.store.get_message, HALF_GROUP, HALF_TOPIC, 0, offset, 1)
        if not result.message_count:
            log.warning("half message at offset %d is gone (retention): transaction dropped", offset)
            return None
        return decode_record(bytes(result.buffer[: int(result.sizes[0])]))

    # -- checks --------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._check_forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _check_forever(self) -> None:
        while True:
            await asyncio.sleep(min(self.settings.check_interval_ms, self.settings.timeout_ms) / 1000 / 2)
            try:
                await self.check_due()
            except Exception:
                log.exception("transaction check failed")

    async def check_due(self) -> None:
        now = int(time.time() * 1000)
        for transaction_id, transaction in list(self.open.items()):
            if transaction.check_after_ms > now:
                continue
            if transaction.check_times >= self.settings.check_max:
                log.warning("transaction %s of %s checked %d times without an answer: rolled back",
                            transaction_id, transaction.topic, transaction.check_times)
                async with self._lock:
                    self.open.pop(transaction_id, None)
                    await self._persist()
                continue
            transaction.check_times += 1
            transaction.check_after_ms = now + self.settings.check_interval_ms
            await self._ask_producer(transaction_id, transaction)
        await self._persist()

    async def _ask_producer(self, transaction_id: str, transaction: OpenTransaction) -> None:
        producers = self.sessions.producers_of(transaction.topic)
        if not producers and not self.checkers:
            return
        half = await self._read_half(transaction.half_offset)
        if half is None or any(check(transaction_id, transaction, half) for check in self.checkers):
            return
        if not producers:
            return
        recover = pb.RecoverOrphanedTransactionCommand(message=messages.to_v2(half, transaction.topic),
                                                       transaction_id=transaction_id)
        command = pb.TelemetryCommand(recover_orphaned_transaction_command=recover)
        producers[transaction.check_times % len(producers)].send(command)
