"""RemotingCommand frames, header fields, route JSON and the ACL signature of the 4.x remoting
protocol (docs/remoting-protocol.md), byte for byte."""

from __future__ import annotations

import json
import struct

import pytest

from rmq.broker_server.errors import BrokerError
from rmq.broker_server.remoting import headers
from rmq.broker_server.remoting.broker_processor import PULL_RESPONSE_CODES
from rmq.broker_server.remoting.dispatch import RESPONSE_CODES
from rmq.broker_server.remoting.remoting_acl import sign, signed, signing_content
from rmq.broker_server.remoting.request_bytes import RequestBytes
from rmq.broker_server.remoting.topic_route_data import BrokerData, QueueData, encode_topic_route
from rmq.remoting.remoting_command import (
    FrameError,
    LanguageCode,
    RemotingCommand,
    SerializeType,
    decode,
)
from rmq.remoting.request_code import RequestCode
from rmq.v1 import rmq_pb2


def payload(frame: bytes) -> bytes:
    """A frame without its length prefix, after checking the prefix counts the rest."""
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    return frame[4:]


def test_json_frame_layout_and_round_trip() -> None:
    command = RemotingCommand(
        RequestCode.PULL_MESSAGE,
        opaque=7,
        remark="r",
        ext_fields={"topic": "T"},
        body=b"\x00body",
        language=LanguageCode.CPP,
        version=401,
    )
    frame = command.encode()
    mark = struct.unpack(">i", frame[4:8])[0]
    assert mark >> 24 == SerializeType.JSON
    header = json.loads(frame[8 : 8 + (mark & 0xFFFFFF)])
    assert header["code"] == 11 and header["language"] == "CPP" and header["extFields"] == {"topic": "T"}
    assert frame.endswith(b"\x00body")
    assert decode(payload(frame)) == command


def test_rocketmq_binary_header_matches_its_layout() -> None:
    """code short, language byte, version short, opaque int, flag int, remark (int length +
    bytes), extFields (int length, then short key length, key, int value length, value)."""
    header = (
        struct.pack(">hbhii", 10, 0, 317, 42, 2)
        + struct.pack(">i", 0)
        + struct.pack(">i", 2 + 5 + 4 + 2)
        + struct.pack(">h", 5)
        + b"topic"
        + struct.pack(">i", 2)
        + b"T1"
    )
    frame_payload = struct.pack(">i", (1 << 24) | len(header)) + header + b"B"
    command = decode(frame_payload)
    assert (command.code, command.language, command.version, command.opaque, command.flag) == (
        10,
        LanguageCode.JAVA,
        317,
        42,
        2,
    )
    assert command.is_oneway and command.remark is None and command.ext_fields == {"topic": "T1"}
    assert command.body == b"B" and command.serialize_type is SerializeType.ROCKETMQ
    assert payload(command.encode()) == frame_payload


def binary_header(ext: bytes, remark: bytes = b"") -> bytes:
    """A frame payload whose ROCKETMQ header carries `remark` and the extFields bytes `ext`."""
    header = struct.pack(">hbhiii", 10, 3, 0, 1, 0, len(remark)) + remark + struct.pack(">i", len(ext)) + ext
    return struct.pack(">i", (1 << 24) | len(header)) + header


def ext_field(key: bytes, value: bytes) -> bytes:
    return struct.pack(">h", len(key)) + key + struct.pack(">i", len(value)) + value


def test_binary_ext_fields_in_utf8_and_of_any_length_survive_a_round_trip() -> None:
    """Keys and values outside ASCII (or with length bytes outside it: 200 bytes) are read as
    UTF-8, as RocketMQ writes them; an unknown language number reads as OTHER."""
    fields = {"topic": "订单", "keys": "k" * 200, "é": "", "": "v", "properties": "TAGS\x01a\x02"}
    command = RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=5, remark="déjà", ext_fields=fields,
                              serialize_type=SerializeType.ROCKETMQ)
    decoded = decode(payload(command.encode()))
    assert decoded.ext_fields == fields and decoded.remark == "déjà" and decoded.opaque == 5
    unknown_language = bytearray(binary_header(ext_field(b"a", b"b")))
    unknown_language[4 + 2] = 99
    assert decode(bytes(unknown_language)).language is LanguageCode.OTHER


