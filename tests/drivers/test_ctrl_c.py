"""RES-11: a Ctrl-C (SIGINT, `KeyboardInterrupt`) that lands inside a sync `stream()` reaches the
caller as `KeyboardInterrupt`, after the same cleanup an interrupt gets (the attempt's stream closed
once, nothing left open), never as `InterruptedError`, an `OSError` an `except Exception:` loop
would swallow. Interrupts by `session.interrupt()` or the `interrupt` event stay `InterruptedError`.

The real openai client on the emulator over loopback; the signal is a real SIGINT sent to the main
thread while it is blocked in the SDK's socket read, in the back-off wait, or running a callback.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from typing import Any

import helpers
import pytest
from helpers import LeakCheck, params, wait_until

import fsm_agent
from fsm_agent.testing import Emulator, HttpError, Scenario, Stall

leaks = helpers.leaks
ANSWER = "One two three four five six seven."


@pytest.fixture(autouse=True)
def default_sigint() -> Iterator[None]:
    """Python's own SIGINT handler (it raises KeyboardInterrupt in the main thread)."""
    assert threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _ctrl_c_when(ready: threading.Event) -> threading.Thread:
    main = threading.main_thread().ident
    assert main is not None

    def press() -> None:
        if ready.wait(10):
            signal.pthread_kill(main, signal.SIGINT)

    thread = threading.Thread(target=press, name="ctrl-c", daemon=True)
    thread.start()
    return thread


def _notices(ready: threading.Event, prefix: str) -> Any:
    def on_status(message: str) -> None:
        if message.startswith(prefix):
            ready.set()

    return on_status


@pytest.mark.parametrize("where", ["silent provider", "back-off wait", "callback", "before any byte"])
def test_ctrl_c_inside_stream_reaches_the_caller_as_keyboard_interrupt(
    emulator: Emulator, leaks: LeakCheck, where: str
) -> None:
    ready = threading.Event()
    kwargs: dict[str, Any] = {}
    if where == "silent provider":
        emulator.script(Scenario.build(ANSWER, faults=[Stall(frames=3, seconds=30)]))
        kwargs["on_text"] = lambda text: ready.set()
    elif where == "back-off wait":
        emulator.script(
            Scenario.build(ANSWER, faults=[HttpError(429, retry_after=30)]), Scenario.build(ANSWER)
        )
        kwargs["on_status"] = _notices(ready, "waiting")
    elif where == "callback":
        emulator.script(Scenario.build(ANSWER))

        def on_text(text: str) -> None:
            raise KeyboardInterrupt  # what a SIGINT does while the caller's callback runs

        kwargs["on_text"] = on_text
    else:
        emulator.script(Scenario.build(ANSWER, faults=[Stall(frames=0, seconds=30)]))
    press = _ctrl_c_when(ready) if where != "callback" else None
    if where == "before any byte":
        seen = threading.Thread(
            target=lambda: wait_until(lambda: bool(emulator.requests), 10) and ready.set()
        )
        seen.start()
    client = leaks.client()
    swallowed: list[BaseException] = []
    with pytest.raises(KeyboardInterrupt):
        try:
            fsm_agent.Session(stale_timeout=60).stream(client, params(), **kwargs)
        except Exception as exc:  # an application's ordinary loop: it must not catch Ctrl-C
            swallowed.append(exc)
    assert swallowed == []
    if press is not None:
        press.join(10)
    leaks.assert_clean()


def test_session_interrupt_and_the_interrupt_event_stay_interrupted_error(
    emulator: Emulator, leaks: LeakCheck
) -> None:
    emulator.script(Scenario.build(ANSWER, faults=[Stall(frames=3, seconds=30)]))
    stop = threading.Event()
    with pytest.raises(InterruptedError):
        fsm_agent.Session(stale_timeout=60).stream(
            leaks.client(), params(), on_text=lambda text: stop.set(), interrupt=stop
        )
    leaks.assert_clean()
