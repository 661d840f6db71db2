"""RES-11 for `astream()`: cancelling the awaiting task closes the stream exactly once and
propagates CancelledError (the machine records an interrupt); `session.interrupt()` from any thread,
an `interrupt=threading.Event()` or a callback's own interrupt raise InterruptedError within 0.2 s
even while the provider is silent. Each test proves no task, thread or socket was left behind."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import openai
import pytest
from helpers import INSTANT, PROMPTLY, Collect, params, wait_until
from test_async_support import AsyncAttemptSpy, AsyncLeakCheck, aleaks, aspy, astream

import fsm_agent
from fsm_agent._internal.trace.sinks import MemorySink
from fsm_agent.testing import KeepaliveOnly, NonStreamingBody, Scenario, Stall, ToolCall

__all__ = ["aleaks", "aspy"]

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

WRITE = ToolCall("write_file", '{"path": "notes/a.txt", "text": "hello"}', arg_fragment=6)
STALLS = {
    "before-text": Stall(1, seconds=10),
    "after-text": Stall(2, seconds=10, kind="text"),
    "mid-tool": Stall(2, seconds=10, kind="tool_args"),
}


def silent(where: str) -> Scenario:
    return Scenario.build("One two three four five six.", tool_calls=[WRITE], faults=[STALLS[where]])


async def until(predicate: Callable[[], bool], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "the condition never came true"
        await asyncio.sleep(0.005)


# -- cancellation of the awaiting task -------------------------------------------------------------


@pytest.mark.parametrize("where", sorted(STALLS))
def test_cancel_mid_stream_closes_once_and_propagates(
    aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy, where: str
) -> None:
    aleaks.emulator.script(silent(where), Scenario.build("Still usable."))
    sink = MemorySink()
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=30, trace=sink)
    got = Collect()

    async def main() -> None:
        task = asyncio.create_task(astream(aleaks, session, got, activity=True))
        await until(lambda: len(aleaks.emulator.requests) == 1 and bool(got.activity))
        await asyncio.sleep(0.05)  # the read is now waiting on the silent socket
        cancelled_at = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - cancelled_at < PROMPTLY
        assert task.cancelled()
        aspy.assert_each_closed_once(1)
        assert not any("reconnecting" in t or "Stream stalled" in t for t in got.texts)
        # the session and the caller's client keep working
        assert (await astream(aleaks, session, Collect())).content == "Still usable."

    aleaks.run(main)
    first = [r for r in sink.records if r.request_id == sink.records[0].request_id]
    assert (first[-1].trigger, first[-1].dest) == ("interrupt", "failed")
    assert len(aleaks.emulator.requests) == 2  # never retried
    assert session.stale_streak == 0


def test_cancel_by_asyncio_timeout_is_a_timeout_not_an_interrupt(
    aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy
) -> None:
    """Structured concurrency: the caller's own deadline wins over the library's (longer) one."""
    aleaks.emulator.script(silent("after-text"))

    async def main() -> None:
        with pytest.raises(TimeoutError) as caught:
            async with asyncio.timeout(0.3):
                await astream(aleaks, fsm_agent.Session(backoff=INSTANT, stale_timeout=30), Collect())
        assert not isinstance(caught.value, fsm_agent.FsmAgentError)
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]

    aleaks.run(main)
    aspy.assert_each_closed_once(1)


def test_cancel_before_response_headers(aleaks: AsyncLeakCheck) -> None:
    aleaks.emulator.script(Scenario.build("x", faults=[NonStreamingBody(), Stall(0, seconds=10)]))

    async def main() -> None:
        task = asyncio.create_task(
            astream(aleaks, fsm_agent.Session(backoff=INSTANT, stale_timeout=30), Collect())
        )
        await until(lambda: bool(aleaks.emulator.requests))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    aleaks.run(main)


def test_cancel_while_a_coroutine_callback_waits(aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy) -> None:
    aleaks.emulator.script(Scenario.build("One two three four five six seven eight."))
    entered = asyncio.Event
    seen: list[str] = []

    async def main() -> None:
        waiting = entered()

        async def on_text(text: str) -> None:
            seen.append(text)
            waiting.set()
            await asyncio.sleep(10)  # a slow consumer: cancellation reaches it here

        task = asyncio.create_task(fsm_agent.Session().astream(aleaks.client(), params(), on_text=on_text))
        await waiting.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    aleaks.run(main)
    assert len(seen) == 1
    aspy.assert_each_closed_once(1)


def test_cancel_during_the_fallback_request(aleaks: AsyncLeakCheck) -> None:
    """The plain request of RES-9 (after keepalives only) is cut short as well."""
    aleaks.emulator.script(
        Scenario.build("x", faults=[KeepaliveOnly(2)]),
        Scenario.build("x", faults=[NonStreamingBody(), Stall(0, seconds=10)]),
    )
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=30)
    got = Collect()

    async def main() -> None:
        task = asyncio.create_task(astream(aleaks, session, got))
        await until(lambda: len(aleaks.emulator.requests) == 2)
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    aleaks.run(main)
    assert session.streaming_disabled is True
    assert aleaks.emulator.requests[1].stream is False


# -- interrupts: InterruptedError within 0.2 s -----------------------------------------------------


def _fire_from_thread(
    fire: Callable[[], Any], ready: Callable[[], bool]
) -> tuple[threading.Thread, list[float]]:
    fired_at: list[float] = []

    def run() -> None:
        if wait_until(ready, 3.0):
            time.sleep(0.1)  # the read is now waiting on the silent socket
            fired_at.append(time.monotonic())
            fire()

    thread = threading.Thread(target=run, name="test-interrupter")
    thread.start()
    return thread, fired_at


@pytest.mark.parametrize("where", sorted(STALLS))
def test_session_interrupt_from_another_thread_while_silent(
    aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy, where: str
) -> None:
    aleaks.emulator.script(silent(where), Scenario.build("Still usable."))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=30)
    got = Collect()

    async def main() -> None:
        thread, fired_at = _fire_from_thread(session.interrupt, lambda: bool(got.activity))
        try:
            with pytest.raises(InterruptedError):
                await astream(aleaks, session, got, activity=True)
            raised_at = time.monotonic()
        finally:
            await asyncio.to_thread(thread.join)
        assert fired_at and raised_at - fired_at[0] < PROMPTLY
        aspy.assert_each_closed_once(1)
        assert (await astream(aleaks, session, Collect())).content == "Still usable."

    aleaks.run(main)
    assert len(aleaks.emulator.requests) == 2


def test_interrupt_event_while_silent(aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy) -> None:
    aleaks.emulator.script(silent("before-text"))
    got = Collect()
    event = threading.Event()

    async def main() -> None:
        thread, fired_at = _fire_from_thread(event.set, lambda: bool(got.activity))
        try:
            with pytest.raises(InterruptedError):
                await astream(
                    aleaks, fsm_agent.Session(stale_timeout=30), got, activity=True, interrupt=event
                )
            raised_at = time.monotonic()
        finally:
            await asyncio.to_thread(thread.join)
        assert fired_at and raised_at - fired_at[0] < PROMPTLY

    aleaks.run(main)
    aspy.assert_each_closed_once(1)


def test_interrupt_during_a_stall_beats_the_stall(aleaks: AsyncLeakCheck) -> None:
    """Interrupt while the stream is silent, before the stall deadline: InterruptedError, no retry."""
    aleaks.emulator.script(silent("before-text"))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=30)  # its deadline far after the interrupt
    got = Collect()

    async def main() -> None:
        async def interrupt_soon() -> None:
            await until(lambda: bool(got.activity))
            await asyncio.sleep(0.25)
            session.interrupt()

        helper = asyncio.create_task(interrupt_soon())
        started = time.monotonic()
        with pytest.raises(InterruptedError):
            await astream(aleaks, session, got, activity=True)
        assert time.monotonic() - started < 0.25 + PROMPTLY
        await helper

    aleaks.run(main)
    assert len(aleaks.emulator.requests) == 1 and session.stale_streak == 0


def test_interrupt_from_inside_a_callback(aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy) -> None:
    aleaks.emulator.script(Scenario.build("One two three four five six seven eight nine.", frame_delay=0.02))
    session = fsm_agent.Session(backoff=INSTANT)
    got = Collect()

    def on_text(text: str) -> None:
        got.on_text(text)
        session.interrupt()

    async def main() -> None:
        with pytest.raises(InterruptedError):
            await session.astream(aleaks.client(), params(), on_text=on_text)

    aleaks.run(main)
    assert len(got.texts) == 1
    aspy.assert_each_closed_once(1)


def test_interrupt_event_already_set_never_connects(aleaks: AsyncLeakCheck) -> None:
    event = threading.Event()
    event.set()

    async def main() -> None:
        with pytest.raises(InterruptedError):
            await astream(aleaks, fsm_agent.Session(backoff=INSTANT), Collect(), interrupt=event)

    aleaks.run(main)
    assert aleaks.emulator.requests == []


def test_interrupt_with_nothing_in_flight_does_not_poison_later_requests(aleaks: AsyncLeakCheck) -> None:
    session = fsm_agent.Session(backoff=INSTANT)
    session.interrupt()
    aleaks.emulator.script(Scenario.build("Normal."))

    async def main() -> None:
        assert (await astream(aleaks, session, Collect())).content == "Normal."

    aleaks.run(main)


# -- a sync client in astream(): its blocking stream runs in a worker thread -----------------------


def test_sync_client_in_a_worker_thread_stall_and_interrupt(aleaks: AsyncLeakCheck) -> None:
    """boto3-style: no async client. The loop keeps running while the worker reads; a stall and an
    interrupt still end the read (the worker's socket is shut down) and the worker thread ends.

    Asserted per rule, not by racing timers: the loop ran while the worker sat in a silent read
    (ticks inside the stall's window), the stall ended that read and the request recovered (a
    loaded machine may stall a healthy attempt too: every later attempt is served healthy), and
    the interrupt, not the 30 s watchdog, ended the second request."""
    aleaks.emulator.script(silent("before-text"), then=Scenario.build("Recovered."))
    client = openai.OpenAI(base_url=aleaks.emulator.openai_base_url, api_key="sk-test", max_retries=0)
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=1.0, retries=5)
    ticks: list[float] = []
    stalled_at: list[float] = []
    attempts: list[int] = []

    def on_status(message: str) -> None:
        if message.startswith("stalled"):
            stalled_at.append(time.monotonic())

    async def ticker() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    async def main() -> None:
        beat = asyncio.create_task(ticker())
        try:
            result = await session.astream(client, params(), on_status=on_status)
            assert result.content == "Recovered." and result.attempts >= 2
            attempts.append(result.attempts)
            assert stalled_at, "the silent read was never ended"
            # The event loop was not blocked by the worker's read: it ran while the worker sat in
            # the silent read (between the provider receiving the request and the stall).
            sent = aleaks.emulator.requests[0].received_at
            assert any(sent < tick < stalled_at[0] for tick in ticks), "the event loop was blocked"
            aleaks.emulator.script(silent("after-text"))
            got = Collect()
            patient = fsm_agent.Session(backoff=INSTANT, stale_timeout=30)
            thread, fired_at = _fire_from_thread(patient.interrupt, lambda: bool(got.texts))
            try:
                with pytest.raises(InterruptedError):
                    await patient.astream(client, params(), **got.callbacks())
                raised_at = time.monotonic()
            finally:
                await asyncio.to_thread(thread.join)
            assert fired_at and raised_at - fired_at[0] < 10  # the interrupt's doing, not the 30 s stall
        finally:
            beat.cancel()
            with pytest.raises(asyncio.CancelledError):
                await beat

    try:
        aleaks.run(main)
    finally:
        client.close()
    assert len(aleaks.emulator.requests) == attempts[0] + 1  # each attempt once, then the interrupted one


@pytest.mark.parametrize("how", ["cancel", "interrupt"])
def test_worker_thread_silent_before_headers_ends_promptly(aleaks: AsyncLeakCheck, how: str) -> None:
    """A sync client's open blocks in a worker thread on a provider that never answers: cancelling
    or interrupting shuts that thread's socket down, so the worker ends too (none left behind)."""
    aleaks.emulator.script(Scenario.build("x", faults=[NonStreamingBody(), Stall(0, seconds=10)]))
    client = openai.OpenAI(base_url=aleaks.emulator.openai_base_url, api_key="sk-test", max_retries=0)
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=30)

    async def main() -> None:
        task = asyncio.create_task(session.astream(client, params()))
        await until(lambda: bool(aleaks.emulator.requests))
        await asyncio.sleep(0.1)
        fired_at = time.monotonic()
        if how == "cancel":
            task.cancel()
        else:
            session.interrupt()
        with pytest.raises(asyncio.CancelledError if how == "cancel" else InterruptedError):
            await task
        assert time.monotonic() - fired_at < PROMPTLY

    try:
        aleaks.run(main, timeout=1.0)
    finally:
        client.close()


def test_worker_thread_fallback_request_cancelled(aleaks: AsyncLeakCheck) -> None:
    """RES-9's plain request of a sync client runs in a worker thread; cancelling it shuts that
    thread's socket down too."""
    aleaks.emulator.script(
        Scenario.build("x", faults=[KeepaliveOnly(2)]),
        Scenario.build("x", faults=[NonStreamingBody(), Stall(0, seconds=10)]),
    )
    client = openai.OpenAI(base_url=aleaks.emulator.openai_base_url, api_key="sk-test", max_retries=0)

    async def main() -> None:
        task = asyncio.create_task(fsm_agent.Session(stale_timeout=30).astream(client, params()))
        await until(lambda: len(aleaks.emulator.requests) == 2)
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        aleaks.run(main, timeout=1.0)
    finally:
        client.close()
    assert aleaks.emulator.requests[1].stream is False
