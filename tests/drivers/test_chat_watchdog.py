"""WD-1, WD-3, WD-4 with the real `openai` client on the emulator: stalls are detected from
outside the reading thread, counted by the session, and trip the breaker. (WD-2's resolution table
is tested in test_timeouts.py.) Stale timeouts are kept at 0.3-0.5 s."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import helpers
import pytest
from helpers import DONE, INSTANT, PROMPTLY, AttemptSpy, Collect, LeakCheck, chunk, params, sse, wait_until

import fsm_agent
from fsm_agent.drivers.watchdog import blocked_read_aborter
from fsm_agent.testing import KeepaliveOnly, NonStreamingBody, Scenario, Stall, ToolCall

leaks = helpers.leaks
spy = helpers.spy

WRITE = ToolCall("write_file", '{"path": "a.txt", "text": "hello"}', arg_fragment=5)


def stream(leaks: LeakCheck, session: fsm_agent.Session, got: Collect, **kwargs: Any) -> Any:
    client = kwargs.pop("client", None) or (leaks.clients[0] if leaks.clients else leaks.client())
    return session.stream(client, params(), **got.callbacks(activity=True), **kwargs)


def stalled_to(result_or_records: Any) -> int:
    records = getattr(result_or_records, "records", result_or_records)
    return sum(1 for record in records if record.dest == "stalled")


# -- WD-1: a silent stream is stalled, aborted, and handled as a transient error -----------------------


def test_wd1_stall_before_text_is_retried(leaks: LeakCheck, spy: AttemptSpy) -> None:
    leaks.emulator.script(
        Scenario.build("Hello.", faults=[Stall(1, seconds=10)]), Scenario.build("Hello again.")
    )
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.5)
    got = Collect()
    result = stream(leaks, session, got)
    assert (result.content, result.attempts, result.stub) == ("Hello again.", 2, False)
    assert got.text == "Hello again."
    assert stalled_to(result) == 1
    assert any(s.startswith("stalled") for s in got.statuses)
    assert session.stale_streak == 0  # the success reset it
    spy.assert_each_closed_once(2)
    leaks.assert_clean()


def test_wd1_stall_exhausted_raises_and_streak_grows(leaks: LeakCheck, spy: AttemptSpy) -> None:
    leaks.emulator.script(Scenario.build("Hello.", faults=[Stall(1, seconds=10)]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3, retries=1)
    with pytest.raises(fsm_agent.StreamStalledError) as caught:
        stream(leaks, session, Collect())
    assert isinstance(caught.value, TimeoutError)
    assert len(leaks.emulator.requests) == 2
    assert session.stale_streak == 2  # one per stall
    spy.assert_each_closed_once(2)
    leaks.assert_clean()


def test_wd1_stall_after_text_gives_stub(leaks: LeakCheck, spy: AttemptSpy) -> None:
    scenario = Scenario.build(
        "One two three four five six seven.", faults=[Stall(2, seconds=10, kind="text")]
    )
    leaks.emulator.script(scenario, Scenario.build("never"))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3)
    got = Collect()
    result = stream(leaks, session, got)
    assert result.stub and result.content == got.text.strip() and result.finish_reason == "length"
    assert result.attempts == 1 and len(leaks.emulator.requests) == 1
    assert stalled_to(result) == 1
    assert session.stale_streak == 0  # a stub resets the streak too (WD-3)
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


def test_wd1_stall_mid_tool_call_exhausted_stub_with_warning(leaks: LeakCheck) -> None:
    stalled = Scenario.build("Writing.", tool_calls=[WRITE], faults=[Stall(2, seconds=10, kind="tool_args")])
    leaks.emulator.script(stalled)
    got = Collect()
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3, retries=0)
    result = stream(leaks, session, got)
    assert result.stub and result.dropped_tool_names == ["write_file"]
    assert "Stream stalled mid tool-call" in got.texts[-1] and result.content.endswith(got.texts[-1])
    assert session.stale_streak == 0
    leaks.assert_clean()


PINGS = {
    "comment": b": ping\n\n",
    "bare-data": b"data:\n\n",
    "event-ping": b"event: ping\n\n",
    "event-ping-with-data": b'event: ping\ndata: {"type": "ping"}\n\n',
}


@pytest.mark.parametrize("kind", sorted(PINGS))
def test_wd1_pings_do_not_keep_a_dead_stream_alive(leaks: LeakCheck, kind: str) -> None:
    frames = (sse(chunk({"role": "assistant", "content": ""})), sse(chunk({"content": "Visible text."})))
    frames += (PINGS[kind],) * 200
    leaks.emulator.script(Scenario(raw=frames, frame_delay=0.05), Scenario.build("never"))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3)
    got = Collect()
    started = time.monotonic()
    result = stream(leaks, session, got)
    assert time.monotonic() - started < 0.3 + PROMPTLY  # the 10 s of pings did not keep it alive
    assert stalled_to(result) == 1
    assert result.stub and result.content == "Visible text."
    leaks.assert_clean()


def test_wd1_slow_but_steady_events_are_not_a_stall(leaks: LeakCheck) -> None:
    """Each event comes 0.2 s after the last, 1.2 s in all, with stale_timeout=0.4: never stalled."""
    pieces = [f"piece {i}. " for i in range(5)]
    frames = (
        sse(chunk({"role": "assistant", "content": ""})),
        *(sse(chunk({"content": p})) for p in pieces),
        sse(chunk({}, finish_reason="stop")),
        DONE,
    )
    leaks.emulator.script(Scenario(raw=frames, frame_delay=0.2))
    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT, stale_timeout=0.4), got)
    assert result.content == "".join(pieces) and result.attempts == 1
    assert stalled_to(result) == 0 and got.statuses == []
    leaks.assert_clean()


def test_wd1_silence_before_response_headers_is_a_stall(leaks: LeakCheck) -> None:
    """The provider accepts the connection but never answers: the open phase is bounded too."""
    leaks.emulator.script(Scenario.build("x", faults=[NonStreamingBody(), Stall(0, seconds=10)]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.4, retries=0)
    started = time.monotonic()
    with pytest.raises(fsm_agent.StreamStalledError):
        stream(leaks, session, Collect())
    assert time.monotonic() - started < 0.4 + PROMPTLY
    assert session.stale_streak == 1
    leaks.assert_clean()


def test_interrupt_before_response_headers(leaks: LeakCheck) -> None:
    """RES-11 while the provider is silent before it sends any header."""
    leaks.emulator.script(Scenario.build("x", faults=[NonStreamingBody(), Stall(0, seconds=10)]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=30)
    client = leaks.client()
    fired_at: list[float] = []

    def interrupter() -> None:
        if wait_until(lambda: bool(leaks.emulator.requests), 3.0):
            time.sleep(0.1)
            fired_at.append(time.monotonic())
            session.interrupt()

    thread = threading.Thread(target=interrupter, name="test-interrupter")
    thread.start()
    with pytest.raises(InterruptedError):
        session.stream(client, params())
    raised_at = time.monotonic()
    thread.join()
    assert fired_at and raised_at - fired_at[0] < PROMPTLY
    leaks.emulator.script(Scenario.build("Still usable."))
    assert session.stream(client, params()).content == "Still usable."
    leaks.assert_clean()


# -- WD-3: the stale streak and the breaker ------------------------------------------------------------


def test_wd3_breaker_trips_before_any_connection(leaks: LeakCheck, spy: AttemptSpy) -> None:
    leaks.emulator.script(Scenario.build("x", faults=[Stall(1, seconds=10)]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3, stale_giveup=2, retries=0)
    for expected_streak in (1, 2):
        with pytest.raises(fsm_agent.StreamStalledError):
            stream(leaks, session, Collect())
        assert session.stale_streak == expected_streak
    seen = len(leaks.emulator.requests)
    opened = len(spy.attempts)
    with pytest.raises(fsm_agent.ProviderUnresponsiveError) as caught:
        stream(leaks, session, Collect())
    assert isinstance(caught.value, RuntimeError) and "unresponsive" in str(caught.value)
    assert len(leaks.emulator.requests) == seen == 2  # the emulator saw no new request
    assert len(spy.attempts) == opened
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


def test_wd3_giveup_zero_disables_the_breaker(leaks: LeakCheck) -> None:
    leaks.emulator.script(
        Scenario.build("x", faults=[Stall(1, seconds=10)]),
        Scenario.build("x", faults=[Stall(1, seconds=10)]),
        Scenario.build("Still connecting."),
    )
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3, stale_giveup=0, retries=0)
    for _ in range(2):
        with pytest.raises(fsm_agent.StreamStalledError):
            stream(leaks, session, Collect())
    assert session.stale_streak == 2
    assert stream(leaks, session, Collect()).content == "Still connecting."
    leaks.assert_clean()


# -- WD-4: on time, without busy polling ---------------------------------------------------------------


def test_wd4_abort_within_quarter_second_of_the_deadline(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("Hello.", faults=[Stall(1, seconds=10)]))
    stale = 0.5
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=stale, retries=0)
    last_activity: list[float] = []
    stalled_at: list[float] = []
    client = leaks.client()

    def on_activity(_: str) -> None:
        last_activity.append(time.monotonic())

    def on_status(message: str) -> None:
        if message.startswith("stalled"):
            stalled_at.append(time.monotonic())

    cpu_before = time.process_time()
    with pytest.raises(fsm_agent.StreamStalledError):
        session.stream(client, params(), on_activity=on_activity, on_status=on_status)
    cpu_used = time.process_time() - cpu_before
    assert last_activity and stalled_at
    late = stalled_at[0] - (last_activity[-1] + stale)
    # WD-4's 0.25 s is the virtual-clock tests' (test_overhead.py, test_async_watchdog.py); here: this
    # deadline fired, not an earlier look nor a later one, whatever the machine's load.
    assert -0.01 <= late < PROMPTLY, f"stall noticed {late:+.3f} s after the deadline"
    assert cpu_used < 0.25, f"{cpu_used:.3f} s of CPU during a {stale} s wait: busy polling?"
    leaks.assert_clean()


# -- the non-streaming fallback (RES-9) is bounded by the watchdog too (FSM-6) -------------------------


def _silent_fallback(leaks: LeakCheck) -> None:
    leaks.emulator.script(
        Scenario.build("x", faults=[KeepaliveOnly(2)]),  # → fallback
        Scenario.build("x", faults=[Stall(0, seconds=10)]),  # the plain request: silence, no headers
    )


def test_interrupt_during_the_fallback_request(leaks: LeakCheck) -> None:
    _silent_fallback(leaks)
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=30)
    client = leaks.client()
    fired_at: list[float] = []

    def interrupter() -> None:
        if wait_until(lambda: len(leaks.emulator.requests) == 2, 3.0):
            time.sleep(0.1)
            fired_at.append(time.monotonic())
            session.interrupt()

    thread = threading.Thread(target=interrupter, name="test-interrupter")
    thread.start()
    with pytest.raises(InterruptedError):
        session.stream(client, params())
    raised_at = time.monotonic()
    thread.join()
    assert fired_at and raised_at - fired_at[0] < PROMPTLY
    leaks.assert_clean()


def test_stall_during_the_fallback_request(leaks: LeakCheck) -> None:
    _silent_fallback(leaks)
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.4, retries=0)
    started = time.monotonic()
    with pytest.raises(fsm_agent.StreamStalledError):
        stream(leaks, session, Collect())
    assert time.monotonic() - started < 0.4 + PROMPTLY
    leaks.assert_clean()


# -- the open-phase abort searches only the library's frames ------------------------------------------


def _blocked_recv(sock: socket.socket) -> bytes:
    # Through the stdlib's socket file, as http.client and the HTTP libraries read: the blocked
    # frame is socket.py's, whose `_sock` is the socket to shut down.
    with sock.makefile("rb", buffering=0) as stream:
        return stream.read(1) or b""


def test_open_phase_abort_wakes_the_blocked_read_and_spares_the_applications_sockets() -> None:
    app_sock, app_peer = socket.socketpair()  # held by the application, outside the driver
    sdk_sock, sdk_peer = socket.socketpair()
    try:

        def driver() -> tuple[Any, bytes]:  # plays SyncDriver._run_attempt
            abort = blocked_read_aborter()
            timer = threading.Timer(0.1, abort)
            timer.start()
            try:
                return abort, _blocked_recv(sdk_sock)  # what the SDK does, inside the driver's call
            finally:
                timer.join()

        abort, data = driver()
        assert data == b""  # woken by the shutdown
        abort()  # this thread has left the driver's call: the abort must find nothing of ours
        app_peer.sendall(b"x")
        assert app_sock.recv(1) == b"x"  # still open and working
        with pytest.raises(OSError):
            sdk_sock.sendall(b"y" * 10)  # the SDK's socket was shut down
    finally:
        for sock in (app_sock, app_peer, sdk_sock, sdk_peer):
            sock.close()


# -- WD-1: time spent in the caller's callbacks is not provider silence ------------------------------


def test_wd1_a_slow_callback_is_not_a_stall(leaks: LeakCheck, spy: AttemptSpy) -> None:
    answer = "Hello there, this is a long answer with several words in it."
    leaks.emulator.script(Scenario.build(answer))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3)
    statuses: list[str] = []
    calls = 0

    def on_text(text: str) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            time.sleep(0.6)  # twice the stale timeout, inside the caller's code

    client = leaks.client()
    result = session.stream(client, params(), on_text=on_text, on_status=statuses.append)
    assert (result.content, result.stub, result.attempts) == (answer, False, 1)
    assert statuses == [] and session.stale_streak == 0
    spy.assert_each_closed_once(1)
    leaks.assert_clean()
