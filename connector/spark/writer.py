"""Spark sink `rmq`: `df.write.format("rmq")` and `df.writeStream.format("rmq")`.

Each Spark task turns its Arrow record batches into `OutgoingMessage`s column by column,
groups them by topic and sends them with `RmqClient.send`, `batchSize` messages per
SendMessage request, retrying on another broker when one cannot be reached or answers a
refusal another broker may cure (the Producer's rule, `send_may_be_retried`). Delivery is
at-least-once: a message acknowledged by the broker stays in the topic even when its Spark
task (or another task of the same job) later fails, and a retried send or task, or a
streaming micro-batch replayed after a restart, sends its rows again.

`queueSelector=hashKeys` sends each row to the queue RocketMQ's SelectMessageQueueByHash
picks for its `keys` (Java String.hashCode modulo the topic's writable queues, in route
order), so rows with the same keys land on one queue in row order and an orderly consumer
sees them in that order; rows without keys go round-robin. Such sends are retried on the same
broker only. A `delay_level` column delays delivery (RocketMQ levels, 1 = 1 s ... 18 = 2 h;
levels above the broker's highest are clamped by the broker). A `deliver_time` column (timestamp)
makes a row a timer message delivered at that time: it is sent as the property TIMER_DELIVER_MS
(epoch ms, RocketMQ 5's delivery timestamp; it replaces one the `properties` column carries);
null: delivered at once.

Streaming output modes: append and update send the micro-batch's rows; complete sends the
whole result table at every micro-batch, as Kafka's sink does (a topic cannot be truncated:
consumers see every version). Batch writes append only (`mode("overwrite")` is refused).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from rmq.auth import SECURITY_OPTION_NAMES, ClientSecurity
from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.connector.endpoints import FORMAT_HINT, parse_endpoints
from rmq.connector.errors import RmqError, RmqSinkError
from rmq.connector.producer import send_may_be_retried, writable_queues
from rmq.message_format import tags_hash_code
from rmq.message_queue import MessageQueue
from rmq.rocketmq_v2.properties import PROPERTY_TIMER_DELIVER_MS

logger = logging.getLogger(__name__)

OPTION_NAMES = ("endpoints", "topic", "batchSize", "queueSelector") + SECURITY_OPTION_NAMES
ROUND_ROBIN = "roundrobin"
HASH_KEYS = "hashkeys"
QUEUE_SELECTORS = {ROUND_ROBIN: "roundRobin", HASH_KEYS: "hashKeys"}   # lower-case -> documented
# Options Spark itself adds to a write's options (DataStreamWriter / save(path)).
SPARK_OPTION_NAMES = ("checkpointLocation", "queryName", "path")
DEFAULT_BATCH_SIZE = 512
MAX_BATCH_SIZE = 10_000
MAX_QUEUE_ID = 2**31 - 1   # int32 on the wire
MAX_DELAY_LEVEL = 2**31 - 1   # int32 on the wire; the broker clamps levels above its highest
SEND_RETRY_BACKOFF_S = 0.2   # before the second and later retries (the first goes to the next broker)


def _is_string(data_type: DataType) -> bool:
    return isinstance(data_type, StringType)   # any collation


def _is_integer(data_type: DataType) -> bool:
    return isinstance(data_type, ByteType | ShortType | IntegerType | LongType)


INTEGER_TYPES = "an integer type (tinyint, smallint, int or bigint)"


def _is_string_map(data_type: DataType) -> bool:
    return (isinstance(data_type, MapType) and _is_string(data_type.keyType)
            and _is_string(data_type.valueType))


# Sink columns: (accepts the Spark type, accepted types for error messages); `body` is required.
SINK_COLUMNS: dict[str, tuple[Callable[[DataType], bool], str]] = {
    "body": (lambda t: isinstance(t, BinaryType) or _is_string(t), "binary or string"),
    "topic": (_is_string, "string"),
    "tags": (_is_string, "string"),
    "keys": (_is_string, "string (space-separated keys)"),
    "properties": (_is_string_map, "map<string,string>"),
    "queue_id": (_is_integer, INTEGER_TYPES),
    "delay_level": (_is_integer, INTEGER_TYPES),
    "deliver_time": (lambda t: isinstance(t, TimestampType), "timestamp (when to deliver the message)"),
}
_US_PER_MS = 1000


@dataclass(frozen=True)
class SinkOptions:
    endpoints: str
    topic: str | None
    batch_size: int
    security: ClientSecurity = ClientSecurity()   # accessKey/secretKey/tls/tlsCaFile
    queue_selector: str = ROUND_ROBIN

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        lowered = {key.lower(): value for key, value in options.items()}
        _reject_unknown(lowered)
        return cls(
            endpoints=_endpoints(lowered.get("endpoints")),
            topic=_topic(lowered.get("topic")),
            batch_size=_batch_size(lowered.get("batchsize")),
            security=_security(options),
            queue_selector=_queue_selector(lowered.get("queueselector")),
        )


def _reject_unknown(options: Mapping[str, str]) -> None:
    known = {name.lower() for name in OPTION_NAMES + SPARK_OPTION_NAMES}
    for key in options:
        if key not in known:
            raise RmqSinkError(
                f"Unknown option {key!r} for the rmq sink: expected one of {', '.join(OPTION_NAMES)}"
            )


def _security(options: Mapping[str, str]) -> ClientSecurity:
    try:
        return ClientSecurity.from_options(options)
    except ValueError as error:   # names the option, never the secret
        raise RmqSinkError(str(error)) from None


def _endpoints(value: str | None) -> str:
    if value is None:
        raise RmqSinkError(f"option 'endpoints' is required: name server(s) or broker(s), {FORMAT_HINT}")
    try:
        parse_endpoints(value)
    except ValueError as error:
        raise RmqSinkError(f"option 'endpoints': {error}") from None
    return value


def _topic(value: str | None) -> str | None:
    if value is None:
        return None
    if not value.strip():
        raise RmqSinkError(
            "option 'topic' is empty: give a topic name, or leave it out and use a 'topic' column"
        )
    return value.strip()


def _queue_selector(value: str | None) -> str:
    if value is None:
        return ROUND_ROBIN
    if value.strip().lower() not in QUEUE_SELECTORS:
        raise RmqSinkError(f"Invalid value {value!r} for option 'queueSelector': expected one of "
                           f"{', '.join(QUEUE_SELECTORS.values())}")
    return value.strip().lower()


def _batch_size(value: str | None) -> int:
    if value is None:
        return DEFAULT_BATCH_SIZE
    try:
        size = int(value)
    except ValueError:
        size = 0
    if not 1 <= size <= MAX_BATCH_SIZE:
        raise RmqSinkError(
            f"option 'batchSize' must be an integer from 1 to {MAX_BATCH_SIZE} "
            f"(messages per SendMessage request), got {value!r}"
        )
    return size


def sink_columns(schema: StructType, topic_option: str | None) -> dict[str, str]:
    """Map each sink column present in `schema` to its field name (matched case-insensitively,
    like Spark); other columns are ignored. Raises RmqSinkError for a missing `body`, a
    missing topic, or a column of a type the sink cannot write."""
    fields = {f.name.lower(): f for f in schema.fields}
    if "body" not in fields:
        raise RmqSinkError(
            f"the DataFrame has no 'body' column: the rmq sink needs a column 'body' of type "
            f"binary or string (columns: {', '.join(schema.fieldNames()) or 'none'})"
        )
    if topic_option is not None:
        fields.pop("topic", None)   # the option wins over the column
    elif "topic" not in fields:
        raise RmqSinkError("no topic: set the 'topic' option or add a 'topic' column of type string")
    columns: dict[str, str] = {}
    for name, (accepts, accepted_types) in SINK_COLUMNS.items():
        spark_field = fields.get(name)
        if spark_field is None:
            continue
        if not accepts(spark_field.dataType):
            raise RmqSinkError(
                f"column '{spark_field.name}' has type {spark_field.dataType.simpleString()}: "
                f"the rmq sink accepts {accepted_types}"
            )
        columns[name] = spark_field.name
    return columns


@dataclass(frozen=True)
class SinkPlan:
    """Everything a write task needs; created (and validated) on the driver, pickled to tasks."""

    options: SinkOptions
    columns: dict[str, str]

    @classmethod
    def create(cls, options: Mapping[str, str], schema: StructType) -> SinkPlan:
        sink_options = SinkOptions.parse(options)
        columns = sink_columns(schema, sink_options.topic)
        if sink_options.queue_selector == HASH_KEYS and "queue_id" in columns:
            raise RmqSinkError("option queueSelector=hashKeys picks the queue from the keys: drop the "
                               f"'{columns['queue_id']}' column or the option")
        return cls(sink_options, columns)

    def messages_by_topic(self, batch: pa.RecordBatch) -> dict[str, list[OutgoingMessage]]:
        """The batch's rows as messages grouped by topic, in row order within a topic.
        Checks the whole batch before returning, so a bad row sends nothing of its batch."""
        rows = batch.num_rows
        bodies = self._bodies(batch)
        tags = self._strings(batch, "tags", rows)
        keys = self._strings(batch, "keys", rows)
        properties = self._with_deliver_times(self._properties(batch, rows), batch)
        queue_ids = self._integers(batch, "queue_id", rows, MAX_QUEUE_ID,
                                   "queue ids are 0 to {maximum} (null: the broker picks the queue)")
        delays = self._integers(batch, "delay_level", rows, MAX_DELAY_LEVEL,
                                "delay levels are 0 (none) to {maximum} (null: none)")
        messages = [
            OutgoingMessage(body, tag, key, props, queue_id=queue_id, delay_level=delay or 0)
            for body, tag, key, props, queue_id, delay
            in zip(bodies, tags, keys, properties, queue_ids, delays, strict=True)
        ]
        if self.options.topic is not None:
            return {self.options.topic: messages} if messages else {}
        grouped: dict[str, list[OutgoingMessage]] = defaultdict(list)
        for topic, message in zip(self._topics(batch), messages, strict=True):
            grouped[topic].append(message)
        return dict(grouped)

    def _integers(self, batch: pa.RecordBatch, column_name: str, rows: int, maximum: int,
                  accepted: str) -> list[int | None]:
        """An optional integer column, each value in [0, maximum] or null."""
        name = self.columns.get(column_name)
        if name is None:
            return [None] * rows
        column = batch.column(name)
        out_of_range = pc.fill_null(pc.or_(pc.less(column, 0), pc.greater(column, maximum)), False)
        if pc.any(out_of_range).as_py():
            row = _first_row(out_of_range)
            raise RmqSinkError(
                f"column '{name}' is {column[row].as_py()} in row {row} of a batch: "
                + accepted.format(maximum=maximum)
            )
        return _python_values(column)

    def _strings(self, batch: pa.RecordBatch, name: str, rows: int) -> list[str]:
        field_name = self.columns.get(name)
        if field_name is None:
            return [""] * rows
        return _python_values(batch.column(field_name).fill_null(""))

    def _bodies(self, batch: pa.RecordBatch) -> list[bytes]:
        name = self.columns["body"]
        column = batch.column(name)
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            column = pc.cast(column, pa.large_binary())
        lengths = pc.binary_length(column)
        if column.null_count or (len(column) and pc.min(lengths).as_py() == 0):
            row = _first_row(pc.fill_null(pc.equal(lengths, 0), True))
            raise RmqSinkError(
                f"column '{name}' is null or empty in row {row} of a batch: every message needs a body"
            )
        return _python_values(column)

    def _properties(self, batch: pa.RecordBatch, rows: int) -> list[dict[str, str]]:
        name = self.columns.get("properties")
        if name is None:
            return [{} for _ in range(rows)]
        column = batch.column(name)
        if column.items.null_count:
            raise RmqSinkError(f"column '{name}' has a null value in a property: rmq properties are strings")
        return [dict(pairs) if pairs else {} for pairs in column.to_pylist()]

    def _with_deliver_times(self, properties: list[dict[str, str]], batch: pa.RecordBatch
                            ) -> list[dict[str, str]]:
        """Each row's properties with TIMER_DELIVER_MS (epoch ms) from its `deliver_time`, if any."""
        name = self.columns.get("deliver_time")
        if name is None:
            return properties
        column = batch.column(name)
        epoch_us = pc.cast(column, pa.int64())
        before_epoch = pc.fill_null(pc.less(epoch_us, 0), False)
        if pc.any(before_epoch).as_py():
            row = _first_row(before_epoch)
            raise RmqSinkError(f"column '{name}' is {column[row].as_py()} in row {row} of a batch: a "
                               "delivery time is after 1970-01-01 (null: deliver at once)")
        delivery_ms = _python_values(pc.divide(epoch_us, _US_PER_MS))
        return [props if ms is None else {**props, PROPERTY_TIMER_DELIVER_MS: str(ms)}
                for props, ms in zip(properties, delivery_ms, strict=True)]

    def _topics(self, batch: pa.RecordBatch) -> list[str]:
        name = self.columns["topic"]
        column = batch.column(name)
        if column.null_count:
            row = _first_row(column.is_null())
            raise RmqSinkError(
                f"column '{name}' is null in row {row} of a batch and no 'topic' option is set"
            )
        return _python_values(column)


