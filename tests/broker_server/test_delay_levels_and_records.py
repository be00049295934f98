import pytest

from rmq.broker_server.processors.delay_levels import (
    DEFAULT_MESSAGE_DELAY_LEVEL,
    delay_level_to_queue_id,
    parse_delay_levels,
    queue_id_to_delay_level,
)
from rmq.stored_message import decode_record


def test_default_levels_tv14_tv23() -> None:
    levels = parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL)
    assert levels == {
        1: 1000,
        2: 5000,
        3: 10000,
        4: 30000,
        5: 60000,
        6: 120000,
        7: 180000,
        8: 240000,
        9: 300000,
        10: 360000,
        11: 420000,
        12: 480000,
        13: 540000,
        14: 600000,
        15: 1200000,
        16: 1800000,
        17: 3600000,
        18: 7200000,
    }
    assert (delay_level_to_queue_id(1), delay_level_to_queue_id(18), queue_id_to_delay_level(2)) == (0, 17, 3)
    assert parse_delay_levels("2d") == {1: 2 * 24 * 3600 * 1000}


@pytest.mark.parametrize("text", ["", "1s 5x", "s", "-1s", "1.5s"])
def test_bad_levels(text: str) -> None:
    with pytest.raises(ValueError):
        parse_delay_levels(text)


def test_decode_record_reads_every_field() -> None:
    body, topic, properties = b"hello", b"TopicTest", "TAGS\x01TagA\x02KEYS\x01k1 k2\x02"
    header = bytearray(84)
    fields = {
        12: (3, 4),
        16: (7, 4),
        20: (42, 8),
        28: (1000, 8),
        36: (0, 4),
        40: (111, 8),
        56: (222, 8),
        72: (2, 4),
    }
    for position, (value, width) in fields.items():
        header[position : position + width] = value.to_bytes(width, "big")
    header[48:56] = bytes([127, 0, 0, 1, 0, 0, 0, 80])
    props = properties.encode()
    record = (
        bytes(header)
        + len(body).to_bytes(4, "big")
        + body
        + bytes([len(topic)])
        + topic
        + len(props).to_bytes(2, "big")
        + props
    )
    message = decode_record(b"padding" + record, 7)
    assert (message.queue_id, message.flag, message.queue_offset, message.physical_offset) == (3, 7, 42, 1000)
    assert (message.born_timestamp, message.store_timestamp, message.reconsume_times) == (111, 222, 2)
    assert message.born_host == bytes([127, 0, 0, 1, 0, 0, 0, 80])
    assert (message.body, message.topic) == (b"hello", "TopicTest")
    assert message.properties == {"TAGS": "TagA", "KEYS": "k1 k2"}
