"""Options of the `rmq` source (DESIGN.md "Spark source"), parsed and validated when the
reader is created, i.e. at `load()` / query start. Names are case-insensitive; a wrong
value raises RmqOptionError naming the option and the accepted values."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rmq.auth import ClientSecurity
from rmq.connector.allocation import AVG, STRATEGY_NAMES
from rmq.connector.client import RmqClient
from rmq.connector.endpoints import parse_endpoints
from rmq.connector.offsets import (
    OFFSET_EARLIEST,
    OFFSET_LATEST,
    AtTimestamp,
    Committed,
    Earliest,
    Latest,
    OffsetPolicy,
    Positions,
    Specific,
    positions_from_json,
)
from rmq.message_format import MAX_TOPIC_LENGTH
from rmq.names import MAX_GROUP_LENGTH, VALID_CHARACTERS, group_name_problem, topic_name_problem
from rmq.subscription import FORMAT_HINT as SUB_FORMAT_HINT
from rmq.subscription import parse_sub_expression

CLUSTERING = "clustering"
BROADCASTING = "broadcasting"
MESSAGE_MODELS = (CLUSTERING, BROADCASTING)

DEFAULT_PULL_BATCH_SIZE = 4096
MAX_PULL_BATCH_SIZE = 32768
DEFAULT_PULL_TIMEOUT_MS = 3000
DEFAULT_CLIENT_TIMEOUT_S = 10.0   # driver-side calls (route, offsets, membership)
DEFAULT_OFFSET_STORE_DIR = "~/.rmq/offsets"
GROUP_PREFIX = "spark-rmq-"   # of the group a query gets when option consumerGroup is not set

OPTION_NAMES = (
    "endpoints", "topic", "consumerGroup", "subExpression", "startingOffsets", "endingOffsets",
    "maxMessagesPerTrigger", "pullBatchSize", "pullTimeoutMs", "allocateStrategy", "messageModel",
    "failOnDataLoss", "offsetStoreDir", "accessKey", "secretKey", "tls", "tlsCaFile",
)
JSON_FORM = 'JSON {"topic":{"broker":{"queueId":offset}}}'
STARTING_FORMS = f"one of earliest, latest, committed, timestamp:<epoch-ms>, or {JSON_FORM}"
ENDING_FORMS = f"latest, or {JSON_FORM}"


class RmqOptionError(ValueError):
    """A source option is missing, unknown or has a wrong value."""


@dataclass(frozen=True)
class PullSettings:
    """What executors need to pull a queue (shipped inside every InputPartition)."""

    endpoints: str
    consumer_group: str
    sub_expression: str
    tags: frozenset[str] | None     # None: every tag ("*")
    pull_batch_size: int
    pull_timeout_ms: int
    fail_on_data_loss: bool
    security: ClientSecurity = field(default_factory=ClientSecurity)   # accessKey/secretKey/tls

    def connect(self, timeout: float = DEFAULT_CLIENT_TIMEOUT_S) -> RmqClient:
        """A client for the endpoints, signing and encrypting as the options say."""
        return RmqClient(self.endpoints, timeout=timeout, **self.security.client_kwargs())


@dataclass(frozen=True)
class SourceOptions:
    """`consumer_group` is the consumerGroup option. Without it each query (or batch read)
    gets its own group, so unrelated queries never split a topic's queues (Kafka's Spark
    source does the same): `pull.consumer_group` holds a new `spark-rmq-<uuid>` name, which
    a restarted stream replaces with the group kept in its checkpointed offsets."""

    topics: tuple[str, ...]
    consumer_group: str | None
    pull: PullSettings
    starting_offsets: OffsetPolicy
    ending_offsets: OffsetPolicy            # batch only
    max_messages_per_trigger: int | None    # stream only
    allocate_strategy: str
    message_model: str
    offset_store_dir: str

    @property
    def endpoints(self) -> str:
        return self.pull.endpoints

    @property
    def broadcasting(self) -> bool:
        return self.message_model == BROADCASTING


def check_source_options(options: Mapping[str, str]) -> None:
    """Validate every option for either kind of read (at `load()`, before the mode is known)."""
    _parse(options, streaming=False)


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate every option; defaults differ between the stream and the batch reader."""
    _check_mode(options, streaming)
    return _parse(options, streaming)


