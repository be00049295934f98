"""One CommitLog record decoded field by field (rmq.message_format layout, big-endian): the
broker's slow paths (delayed delivery, send-back) and the client SDK's per-message view.
Pulls ship records undecoded; the Spark source decodes them column-wise instead."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rmq import message_format as mf


@dataclass(frozen=True)
class StoredMessage:
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    store_timestamp: int
    store_host: bytes
    reconsume_times: int
    body: bytes
    topic: str
    properties: dict[str, str]


def decode_record(buffer: bytes, position: int = 0) -> StoredMessage:
    (
        _total,
        _magic,
        _crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        _prepared,
        body_length,
    ) = mf.HEADER.unpack_from(buffer, position)
    cursor = position + mf.BODY_POS
    body = bytes(buffer[cursor : cursor + body_length])
    cursor += body_length
    topic_length = buffer[cursor]
    topic = bytes(buffer[cursor + 1 : cursor + 1 + topic_length]).decode()
    cursor += 1 + topic_length
    properties_length = int.from_bytes(buffer[cursor : cursor + 2], "big")
    properties = mf.decode_properties(bytes(buffer[cursor + 2 : cursor + 2 + properties_length]).decode())
    return StoredMessage(
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        body,
        topic,
        properties,
    )


def offset_msg_id(message: StoredMessage) -> str:
    """The record's message id: store host and CommitLog offset (MessageDecoder.createMessageId)."""
    return mf.message_id(message.store_host, message.physical_offset)


def decode_records(buffer: bytes, sizes: Iterable[int]) -> list[StoredMessage]:
    """Every record of a pull result (`sizes` as returned with it)."""
    messages, position = [], 0
    for size in sizes:
        messages.append(decode_record(buffer, position))
        position += int(size)
    return messages
