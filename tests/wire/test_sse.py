"""The SSE decoder (SPEC WIRE-1..3): WHATWG line rules, keepalives, errors, any fragmentation."""

from __future__ import annotations

import itertools
import pickle
import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm_agent._internal.wire.sse import SSEDecodeError, SSEDecoder, SSEFrame

BOM = b"\xef\xbb\xbf"


# -- helpers --------------------------------------------------------------------------------------


def run(chunks: list[bytes], max_line_bytes: int | None = None) -> tuple[list[SSEFrame], str | None, bool]:
    """Feed `chunks` then flush: the frames returned, the error raised (as text), `pending` at EOF."""
    decoder = SSEDecoder(max_line_bytes=max_line_bytes)
    frames: list[SSEFrame] = []
    try:
        for chunk in chunks:
            frames.extend(decoder.feed(chunk))
        pending = decoder.pending
        frames.extend(decoder.flush())
    except SSEDecodeError as exc:
        return frames, f"{exc} raw={exc.raw!r} offset={exc.offset}", decoder.pending
    return frames, None, pending


def split_at(stream: bytes, points: list[int]) -> list[bytes]:
    cuts = [0, *sorted(points), len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(cuts)]


def every_way(stream: bytes, max_line_bytes: int | None = None) -> tuple[list[SSEFrame], str | None, bool]:
    """Decode `stream` whole, one byte at a time and at random cuts; all must agree."""
    whole = run([stream], max_line_bytes)
    assert run([bytes([b]) for b in stream], max_line_bytes) == whole
    rng = random.Random(len(stream))
    for _ in range(20):
        points = [rng.randint(0, len(stream)) for _ in range(rng.randint(1, 6))]
        assert run(split_at(stream, points), max_line_bytes) == whole
    return whole


def frames_of(stream: bytes) -> list[SSEFrame]:
    frames, error, _ = every_way(stream)
    assert error is None
    return frames


# -- WHATWG line rules ----------------------------------------------------------------------------

F = SSEFrame

