"""WIRE-1..4 and ACC-9/10 end to end: raw Server-Sent Events bytes from the emulator, read by the
real `openai` client's raw streaming response and decoded by fsm_agent. (The SSE decoder's own unit
tests, whole versus byte-at-a-time, live in test_sse.py.)"""

from __future__ import annotations

import time
from typing import Any

import helpers
import pytest
from helpers import DONE, INSTANT, PROMPTLY, Collect, LeakCheck, chunk, params, sse, text_frames

import fsm_agent
from fsm_agent.testing import DropAfter, EmptyBody, KeepaliveOnly, Scenario, Stall

leaks = helpers.leaks

PIECES = ("Hello", ", wire", " world.")


def run(
    leaks: LeakCheck, *scenarios: Scenario, session: fsm_agent.Session | None = None
) -> tuple[Any, Collect]:
    leaks.emulator.script(*scenarios)
    got = Collect()
    result = (session or fsm_agent.Session()).stream(leaks.client(), params(), **got.callbacks(activity=True))
    return result, got


def assert_plain_success(result: Any, got: Collect, text: str = "".join(PIECES)) -> None:
    assert result.content == text and got.text == text
    assert (result.finish_reason, result.attempts, result.stub, result.streamed) == ("stop", 1, False, True)
    assert got.statuses == []


# -- WIRE-1: the decoder's field rules, end to end ----------------------------------------------------


def test_multi_line_data_is_joined(leaks: LeakCheck) -> None:
    frames = (
        b'data: {"id": "x", "choices": [{"index": 0,\ndata: "delta": {"content": "Hello"}}]}\n\n',
        b'data: {"id": "x",\ndata:  "choices": [{"index": 0, "delta": {"content": ", wire"}}]}\n\n',
        sse(chunk({"content": " world."})),
        sse(chunk({}, finish_reason="stop")),
        DONE,
    )
    result, got = run(leaks, Scenario(raw=frames))
    assert_plain_success(result, got)
    leaks.assert_clean()


@pytest.mark.parametrize("newline", ["\r\n", "\r"], ids=["crlf", "cr"])
def test_crlf_and_cr_line_ends(leaks: LeakCheck, newline: str) -> None:
    frames = tuple(f.replace(b"\n", newline.encode()) for f in text_frames(*PIECES))
    result, got = run(leaks, Scenario(raw=frames))
    assert_plain_success(result, got)
    leaks.assert_clean()


def test_crlf_split_between_writes(leaks: LeakCheck) -> None:
    body = b"".join(text_frames(*PIECES)).replace(b"\n", b"\r\n")
    cuts = [i + 1 for i in range(len(body)) if body[i : i + 1] == b"\r"]
    pieces = tuple(body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True) if body[a:b])
    result, got = run(leaks, Scenario(raw=pieces))
    assert_plain_success(result, got)
    leaks.assert_clean()


def test_one_byte_writes(leaks: LeakCheck) -> None:
    body = b"".join(text_frames("Grüße, ", "😀 ", "done."))
    result, got = run(leaks, Scenario(raw=tuple(body[i : i + 1] for i in range(len(body)))))
    assert_plain_success(result, got, "Grüße, 😀 done.")
    leaks.assert_clean()


def test_comments_ids_retry_and_bom(leaks: LeakCheck) -> None:
    first, *rest = text_frames(*PIECES)
    frames = (
        b"\xef\xbb\xbf: stream opened\n\n",  # a BOM, then a comment
        first,
        b": a comment inside a frame\n" + rest[0],
        b"id: 17\n\n",
        b"retry: 3000\n\n",
        b"id: 18\n" + rest[1],
        b"event: message\n" + rest[2],
        *rest[3:],
    )
    result, got = run(leaks, Scenario(raw=frames))
    assert_plain_success(result, got)
    leaks.assert_clean()


# -- WIRE-2: keepalives in the middle of a stream ------------------------------------------------------

KEEPALIVES = {
    "comment": b": keepalive\n\n",
    "bare-data": b"data:\n\n",
    "bare-data-space": b"data: \n\n",
    "event-ping": b"event: ping\n\n",
    "event-ping-with-data": b'event: ping\ndata: {"type": "ping"}\n\n',
}


@pytest.mark.parametrize("kind", sorted(KEEPALIVES))
def test_keepalives_mid_stream_complete_normally(leaks: LeakCheck, kind: str) -> None:
    frames: list[bytes] = []
    for frame in text_frames(*PIECES):
        frames += [KEEPALIVES[kind], KEEPALIVES[kind], frame]
    result, got = run(leaks, Scenario(raw=tuple(frames)))
    assert_plain_success(result, got)
    leaks.assert_clean()


# -- WIRE-3: keepalives only, then EOF → RES-9 ---------------------------------------------------------


@pytest.mark.parametrize("kind", ["comment", "data", "event", "ping"])
def test_keepalives_only_then_eof_falls_back(leaks: LeakCheck, kind: str) -> None:
    session = fsm_agent.Session(backoff=INSTANT)
    result, got = run(
        leaks,
        Scenario.build("From the plain request.", faults=[KeepaliveOnly(4, kind=kind)]),
        session=session,
    )
    assert result.content == "From the plain request." and result.streamed is False
    assert got.texts == ["From the plain request."]
    assert session.streaming_disabled is True
    assert [r.stream for r in leaks.emulator.requests] == [True, False]
    leaks.assert_clean()


