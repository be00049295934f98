"""RemotingCommand (docs/remoting-protocol.md, "Frames" and "Headers"): one request or response,
its header in JSON or in ROCKETMQ's binary encoding, and its body. `decode` takes a frame's
payload (everything after the length prefix) and raises FrameError for anything malformed;
`encode` writes a whole frame, header in the encoding the command names. A server reads a frame's
header before its body (`decode_header`, then the body set on the command): the header decides
whether the body is worth reading. JSON from the wire nests at most MAX_JSON_DEPTH deep
(`json_within_depth`), so no client can make a decoder recurse past Python's limit."""

from __future__ import annotations

import enum
import json
import struct
from dataclasses import dataclass, field
from typing import Any

LENGTH = struct.Struct(">i")
HEADER_LENGTH_MASK = 0xFFFFFF
RPC_TYPE_RESPONSE = 1  # flag bit 0: the command is a response
RPC_ONEWAY = 2  # flag bit 1: the sender wants no response
_BINARY_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_BINARY_PREFIX = struct.Struct(">hbhiii")  # the fixed fields, then the remark's length
_SHORT = struct.Struct(">h")
MAX_JSON_DEPTH = 32   # a RemotingCommand header nests 2 deep (extFields); request bodies a few more


class FrameError(ValueError):
    """A frame that is not a well-formed RemotingCommand: the connection is closed. The codec is
    shared by the broker and the SDK, so this is neither side's error tree: each edge handles it."""


class SerializeType(enum.IntEnum):
    JSON = 0
    ROCKETMQ = 1


class LanguageCode(enum.IntEnum):
    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12


_LANGUAGES = {language.value: language for language in LanguageCode}
_LANGUAGE_NAMES = {language.name: language for language in LanguageCode}
_LANGUAGE_NAME_OF = {language: language.name for language in LanguageCode}
_JSON_NAME = SerializeType.JSON.name