TABLE: list[tuple[str, bytes, list[SSEFrame]]] = [
    ("one data line", b"data: hello\n\n", [F(data="hello")]),
    ("data lines joined with LF", b"data: a\ndata: b\ndata: c\n\n", [F(data="a\nb\nc")]),
    ("no space after colon", b"data:a\n\n", [F(data="a")]),
    ("only one leading space stripped", b"data:  a \n\n", [F(data=" a ")]),
    ("colon inside the value", b"data: a: b:c\n\n", [F(data="a: b:c")]),
    ("field without colon has empty value", b"data\n\n", [F(data="")]),
    ("empty data lines keep their LF", b"data\ndata\n\n", [F(data="\n")]),
    ("bare data colon", b"data:\n\n", [F(data="")]),
    ("event field", b"event: delta\ndata: x\n\n", [F(event="delta", data="x")]),
    ("empty event is the default type", b"event:\ndata: x\n\n", [F(data="x")]),
    ("last event field wins", b"event: a\nevent: b\ndata: x\n\n", [F(event="b", data="x")]),
    ("id field", b"id: 42\ndata: x\n\n", [F(id="42", data="x")]),
    ("empty id is kept", b"id\n\n", [F(id="")]),
    ("id with NUL ignored", b"id: a\x00b\ndata: x\n\n", [F(data="x")]),
    ("id with NUL keeps the earlier id", b"id: 1\nid: 2\x00\ndata: x\n\n", [F(id="1", data="x")]),
    ("retry digits", b"retry: 3000\n\n", [F(retry=3000)]),
    ("retry leading zeros", b"retry: 007\n\n", [F(retry=7)]),
    ("retry with unit ignored", b"retry: 30s\n\n", [F()]),
    ("retry negative ignored", b"retry: -1\n\n", [F()]),
    ("retry empty ignored", b"retry:\n\n", [F()]),
    ("retry non-ASCII digit ignored", "retry: ３\n\n".encode(), [F()]),
    ("comment only", b": ping\n\n", [F()]),
    ("bare colon comment", b":\n\n", [F()]),
    ("comment inside a block", b": note\ndata: x\n: more\n\n", [F(data="x")]),
    ("unknown field", b"foo: bar\n\n", [F()]),
    ("field names are case-sensitive", b"Data: x\nEVENT: y\n\n", [F()]),
    ("space before colon makes another name", b"data : x\n\n", [F()]),
    ("LF", b"data: a\n\ndata: b\n\n", [F(data="a"), F(data="b")]),
    ("CR", b"data: a\rdata: b\r\rdata: c\r\r", [F(data="a\nb"), F(data="c")]),
    ("CRLF", b"data: a\r\ndata: b\r\n\r\n", [F(data="a\nb")]),
    ("mixed line ends", b"data: a\r\ndata: b\rdata: c\n\r\n", [F(data="a\nb\nc")]),
    ("CR LF as two ends when apart", b"data: a\r\r\n", [F(data="a")]),
    ("LF CR is two line ends", b"data: a\n\rdata: b\n\n", [F(data="a"), F(data="b")]),
    ("leading BOM stripped", BOM + b"data: x\n\n", [F(data="x")]),
    ("only the first BOM stripped", BOM + BOM + b"data: x\n\n", [F()]),
    ("BOM later is text", b"data: x\n\n" + BOM + b"data: y\n\n", [F(data="x"), F()]),
    ("BOM inside a value kept", b"data: " + BOM + b"\n\n", [F(data="\ufeff")]),
    ("blank lines alone yield nothing", b"\n\n\r\n\r", []),
    ("blank lines before a block", b"\n\r\n\rdata: x\n\n", [F(data="x")]),
    ("extra blank lines between blocks", b"data: a\n\n\n\n\ndata: b\n\n", [F(data="a"), F(data="b")]),
    ("unterminated final block dropped", b"data: a\n\ndata: b\n", [F(data="a")]),
    ("unterminated final line dropped", b"data: a\n\ndata: b", [F(data="a")]),
    ("event ping without data", b"event: ping\n\n", [F(event="ping")]),
    ("all fields", b"event: e\nid: 7\nretry: 10\ndata: d\n\n", [F("e", "d", "7", 10)]),
    (
        "fields reset after dispatch",
        b"event: e\nid: 7\ndata: d\n\ndata: z\n\n",
        [F("e", "d", "7"), F(data="z")],
    ),
    ("multibyte text", "data: héllo 😀 世界\n\n".encode(), [F(data="héllo 😀 世界")]),
    ("multibyte field name", "dätä: x\n\n".encode(), [F()]),
    (
        "other Unicode line breaks are text",
        "data: a\u2028b\u2029c\x0bd\x0ce\x1cf\x85g\n\n".encode(),
        [F(data="a\u2028b\u2029c\x0bd\x0ce\x1cf\x85g")],
    ),
    ("NUL in data kept", b"data: a\x00b\n\n", [F(data="a\x00b")]),
    ("done sentinel is plain data", b"data: [DONE]\n\n", [F(data="[DONE]")]),
]


@pytest.mark.parametrize(
    ("stream", "expected"), [case[1:] for case in TABLE], ids=[case[0] for case in TABLE]
)
def test_whatwg_rules(stream: bytes, expected: list[SSEFrame]) -> None:
    assert frames_of(stream) == expected


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    assert run([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]) == ([F(data="a\nb")], None, False)
    assert run([b"data: a\r", b"\n", b"\r\n"]) == ([F(data="a")], None, False)
    assert run([b"data: a\r", b"\r"]) == ([F(data="a")], None, False)


def test_cr_terminated_frame_is_dispatched_without_waiting_for_the_next_byte() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\r") == [F(data="a")]
    assert decoder.feed(b"\n") == []  # a blank line with nothing before it


def test_multibyte_character_split_across_chunks() -> None:
    encoded = "data: 😀é\n\n".encode()
    start = encoded.index(b"\xf0")
    for cut in range(start + 1, start + 6):
        assert run([encoded[:cut], encoded[cut:]]) == ([F(data="😀é")], None, False)