@pytest.mark.parametrize("kind", ["comment", "data", "event", "ping"])
def test_keepalives_only_then_eof_raises_when_asked(leaks: LeakCheck, kind: str) -> None:
    leaks.emulator.script(Scenario.build("x", faults=[KeepaliveOnly(4, kind=kind)]))
    with pytest.raises(fsm_agent.StreamingUnsupportedError):
        fsm_agent.Session(backoff=INSTANT, unsupported="raise").stream(leaks.client(), params())
    assert len(leaks.emulator.requests) == 1
    leaks.assert_clean()


def test_no_frames_at_all_is_an_empty_stream(leaks: LeakCheck) -> None:
    """WIRE-3 / ACC-9: an empty body is EmptyStreamError, retried like a transient error."""
    result, _got = run(leaks, Scenario.build("x", faults=[EmptyBody()]), Scenario.build("Second try."))
    assert (result.content, result.attempts) == ("Second try.", 2)
    leaks.emulator.script(Scenario.build("x", faults=[EmptyBody()]))
    with pytest.raises(fsm_agent.EmptyStreamError):
        fsm_agent.Session(backoff=INSTANT, retries=1).stream(leaks.clients[0], params())
    assert len(leaks.emulator.requests) == 2 + 2
    leaks.assert_clean()


def test_frames_without_content_or_finish_are_an_empty_stream(leaks: LeakCheck) -> None:
    frames = (sse(chunk({"role": "assistant"})), sse(chunk({"content": ""})), DONE)
    leaks.emulator.script(Scenario(raw=frames))
    with pytest.raises(fsm_agent.EmptyStreamError):
        fsm_agent.Session(backoff=INSTANT, retries=0).stream(leaks.client(), params())
    leaks.assert_clean()


# -- WIRE-4: [DONE] ends the stream --------------------------------------------------------------------


def test_bytes_after_done_are_ignored(leaks: LeakCheck) -> None:
    frames = (
        *text_frames(*PIECES),
        sse(chunk({"content": " EXTRA"})),
        b"data: {this is not json}\n\n",
        b"data: \xff\xfe not utf-8\n\n",
    )
    result, got = run(leaks, Scenario(raw=frames))
    assert_plain_success(result, got)
    leaks.assert_clean()


def test_done_returns_without_waiting_for_the_connection_to_end(leaks: LeakCheck) -> None:
    frames = text_frames(*PIECES)
    leaks.emulator.script(Scenario(raw=frames, faults=(Stall(len(frames), seconds=10),)))
    started = time.monotonic()
    got = Collect()
    result = fsm_agent.Session(stale_timeout=30).stream(leaks.client(), params(), **got.callbacks())
    assert time.monotonic() - started < PROMPTLY  # not the 10 s the connection stays open
    assert_plain_success(result, got)
    leaks.assert_clean()


def test_finish_then_eof_without_done(leaks: LeakCheck) -> None:
    result, got = run(leaks, Scenario(raw=text_frames(*PIECES)[:-1]))
    assert_plain_success(result, got)
    leaks.assert_clean()


def test_connection_lost_after_the_finish_reason_keeps_the_answer(leaks: LeakCheck) -> None:
    """The finish reason came; losing the usage chunk and [DONE] does not make it a stub."""
    scenario = Scenario.build("Complete answer.", faults=[DropAfter(1, kind="finish")])
    result, _got = run(leaks, scenario)
    assert (result.content, result.finish_reason, result.stub, result.attempts) == (
        "Complete answer.",
        "stop",
        False,
        1,
    )
    assert result.usage is None
    leaks.assert_clean()


# -- ACC-10: errors inside the stream ------------------------------------------------------------------


def test_finish_reason_error_raises(leaks: LeakCheck) -> None:
    frames = (sse(chunk({"role": "assistant"})), sse(chunk({}, finish_reason="error")), DONE)
    leaks.emulator.script(Scenario(raw=frames))
    with pytest.raises(fsm_agent.ProviderStreamError):
        fsm_agent.Session(backoff=INSTANT).stream(leaks.client(), params())
    leaks.assert_clean()


def test_sse_error_event_raises(leaks: LeakCheck) -> None:
    frames = (
        sse(chunk({"role": "assistant"})),
        sse({"message": "Upstream model crashed", "code": "upstream_crash"}, event="error"),
        *text_frames("never delivered")[1:],
    )
    leaks.emulator.script(Scenario(raw=frames))
    got = Collect()
    with pytest.raises(fsm_agent.ProviderStreamError) as caught:
        fsm_agent.Session(backoff=INSTANT).stream(leaks.client(), params(), **got.callbacks())
    assert "Upstream model crashed" in str(caught.value)
    assert caught.value.code == "upstream_crash"
    assert got.texts == []
    leaks.assert_clean()


def test_openrouter_style_mid_stream_error_after_text_gives_stub(leaks: LeakCheck) -> None:
    error = {"code": "server_error", "message": "Provider disconnected"}
    frames = (
        *text_frames(*PIECES)[:3],
        sse({"id": "x", "error": error, "choices": [{"index": 0, "delta": {}, "finish_reason": "error"}]}),
    )
    result, _got = run(leaks, Scenario(raw=frames))
    assert result.stub and result.content == "Hello, wire" and result.attempts == 1
    leaks.assert_clean()
