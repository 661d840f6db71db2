"""AWS event-stream binary framing (``application/vnd.amazon.eventstream``), as used by Bedrock
ConverseStream: encode messages with string headers and CRC32 checksums, corrupt a checksum on
purpose, and decode messages back (for assertions in tests)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

_PRELUDE = struct.Struct(">II")
_STRING = 7


class EventStreamDecodeError(ValueError):
    """Raised by `decode_messages` on truncated data or a checksum mismatch."""


@dataclass(frozen=True)
class EventMessage:
    headers: Mapping[str, str]
    payload: bytes


def _encode_headers(headers: Mapping[str, str]) -> bytes:
    out = bytearray()
    for name, value in headers.items():
        raw_name = name.encode()
        raw_value = value.encode()
        out += struct.pack(">B", len(raw_name)) + raw_name
        out += struct.pack(">BH", _STRING, len(raw_value)) + raw_value
    return bytes(out)


def encode_message(headers: Mapping[str, str], payload: bytes) -> bytes:
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
    """Decode consecutive messages (string headers only), verifying both checksums."""
    pos = 0
    while pos < len(data):
        if len(data) - pos < 16:
            raise EventStreamDecodeError("truncated prelude")
        total, head_len = _PRELUDE.unpack_from(data, pos)
        (prelude_crc,) = struct.unpack_from(">I", data, pos + 8)
        if zlib.crc32(data[pos : pos + 8]) != prelude_crc:
            raise EventStreamDecodeError("prelude checksum mismatch")
        if len(data) - pos < total:
            raise EventStreamDecodeError("truncated message")
        msg = data[pos : pos + total]
        (crc,) = struct.unpack(">I", msg[-4:])
        if zlib.crc32(msg[:-4]) != crc:
            raise EventStreamDecodeError("message checksum mismatch")
        headers: dict[str, str] = {}
        hp = 12
        while hp < 12 + head_len:
            nlen = msg[hp]
            name = msg[hp + 1 : hp + 1 + nlen].decode()
            hp += 1 + nlen
            htype = msg[hp]
            if htype != _STRING:
                raise EventStreamDecodeError(f"unsupported header type {htype}")
            (vlen,) = struct.unpack_from(">H", msg, hp + 1)
            headers[name] = msg[hp + 3 : hp + 3 + vlen].decode()
            hp += 3 + vlen
        yield EventMessage(headers, msg[12 + head_len : -4])
        pos += total
