"""Byte layout of one CommitLog message record (spec store-commitlog-consumequeue §3).

The store writes records in this layout and the broker ships them unchanged inside
`PackedMessages`, so this module is the single definition both sides read. All integers
are big-endian, as Java's ByteBuffer writes them.
"""

from __future__ import annotations

import functools
import operator
import struct

MESSAGE_MAGIC_CODE = -626843481   # 0xDAA320A7
BLANK_MAGIC_CODE = -875286124     # 0xCBD43194, end-of-file blank record
END_FILE_MIN_BLANK_LENGTH = 8     # total size + magic code of the blank record

# Field offsets inside a record (IPv4 hosts: 4-byte address + 4-byte port).
TOTAL_SIZE_POS = 0
MAGIC_CODE_POS = 4
BODY_CRC_POS = 8
QUEUE_ID_POS = 12
FLAG_POS = 16
QUEUE_OFFSET_POS = 20
PHYSICAL_OFFSET_POS = 28
SYS_FLAG_POS = 36
BORN_TIMESTAMP_POS = 40
BORN_HOST_POS = 48
STORE_TIMESTAMP_POS = 56
STORE_HOST_POS = 64
RECONSUME_TIMES_POS = 72
PREPARED_TRANSACTION_OFFSET_POS = 76
BODY_LENGTH_POS = 84
BODY_POS = 88
HOST_SIZE = 8

# The fixed 88 bytes before the body, field by field (name, struct code): the one declaration
# the store writes and parses with and the decoders read with (as `HEADER` or as a numpy dtype).
HEADER_FIELDS: tuple[tuple[str, str], ...] = (
    ("total_size", "i"), ("magic_code", "i"), ("body_crc", "i"), ("queue_id", "i"), ("flag", "i"),
    ("queue_offset", "q"), ("physical_offset", "q"), ("sys_flag", "i"), ("born_timestamp", "q"),
    ("born_host", f"{HOST_SIZE}s"), ("store_timestamp", "q"), ("store_host", f"{HOST_SIZE}s"),
    ("reconsume_times", "i"), ("prepared_transaction_offset", "q"), ("body_length", "i"),
)
HEADER = struct.Struct(">" + "".join(code for _, code in HEADER_FIELDS))
BLANK = struct.Struct(">ii")   # the end-of-file blank record: total size, BLANK_MAGIC_CODE
assert HEADER.size == BODY_POS

# 4+4+4+4+4+8+8+4+8+8+8+8+4+8 header, 4 body length, 1 topic length, 2 properties length.
FIXED_OVERHEAD = 91
MAX_TOPIC_LENGTH = 127            # the topic length is one signed byte
MAX_PROPERTIES_LENGTH = 32767     # the properties length is one signed short

# Properties string: name \x01 value \x02 per property.
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
# a timer message's delivery (RocketMQ MessageConst; docs/internals/timer.md): epoch ms, or a delay
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
# what rmq itself puts in the properties: a client-given property of these names is refused
SYSTEM_PROPERTIES = frozenset({PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, PROPERTY_DELAY_TIME_LEVEL,
                               PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID})
KEY_SEPARATOR = " "


def calc_msg_length(body_length: int, topic_length: int, properties_length: int) -> int:
    """Record length for the given field lengths (CommitLog#calMsgLength): negative
    body or properties lengths count as 0, the length prefixes remain."""
    return FIXED_OVERHEAD + max(body_length, 0) + topic_length + max(properties_length, 0)


def encode_properties(properties: dict[str, str]) -> str:
    return "".join([f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in properties.items()])


def decode_properties(text: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        if item:
            name, _, value = item.partition(NAME_VALUE_SEPARATOR)
            result[name] = value
    return result


def record_properties(record: bytes) -> dict[str, str]:
    """The properties of one stored record, read by walking the length-prefixed fields that
    precede them (body, topic) without decoding anything else."""
    body_length = int.from_bytes(record[BODY_LENGTH_POS:BODY_POS], "big", signed=True)
    topic_length_pos = BODY_POS + max(body_length, 0)
    properties_length_pos = topic_length_pos + 1 + record[topic_length_pos]
    properties_pos = properties_length_pos + 2
    length = int.from_bytes(record[properties_length_pos:properties_pos], "big", signed=True)
    return decode_properties(bytes(record[properties_pos:properties_pos + max(length, 0)]).decode())


def tags_hash_code(tags: str) -> int:
    """Java String.hashCode of the tag: the tagsCode stored in ConsumeQueue entries and
    matched by the broker's tag filter (the client re-checks the tag string).

    sum(unit[i] * 31**(n-1-i)) mod 2**32 as a signed int, evaluated in C with map/sum."""
    units = tags.encode() if tags.isascii() else _utf16_units(tags)
    h: int = sum(map(operator.mul, units, _powers_of_31(len(units)))) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.cache
def _powers_of_31(length: int) -> tuple[int, ...]:
    return tuple(pow(31, length - 1 - i, 1 << 32) for i in range(length))


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


def message_id(store_host: bytes, physical_offset: int) -> str:
    """RocketMQ offset message id: store host (address + port, 8 bytes) and the
    record's physical CommitLog offset, upper-case hex (32 characters for IPv4)."""
    return (store_host + physical_offset.to_bytes(8, "big")).hex().upper()