@pytest.mark.parametrize(
    "frame_payload, reason",
    [
        (binary_header(b"\x00"), "truncated in an extFields key length"),
        (binary_header(b"\x00\x05ab"), "truncated in an extFields key"),
        # a key length of -32768 (Java's short), not 32768, though 32768 bytes follow
        (binary_header(b"\x80\x00" + b"k" * 32768 + b"\x00" * 4), "truncated in an extFields key"),
        (binary_header(b"\x00\x01a\x00\x00"), "truncated in an extFields value length"),
        (binary_header(b"\x00\x01a\x00\x00\x00\x09abc"), "truncated in an extFields value"),
        (binary_header(b"\x00\x01a\xff\xff\xff\xfe" + b"\x00" * 4), "truncated in an extFields value"),
        (binary_header(ext_field(b"a", b"\xff")), "extFields value is not UTF-8"),
        (binary_header(ext_field(b"\xc3", b"v")), "extFields key is not UTF-8"),
        (binary_header(b"", b"\xff"), "remark is not UTF-8"),
        (struct.pack(">ihbhiiii", (1 << 24) | 23, 10, 3, 0, 1, 0, 0, 50) + b"ab", "truncated in extFields"),
    ],
)
def test_malformed_binary_ext_fields_are_frame_errors(frame_payload: bytes, reason: str) -> None:
    with pytest.raises(FrameError, match=reason):
        decode(frame_payload)


def test_a_response_keeps_the_opaque_and_the_header_encoding() -> None:
    request = RemotingCommand(RequestCode.HEART_BEAT, opaque=9, serialize_type=SerializeType.ROCKETMQ)
    response = decode(payload(request.response(0, "fine", {"k": "v"}).encode()))
    assert response.is_response and response.opaque == 9 and response.remark == "fine"
    assert response.serialize_type is SerializeType.ROCKETMQ and response.ext_fields == {"k": "v"}


def test_json_ext_fields_written_as_numbers_are_read_as_strings() -> None:
    """The C++ client writes some header fields as JSON numbers (queueId, sysFlag)."""
    header = b'{"code":11,"opaque":3,"flag":0,"language":"CPP","extFields":{"queueId":3,"x":true,"y":null}}'
    command = decode(struct.pack(">i", len(header)) + header)
    assert command.ext_fields == {"queueId": "3", "x": "true"}


@pytest.mark.parametrize(
    "frame_payload, reason",
    [
        (b"\x00\x00", "no header length"),
        (struct.pack(">i", 50) + b"{}", "exceeds the frame"),
        (struct.pack(">i", 5) + b"{oops", "not valid JSON"),
        (struct.pack(">i", 2) + b"[]", "not an object"),
        (struct.pack(">i", 12) + b'{"code":"x"}', "must be an integer"),
        (struct.pack(">i", (7 << 24) | 0), "unknown header encoding 7"),
        (struct.pack(">i", (1 << 24) | 3) + b"\x00\x0a\x00", "truncated"),
        (
            struct.pack(">i", (1 << 24) | 19) + struct.pack(">hbhiii", 10, 0, 0, 1, 0, 1000) + b"\x00\x00",
            "truncated in the remark",
        ),
    ],
)
def test_malformed_headers_are_frame_errors(frame_payload: bytes, reason: str) -> None:
    with pytest.raises(FrameError, match=reason):
        decode(frame_payload)


def test_send_header_v2_short_names_are_the_v1_names() -> None:
    command = RemotingCommand(
        RequestCode.SEND_MESSAGE_V2, ext_fields={"a": "PG", "b": "T", "e": "3", "i": "p"}
    )
    assert headers.send_header(command) == {
        "producerGroup": "PG",
        "topic": "T",
        "queueId": "3",
        "properties": "p",
    }


def batch_entry(body: bytes, properties: str, flag: int = 0) -> bytes:
    encoded = properties.encode()
    return (
        struct.pack(">iiiii", 20 + len(body) + 2 + len(encoded), 0, 0, flag, len(body))
        + body
        + struct.pack(">h", len(encoded))
        + encoded
    )