def _first_row(mask: pa.Array) -> int:
    row: int = pc.index(mask, True).as_py()
    return row


def _python_values(column: pa.Array) -> list[Any]:
    """The column as Python values (pyarrow has no type information)."""
    values: list[Any] = column.to_pylist()
    return values


def request_chunks(messages: list[OutgoingMessage], batch_size: int) -> Iterator[list[OutgoingMessage]]:
    """One topic's messages in `batch_size` runs, one `RmqClient.send` each (the client splits
    a run further when it exceeds the request size limit)."""
    for start in range(0, len(messages), batch_size):
        yield messages[start:start + batch_size]


def send_with_retry(client: RmqClient, topic: str, messages: list[OutgoingMessage],
                    broker_name: str | None = None) -> None:
    """Send, retrying what was not acknowledged by the Producer's rule (`send_may_be_retried`:
    an unreachable broker or a retryResponseCode, retryTimesWhenSendFailed = 2): the client picks
    the next of the topic's brokers each time, or retries `broker_name` when the queue is chosen
    (orderly sends). The acknowledged head of a batch is never sent again; a retry may duplicate
    a message whose acknowledgement was lost: at-least-once. Other refusals (oversized message,
    bad property) are not retried, nor is a topic the route does not know (as RocketMQ's
    "No route info of this topic"), which `client.route` raises first."""
    client.route(topic)
    for attempt in itertools.count():
        try:
            client.send(topic, messages, broker_name=broker_name)
            return
        except RmqError as error:
            if not send_may_be_retried(error, attempt):
                raise
            messages = messages[error.acknowledged:]
            logger.warning("send to %s failed (%s), retrying the %d unacknowledged messages",
                           topic, error, len(messages))
            if attempt:   # the first retry goes straight to the next broker, like RocketMQ
                time.sleep(SEND_RETRY_BACKOFF_S * attempt)


