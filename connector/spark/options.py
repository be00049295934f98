"""Options of the `rmq` source (docs/manual/spark.md), parsed and validated when the
reader is created, i.e. at `load()` / query start. Names are case-insensitive; a wrong
value raises RmqOptionError naming the option and the accepted values."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from rmq.auth import SECURITY_OPTION_NAMES, ClientSecurity
from rmq.connector.allocation import STRATEGY_NAMES, AllocateStrategy
from rmq.connector.client import RmqClient
from rmq.connector.endpoints import parse_endpoints
from rmq.connector.errors import RmqOptionError
from rmq.connector.offset_store import DEFAULT_OFFSET_STORE_DIR
from rmq.connector.offsets import Positions, positions_from_json
from rmq.connector.spark.source_offsets import (
    OFFSET_EARLIEST,
    OFFSET_LATEST,
    AtTimestamp,
    Committed,
    Earliest,
    Latest,
    OffsetPolicy,
    Specific,
    Timestamps,
)
from rmq.connector.spark.source_schema import ALL_COLUMNS
from rmq.connector.transport import TRANSPORTS, Transport
from rmq.message_format import MAX_TOPIC_LENGTH
from rmq.names import MAX_GROUP_LENGTH, VALID_CHARACTERS, group_name_problem, topic_name_problem
from rmq.sql92 import Sql92Error
from rmq.subscription import FORMAT_HINT as SUB_FORMAT_HINT
from rmq.subscription import ExpressionType, MessageSelector, parse_sub_expression

CLUSTERING = "clustering"
BROADCASTING = "broadcasting"
MESSAGE_MODELS = (CLUSTERING, BROADCASTING)

_Default = TypeVar("_Default", int, None)   # a default given: an int; none: int | None

DEFAULT_PULL_BATCH_SIZE = 4096
MAX_PULL_BATCH_SIZE = 32768
DEFAULT_PULL_TIMEOUT_MS = 3000
# How long the driver and the executors retry a broker that cannot be reached before the
# query fails: long enough to ride out a broker restart (Kafka's source rides out ~2 min).
DEFAULT_BROKER_OUTAGE_WINDOW_MS = 120_000
OUTAGE_OPTION = "brokerOutageWindowMs"
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000   # Kafka's maxTriggerDelay default, 15m
DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}
DURATION_PATTERN = re.compile(r"^(\d+)\s*(ms|s|min|m|h)?$")
DEFAULT_CLIENT_TIMEOUT_S = 10.0   # driver-side calls (route, offsets, membership)
GROUP_PREFIX = "spark-rmq-"   # of the group a query gets when option consumerGroup is not set

OPTION_NAMES = (
    "endpoints", "topic", "topicPattern", "consumerGroup", "subExpression", "sqlFilter", "startingOffsets",
    "startingOffsetsByTimestamp", "committedFallback", "endingOffsets", "endingOffsetsByTimestamp",
    "endingTimestamp", "maxMessagesPerTrigger", "minMessagesPerTrigger", "maxTriggerDelay",
    "minPartitions", "maxRecordsPerPartition", "maxBytesPerTrigger", "startingOffsetsByTimestampStrategy",
    "pullBatchSize", "pullTimeoutMs", OUTAGE_OPTION, "allocateStrategy",
    "messageModel", "failOnDataLoss", "offsetStoreDir", "transport",
) + SECURITY_OPTION_NAMES
BATCH_ONLY = ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")
STREAM_ONLY = ("maxMessagesPerTrigger", "maxBytesPerTrigger", "minMessagesPerTrigger", "maxTriggerDelay")
JSON_FORM = 'JSON {"topic":{"broker":{"queueId":offset}}}'
TIMESTAMPS_FORM = 'JSON {"topic":{"broker":{"queueId":epochMs}}}'
STARTING_FORMS = f"one of earliest, latest, committed, timestamp:<epoch-ms>, or {JSON_FORM}"
ENDING_FORMS = f"latest, or {JSON_FORM}"
FALLBACK_FORMS = "one of latest, earliest, timestamp:<epoch-ms>, error"
TIMESTAMP_STRATEGY = "startingOffsetsByTimestampStrategy"
DURATION_FORMS = "a duration: <n>ms, <n>s, <n>m or <n>h (no unit: ms)"


@dataclass(frozen=True)
class PullSettings:
    """What executors need to pull a queue (shipped inside every InputPartition)."""

    endpoints: str
    consumer_group: str
    sub_expression: str
    tags: frozenset[str] | None     # None: every tag ("*")
    pull_batch_size: int
    pull_timeout_ms: int             # one request
    fail_on_data_loss: bool
    outage_window_ms: int = DEFAULT_BROKER_OUTAGE_WINDOW_MS   # retrying an unreachable broker
    security: ClientSecurity = field(default_factory=ClientSecurity)   # accessKey/secretKey/tls
    sql_filter: str | None = None    # sqlFilter: an SQL92 condition the broker evaluates instead of tags
    transport: Transport = Transport.AUTO
    columns: tuple[str, ...] = ALL_COLUMNS   # the query's schema (source_schema.source_columns)

    @property
    def read_columns(self) -> tuple[str, ...]:
        """What a read gathers: the query's columns, and those the reader needs itself (queue_offset
        to trim the range's end, tags to re-check the tag filter), dropped before Spark sees them."""
        needed = ("queue_offset",) + (("tags",) if self.tags is not None else ())
        return self.columns + tuple(name for name in needed if name not in self.columns)

    @property
    def selector(self) -> str | MessageSelector:
        """What each pull selects: the tag expression, or the SQL92 filter."""
        if self.sql_filter is None:
            return self.sub_expression
        return MessageSelector(self.sql_filter, ExpressionType.SQL92)

    def connect(self, timeout: float = DEFAULT_CLIENT_TIMEOUT_S) -> RmqClient:
        """A client for the endpoints, signing and encrypting as the options say."""
        return RmqClient(self.endpoints, timeout=timeout, **self.security.client_kwargs())