def test_bom_split_across_chunks() -> None:
    assert run([b"\xef", b"\xbb", b"\xbf", b"data: x\n\n"]) == ([F(data="x")], None, False)
    assert run([b"\xef\xbb", b"data: x\n\n"])[1] is not None  # a broken BOM is invalid UTF-8


def test_last_event_id_persists_across_blocks() -> None:
    decoder = SSEDecoder()
    assert decoder.last_event_id == ""
    frames = decoder.feed(b"id: 5\ndata: a\n\ndata: b\n\nid: 6\x00\n\n")
    assert [frame.id for frame in frames] == ["5", None, None]
    assert decoder.last_event_id == "5"


# -- keepalives -----------------------------------------------------------------------------------

KEEPALIVES = [
    b": ping\n\n",
    b"data:\n\n",
    b"data\n\n",
    b"event: ping\n\n",
    b"id:\n\n",
    b"id: 3\n\n",
    b"retry: 5\n\n",
]


@pytest.mark.parametrize("stream", KEEPALIVES)
def test_payloadless_blocks_are_keepalives(stream: bytes) -> None:
    [frame] = frames_of(stream)
    assert frame.is_keepalive


@pytest.mark.parametrize(
    "stream", [b"data: {}\n\n", b"data: x\n\n", b"event: ping\ndata: 1\n\n", b"data\ndata\n\n"]
)
def test_blocks_with_payload_are_not_keepalives(stream: bytes) -> None:
    [frame] = frames_of(stream)
    assert not frame.is_keepalive


def test_every_block_with_a_line_yields_a_frame_so_keepalives_can_be_counted() -> None:
    stream = b": a\n\n: b\n\nunknown: 1\n\n\n\nevent: ping\n\n"
    frames = frames_of(stream)
    assert len(frames) == 4
    assert all(frame.is_keepalive for frame in frames)


# -- pending and flush ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stream", "pending"),
    [
        (b"", False),
        (b"data: x\n\n", False),
        (b"data: x\n\n\n", False),
        (b"data: x\r", True),
        (b"data: x\n", True),
        (b"data: x", True),
        (b": comment\n", True),
        (b"\xef", True),
        (BOM, False),
        (b"data: a\n\ndata: b", True),
    ],
)
def test_pending_tells_a_cut_off_block(stream: bytes, pending: bool) -> None:
    _, error, at_eof = every_way(stream)
    assert error is None
    assert at_eof is pending


def test_flush_dispatches_nothing_and_ends_the_stream() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\ndata: b\n") == [F(data="a")]
    assert decoder.flush() == []
    assert decoder.pending
    assert decoder.flush() == []
    with pytest.raises(RuntimeError):
        decoder.feed(b"\n")


def test_empty_chunks_are_harmless() -> None:
    assert run([b"", b"data: x\n", b"", b"\n", b""]) == ([F(data="x")], None, False)


# -- errors ---------------------------------------------------------------------------------------


def test_invalid_utf8_raises_with_offset_and_line() -> None:
    decoder = SSEDecoder()
    with pytest.raises(SSEDecodeError) as caught:
        decoder.feed(b"data: ok\n\ndata: \xff!\n\n")
        decoder.flush()
    error = caught.value
    assert isinstance(error, ValueError)
    assert error.offset == 16
    assert error.raw == b"data: \xff!"
    assert "UTF-8" in str(error)
    assert "offset 16" in str(error)


@pytest.mark.parametrize(
    "bad",
    [
        b"\xff",
        b"\xc3(",  # missing continuation
        b"\xe2\x82",  # truncated before the line end
        b"\xed\xa0\x80",  # an encoded surrogate
        b"\xc0\xaf",  # overlong
        b"\xf4\x90\x80\x80",  # beyond U+10FFFF
        b"\x80",  # lone continuation
    ],
)
def test_every_kind_of_invalid_utf8_is_rejected_alike_however_split(bad: bytes) -> None:
    stream = b"data: a\n\ndata: " + bad + b"\n\n"
    frames, error, _ = every_way(stream)
    assert frames == [F(data="a")]
    assert error is not None
    assert "offset 15" in error


