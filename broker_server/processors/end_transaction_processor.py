"""Transactional messages of every protocol (RocketMQ EndTransactionProcessor /
TransactionalMessageService / TransactionalMessageCheckService; spec rocketmq-v2-protocol.md §1
EndTransaction, §3.9; docs/remoting-protocol.md, "Transactions"). Protocol-neutral: refusals are
BrokerError leaves, and producers are asked for a transaction's state through the
`TransactionCheck` each adapter registers (RocketMQ 5 Telemetry, 4.x CHECK_TRANSACTION_STATE).

A TRANSACTION message is stored as a half message in queue 0 of `rmq_sys_trans_half`, invisible
to consumers, with its real topic and queue in properties. EndTransaction COMMIT stores it in
its real queue (once: the transaction is then closed), ROLLBACK drops it. A transaction still
open `transaction_timeout_ms` after the half message was stored (or after the producer's
CHECK_IMMUNITY_TIME_IN_SECONDS) is checked back: one of its producers is asked (a 4.x producer of
its group, else a RocketMQ 5 producer of its topic), every `check_interval_ms`, at most
`check_max` times (then it is rolled back, as RocketMQ discards it).

A transaction belongs to the account that opened it and its topic (the RocketMQ 5 protocol
names no producer group: the account's producers of the topic are the group). Only that
account's producers of the topic are asked to resolve it, and only that account (or an admin)
may end it, holding PUB on the transaction's own topic, whatever topic the request names
(docs/security-model.md: transactions).

Open transactions are journaled in `<store>/config/transactions.journal` (rmq.broker_server.journal:
one fsynced line per opened, checked or ended transaction, shared by concurrent callers) before
the half message is acknowledged, so a restart, kill -9 included, forgets none."""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from rmq.broker_server.errors import BrokerError, UnknownTransaction
from rmq.broker_server.journal import Journal
from rmq.broker_server.json_file import read_json
from rmq.broker_server.long_polling.fair_shares import adjust_count
from rmq.broker_server.processors.names import SYSTEM_TOPIC_PREFIX
from rmq.broker_server.processors.schedule_message_service import message_timeup
from rmq.broker_server.processors.send_message_processor import SendMessageProcessor
from rmq.broker_server.processors.store_executor import StoreExecutor
from rmq.broker_server.security import caller
from rmq.broker_server.security.acl import AccessDenied, Need, ResourceKind
from rmq.rocketmq_v2.properties import PROPERTY_CHECK_IMMUNITY_TIME, PROPERTY_TRANSACTION_PREPARED
from rmq.store import MessageStore
from rmq.stored_message import StoredMessage, decode_record
from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)
HALF_TOPIC = SYSTEM_TOPIC_PREFIX + "trans_half"
HALF_GROUP = SYSTEM_TOPIC_PREFIX + "trans_check"
COMPACT_AFTER_LINES = 100_000


class Resolution(enum.Enum):
    """How a producer ends a transaction (each adapter translates its protocol's value)."""

    COMMIT = enum.auto()
    ROLLBACK = enum.auto()


@dataclass
class OpenTransaction:
    topic: str
    message_id: str
    half_offset: int          # queue offset in HALF_TOPIC queue 0
    check_after_ms: int       # first check time (store time + timeout or immunity)
    check_times: int = 0
    owner: str = ""           # the access key that opened it ("" on a broker without --acl)


@dataclass(frozen=True)
class TransactionSettings:
    timeout_ms: int = 6_000          # RocketMQ transactionTimeOut
    check_interval_ms: int = 30_000  # RocketMQ transactionCheckInterval
    check_max: int = 15              # RocketMQ transactionCheckMax
    max_open: int = 100_000          # open transactions on the broker ...
    max_open_per_account: int = 10_000   # ... and of one account (with --acl)


class TransactionCheck(Protocol):
    """One protocol's way to ask a producer for an open transaction's state (RocketMQ 5 Telemetry,
    4.x CHECK_TRANSACTION_STATE), registered by that protocol's adapter."""

    def ask(self, transaction_id: str, transaction: OpenTransaction, half: StoredMessage) -> bool:
        """Send the check to one of the owner's producers; False when none is connected."""