@dataclass
class RmqCommitMessage(WriterCommitMessage):
    """What one write task sent: acknowledged messages per topic."""

    sent: dict[str, int] = field(default_factory=dict)


def write_batches(plan: SinkPlan, batches: Iterable[pa.RecordBatch]) -> RmqCommitMessage:
    """Send every row of `batches`; returns once the broker acknowledged all of them.
    A failed send raises (the task fails; Spark may retry it: at-least-once)."""
    sent: Counter[str] = Counter()
    client = RmqClient(plan.options.endpoints, **plan.options.security.client_kwargs())
    queues: dict[str, list[MessageQueue]] = {}   # hashKeys: each topic's writable queues, once per task
    try:
        for batch in batches:
            for topic, messages in plan.messages_by_topic(batch).items():
                if plan.options.queue_selector == HASH_KEYS:
                    if topic not in queues:
                        queues[topic] = writable_queues(client.query_route(topic))
                    runs = by_keys(messages, queues[topic])
                else:
                    runs = {None: messages}
                for broker_name, run in runs.items():
                    for chunk in request_chunks(run, plan.options.batch_size):
                        send_with_retry(client, topic, chunk, broker_name)
                        sent[topic] += len(chunk)
    finally:
        client.close()
    return RmqCommitMessage(dict(sent))


