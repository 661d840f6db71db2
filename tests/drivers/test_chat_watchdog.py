"""WD-1, WD-3, WD-4 with the real `openai` client on the emulator: stalls are detected from
outside the reading thread, counted by the session, and trip the breaker. (WD-2's resolution table
is tested in test_timeouts.py.) Stale timeouts are kept at 0.3-0.5 s.

The stall, breaker and deadline behaviours every provider shares run on every provider and driver
in tests/matrix/test_shared_behaviours.py; here what is the sync driver's own."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import helpers
import pytest
from helpers import INSTANT, PROMPTLY, AttemptSpy, Collect, LeakCheck, params, wait_until

import fsm_agent
from fsm_agent._internal.drivers.watchdog import blocked_read_aborter
from fsm_agent.testing import KeepaliveOnly, NonStreamingBody, Scenario, Stall

leaks = helpers.leaks
spy = helpers.spy


def stream(leaks: LeakCheck, session: fsm_agent.Session, got: Collect, **kwargs: Any) -> Any:
    client = kwargs.pop("client", None) or (leaks.clients[0] if leaks.clients else leaks.client())
    return session.stream(client, params(), **got.callbacks(activity=True), **kwargs)


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