class EndTransactionProcessor:
    def __init__(self, store: MessageStore, executor: StoreExecutor, sender: SendMessageProcessor,
                 store_path: Path, settings: TransactionSettings) -> None:
        self.store = store
        self.executor = executor
        self.sender = sender
        self.settings = settings
        self.open: dict[str, OpenTransaction] = {}
        self._per_owner: dict[str, int] = {}
        config = store_path / "config"
        self._before_journal = config / "transactions.json"   # written by earlier releases
        self._journal = Journal(config / "transactions.journal", executor, self._snapshot,
                                COMPACT_AFTER_LINES)
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._checks: list[TransactionCheck] = []

    def add_check(self, check: TransactionCheck) -> None:
        """A protocol's producers, asked in the order the checks were added until one is reached."""
        self._checks.append(check)

    def load(self) -> None:
        self._journal.replay(self._apply)
        earlier = read_json(self._before_journal)
        if earlier is not None:
            for transaction_id, fields in earlier.get("open", {}).items():
                self._add(transaction_id, OpenTransaction(**fields))
            self._journal.rewrite_now()
            self._before_journal.unlink()

    def _apply(self, entry: dict[str, Any]) -> None:
        kind, transaction_id = entry["op"], entry["id"]
        if kind == "open":
            self._add(transaction_id, OpenTransaction(**entry["t"]))
        elif kind == "check":
            transaction = self.open.get(transaction_id)
            if transaction is not None:   # else ended meanwhile: its end may be journaled first
                transaction.check_times, transaction.check_after_ms = entry["times"], entry["after"]
        elif kind == "end":
            if transaction_id in self.open:
                self._remove(transaction_id)
        else:
            raise ValueError(f"unknown journal entry {kind!r}")

    def _snapshot(self) -> list[dict[str, Any]]:
        return [{"op": "open", "id": tid, "t": asdict(t)} for tid, t in self.open.items()]

    def _add(self, transaction_id: str, transaction: OpenTransaction) -> None:
        self.open[transaction_id] = transaction
        adjust_count(self._per_owner, transaction.owner, 1)

    def _remove(self, transaction_id: str) -> None:
        adjust_count(self._per_owner, self.open.pop(transaction_id).owner, -1)

    def _ended(self, transaction_id: str) -> None:
        self._remove(transaction_id)
        self._journal.record({"op": "end", "id": transaction_id})

    def check_room(self) -> None:
        """TOO_MANY_REQUESTS when the broker, or the calling account (with --acl), holds its
        most open transactions: asked before a half message is stored, and again when it is."""
        owner = caller.account_key()
        if len(self.open) >= self.settings.max_open:
            raise BrokerError(rmq_pb2.LIMIT_EXCEEDED,
                              f"{self.settings.max_open} transactions are open (max_open_transactions)")
        if owner and self._per_owner.get(owner, 0) >= self.settings.max_open_per_account:
            raise BrokerError(rmq_pb2.LIMIT_EXCEEDED,
                              f"this account holds {self.settings.max_open_per_account} open transactions, "
                              f"its share (max_open_transactions_per_account)")

    # -- half messages -------------------------------------------------------------------
    async def opened(self, topic: str, message_id: str, half_offset: int, properties: dict[str, str]) -> str:
        """Register a stored half message for the calling account; returns its transaction id."""
        self.check_room()
        owner = caller.account_key()
        delay_ms = self.settings.timeout_ms
        immunity = properties.get(PROPERTY_CHECK_IMMUNITY_TIME, "")
        if immunity.isdigit():
            delay_ms = max(delay_ms, int(immunity) * 1000)
        transaction_id = uuid.uuid4().hex.upper()
        transaction = OpenTransaction(topic, message_id, half_offset, int(time.time() * 1000) + delay_ms,
                                      owner=owner)
        self._add(transaction_id, transaction)
        self._journal.record({"op": "open", "id": transaction_id, "t": asdict(transaction)})
        await self._journal.sync()
        return transaction_id

    def require(self, transaction_id: str) -> OpenTransaction:
        """The open transaction, or UnknownTransaction."""
        transaction = self.open.get(transaction_id)
        if transaction is None:
            raise UnknownTransaction(f"transaction {transaction_id!r} is unknown or already ended")
        return transaction

    async def end(self, transaction_id: str, message_id: str, resolution: Resolution,
                  topic: str = "") -> None:
        """COMMIT: the message enters its real queue (once); ROLLBACK: it never does. Only the
        account that opened the transaction (or an admin) may end it, with PUB on its topic."""
        async with self._lock:
            transaction = self.require(transaction_id)
            check_may_end(transaction_id, transaction)
            if transaction.message_id != message_id:
                raise UnknownTransaction(f"transaction {transaction_id!r} is not for message {message_id!r}")
            if topic and topic != transaction.topic:
                raise UnknownTransaction(f"transaction {transaction_id!r} is not for topic {topic!r}")
            if resolution is Resolution.COMMIT:
                half = await self._read_half(transaction.half_offset)
                if half is not None:
                    committed = message_timeup(half)
                    committed.properties.pop(PROPERTY_TRANSACTION_PREPARED, None)
                    await self.sender.put_records(transaction.topic, [committed])
            self._ended(transaction_id)
            await self._journal.sync()

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
            if transaction.check_after_ms > now or transaction_id not in self.open:   # ended meanwhile
                continue
            if transaction.check_times >= self.settings.check_max:
                log.warning("transaction %s of %s checked %d times without an answer: rolled back",
                            transaction_id, transaction.topic, transaction.check_times)
                async with self._lock:
                    if transaction_id in self.open:
                        self._ended(transaction_id)
                continue
            transaction.check_times += 1
            transaction.check_after_ms = now + self.settings.check_interval_ms
            self._journal.record({"op": "check", "id": transaction_id, "times": transaction.check_times,
                                  "after": transaction.check_after_ms})
            await self._ask_producer(transaction_id, transaction)
        await self._journal.sync()

    async def _ask_producer(self, transaction_id: str, transaction: OpenTransaction) -> None:
        """Ask one of the owner's producers (the first protocol that has one connected)."""
        if not self._checks:
            return
        half = await self._read_half(transaction.half_offset)
        if half is None:
            return
        for check in self._checks:
            if check.ask(transaction_id, transaction, half):
                return


def check_may_end(transaction_id: str, transaction: OpenTransaction) -> None:
    """AccessDenied unless the calling account opened the transaction (or is an admin) and holds
    PUB on the transaction's own topic."""
    if not caller.owns(transaction.owner):
        raise AccessDenied(f"transaction {transaction_id!r} was opened by another account")
    if not caller.may(ResourceKind.TOPIC, transaction.topic, Need.PUB):
        raise AccessDenied(f"ending transaction {transaction_id!r} needs PUB on its topic")
