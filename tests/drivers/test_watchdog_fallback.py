"""The open-phase abort's fallback (RES-11, WD-1): where the interpreter's frame hook is missing (or
finds no socket of the HTTP stack), nothing is aborted, and a read blocked before the response
headers ends at the SDK's own read timeout, which the adapters cap at the stale timeout. Forced
here by removing the hook (`watchdog._current_frames`), with the real `openai` client on the
emulator; and the frame search's own rule: only the HTTP stack's modules, by module name."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import helpers
import pytest
from helpers import INSTANT, PROMPTLY, LeakCheck, params, wait_until

import fsm_agent
from fsm_agent._internal.drivers import watchdog
from fsm_agent.testing import NonStreamingBody, Scenario, Stall

leaks = helpers.leaks


@pytest.fixture
def no_frame_hook(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(watchdog, "_current_frames", None)
    yield


def _silent_before_headers(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("x", faults=[NonStreamingBody(), Stall(0, seconds=30)]))


def test_fallback_silence_before_headers_is_still_a_stall_on_time(
    leaks: LeakCheck, no_frame_hook: None
) -> None:
    _silent_before_headers(leaks)
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.5, retries=0)
    started = time.monotonic()
    with pytest.raises(fsm_agent.StreamStalledError):
        session.stream(leaks.client(), params())
    elapsed = time.monotonic() - started
    assert 0.5 * 0.95 <= elapsed < 0.5 + PROMPTLY  # the SDK's read timeout, capped at the stale timeout
    assert session.stale_streak == 1
    leaks.assert_clean()


def test_fallback_interrupt_before_headers_is_honoured_when_the_read_ends(
    leaks: LeakCheck, no_frame_hook: None
) -> None:
    _silent_before_headers(leaks)
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=3.0, retries=0)
    client = leaks.client()
    fired_at: list[float] = []

    def interrupter() -> None:
        if wait_until(lambda: bool(leaks.emulator.requests), 3.0):
            fired_at.append(time.monotonic())
            session.interrupt()

    thread = threading.Thread(target=interrupter, name="test-interrupter")
    started = time.monotonic()
    thread.start()
    with pytest.raises(InterruptedError):  # an interrupt, not the stall the read's end looks like
        session.stream(client, params())
    raised_at = time.monotonic()
    thread.join()
    assert fired_at and raised_at - started < 3.0 + PROMPTLY  # within one stale timeout
    assert session.stale_streak == 0
    leaks.emulator.script(Scenario.build("Still usable."))
    assert session.stream(client, params()).content == "Still usable."
    leaks.assert_clean()


def _blocked_recv(sock: socket.socket) -> bytes:
    with sock.makefile("rb", buffering=0) as stream:  # socket.py's frame holds `_sock`
        return stream.read(1) or b""


def _blocked_read_aborted_after(sock: socket.socket, peer: socket.socket, delay: float) -> tuple[bytes, bool]:
    """Block on `sock` (a 2 s timeout standing for the SDK's), aborting it from a timer after
    `delay`: what the read returned, and whether the socket was shut down."""
    sock.settimeout(2.0)

    def driver() -> bytes:  # plays SyncDriver._run_attempt
        abort = watchdog.blocked_read_aborter()
        timer = threading.Timer(delay, abort)
        timer.start()
        try:
            try:
                return _blocked_recv(sock)
            except TimeoutError:
                return b"timeout"
        finally:
            timer.join()

    data = driver()
    try:
        peer.sendall(b"y")
        shut = sock.recv(1) != b"y"
    except OSError:
        shut = True
    return data, shut


def test_fallback_aborter_leaves_the_read_to_its_timeout(no_frame_hook: None) -> None:
    sock, peer = socket.socketpair()
    try:
        data, shut = _blocked_read_aborted_after(sock, peer, 0.05)
        assert (data, shut) == (b"timeout", False)  # nothing was aborted: the read's timeout ended it
    finally:
        sock.close()
        peer.close()


def test_frame_search_aborts_the_transport_frames_socket() -> None:
    sock, peer = socket.socketpair()
    try:
        data, shut = _blocked_read_aborted_after(sock, peer, 0.05)
        assert (data, shut) == (b"", True)  # woken at once by the shutdown
    finally:
        sock.close()
        peer.close()


def test_only_the_http_stacks_modules_count_as_transport() -> None:
    def frame_of(module: str) -> Any:
        namespace: dict[str, Any] = {"__name__": module}
        exec("import sys\ndef here():\n    return sys._getframe()\n", namespace)
        return namespace["here"]()

    for module in ("httpcore._backends.sync", "httpcore2._sync.http11", "httpx._client", "socket", "ssl"):
        assert watchdog._is_transport_code(frame_of(module)), module
    for module in ("myapp.httpclient", "application", "fsm_agent._internal.providers.base", "sockets_helper"):
        assert not watchdog._is_transport_code(frame_of(module)), module
