"""Incremental AWS event-stream decoder (``application/vnd.amazon.eventstream``): bytes in, messages
out (WIRE-1, Bedrock ConverseStream).

A message is a 12-byte prelude (total length, headers length, both big-endian uint32, then the
CRC32 of those 8 bytes), the headers, the payload and the CRC32 of everything before it. A header is
a 1-byte name length, the UTF-8 name, a 1-byte type and a value: 0 true, 1 false, 2 int8, 3 int16,
4 int32, 5 int64, 6 bytes and 7 UTF-8 string (each after a 2-byte length), 8 timestamp (int64
milliseconds), 9 UUID (16 bytes). Values come out as botocore gives them: bool, int, bytes, str,
int, bytes.

Rules, the same as botocore's reader: the prelude's CRC is checked as soon as its 12 bytes are in,
then its lengths (headers at most 128 KiB, payload at most 24 MiB), before any more of the message
is waited for; the message CRC when the whole message is in. A checksum that does not match, a
length past the limits or inconsistent, a header of an unknown type, a duplicate header name or
headers that overrun their length raise `EventStreamDecodeError`, whose `kind` is the name of the
botocore error for the same fault. Bytes left at the end that make no whole message are `pending`;
what to do with them is the caller's choice.

Never performs I/O, reads no clock, takes no lock: one decoder belongs to one stream. Theory of
operation: a read is decoded where it lies (message slices over the read, CRCs over memoryviews);
only an incomplete message is kept, as a list of parts joined once when the bytes it needs are in,
so every byte is copied a bounded number of times however the stream is split (linear time).
Header blocks repeat from message to message (the same three headers on every event), so each
distinct short block is parsed once and its mapping reused: the mappings handed out are shared
and must not be changed.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Final, NamedTuple
from zlib import crc32

__all__ = [
    "MAX_HEADERS_LENGTH",
    "MAX_PAYLOAD_LENGTH",
    "EventFrame",
    "EventStreamDecodeError",
    "EventStreamDecoder",
    "HeaderValue",
]

MAX_HEADERS_LENGTH: Final = 128 * 1024
MAX_PAYLOAD_LENGTH: Final = 24 * 1024 * 1024
_PRELUDE: Final = 12
_OVERHEAD: Final = 16  # prelude and message CRC
_CACHE_LIMIT: Final = 64  # distinct header blocks kept per stream ...
_CACHE_BLOCK: Final = 512  # ... each at most this long: a hostile stream cannot make it big

_prelude = struct.Struct(">III").unpack_from
_u16 = struct.Struct(">H").unpack_from
_u32 = struct.Struct(">I").unpack_from
_FIXED: Final = {
    2: struct.Struct(">b"),
    3: struct.Struct(">h"),
    4: struct.Struct(">i"),
    5: struct.Struct(">q"),
}
_FIXED[8] = _FIXED[5]

HeaderValue = bool | int | bytes | str


class EventStreamDecodeError(ValueError):
    """The bytes are not a valid event stream. `kind` names the botocore error for the same fault
    (ChecksumMismatch, InvalidHeadersLength, InvalidPayloadLength, DuplicateHeader, or
    InvalidHeaders, which botocore has not: it fails with a plain KeyError or struct error);
    `details` are that error's arguments; `offset` is the stream offset of the message."""

    def __init__(self, kind: str, message: str, *details: object, offset: int = 0) -> None:
        super().__init__(message)
        self.kind = kind
        self.details = details
        self.offset = offset


class EventFrame(NamedTuple):
    """One message: its headers (a shared mapping, not to be changed) and its payload."""

    headers: Mapping[str, HeaderValue]
    payload: bytes


def _checksum_error(expected: int, calculated: int, offset: int) -> EventStreamDecodeError:
    return EventStreamDecodeError(
        "ChecksumMismatch",
        f"Checksum mismatch: expected 0x{expected:08x}, calculated 0x{calculated:08x}",
        expected,
        calculated,
        offset=offset,
    )