def by_keys(messages: list[OutgoingMessage], queues: Sequence[MessageQueue]
            ) -> dict[str | None, list[OutgoingMessage]]:
    """hashKeys: each message with keys gets its queue (SelectMessageQueueByHash over the
    String.hashCode of its keys), grouped by broker in row order; messages without keys
    stay unrouted (None: round-robin)."""
    if not queues:
        raise RmqSinkError("queueSelector=hashKeys: the topic has no writable queue")
    runs: dict[str | None, list[OutgoingMessage]] = defaultdict(list)
    for message in messages:
        if not message.keys:
            runs[None].append(message)
            continue
        mq = queues[abs(tags_hash_code(message.keys)) % len(queues)]
        message.queue_id = mq.queue_id
        runs[mq.broker_name].append(message)
    return dict(runs)


def total_sent(messages: Iterable[WriterCommitMessage | None]) -> Counter[str]:
    total: Counter[str] = Counter()
    for message in messages:
        if isinstance(message, RmqCommitMessage):
            total.update(message.sent)
    return total


def _log_abort(messages: Iterable[WriterCommitMessage | None], what: str) -> None:
    sent = total_sent(messages)
    if sent:
        logger.warning(
            "%s failed; messages already acknowledged stay in their topics (at-least-once): %s",
            what, dict(sent),
        )


class RmqDataSourceArrowWriter(DataSourceArrowWriter):
    """Batch sink: `df.write.format("rmq").option("endpoints", ...).save()`."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise RmqSinkError(
                "the rmq sink only appends messages to a topic: use mode('append') (a topic cannot be "
                "overwritten)"
            )
        self.plan = SinkPlan.create(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RmqCommitMessage:
        return write_batches(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        logger.info("rmq write committed: %s", dict(total_sent(messages)))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_abort(messages, "rmq write")


class RmqDataSourceStreamArrowWriter(DataSourceStreamArrowWriter):
    """Streaming sink: `df.writeStream.format("rmq")`; a replayed micro-batch is sent again."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        # overwrite: output mode complete, which sends the whole result table every micro-batch.
        self.plan = SinkPlan.create(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RmqCommitMessage:
        return write_batches(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        logger.info("rmq micro-batch %d committed: %s", batchId, dict(total_sent(messages)))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_abort(messages, f"rmq micro-batch {batchId}")