def test_frames_before_a_bad_line_are_returned_then_the_error_raised() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\ndata: \xff\n\n") == [F(data="a")]
    with pytest.raises(SSEDecodeError):
        decoder.feed(b"data: b\n\n")
    with pytest.raises(SSEDecodeError):
        decoder.flush()


def test_raw_is_capped() -> None:
    decoder = SSEDecoder()
    with pytest.raises(SSEDecodeError) as caught:
        decoder.feed(b"data: " + b"a" * 10_000 + b"\xff\n\n")
    assert len(caught.value.raw) == 4096
    assert caught.value.offset == 10_006


def test_invalid_bytes_in_a_discarded_final_line_are_not_an_error() -> None:
    assert run([b"data: a\n\ndata: \xff"]) == ([F(data="a")], None, True)


def test_decode_error_pickles() -> None:
    error = SSEDecodeError("bad", raw=b"x", offset=3)
    clone = pickle.loads(pickle.dumps(error))
    assert (str(clone), clone.raw, clone.offset) == ("bad", b"x", 3)


# -- max_line_bytes -------------------------------------------------------------------------------


def test_line_at_the_limit_passes_and_one_byte_more_fails() -> None:
    assert run([b"data: 1234\n\n"], max_line_bytes=10) == ([F(data="1234")], None, False)
    frames, error, _ = run([b"data: 12345\n\n"], max_line_bytes=10)
    assert frames == []
    assert error is not None and "frame too large" in error


def test_an_incomplete_line_over_the_limit_fails_at_once() -> None:
    decoder = SSEDecoder(max_line_bytes=1024)
    decoder.feed(b"data: ")
    with pytest.raises(SSEDecodeError, match="frame too large") as caught:
        for _ in range(100):
            decoder.feed(b"x" * 100)
    assert len(decoder._partial) <= 1024 + 100  # memory stopped growing
    assert caught.value.offset == 0
    assert caught.value.raw == (b"data: " + b"x" * 2000)[:1025]


def test_frames_before_an_oversized_line_are_kept_however_split() -> None:
    stream = b"data: a\n\n: ok\n\ndata: " + b"y" * 50 + b"\n\ndata: b\n\n"
    frames, error, _ = every_way(stream, max_line_bytes=20)
    assert frames == [F(data="a"), F()]
    assert error is not None and "frame too large" in error and "offset 15" in error


def test_limit_counts_bytes_not_characters() -> None:
    stream = "data: éé\n\n".encode()  # 10 bytes, 8 characters
    assert every_way(stream, max_line_bytes=10)[1] is None
    assert every_way(stream, max_line_bytes=9)[1] is not None


@pytest.mark.parametrize("bad", [0, -1, True])
def test_limit_must_be_positive(bad: int) -> None:
    with pytest.raises(ValueError):
        SSEDecoder(max_line_bytes=bad)


# -- frames ---------------------------------------------------------------------------------------


def test_frames_are_immutable_values() -> None:
    [frame] = frames_of(b"event: e\nid: 1\nretry: 2\ndata: d\n\n")
    assert frame == SSEFrame(event="e", data="d", id="1", retry=2)
    assert hash(frame) == hash(SSEFrame(event="e", data="d", id="1", retry=2))
    assert not hasattr(frame, "__dict__")
    with pytest.raises(AttributeError):  # a named tuple's field (a frozen dataclass's error is one too)
        frame.data = "x"  # type: ignore[misc]
    assert repr(frame) == "SSEFrame(event='e', data='d', id='1', retry=2)"


def test_the_one_block_read_builds_the_same_frame() -> None:
    """The one-block read builds its frame without the constructor's call: the same value."""
    [frame] = SSEDecoder().feed(b"event: e\ndata: d\n\n")
    assert type(frame) is SSEFrame and frame == SSEFrame("e", "d")
    assert (frame.event, frame.data, frame.id, frame.retry) == ("e", "d", None, None)
    assert frame._asdict() == {"event": "e", "data": "d", "id": None, "retry": None}


# -- linear time ----------------------------------------------------------------------------------


