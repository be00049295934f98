"""Reading a request's header fields and JSON bodies (docs/remoting-protocol.md, "Request
codes"): every missing or malformed field is an ILLEGAL_ARGUMENT naming it, answered to the
client, never an exception that reaches the connection."""

from __future__ import annotations

import json
import struct
from typing import Any

from rmq.broker_server.errors import BrokerError, illegal_argument
from rmq.remoting.remoting_command import MAX_JSON_DEPTH, RemotingCommand, json_within_depth
from rmq.remoting.request_code import RequestCode
from rmq.v1 import rmq_pb2

# SendMessageRequestHeaderV2's one-letter names for SendMessageRequestHeader's fields.
SEND_HEADER_V2_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
}
# A batch body's message: total size, magic code, body CRC, flag, body length (then the body,
# a 2-byte properties length and the properties): MessageDecoder.encodeMessage.
BATCH_ENTRY = struct.Struct(">iiiii")
PROPERTIES_LENGTH = struct.Struct(">h")
# messageModel by name (Java) or by its ordinal (C++ writes the enum's number).
MESSAGE_MODELS = {
    "BROADCASTING": rmq_pb2.BROADCASTING,
    "CLUSTERING": rmq_pb2.CLUSTERING,
    0: rmq_pb2.BROADCASTING,
    1: rmq_pb2.CLUSTERING,
}


def required(fields: dict[str, str], name: str) -> str:
    value = fields.get(name)
    if value is None:
        raise illegal_argument(f"header field {name} is missing")
    return value


def text(command: RemotingCommand, name: str, default: str | None = None) -> str:
    if default is not None:
        return command.ext_fields.get(name, default)
    return required(command.ext_fields, name)


def int_field(fields: dict[str, str], name: str, default: int | None = None) -> int:
    value = fields.get(name)
    if value is None:
        if default is not None:
            return default
        raise illegal_argument(f"header field {name} is missing")
    try:
        return int(value)
    except ValueError:
        raise _not_an_integer(name, value) from None


def _not_an_integer(name: str, value: str) -> BrokerError:
    return illegal_argument(f"header field {name} must be an integer, not {value!r}")


def int_fields(fields: dict[str, str], defaults: tuple[tuple[str, int], ...]) -> list[int]:
    """int_field of each (name, default) in `defaults`, in one call (a send reads four)."""
    values = []
    for name, default in defaults:
        value = fields.get(name)
        if value is None:
            values.append(default)
            continue
        try:
            values.append(int(value))
        except ValueError:
            raise _not_an_integer(name, value) from None
    return values


def send_header(command: RemotingCommand) -> dict[str, str]:
    """A send's header fields under SendMessageRequestHeader's names (V2 short names mapped)."""
    if command.code == RequestCode.SEND_MESSAGE:
        return command.ext_fields
    return {SEND_HEADER_V2_NAMES.get(name, name): value for name, value in command.ext_fields.items()}


def batch_messages(body: bytes) -> list[tuple[bytes, str, int]]:
    """(body, properties, flag) of each message of a SEND_BATCH_MESSAGE body."""
    messages: list[tuple[bytes, str, int]] = []
    position = 0
    while position < len(body):
        if position + BATCH_ENTRY.size > len(body):
            raise illegal_argument(f"batch message {len(messages)} is truncated")
        total, _magic, _crc, flag, body_length = BATCH_ENTRY.unpack_from(body, position)
        end = position + total
        properties_at = position + BATCH_ENTRY.size + body_length
        if total < BATCH_ENTRY.size + 2 or body_length < 0 or end > len(body) or properties_at + 2 > end:
            raise illegal_argument(f"batch message {len(messages)} has inconsistent lengths")
        properties_length = PROPERTIES_LENGTH.unpack_from(body, properties_at)[0]
        if properties_at + 2 + properties_length != end:
            raise illegal_argument(f"batch message {len(messages)} has inconsistent lengths")
        try:
            properties = body[properties_at + 2 : end].decode()
        except UnicodeDecodeError:
            raise illegal_argument(f"batch message {len(messages)}: properties are not UTF-8") from None
        messages.append((body[position + BATCH_ENTRY.size : properties_at], properties, flag))
        position = end
    if not messages:
        raise illegal_argument("the batch holds no messages")
    return messages


def json_body(command: RemotingCommand) -> dict[str, Any]:
    if not json_within_depth(command.body):
        raise illegal_argument(f"the body's JSON nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        data = json.loads(command.body)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise illegal_argument(f"the body is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise illegal_argument("the body is not a JSON object")
    return data


def json_text(data: dict[str, Any], name: str) -> str:
    value = data.get(name, "")
    if not isinstance(value, str):
        raise illegal_argument(f"{name} must be a string, not {value!r}")
    return value


def json_list(data: dict[str, Any], name: str) -> list[dict[str, Any]]:
    value = data.get(name) or []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise illegal_argument(f"{name} must be a list of objects")
    return value


def message_model(consumer: dict[str, Any]) -> rmq_pb2.MessageModel:
    name = consumer.get("messageModel", "CLUSTERING")
    if isinstance(name, bool) or not isinstance(name, str | int) or name not in MESSAGE_MODELS:
        raise illegal_argument(f"messageModel must be CLUSTERING or BROADCASTING, not {name!r}")
    return MESSAGE_MODELS[name]


def lock_body(command: RemotingCommand) -> tuple[str, str, list[rmq_pb2.MessageQueue]]:
    """(consumer group, client id, queues) of a LOCK_BATCH_MQ / UNLOCK_BATCH_MQ body."""
    data = json_body(command)
    queues = []
    for mq in json_list(data, "mqSet"):
        queue_id = mq.get("queueId")
        if isinstance(queue_id, bool) or not isinstance(queue_id, int):
            raise illegal_argument(f"mqSet queueId must be an integer, not {queue_id!r}")
        queues.append(
            rmq_pb2.MessageQueue(
                topic=json_text(mq, "topic"), broker_name=json_text(mq, "brokerName"), queue_id=queue_id
            )
        )
    return json_text(data, "consumerGroup"), json_text(data, "clientId"), queues
