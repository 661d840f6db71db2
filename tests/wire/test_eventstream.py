"""The AWS event-stream decoder (WIRE-1, Bedrock): every header type, any split of the input, both
checksums and the length limits — checked against botocore's own reader of the same bytes — and
the Bedrock attempt over it: a real boto3 client and botocore `EventStream`, the body handed to the
driver split at every byte, a corrupted checksum at every byte, and the fallback to botocore's
parser for a stream that is not botocore's."""

from __future__ import annotations

import io
import itertools
import json
import struct
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.awsrequest
import botocore.config
import botocore.eventstream
import pytest
import urllib3
from helpers import INSTANT
from hypothesis import given, settings
from hypothesis import strategies as st

import fsm_agent
from fsm_agent._internal.providers import bedrock
from fsm_agent._internal.wire.eventstream import (
    MAX_HEADERS_LENGTH,
    MAX_PAYLOAD_LENGTH,
    EventStreamDecodeError,
    EventStreamDecoder,
)
from fsm_agent.testing.eventstream import (
    TypedHeader,
    corrupt_crc,
    decode_messages,
    encode_message,
    event_message,
    exception_message,
)

# -- the decoder against botocore's reader -------------------------------------------------------------


def botocore_messages(data: bytes) -> list[tuple[dict[str, Any], bytes]]:
    buffer = botocore.eventstream.EventStreamBuffer()
    buffer.add_data(data)
    return [(message.headers, message.payload) for message in buffer]


def ours(chunks: list[bytes]) -> list[tuple[dict[str, Any], bytes]]:
    decoder = EventStreamDecoder()
    out = [(dict(f.headers), f.payload) for chunk in chunks for f in decoder.feed(chunk)]
    assert decoder.pending == 0
    return out


def split_at(data: bytes, points: list[int]) -> list[bytes]:
    cuts = sorted({0, len(data), *(p % (len(data) + 1) for p in points)})
    return [data[a:b] for a, b in itertools.pairwise(cuts)]


ALL_TYPES = {
    "t": TypedHeader(0, True),
    "f": TypedHeader(1, False),
    "i8": TypedHeader(2, -7),
    "i16": TypedHeader(3, -300),
    "i32": TypedHeader(4, 70_000),
    "i64": TypedHeader(5, -(2**40)),
    "bytes": TypedHeader(6, b"\x00\xff"),
    "string": "héllo",
    "ts": TypedHeader(8, 1_700_000_000_123),
    "uuid": TypedHeader(9, uuid.UUID(int=12345).bytes),
}


def test_every_header_type_as_botocore_reads_it() -> None:
    message = encode_message(ALL_TYPES, b'{"a": 1}')
    got = ours([message])
    assert got == botocore_messages(message)
    headers, payload = got[0]
    assert headers["t"] is True and headers["f"] is False and headers["i64"] == -(2**40)
    assert headers["uuid"] == uuid.UUID(int=12345).bytes and headers["string"] == "héllo"
    assert payload == b'{"a": 1}'


def test_split_at_every_byte_and_one_byte_at_a_time() -> None:
    body = event_message("messageStart", b'{"role":"assistant"}') + encode_message(ALL_TYPES, b"x" * 40)
    whole = ours([body])
    assert len(whole) == 2
    for cut in range(len(body) + 1):
        assert ours([body[:cut], body[cut:]]) == whole
    assert ours([body[i : i + 1] for i in range(len(body))]) == whole