def test_batch_bodies_are_split_into_messages() -> None:
    body = batch_entry(b"one", "TAGS\x01a\x02", 5) + batch_entry(b"two!", "")
    assert headers.batch_messages(body) == [(b"one", "TAGS\x01a\x02", 5), (b"two!", "", 0)]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        batch_entry(b"one", "")[:-1],
        batch_entry(b"x", "") + b"\x00\x00",
        struct.pack(">iiiii", 9999, 0, 0, 0, 1) + b"x\x00\x00",
    ],
)
def test_a_malformed_batch_is_refused_naming_it(body: bytes) -> None:
    with pytest.raises(BrokerError) as refused:
        headers.batch_messages(body)
    assert refused.value.code == rmq_pb2.ILLEGAL_ARGUMENT


def test_route_json_writes_broker_ids_as_bare_integers() -> None:
    body = encode_topic_route(
        [BrokerData("broker-a", {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}, "DefaultCluster")],
        [QueueData("broker-a", 4, 2, 6)],
    ).decode()
    assert '"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"}' in body
    route = json.loads(body.replace("{0:", '{"0":').replace(",1:", ',"1":'))
    assert route["queueDatas"] == [
        {"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 2}
    ]
    assert route["brokerDatas"][0]["brokerName"] == "broker-a"


def test_the_signature_covers_every_field_but_itself_by_sorted_name_then_the_body() -> None:
    fields = {"topic": "T", "AccessKey": "ak", "Signature": "old", "queueId": "1"}
    assert signing_content(fields, b"BODY") == b"ak" + b"1" + b"T" + b"BODY"
    request = signed(
        RemotingCommand(RequestCode.SEND_MESSAGE, ext_fields={"topic": "T"}, body=b"x"), "ak", "sk"
    )
    assert request.ext_fields["Signature"] == sign("sk", b"akTx")
    # RFC 2202 test case 2 (HMAC-SHA1), base64
    assert sign("Jefe", b"what do ya want for nothing?") == "7/zfauXrL6LSdBbV8YTfnCWafHk="


def test_every_status_and_pull_status_has_a_response_code() -> None:
    assert set(RESPONSE_CODES) == set(rmq_pb2.Code.values())
    assert set(PULL_RESPONSE_CODES) == set(rmq_pb2.PullStatus.values())


def test_request_bytes_wait_for_room_on_the_connection_and_in_all() -> None:
    budget = RequestBytes(total=100, per_connection=60, per_account=100)
    woken: list[str] = []
    assert budget.try_acquire("a", "A", 50) and budget.try_acquire("b", "B", 40)
    assert not budget.try_acquire("a", "A", 20)   # a would pass 60 on its connection
    assert not budget.try_acquire("c", "C", 30)   # c 100 in all
    budget.wait("a", lambda: woken.append("a"))
    budget.wait("c", lambda: woken.append("c"))
    budget.release("b", "B", 40)
    assert woken == ["a", "c"]   # each waiter is called once, and tries again
    assert budget.try_acquire("c", "C", 30) and not budget.try_acquire("a", "A", 20)
    budget.wait("a", lambda: woken.append("a again"))
    budget.release("a", "A", 50)
    assert woken[-1] == "a again" and budget.try_acquire("a", "A", 20)
    assert budget.held == 50
    budget.release("a", "A", 20)
    budget.release("c", "C", 30)
    assert budget.try_acquire("d", "D", 500)   # a frame over the bounds is read when nothing else is held
    budget.wait("e", lambda: woken.append("e"))
    budget.forget("e")   # its connection closed
    budget.release("d", "D", 500)
    assert woken[-1] == "a again" and budget.held == 0


def test_one_account_holds_at_most_its_share_of_request_bytes() -> None:
    """Its connections together stop at the account's share; another account still gets room."""
    budget = RequestBytes(total=100, per_connection=60, per_account=40)
    assert budget.try_acquire("a1", "greedy", 30)
    assert not budget.try_acquire("a2", "greedy", 20)   # 50 > the account's 40, on another connection
    assert budget.try_acquire("b", "other", 40) and budget.held_by("greedy") == 30
    budget.release("a1", "greedy", 30)
    assert budget.try_acquire("a2", "greedy", 20) and budget.held_by("other") == 40