@dataclass(frozen=True)
class SourceOptions:
    """`consumer_group` is the consumerGroup option. Without it each query (or batch read)
    gets its own group, so unrelated queries never split a topic's queues (Kafka's Spark
    source does the same): `pull.consumer_group` holds a new `spark-rmq-<uuid>` name, which
    a restarted stream replaces with the group kept in its checkpointed offsets."""

    topics: tuple[str, ...]                 # empty with topicPattern
    consumer_group: str | None
    pull: PullSettings
    starting_offsets: OffsetPolicy
    ending_offsets: OffsetPolicy            # batch only
    max_messages_per_trigger: int | None    # stream only
    allocate_strategy: str
    message_model: str
    offset_store_dir: str
    topic_pattern: re.Pattern[str] | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_bytes_per_trigger: int | None = None       # stream only
    min_messages_per_trigger: int | None = None   # stream only
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS

    def subscribes(self, topic: str) -> bool:
        """Whether `topic` is one of the query's topics (option topic, or matches topicPattern)."""
        if self.topic_pattern is not None:
            return self.topic_pattern.fullmatch(topic) is not None
        return topic in self.topics

    @property
    def endpoints(self) -> str:
        return self.pull.endpoints

    @property
    def broadcasting(self) -> bool:
        return self.message_model == BROADCASTING


def check_source_options(options: Mapping[str, str]) -> None:
    """Validate every option for either kind of read (at `load()`, before the mode is known)."""
    _parse(options, streaming=False)


def parse_source_options(options: Mapping[str, str], *, streaming: bool,
                         columns: tuple[str, ...] = ALL_COLUMNS) -> SourceOptions:
    """Validate every option; defaults differ between the stream and the batch reader. `columns`:
    those of the query's schema (source_schema.source_columns)."""
    _check_mode(options, streaming)
    return _parse(options, streaming, columns)