header_values = st.one_of(
    st.text(max_size=20),
    st.builds(TypedHeader, st.sampled_from([0, 1])),
    st.builds(TypedHeader, st.just(2), st.integers(-(2**7), 2**7 - 1)),
    st.builds(TypedHeader, st.just(3), st.integers(-(2**15), 2**15 - 1)),
    st.builds(TypedHeader, st.just(4), st.integers(-(2**31), 2**31 - 1)),
    st.builds(TypedHeader, st.sampled_from([5, 8]), st.integers(-(2**63), 2**63 - 1)),
    st.builds(TypedHeader, st.just(6), st.binary(max_size=20)),
    st.builds(TypedHeader, st.just(9), st.binary(min_size=16, max_size=16)),
)
messages = st.lists(
    st.tuples(
        st.dictionaries(st.text(min_size=1, max_size=8), header_values, max_size=5), st.binary(max_size=60)
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=150, deadline=None)
@given(messages, st.lists(st.integers(min_value=0), max_size=12))
def test_any_messages_any_split_read_as_botocore_reads_them(
    spec: list[tuple[dict[str, Any], bytes]], points: list[int]
) -> None:
    body = b"".join(encode_message(headers, payload) for headers, payload in spec)
    expected = botocore_messages(body)
    assert ours([body]) == expected
    assert ours(split_at(body, points)) == expected
    assert [(dict(m.headers), m.payload) for m in decode_messages(body)] == expected


@settings(max_examples=100, deadline=None)
@given(
    st.integers(min_value=0),
    st.integers(min_value=1, max_value=255),
    st.lists(st.integers(min_value=0), max_size=6),
)
def test_a_byte_changed_anywhere_is_the_checksum_error_botocore_gives(
    where: int, flip: int, points: list[int]
) -> None:
    good = event_message("contentBlockDelta", b'{"contentBlockIndex":0,"delta":{"text":"hi"}}')
    position = where % len(good)
    bad = good[:position] + bytes([good[position] ^ flip]) + good[position + 1 :]
    with pytest.raises(botocore.eventstream.ChecksumMismatch) as theirs:
        botocore_messages(bad)
    decoder = EventStreamDecoder()
    with pytest.raises(EventStreamDecodeError) as caught:
        for chunk in split_at(bad + good, points):
            decoder.feed(chunk)
    assert caught.value.kind == "ChecksumMismatch" and str(caught.value) == str(theirs.value)
    with pytest.raises(EventStreamDecodeError):  # a failed decoder stays failed
        decoder.feed(good)


def test_corrupt_message_crc() -> None:
    message = event_message("messageStart", b"{}")
    with pytest.raises(EventStreamDecodeError, match="Checksum mismatch") as caught:
        EventStreamDecoder().feed(corrupt_crc(message))
    assert caught.value.kind == "ChecksumMismatch" and len(caught.value.details) == 2
    with pytest.raises(EventStreamDecodeError):
        list(decode_messages(corrupt_crc(message)))
    with pytest.raises(EventStreamDecodeError, match="truncated"):
        list(decode_messages(message[:-3]))


def prelude(total: int, headers: int) -> bytes:
    head = struct.pack(">II", total, headers)
    return head + struct.pack(">I", zlib.crc32(head))


@pytest.mark.parametrize(
    ("total", "headers", "kind"),
    [
        (16 + MAX_HEADERS_LENGTH + 1, MAX_HEADERS_LENGTH + 1, "InvalidHeadersLength"),
        (16 + MAX_PAYLOAD_LENGTH + 1, 0, "InvalidPayloadLength"),
        (20, 10, "InvalidHeadersLength"),  # more headers than the message holds
    ],
)
def test_lengths_are_checked_at_the_prelude(total: int, headers: int, kind: str) -> None:
    """Before any more of the message is waited for (a lying prelude never buffers 24 MiB)."""
    decoder = EventStreamDecoder()
    with pytest.raises(EventStreamDecodeError) as caught:
        decoder.feed(prelude(total, headers))
    assert caught.value.kind == kind
    if kind != "InvalidHeadersLength" or headers > MAX_HEADERS_LENGTH:  # botocore agrees
        with pytest.raises(getattr(botocore.eventstream, kind)):
            botocore_messages(prelude(total, headers))


def test_bad_header_blocks() -> None:
    block = b"\x01a\x07\x00\x01x" * 2  # the same name twice
    duplicate = _with_header_block(block)
    with pytest.raises(EventStreamDecodeError) as caught:
        EventStreamDecoder().feed(duplicate)
    assert caught.value.kind == "DuplicateHeader"
    with pytest.raises(botocore.eventstream.DuplicateHeader):
        botocore_messages(duplicate)
    for bad in (b"\x01a\x0a\x00", b"\x01a\x07\x00\x09xx", b"\x05a", b"\x01a\x07\x00\x02\xff\xfe"):
        with pytest.raises(EventStreamDecodeError) as caught:
            EventStreamDecoder().feed(_with_header_block(bad))
        assert caught.value.kind == "InvalidHeaders"


def _with_header_block(block: bytes) -> bytes:
    head = struct.pack(">II", 16 + len(block), len(block))
    body = head + struct.pack(">I", zlib.crc32(head)) + block
    return body + struct.pack(">I", zlib.crc32(body))


def test_a_large_message_in_small_reads_is_joined_once() -> None:
    payload = b"p" * 200_000
    message = event_message("contentBlockDelta", payload)
    decoder = EventStreamDecoder()
    frames = []
    for start in range(0, len(message), 1000):
        frames += decoder.feed(message[start : start + 1000])
        if start + 1000 < len(message):
            assert len(decoder._parts) == 1 + start // 1000  # kept as parts, not re-joined
    assert [f.payload for f in frames] == [payload]


# -- the Bedrock attempt over a real boto3 client ----------------------------------------------------

PARAMS = {"modelId": "m", "messages": [{"role": "user", "content": [{"text": "hi"}]}]}


class Pieces(urllib3.HTTPResponse):
    """urllib3's response over a body in memory, its reads cut where a test says."""

    def __init__(self, parts: list[bytes]) -> None:
        super().__init__(
            body=io.BytesIO(b"".join(parts)),
            headers={"content-type": "application/vnd.amazon.eventstream"},
            status=200,
            preload_content=False,
        )
        self.parts = parts

    def stream(self, amt: int | None = 2**16, decode_content: bool | None = None) -> Iterator[bytes]:
        yield from self.parts


def client_over(parts: list[bytes]) -> Any:
    client = boto3.client(
        "bedrock-runtime",
        endpoint_url="http://bedrock.invalid",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=botocore.config.Config(retries={"max_attempts": 1}),
    )

    def answer(request: Any, **_: Any) -> Any:
        raw = Pieces(parts)
        return botocore.awsrequest.AWSResponse(request.url, 200, raw.headers, raw)

    client.meta.events.register("before-send.bedrock-runtime.ConverseStream", answer)
    return client


class Wrapped:
    """A client that hands over botocore's stream wrapped (not botocore's `EventStream` itself)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def converse_stream(self, **params: Any) -> Any:
        response = dict(self._client.converse_stream(**params))
        inner = response["stream"]
        response["stream"] = iter(inner)
        return response


def event(name: str, body: dict[str, Any]) -> bytes:
    return event_message(name, json.dumps(body).encode())


BODY = b"".join(
    [
        event("messageStart", {"role": "assistant"}),
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hel"}}),
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "lo."}}),
        event("contentBlockStop", {"contentBlockIndex": 0}),
        event("messageStop", {"stopReason": "end_turn"}),
        event("metadata", {"usage": {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5}}),
    ]
)


def outcome(client: Any) -> Any:
    try:
        result = fsm_agent.Session(backoff=INSTANT, retries=0).stream(client, PARAMS)
    except fsm_agent.ProviderStreamError as exc:
        return ("error", exc.code, str(exc), type(exc.__cause__).__name__)
    return (result.content, result.finish_reason, result.usage.total_tokens if result.usage else None)


def test_our_decoder_reads_botocore_streams_and_a_wrapped_stream_keeps_botocore_parser() -> None:
    client = client_over([BODY])
    stream = client.converse_stream(**PARAMS)["stream"]
    assert bedrock._raw_body(stream) is not None  # the fast path: botocore's parser is not run
    stream.close()
    assert bedrock._raw_body(iter(())) is None
    assert outcome(client) == outcome(Wrapped(client)) == ("Hello.", "stop", 5)


def test_a_body_split_at_every_byte_reads_the_same() -> None:
    for cut in range(len(BODY) + 1):
        assert outcome(client_over([BODY[:cut], BODY[cut:]])) == ("Hello.", "stop", 5), cut
    assert outcome(client_over([BODY[i : i + 1] for i in range(len(BODY))])) == ("Hello.", "stop", 5)


def test_a_corrupt_byte_anywhere_is_the_outcome_botocore_parser_gives() -> None:
    first = len(event("messageStart", {"role": "assistant"}))
    for position in range(first, first + 60):
        bad = BODY[:position] + bytes([BODY[position] ^ 0x20]) + BODY[position + 1 :]
        ours_outcome = outcome(client_over([bad]))
        assert ours_outcome == outcome(Wrapped(client_over([bad]))), position
        assert ours_outcome[:2] == ("error", "provider_stream_malformed_chunk")
        assert ours_outcome[3] == "ChecksumMismatch" and "Checksum mismatch" in ours_outcome[2]


@pytest.mark.parametrize(
    "message",
    [
        exception_message("throttlingException", b'{"message": "slow down"}'),
        exception_message("validationException", b'{"Message": "bad input"}'),
        encode_message({":message-type": "error", ":error-code": "Boom", ":error-message": "went off"}, b""),
    ],
)
def test_in_stream_exceptions_as_botocore_raises_them(message: bytes) -> None:
    body = event("messageStart", {"role": "assistant"}) + message
    got = outcome(client_over([body]))
    theirs = outcome(Wrapped(client_over([body])))
    assert got[0] == "error" and got[3] == "EventStreamError"
    if b'"Message"' in message:  # botocore's model keeps `message` only; ours reads either
        assert (got[1], got[3]) == (theirs[1], theirs[3]) and "bad input" in got[2]
    else:
        assert got == theirs


@pytest.mark.parametrize(
    "payload", [b"{this is not json", b"[1, 2]", b'{"contentBlockIndex": 0, "delta": {"text": NaN}}']
)
def test_malformed_payloads_are_malformed_chunks_on_both_paths(payload: bytes) -> None:
    body = event("messageStart", {"role": "assistant"}) + event_message("contentBlockDelta", payload)
    got = outcome(client_over([body]))
    assert got[:2] == ("error", "provider_stream_malformed_chunk") and "contentBlockDelta" in got[2]
    theirs = outcome(Wrapped(client_over([body])))
    assert theirs[:2] == got[:2]


def test_unknown_event_types_are_skipped_and_a_cut_stream_is_incomplete() -> None:
    odd = event("someFutureEvent", {"x": 1})
    assert outcome(client_over([odd + BODY])) == ("Hello.", "stop", 5)
    cut = BODY[:-7]  # the last message never completes
    assert outcome(client_over([cut])) == outcome(Wrapped(client_over([cut])))