def parse_headers(block: bytes, offset: int = 0) -> dict[str, HeaderValue]:
    """One message's header block as a dict (raises `EventStreamDecodeError`)."""
    headers: dict[str, HeaderValue] = {}
    pos, end = 0, len(block)
    try:
        while pos < end:
            size = block[pos]
            name = block[pos + 1 : pos + 1 + size].decode("utf-8")
            pos += 1 + size
            kind = block[pos]
            pos += 1
            value: HeaderValue
            if kind == 7 or kind == 6:
                (length,) = _u16(block, pos)
                raw = block[pos + 2 : pos + 2 + length]
                if len(raw) != length:
                    raise IndexError("value past the block")
                value = raw.decode("utf-8") if kind == 7 else raw
                pos += 2 + length
            elif kind == 0 or kind == 1:
                value = kind == 0
            elif kind == 9:
                value = block[pos : pos + 16]
                if len(value) != 16:
                    raise IndexError("value past the block")
                pos += 16
            else:
                fixed = _FIXED.get(kind)
                if fixed is None:
                    raise EventStreamDecodeError(
                        "InvalidHeaders", f"unknown header type {kind} for {name!r}", offset=offset
                    )
                (value,) = fixed.unpack_from(block, pos)
                pos += fixed.size
            if name in headers:
                raise EventStreamDecodeError(
                    "DuplicateHeader", f"Duplicate header present: {name}", name, offset=offset
                )
            headers[name] = value
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise EventStreamDecodeError(
            "InvalidHeaders", f"the headers overrun their block or are not UTF-8 ({exc})", offset=offset
        ) from None
    return headers


class EventStreamDecoder:
    """`feed(bytes) -> list[EventFrame]`, the messages each read completes, split anywhere."""

    __slots__ = ("_cache", "_failed", "_have", "_need", "_offset", "_parts")

    def __init__(self) -> None:
        self._parts: list[bytes] = []  # an incomplete message's bytes, as they came
        self._have = 0  # their length
        self._need = _PRELUDE  # the length at which they are worth looking at again
        self._offset = 0  # stream offset of the first byte not yet decoded
        self._cache: dict[bytes, dict[str, HeaderValue]] = {}
        self._failed: EventStreamDecodeError | None = None

    @property
    def pending(self) -> int:
        """Bytes held that make no whole message yet."""
        return self._have

    def feed(self, chunk: bytes) -> list[EventFrame]:
        if self._failed is not None:
            raise self._failed
        if self._parts:
            self._parts.append(chunk)
            self._have += len(chunk)
            if self._have < self._need:
                return []
            data = b"".join(self._parts)
            self._parts = []
        else:
            data = chunk
        try:
            return self._decode(data)
        except EventStreamDecodeError as exc:
            self._parts = []
            self._have = 0
            self._failed = exc
            raise

    def _decode(self, data: bytes) -> list[EventFrame]:
        frames: list[EventFrame] = []
        view = memoryview(data)
        cache = self._cache
        pos, end = 0, len(data)
        need = _PRELUDE
        while end - pos >= _PRELUDE:
            total, head, prelude_crc = _prelude(data, pos)
            calculated = crc32(view[pos : pos + 8])
            if calculated != prelude_crc:
                raise _checksum_error(prelude_crc, calculated, self._offset + pos)
            if head > MAX_HEADERS_LENGTH:
                raise EventStreamDecodeError(
                    "InvalidHeadersLength",
                    f"Header length of {head} exceeded the maximum of {MAX_HEADERS_LENGTH}",
                    head,
                    offset=self._offset + pos,
                )
            payload = total - head - _OVERHEAD
            if payload > MAX_PAYLOAD_LENGTH:
                raise EventStreamDecodeError(
                    "InvalidPayloadLength",
                    f"Payload length of {payload} exceeded the maximum of {MAX_PAYLOAD_LENGTH}",
                    payload,
                    offset=self._offset + pos,
                )
            if payload < 0:
                raise EventStreamDecodeError(
                    "InvalidHeadersLength",
                    f"a message of {total} bytes cannot hold {head} bytes of headers",
                    head,
                    offset=self._offset + pos,
                )
            if end - pos < total:
                need = total
                break
            stop = pos + total - 4
            (message_crc,) = _u32(data, stop)
            calculated = crc32(view[pos + 8 : stop], prelude_crc)
            if calculated != message_crc:
                raise _checksum_error(message_crc, calculated, self._offset + pos)
            body = pos + _PRELUDE + head
            block = data[pos + _PRELUDE : body]
            headers = cache.get(block)
            if headers is None:
                headers = parse_headers(block, self._offset + pos)
                if len(cache) < _CACHE_LIMIT and head <= _CACHE_BLOCK:
                    cache[block] = headers
            frames.append(EventFrame(headers, data[body:stop]))
            pos += total
        self._offset += pos
        if pos < end:
            self._parts = [data[pos:]]
            self._have = end - pos
            self._need = need
        else:
            self._have = 0
        return frames
