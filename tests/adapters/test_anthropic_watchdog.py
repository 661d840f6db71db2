"""WD-1..4 and RES-11 for Anthropic Messages, with the real `anthropic` client on the emulator:
stalls (also while the provider sends nothing but `ping` events), interrupts while the provider is
silent, and the stale breaker behave as for Chat Completions. Stale timeouts are 0.3-0.5 s."""

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


def test_wd1_stall_before_text_is_retried(leaks: LeakCheck, spy: AttemptSpy) -> None:
    leaks.emulator.script(
        Scenario.build("Hello.", faults=[Stall(2, seconds=10)]), Scenario.build("Hello again.")
    )
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.5)
    got = Collect()
    result = stream(leaks, session, got)
    assert (result.content, result.attempts, result.stub) == ("Hello again.", 2, False)
    assert got.text == "Hello again." and stalled_to(result) == 1
    assert any(s.startswith("stalled") for s in got.statuses)
    assert session.stale_streak == 0
    spy.assert_each_closed_once(2)
    leaks.assert_clean()


def test_wd1_stall_after_text_gives_stub(leaks: LeakCheck, spy: AttemptSpy) -> None:
    scenario = Scenario.build(
        "One two three four five six seven.", faults=[Stall(2, seconds=10, kind="text")]
    )
    leaks.emulator.script(scenario, Scenario.build("never"))
    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3), got)
    assert result.stub and result.content == got.text.strip() == "One two three four five six"
    assert (result.attempts, len(leaks.emulator.requests), stalled_to(result)) == (1, 1, 1)
    spy.assert_each_closed_once(1)
    leaks.assert_clean()


def test_wd1_stall_mid_tool_call_retried_with_marker(leaks: LeakCheck, spy: AttemptSpy) -> None:
    stalled = Scenario.build("Writing.", tool_calls=[WRITE], faults=[Stall(2, seconds=10, kind="tool_args")])
    leaks.emulator.script(stalled, Scenario.build("Writing.", tool_calls=[WRITE]))
    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3), got)
    assert sum("reconnecting" in t for t in got.texts) == 1
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("write_file", WRITE.arguments)]
    assert result.attempts == 2 and not result.stub
    spy.assert_each_closed_once(2)
    leaks.assert_clean()


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


def test_wd4_abort_within_quarter_second_of_the_deadline(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("Hello.", faults=[Stall(3, seconds=10)]))
    stale = 0.5
    last_activity: list[float] = []
    stalled_at: list[float] = []

    def on_status(message: str) -> None:
        if message.startswith("stalled"):
            stalled_at.append(time.monotonic())

    cpu_before = time.process_time()
    with pytest.raises(fsm_agent.StreamStalledError):
        fsm_agent.Session(backoff=INSTANT, stale_timeout=stale, retries=0).stream(
            ant_client(leaks),
            params(),
            on_activity=lambda _: last_activity.append(time.monotonic()),
            on_status=on_status,
        )
    cpu_used = time.process_time() - cpu_before
    late = stalled_at[0] - (last_activity[-1] + stale)
    # WD-4's 0.25 s is the virtual-clock tests' (test_overhead.py, test_async_watchdog.py); here: this
    # deadline fired, not an earlier look nor a later one, whatever the machine's load.
    assert -0.01 <= late < PROMPTLY, f"stall noticed {late:+.3f} s after the deadline"
    assert cpu_used < 0.25, f"{cpu_used:.3f} s of CPU during a {stale} s wait: busy polling?"
    leaks.assert_clean()


# -- RES-11: interrupts while the provider is silent ------------------------------------------------------


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


def test_wd3_breaker_trips_before_any_connection(leaks: LeakCheck, spy: AttemptSpy) -> None:
    leaks.emulator.script(Scenario.build("x", faults=[Stall(1, seconds=10)]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3, stale_giveup=2, retries=0)
    for expected_streak in (1, 2):
        with pytest.raises(fsm_agent.StreamStalledError):
            stream(leaks, session, Collect())
        assert session.stale_streak == expected_streak
    with pytest.raises(fsm_agent.ProviderUnresponsiveError) as caught:
        stream(leaks, session, Collect())
    assert "unresponsive" in str(caught.value)
    assert len(leaks.emulator.requests) == 2 and len(spy.attempts) == 2  # no new connection
    spy.assert_each_closed_once()
    leaks.assert_clean()


def test_wd3_success_resets_the_streak(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("x", faults=[Stall(1, seconds=10)]), Scenario.build("Back."))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3, stale_giveup=2, retries=0)
    with pytest.raises(fsm_agent.StreamStalledError):
        stream(leaks, session, Collect())
    assert session.stale_streak == 1
    assert stream(leaks, session, Collect()).content == "Back."
    assert session.stale_streak == 0
    leaks.assert_clean()
