"""Spec store-commitlog-consumequeue TV1, TV19 (tag hash), TV2 msgId."""

import struct

from rmq import message_format as mf


def test_calc_msg_length_vectors() -> None:
    assert mf.calc_msg_length(0, 0, 0) == 91
    assert mf.calc_msg_length(5, 9, 0) == 105
    assert mf.calc_msg_length(5, 9, 20) == 125
    assert mf.calc_msg_length(-1, 9, -1) == 100


def test_tags_hash_code_is_java_string_hash() -> None:
    assert mf.tags_hash_code("TagA") == 2598919
    assert mf.tags_hash_code("") == 0
    assert mf.tags_hash_code("TopicTest#KEY1") == -1656969516


def test_message_id_vector() -> None:
    host = bytes([127, 0, 0, 1]) + (10911).to_bytes(4, "big")
    assert mf.message_id(host, 0) == "7F00000100002A9F0000000000000000"


def test_properties_round_trip() -> None:
    props = {"TAGS": "TagA", "KEYS": "k1 k2", "x": "y"}
    text = mf.encode_properties(props)
    assert text == "TAGS\x01TagA\x02KEYS\x01k1 k2\x02x\x01y\x02"
    assert mf.decode_properties(text) == props


def test_header_fields_sit_at_the_declared_positions() -> None:
    """HEADER (packing/parsing) and the *_POS constants (column reads) are one layout, spec
    store-commitlog-consumequeue §3."""
    position, positions = 0, {}
    for name, code in mf.HEADER_FIELDS:
        positions[name] = position
        position += struct.calcsize(">" + code)
    assert position == mf.HEADER.size == mf.BODY_POS
    assert positions == {
        "total_size": mf.TOTAL_SIZE_POS, "magic_code": mf.MAGIC_CODE_POS, "body_crc": mf.BODY_CRC_POS,
        "queue_id": mf.QUEUE_ID_POS, "flag": mf.FLAG_POS, "queue_offset": mf.QUEUE_OFFSET_POS,
        "physical_offset": mf.PHYSICAL_OFFSET_POS, "sys_flag": mf.SYS_FLAG_POS,
        "born_timestamp": mf.BORN_TIMESTAMP_POS, "born_host": mf.BORN_HOST_POS,
        "store_timestamp": mf.STORE_TIMESTAMP_POS, "store_host": mf.STORE_HOST_POS,
        "reconsume_times": mf.RECONSUME_TIMES_POS,
        "prepared_transaction_offset": mf.PREPARED_TRANSACTION_OFFSET_POS, "body_length": mf.BODY_LENGTH_POS,
    }