def _parse(options: Mapping[str, str], streaming: bool, columns: tuple[str, ...] = ALL_COLUMNS
           ) -> SourceOptions:
    values = {str(key).lower(): str(value) for key, value in options.items()}
    _reject_unknown(values)
    get = _Getter(values)
    endpoints = get.required("endpoints")
    try:
        parse_endpoints(endpoints)
    except ValueError as error:
        raise RmqOptionError(f"Invalid value {endpoints!r} for option 'endpoints': {error}") from None
    topics, pattern = _parse_subscription(get)
    group = get.text("consumerGroup") or None
    if group is not None:
        _check_name("consumerGroup", group, MAX_GROUP_LENGTH, group_name_problem)
    sub_expression, tags = _parse_sub_expression(get.text("subExpression") or "*")
    sql_filter = _parse_sql_filter(get.text("sqlFilter"), get.text("subExpression"))
    subscribed = _Subscribed(topics, pattern)
    starting_offsets = _parse_starting(get, streaming, group, subscribed)
    return SourceOptions(
        topics=topics,
        consumer_group=group,
        pull=PullSettings(
            endpoints=endpoints,
            consumer_group=group or new_group_name(),
            sub_expression=sub_expression,
            tags=tags,
            pull_batch_size=get.positive_int("pullBatchSize", DEFAULT_PULL_BATCH_SIZE, MAX_PULL_BATCH_SIZE),
            pull_timeout_ms=get.positive_int("pullTimeoutMs", DEFAULT_PULL_TIMEOUT_MS),
            fail_on_data_loss=get.choice("failOnDataLoss", ("true", "false"), "true") == "true",
            outage_window_ms=get.positive_int(OUTAGE_OPTION, DEFAULT_BROKER_OUTAGE_WINDOW_MS),
            security=_parse_security(options),
            sql_filter=sql_filter,
            transport=Transport(get.choice("transport", TRANSPORTS, Transport.AUTO.value)),
            columns=columns,
        ),
        starting_offsets=starting_offsets,
        ending_offsets=_parse_ending(get, subscribed),
        max_messages_per_trigger=get.positive_int("maxMessagesPerTrigger", None),
        allocate_strategy=get.choice("allocateStrategy", STRATEGY_NAMES, AllocateStrategy.AVG),
        message_model=get.choice("messageModel", MESSAGE_MODELS, CLUSTERING),
        offset_store_dir=_parse_offset_store_dir(get.text("offsetStoreDir")),
        topic_pattern=pattern,
        min_partitions=get.positive_int("minPartitions", None),
        max_records_per_partition=get.positive_int("maxRecordsPerPartition", None),
        max_bytes_per_trigger=get.positive_int("maxBytesPerTrigger", None),
        min_messages_per_trigger=get.positive_int("minMessagesPerTrigger", None),
        max_trigger_delay_ms=get.duration_ms("maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
    )


def new_group_name() -> str:
    """The consumer group of a query started without option consumerGroup."""
    return f"{GROUP_PREFIX}{uuid.uuid4().hex}"


def legacy_group_name(topics: tuple[str, ...]) -> str:
    """The group that offsets checkpointed before they carried one were read under (the
    former default of option consumerGroup): a restarted query keeps it."""
    return GROUP_PREFIX + "_".join(topics)


def invalid(option: str, value: str, expected: str) -> RmqOptionError:
    return RmqOptionError(f"Invalid value {value!r} for option {option!r}: expected {expected}")


class _Getter:
    def __init__(self, values: dict[str, str]) -> None:
        self._values = values

    def text(self, option: str) -> str | None:
        value = self._values.get(option.lower())
        return value.strip() if value is not None else None

    def required(self, option: str) -> str:
        value = self.text(option)
        if not value:
            raise RmqOptionError(f"Option {option!r} is required for the rmq source")
        return value

    def choice(self, option: str, accepted: tuple[str, ...], default: str) -> str:
        value = self.text(option)
        if value is None:
            return default
        if value.lower() not in accepted:
            raise invalid(option, value, f"one of {', '.join(accepted)}")
        return value.lower()

    def positive_int(self, option: str, default: _Default, maximum: int | None = None) -> int | _Default:
        value = self.text(option)
        if value is None:
            return default
        expected = "a positive integer" + (f" <= {maximum}" if maximum else "")
        try:
            number = int(value)
        except ValueError:
            raise invalid(option, value, expected) from None
        if number <= 0 or (maximum is not None and number > maximum):
            raise invalid(option, value, expected)
        return number


    def duration_ms(self, option: str, default: int) -> int:
        value = self.text(option)
        if value is None:
            return default
        match = DURATION_PATTERN.match(value.lower())
        if match is None or int(match.group(1)) <= 0:
            raise invalid(option, value, DURATION_FORMS)
        return int(match.group(1)) * DURATION_UNITS_MS[match.group(2) or "ms"]


def _reject_unknown(values: dict[str, str]) -> None:
    known = {name.lower() for name in OPTION_NAMES}
    for key in values:
        if key not in known:
            raise RmqOptionError(
                f"Unknown option {key!r} for the rmq source: expected one of {', '.join(OPTION_NAMES)}"
            )


def _check_mode(options: Mapping[str, str], streaming: bool) -> None:
    values = {str(key).lower() for key in options}
    for option in BATCH_ONLY if streaming else STREAM_ONLY:
        if option.lower() in values:
            where = "batch reads only (spark.read)" if streaming else "streams only (spark.readStream)"
            raise RmqOptionError(f"Option {option!r} applies to {where}")


def _check_name(option: str, name: str, max_length: int, problem: Callable[[str], str | None]) -> None:
    if problem(name) is not None:
        raise invalid(option, name, f"names of at most {max_length} characters from {VALID_CHARACTERS}")


def _parse_topics(text: str) -> tuple[str, ...]:
    topics = tuple(dict.fromkeys(part.strip() for part in text.split(",")))
    for topic in topics:
        if not topic:
            raise invalid("topic", text, "a topic name or a comma-separated list of names")
        _check_name("topic", topic, MAX_TOPIC_LENGTH, topic_name_problem)
    return topics


def _parse_subscription(get: _Getter) -> tuple[tuple[str, ...], re.Pattern[str] | None]:
    """Option topic (names) or topicPattern (a regex the whole topic name must match)."""
    topic, pattern = get.text("topic"), get.text("topicPattern")
    if topic and pattern:
        raise RmqOptionError("Options 'topic' and 'topicPattern' exclude each other: give one of them")
    if pattern:
        try:
            return (), re.compile(pattern)
        except re.error as error:
            raise invalid("topicPattern", pattern, f"a Python regular expression ({error})") from None
    if not topic:
        raise RmqOptionError("Option 'topic' is required for the rmq source (or option 'topicPattern')")
    return _parse_topics(topic), None


def _parse_offset_store_dir(text: str | None) -> str:
    """The directory, which must be a directory or not exist yet (it is created on first use)."""
    path = os.path.expanduser(text or DEFAULT_OFFSET_STORE_DIR)
    for parent in (path, *map(str, Path(path).parents)):
        if os.path.exists(parent):
            if not os.path.isdir(parent):
                raise invalid("offsetStoreDir", text or path,
                              f"a directory (or a path to create one at), but {parent} is a file")
            break
    return path


def _parse_security(options: Mapping[str, str]) -> ClientSecurity:
    try:
        return ClientSecurity.from_options(options)
    except ValueError as error:   # names the option, never the secret
        raise RmqOptionError(str(error)) from None


def _parse_sql_filter(text: str | None, sub_expression: str | None) -> str | None:
    """sqlFilter, checked now (the error names the position); it replaces subExpression."""
    if text is None:
        return None
    if sub_expression is not None:
        raise RmqOptionError("Options 'sqlFilter' and 'subExpression' are mutually exclusive: give one "
                             "(a tag condition can be written in SQL92 as TAGS IN ('TagA', 'TagB'))")
    try:
        return MessageSelector.by_sql(text).expression
    except Sql92Error as error:
        raise RmqOptionError(f"Invalid value for option 'sqlFilter': {error}") from None


def _parse_sub_expression(text: str) -> tuple[str, frozenset[str] | None]:
    try:
        return parse_sub_expression(text)
    except ValueError:
        raise invalid("subExpression", text, SUB_FORMAT_HINT) from None


@dataclass(frozen=True)
class _Subscribed:
    """What offset JSON may name: the topics of option topic, or those topicPattern matches."""

    topics: tuple[str, ...]
    pattern: re.Pattern[str] | None

    def check(self, option: str, text: str, positions: Positions) -> None:
        for mq in positions:
            if self.pattern is not None and not self.pattern.fullmatch(mq.topic):
                raise RmqOptionError(f"Invalid value {text!r} for option {option!r}: topic {mq.topic!r} "
                                     f"does not match option 'topicPattern' ({self.pattern.pattern})")
            if self.pattern is None and mq.topic not in self.topics:
                raise RmqOptionError(f"Invalid value {text!r} for option {option!r}: topic {mq.topic!r} "
                                     f"is not in option 'topic' ({', '.join(self.topics)})")


def _parse_starting(get: _Getter, streaming: bool, group: str | None,
                    subscribed: _Subscribed) -> OffsetPolicy:
    default: OffsetPolicy = Latest() if streaming else Earliest()
    text = get.text("startingOffsets")
    policy = default if text is None else _parse_start_word(text, default, subscribed)
    fallback_text = get.text("committedFallback")
    if isinstance(policy, Committed):
        if group is None:
            raise RmqOptionError(
                "Option 'startingOffsets' committed needs option 'consumerGroup': without it the query "
                "gets a new group of its own (spark-rmq-<uuid>), which has no committed offsets"
            )
        if fallback_text is not None:
            policy = Committed(_parse_fallback(fallback_text))
    elif fallback_text is not None:
        raise RmqOptionError("Option 'committedFallback' applies to startingOffsets=committed only")
    strict = _parse_timestamp_strategy(get, policy)
    if isinstance(policy, AtTimestamp):
        policy = AtTimestamp(policy.timestamp_ms, strict)
    by_timestamp = get.text("startingOffsetsByTimestamp")
    if by_timestamp is None:
        return policy
    stamps = _parse_json("startingOffsetsByTimestamp", by_timestamp, subscribed, 0, TIMESTAMPS_FORM)
    return Timestamps(stamps, policy, strict)


def _parse_timestamp_strategy(get: _Getter, policy: OffsetPolicy) -> bool:
    """startingOffsetsByTimestampStrategy: whether a queue without a message at or after its starting
    timestamp fails the query (error) rather than starting at its end (latest, the default)."""
    strategy = get.choice(TIMESTAMP_STRATEGY, ("error", "latest"), "latest")
    if get.text(TIMESTAMP_STRATEGY) is not None and get.text("startingOffsetsByTimestamp") is None \
            and not isinstance(policy, AtTimestamp):
        raise RmqOptionError(f"Option {TIMESTAMP_STRATEGY!r} applies to startingOffsetsByTimestamp and "
                             "startingOffsets=timestamp:<epoch-ms> only")
    return strategy == "error"


def _parse_start_word(text: str, default: OffsetPolicy, subscribed: _Subscribed) -> OffsetPolicy:
    word = text.lower()
    if word in ("earliest", "latest", "committed"):
        words: dict[str, OffsetPolicy] = {"earliest": Earliest(), "latest": Latest(),
                                          "committed": Committed()}
        return words[word]
    if word.startswith("timestamp:"):
        return _parse_timestamp("startingOffsets", text)
    positions = _parse_json("startingOffsets", text, subscribed, OFFSET_EARLIEST, STARTING_FORMS)
    return Specific(positions, default)


def _parse_timestamp(option: str, text: str) -> AtTimestamp:
    stamp = text.lower().removeprefix("timestamp:").strip()
    if stamp.isdigit():
        return AtTimestamp(int(stamp))
    raise invalid(option, text, "timestamp:<epoch-ms> with a non-negative integer")


def _parse_fallback(text: str) -> OffsetPolicy | None:
    """committedFallback: where a queue the group never committed starts (None: fail)."""
    word = text.lower()
    if word in ("latest", "earliest", "error"):
        fallbacks: dict[str, OffsetPolicy | None] = {"latest": Latest(), "earliest": Earliest(),
                                                     "error": None}
        return fallbacks[word]
    if word.startswith("timestamp:"):
        return _parse_timestamp("committedFallback", text)
    raise invalid("committedFallback", text, FALLBACK_FORMS)


def _parse_ending(get: _Getter, subscribed: _Subscribed) -> OffsetPolicy:
    text = get.text("endingOffsets")
    stamp_text = get.text("endingTimestamp")
    by_timestamp = get.text("endingOffsetsByTimestamp")
    if stamp_text is not None:
        if text is not None or by_timestamp is not None:
            raise RmqOptionError("Option 'endingTimestamp' applies to every queue: give it without "
                                 "'endingOffsets' and 'endingOffsetsByTimestamp'")
        if not stamp_text.isdigit():
            raise invalid("endingTimestamp", stamp_text, "an epoch-ms timestamp (a non-negative integer)")
        return AtTimestamp(int(stamp_text))
    policy: OffsetPolicy = Latest()
    if text is not None and text.lower() != "latest":
        positions = _parse_json("endingOffsets", text, subscribed, OFFSET_LATEST, ENDING_FORMS)
        policy = Specific(positions, Latest())
    if by_timestamp is None:
        return policy
    return Timestamps(_parse_json("endingOffsetsByTimestamp", by_timestamp, subscribed, 0, TIMESTAMPS_FORM),
                      policy)


def _parse_json(option: str, text: str, subscribed: _Subscribed, min_offset: int, forms: str) -> Positions:
    try:
        positions = positions_from_json(json.loads(text), min_offset=min_offset)
    except json.JSONDecodeError:
        raise invalid(option, text, forms) from None
    except ValueError as error:
        raise RmqOptionError(f"Invalid value {text!r} for option {option!r}: {error}") from None
    subscribed.check(option, text, positions)
    return positions