@dataclass
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    language: LanguageCode = LanguageCode.JAVA
    version: int = 0
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RPC_TYPE_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & RPC_ONEWAY)

    def response(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The answer to this request: same opaque, same header encoding."""
        return RemotingCommand(
            code,
            self.opaque,
            RPC_TYPE_RESPONSE,
            remark,
            ext_fields or {},
            body,
            LanguageCode.JAVA,
            self.version,
            self.serialize_type,
        )

    def encode(self) -> bytes:
        header = (
            encode_binary_header(self)
            if self.serialize_type is SerializeType.ROCKETMQ
            else encode_json_header(self)
        )
        mark = (self.serialize_type << 24) | len(header)
        return b"".join((LENGTH.pack(4 + len(header) + len(self.body)), LENGTH.pack(mark), header, self.body))


def decode(payload: bytes) -> RemotingCommand:
    """The command in a frame's payload (the bytes after the length prefix)."""
    if len(payload) < 4:
        raise FrameError(f"a frame of {len(payload)} bytes has no header length")
    mark = LENGTH.unpack_from(payload)[0]
    header_length = mark & HEADER_LENGTH_MASK
    if header_length > len(payload) - 4:
        raise FrameError(f"header length {header_length} exceeds the frame ({len(payload) - 4} bytes)")
    command = decode_header(mark, payload[4 : 4 + header_length])
    command.body = payload[4 + header_length :]
    return command


def decode_header(mark: int, header: bytes) -> RemotingCommand:
    """The command a frame's header describes, without its body: `mark` is the header length
    word (encoding in its top byte); FrameError for anything malformed."""
    kind = (mark >> 24) & 0xFF
    if kind == SerializeType.JSON:
        return decode_json_header(header, b"")
    if kind == SerializeType.ROCKETMQ:
        return decode_binary_header(header, b"")
    raise FrameError(f"unknown header encoding {kind} (0 = JSON, 1 = ROCKETMQ)")


_OPENERS = frozenset(b"[{")
_CLOSERS = frozenset(b"]}")


def json_within_depth(data: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON text `data` nests arrays and objects at most `limit` deep (brackets inside
    strings do not count). Counting the brackets first keeps the usual small document a C-speed
    check; only one with more than `limit` of them is walked."""
    if data.count(b"{") + data.count(b"[") <= limit:
        return True
    depth, in_string, escaped = 0, False, False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:   # backslash
                escaped = True
            elif byte == 0x22:   # closing quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in _OPENERS:
            depth += 1
            if depth > limit:
                return False
        elif byte in _CLOSERS:
            depth -= 1
    return True


def encode_json_header(command: RemotingCommand) -> bytes:
    header: dict[str, object] = {
        "code": command.code,
        "language": _LANGUAGE_NAME_OF[command.language],   # no enum property per answer
        "version": command.version,
        "opaque": command.opaque,
        "flag": command.flag,
        "extFields": command.ext_fields,
        "serializeTypeCurrentRPC": _JSON_NAME,
    }
    if command.remark is not None:
        header["remark"] = command.remark
    return _JSON_ENCODER.encode(header).encode()


_JSON_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))   # made once, not per dumps
_JSON_DECODER = json.JSONDecoder()
_INT_FIELDS = ("code", "opaque", "flag", "version")


def _int_fields(header: dict[str, Any]) -> list[int]:
    """The header's code, opaque, flag and version (0 when absent)."""
    values = [header.get(name, 0) for name in _INT_FIELDS]
    for name, value in zip(_INT_FIELDS, values, strict=True):
        if type(value) is not int:   # bool is not int here, as in Java
            raise FrameError(f"header field {name!r} must be an integer, not {value!r}")
    return values


def _text(value: object) -> str:
    """An extFields value as the string it stands for (clients write some numbers unquoted)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise FrameError(f"an extFields value must be a string or a number, not {value!r}")


def decode_json_header(header: bytes, body: bytes) -> RemotingCommand:
    if not json_within_depth(header):
        raise FrameError(f"the JSON header nests deeper than {MAX_JSON_DEPTH} levels")
    try:   # RocketMQ writes its JSON headers in UTF-8
        parsed = _JSON_DECODER.decode(header.decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise FrameError(f"the JSON header is not valid JSON: {error}") from None
    if not isinstance(parsed, dict):
        raise FrameError("the JSON header is not an object")
    ext = parsed.get("extFields") or {}
    if not isinstance(ext, dict):
        raise FrameError("extFields is not an object")
    remark = parsed.get("remark")
    code, opaque, flag, version = _int_fields(parsed)
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        remark=None if remark is None else _text(remark),
        # JSON object keys are strings; most values are too (the rest go through _text)
        ext_fields={key: value if type(value) is str else str(value) if type(value) is int else _text(value)
                    for key, value in ext.items() if value is not None},
        body=body,
        language=_LANGUAGE_NAMES.get(str(parsed.get("language")), LanguageCode.OTHER),
        version=version,
        serialize_type=SerializeType.JSON,
    )


_KEY_FIELDS: dict[str, bytes] = {}   # an extFields key as written: its 2-byte length, its bytes


def _key_field(key: str) -> bytes:
    data = key.encode()
    field = _SHORT.pack(len(data)) + data
    if len(_KEY_FIELDS) < 4096:   # the keys of the answers written, a few dozen names
        _KEY_FIELDS[key] = field
    return field


def encode_binary_header(command: RemotingCommand) -> bytes:
    remark = (command.remark or "").encode()
    fields: list[bytes] = []
    for key, value in command.ext_fields.items():
        value_bytes = value.encode()
        fields += (_KEY_FIELDS.get(key) or _key_field(key), LENGTH.pack(len(value_bytes)), value_bytes)
    ext = b"".join(fields)
    return b"".join((_BINARY_PREFIX.pack(command.code, command.language, command.version, command.opaque,
                                         command.flag, len(remark)),
                     remark, LENGTH.pack(len(ext)), ext))


def _truncated(what: str) -> FrameError:
    return FrameError(f"the ROCKETMQ header is truncated in {what}")


def _utf8(data: bytes, what: str) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise FrameError(f"the ROCKETMQ header's {what} is not UTF-8") from None


def decode_binary_header(header: bytes, body: bytes) -> RemotingCommand:
    """One pass over the header: its fixed part and the remark's length in one `struct` unpack,
    the extFields in `_ext_fields`."""
    end = len(header)
    if end < _BINARY_PREFIX.size:
        raise _truncated("its fixed fields" if end < _BINARY_FIXED.size else "the remark length")
    code, language, version, opaque, flag, remark_length = _BINARY_PREFIX.unpack_from(header)
    at, remark = _BINARY_PREFIX.size, None
    if remark_length > 0:
        if at + remark_length > end:
            raise _truncated("the remark")
        remark = _utf8(header[at : at + remark_length], "the remark")
        at += remark_length
    if at + LENGTH.size > end:
        raise _truncated("the extFields length")
    ext_length = LENGTH.unpack_from(header, at)[0]
    at += LENGTH.size
    if ext_length < 0 or at + ext_length > end:
        raise _truncated("extFields")
    return RemotingCommand(
        code,
        opaque,
        flag,
        remark,
        _ext_fields(header[at : at + ext_length]) if ext_length else {},
        body,
        _LANGUAGES.get(language, LanguageCode.OTHER),
        version,
        SerializeType.ROCKETMQ,
    )


def _ext_fields(data: bytes) -> dict[str, str]:
    """extFields (key length: 2 bytes, key, value length: 4 bytes, value; lengths big-endian and
    signed, as Java writes them) read with no call per field: lengths from the bytes themselves,
    keys and values sliced from the text decoded once when it is all ASCII (the usual header),
    else decoded one by one as UTF-8."""
    text = data.decode("ascii") if data.isascii() else None
    fields: dict[str, str] = {}
    at, end = 0, len(data)
    while at < end:
        if at + 2 > end:
            raise _truncated("an extFields key length")
        key_end = at + 2 + (data[at] << 8 | data[at + 1])
        if data[at] & 0x80 or key_end > end:
            raise _truncated("an extFields key")
        if key_end + 4 > end:
            raise _truncated("an extFields value length")
        value_end = key_end + 4 + (data[key_end] << 24 | data[key_end + 1] << 16 | data[key_end + 2] << 8
                                   | data[key_end + 3])
        if value_end > end:   # a negative length (sign bit set) reads as over 2 GiB here
            raise _truncated("an extFields value")
        if text is not None:
            fields[text[at + 2 : key_end]] = text[key_end + 4 : value_end]
        else:
            fields[_utf8(data[at + 2 : key_end], "an extFields key")] = _utf8(
                data[key_end + 4 : value_end], "an extFields value")
        at = value_end
    return fields