def test_200_kb_fed_byte_by_byte_is_linear() -> None:
    # One 100 KB line (the worst case for re-joining buffers) and 100 KB of small frames.
    long_payload = "x" * 100_000
    small = b"".join(b'data: {"n": %d}\r\n\r\n' % n for n in range(5_000))
    stream = b"data: " + long_payload.encode() + b"\n\n" + small
    assert len(stream) > 200_000
    decoder = SSEDecoder()
    frames: list[SSEFrame] = []
    for index in range(len(stream)):
        frames.extend(decoder.feed(stream[index : index + 1]))
    assert frames[0].data == long_payload
    assert len(frames) == 5_001
    assert frames[-1].data == '{"n": 4999}'


# -- properties -----------------------------------------------------------------------------------


def reference_frames(stream: bytes) -> list[SSEFrame]:
    """A direct, slow reading of the WHATWG rules over the whole stream, for comparison."""
    text = stream.decode("utf-8")
    text = text.removeprefix("\ufeff")
    lines = re.split(r"\r\n|\r|\n", text)
    lines.pop()  # the unterminated tail, or "" after the last line end
    frames: list[SSEFrame] = []
    fields: dict[str, object] = {}
    data: list[str] = []
    seen = False
    for line in lines:
        if line == "":
            if seen:
                frames.append(
                    SSEFrame(
                        event=str(fields["event"]) or None if "event" in fields else None,
                        data="\n".join(data) if data else None,
                        id=str(fields["id"]) if "id" in fields else None,
                        retry=int(str(fields["retry"])) if "retry" in fields else None,
                    )
                )
            fields, data, seen = {}, [], False
            continue
        seen = True
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            fields["event"] = value
        elif name == "id" and "\x00" not in value:
            fields["id"] = value
        elif name == "retry" and re.fullmatch(r"[0-9]+", value):
            fields["retry"] = value
    return frames


characters = st.characters(exclude_categories=["Cs"], exclude_characters="\r\n")
values = st.one_of(
    st.text(characters, max_size=12),
    st.text("0123456789", min_size=1, max_size=4),
    st.sampled_from(["", " ", "  x", "a:b", "\x00", "\ufeff", "😀", "é", "[DONE]", '{"a": 1}']),
)
names = st.sampled_from(["data", "data", "data", "event", "id", "retry", "", "Data", "x-unknown", "dat"])
separators = st.sampled_from(["", ":", ":", ": ", ":  "])
line_ends = st.sampled_from(["\n", "\r", "\r\n"])
lines = st.one_of(
    st.tuples(names, separators, values).map(lambda parts: "".join(parts) if parts[1] else parts[0]),
    st.just(""),
    st.just(""),
    st.builds(lambda text: ":" + text, st.text(characters, max_size=8)),
)


@st.composite
def event_streams(draw: st.DrawFn) -> bytes:
    body = "".join(line + draw(line_ends) for line in draw(st.lists(lines, max_size=25)))
    tail = draw(st.sampled_from(["", "", "data: cut", "data: cut\n", ":"]))
    prefix = draw(st.sampled_from(["", "", "\ufeff"]))
    return (prefix + body + tail).encode("utf-8")


@st.composite
def cuts(draw: st.DrawFn, stream: bytes) -> list[bytes]:
    points = draw(st.lists(st.integers(0, len(stream)), max_size=12))
    return split_at(stream, points)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_fragmentation_matches_the_reference_reading(data: st.DataObject) -> None:
    stream = data.draw(event_streams())
    expected = reference_frames(stream)
    assert run([stream])[0] == expected
    assert run(data.draw(cuts(stream)))[0] == expected
    assert run([stream[i : i + 1] for i in range(len(stream))])[0] == expected


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_arbitrary_bytes_decode_the_same_however_split(data: st.DataObject) -> None:
    stream = data.draw(
        st.one_of(
            st.binary(max_size=60),
            event_streams().map(lambda s: s.replace(b"a", b"\xff")),
            event_streams().map(lambda s: s[:-1] if len(s) > 1 else s),
        )
    )
    limit = data.draw(st.one_of(st.none(), st.integers(1, 40)))
    whole = run([stream], limit)
    assert run(data.draw(cuts(stream)), limit) == whole
    assert run([stream[i : i + 1] for i in range(len(stream))], limit) == whole
