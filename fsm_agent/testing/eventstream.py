"""AWS event-stream binary framing (``application/vnd.amazon.eventstream``), as used by Bedrock
ConverseStream: encode messages with CRC32 checksums (string headers, or any header type through
`TypedHeader`), corrupt a checksum on purpose, and decode messages back for assertions in tests,
with the library's own decoder (`fsm_agent._internal.wire.eventstream`): one reader of the framing."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from fsm_agent._internal.wire.eventstream import EventStreamDecodeError, EventStreamDecoder, HeaderValue

_PRELUDE = struct.Struct(">II")
_STRING = 7
_FORMATS = {2: ">b", 3: ">h", 4: ">i", 5: ">q", 8: ">q"}

__all__ = [
    "EventMessage",
    "EventStreamDecodeError",
    "TypedHeader",
    "corrupt_crc",
    "decode_messages",
    "encode_message",
    "event_message",
    "exception_message",
]


@dataclass(frozen=True)
class TypedHeader:
    """A header value of an explicit wire type: 0 true, 1 false, 2 int8, 3 int16, 4 int32, 5 int64,
    6 bytes, 7 string, 8 timestamp (int64 milliseconds), 9 UUID (16 bytes)."""

    kind: int
    value: bool | int | bytes | str = b""


@dataclass(frozen=True)
class EventMessage:
    headers: Mapping[str, HeaderValue]
    payload: bytes


def _encode_value(value: str | TypedHeader) -> bytes:
    if isinstance(value, str):
        value = TypedHeader(_STRING, value)
    kind, raw = value.kind, value.value
    if kind in (0, 1):
        return struct.pack(">B", kind)
    if kind in _FORMATS:
        assert isinstance(raw, int)
        return struct.pack(">B", kind) + struct.pack(_FORMATS[kind], raw)
    data = raw.encode() if isinstance(raw, str) else raw
    assert isinstance(data, bytes)
    if kind == 9:
        return struct.pack(">B", kind) + data
    return struct.pack(">BH", kind, len(data)) + data


def _encode_headers(headers: Mapping[str, str | TypedHeader]) -> bytes:
    out = bytearray()
    for name, value in headers.items():
        raw_name = name.encode()
        out += struct.pack(">B", len(raw_name)) + raw_name + _encode_value(value)
    return bytes(out)


def encode_message(headers: Mapping[str, str | TypedHeader], payload: bytes) -> bytes:
    """One event-stream message: prelude (total length, headers length, prelude CRC), headers,
    payload, message CRC (CRC32 of everything before it)."""
    head = _encode_headers(headers)
    total = 12 + len(head) + len(payload) + 4
    prelude = _PRELUDE.pack(total, len(head))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + head + payload
    return body + struct.pack(">I", zlib.crc32(body))


def event_message(event_type: str, payload: bytes) -> bytes:
    headers = {":event-type": event_type, ":content-type": "application/json", ":message-type": "event"}
    return encode_message(headers, payload)


def exception_message(exception_type: str, payload: bytes) -> bytes:
    headers = {
        ":exception-type": exception_type,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return encode_message(headers, payload)


def corrupt_crc(message: bytes) -> bytes:
    """The same message with its trailing message CRC flipped."""
    crc = struct.unpack(">I", message[-4:])[0] ^ 0xFFFFFFFF
    return message[:-4] + struct.pack(">I", crc)


def decode_messages(data: bytes) -> Iterator[EventMessage]:
    """Decode consecutive messages, verifying both checksums; bytes that make no whole message at
    the end are an error here (`EventStreamDecodeError`, kind "Truncated")."""
    decoder = EventStreamDecoder()
    for frame in decoder.feed(data):
        yield EventMessage(dict(frame.headers), frame.payload)
    if decoder.pending:
        raise EventStreamDecodeError("Truncated", f"truncated message: {decoder.pending} bytes left over")
