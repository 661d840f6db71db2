"""WD-1..4 and RES-11 for Anthropic Messages, with the real `anthropic` client on the emulator:
stalls (also while the provider sends nothing but `ping` events), interrupts while the provider is
silent, and the stale breaker behave as for Chat Completions. Stale timeouts are 0.3-0.5 s.

The stall, breaker and deadline behaviours every provider shares: tests/matrix/test_shared_behaviours.py."""

from __future__ import annotations

import threading
import time
from typing import Any

import helpers
import pytest
import test_anthropic_common as common
from helpers import INSTANT, PROMPTLY, AttemptSpy, Collect, LeakCheck, sse, wait_until
from test_anthropic_common import WRITE, ant_client, params

import fsm_agent
from fsm_agent.testing import Scenario, Stall

leaks = helpers.leaks
spy = common.spy

START = sse(
    {
        "type": "message_start",
        "message": {
            "id": "msg_raw",
            "type": "message",
            "role": "assistant",
            "model": "claude-raw",
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
    },
    event="message_start",
)
TEXT_BLOCK = sse(
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    event="content_block_start",
)
PING = sse({"type": "ping"}, event="ping")


def text_delta(text: str) -> bytes:
    event = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
    return sse(event, event="content_block_delta")


def stream(leaks: LeakCheck, session: fsm_agent.Session, got: Collect, **kwargs: Any) -> Any:
    client = kwargs.pop("client", None) or (leaks.clients[0] if leaks.clients else ant_client(leaks))
    return session.stream(client, params(), **got.callbacks(activity=True), **kwargs)


def stalled_to(result: Any) -> int:
    return sum(1 for record in result.records if record.dest == "stalled")


# -- WD-1 ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("visible", [True, False], ids=["after-text", "before-text"])
def test_wd1_pings_alone_do_not_keep_a_stalled_stream_alive(leaks: LeakCheck, visible: bool) -> None:
    frames = (START, TEXT_BLOCK, text_delta("Visible text.")) if visible else (START,)
    leaks.emulator.script(
        Scenario(raw=(*frames, *(PING,) * 200), frame_delay=0.05), Scenario.build("Recovered.")
    )
    got = Collect()
    started = time.monotonic()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3), got)
    assert stalled_to(result) == 1
    assert got.activity.count("ping") >= 4  # pings kept coming during the stall, and were seen
    if visible:
        assert time.monotonic() - started < 0.3 + PROMPTLY  # the 10 s of pings did not keep it alive
        assert result.stub and result.content == "Visible text."
    else:
        assert (result.content, result.attempts) == ("Recovered.", 2)
    leaks.assert_clean()


@pytest.mark.parametrize("where", ["before-text", "mid-tool"])
def test_res11_interrupt_during_a_stall(leaks: LeakCheck, spy: AttemptSpy, where: str) -> None:
    stall = Stall(2, seconds=10) if where == "before-text" else Stall(2, seconds=10, kind="tool_args")
    leaks.emulator.script(Scenario.build("One two three.", tool_calls=[WRITE], faults=[stall]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=30)
    client = ant_client(leaks)
    got = Collect()
    fired_at: list[float] = []

    def interrupter() -> None:
        if wait_until(lambda: bool(got.activity), 3.0):
            time.sleep(0.15)  # the reader is now blocked on the silent socket
            fired_at.append(time.monotonic())
            session.interrupt()

    thread = threading.Thread(target=interrupter, name="test-interrupter")
    thread.start()
    with pytest.raises(InterruptedError):
        session.stream(client, params(), **got.callbacks(activity=True))
    raised_at = time.monotonic()
    thread.join()
    assert fired_at and raised_at - fired_at[0] < PROMPTLY
    assert len(leaks.emulator.requests) == 1  # never retried
    assert not any("reconnecting" in t or "Stream stalled" in t for t in got.texts)
    spy.assert_each_closed_once(1)
    assert client.is_closed() is False  # the caller's client is never closed
    leaks.emulator.script(Scenario.build("Still usable."))
    assert session.stream(client, params()).content == "Still usable."
    leaks.assert_clean()


# -- WD-3: the stale streak and the breaker --------------------------------------------------------------