def _parse(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    values = {str(key).lower(): str(value) for key, value in options.items()}
    _reject_unknown(values)
    get = _Getter(values)
    endpoints = get.required("endpoints")
    try:
        parse_endpoints(endpoints)
    except ValueError as error:
        raise RmqOptionError(f"Invalid value {endpoints!r} for option 'endpoints': {error}") from None
    topics = _parse_topics(get.required("topic"))
    group = get.text("consumerGroup") or None
    if group is not None:
        _check_name("consumerGroup", group, MAX_GROUP_LENGTH, group_name_problem)
    sub_expression, tags = _parse_sub_expression(get.text("subExpression") or "*")
    default_start: OffsetPolicy = Latest() if streaming else Earliest()
    starting_offsets = _parse_starting(get.text("startingOffsets"), default_start, topics)
    if isinstance(starting_offsets, Committed) and group is None:
        raise RmqOptionError(
            "Option 'startingOffsets' committed needs option 'consumerGroup': without it the query "
            "gets a new group of its own (spark-rmq-<uuid>), which has no committed offsets"
        )
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
            security=_parse_security(options),
        ),
        starting_offsets=starting_offsets,
        ending_offsets=_parse_ending(get.text("endingOffsets"), topics),
        max_messages_per_trigger=get.positive_int("maxMessagesPerTrigger", None),
        allocate_strategy=get.choice("allocateStrategy", STRATEGY_NAMES, AVG),
        message_model=get.choice("messageModel", MESSAGE_MODELS, CLUSTERING),
        offset_store_dir=os.path.expanduser(get.text("offsetStoreDir") or DEFAULT_OFFSET_STORE_DIR),
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

    def positive_int(self, option: str, default: int | None, maximum: int | None = None) -> int | None:
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


def _reject_unknown(values: dict[str, str]) -> None:
    known = {name.lower() for name in OPTION_NAMES}
    for key in values:
        if key not in known:
            raise RmqOptionError(
                f"Unknown option {key!r} for the rmq source: expected one of {', '.join(OPTION_NAMES)}"
            )


def _check_mode(options: Mapping[str, str], streaming: bool) -> None:
    values = {str(key).lower() for key in options}
    if streaming and "endingoffsets" in values:
        raise RmqOptionError("Option 'endingOffsets' applies to batch reads only (spark.read)")
    if not streaming and "maxmessagespertrigger" in values:
        raise RmqOptionError("Option 'maxMessagesPerTrigger' applies to streams only (spark.readStream)")


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


def _parse_security(options: Mapping[str, str]) -> ClientSecurity:
    try:
        return ClientSecurity.from_options(options)
    except ValueError as error:   # names the option, never the secret
        raise RmqOptionError(str(error)) from None


def _parse_sub_expression(text: str) -> tuple[str, frozenset[str] | None]:
    try:
        return parse_sub_expression(text)
    except ValueError:
        raise invalid("subExpression", text, SUB_FORMAT_HINT) from None


def _parse_starting(text: str | None, default: OffsetPolicy, topics: tuple[str, ...]) -> OffsetPolicy:
    if text is None:
        return default
    word = text.lower()
    if word in ("earliest", "latest", "committed"):
        return {"earliest": Earliest(), "latest": Latest(), "committed": Committed()}[word]
    if word.startswith("timestamp:"):
        stamp = word.removeprefix("timestamp:").strip()
        if stamp.isdigit():
            return AtTimestamp(int(stamp))
        raise invalid("startingOffsets", text, "timestamp:<epoch-ms> with a non-negative integer")
    return Specific(_parse_json("startingOffsets", text, topics, OFFSET_EARLIEST, STARTING_FORMS), default)


def _parse_ending(text: str | None, topics: tuple[str, ...]) -> OffsetPolicy:
    if text is None or text.lower() == "latest":
        return Latest()
    return Specific(_parse_json("endingOffsets", text, topics, OFFSET_LATEST, ENDING_FORMS), Latest())


def _parse_json(option: str, text: str, topics: tuple[str, ...], min_offset: int, forms: str) -> Positions:
    try:
        positions = positions_from_json(json.loads(text), min_offset=min_offset)
    except json.JSONDecodeError:
        raise invalid(option, text, forms) from None
    except ValueError as error:
        raise RmqOptionError(f"Invalid value {text!r} for option {option!r}: {error}") from None
    for mq in positions:
        if mq.topic not in topics:
            raise RmqOptionError(
                f"Invalid value {text!r} for option {option!r}: topic {mq.topic!r} is not in option "
                f"'topic' ({', '.join(topics)})"
            )
    return positions

