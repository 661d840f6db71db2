"""WD-1, WD-3, WD-4 for `astream()`: the event loop's timers find stalls (no thread, no polling), the
session counts them, the breaker trips — the sync matrix of test_chat_watchdog.py, on the asyncio
driver with the real `openai.AsyncOpenAI` client. Stale timeouts are kept at 0.3-0.5 s."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest
from helpers import DONE, INSTANT, PROMPTLY, Collect, chunk, params, sse
from test_async_support import AsyncAttemptSpy, AsyncCollect, AsyncLeakCheck, aleaks, aspy, astream
from virtual_time import run_on_virtual_time

import fsm_agent
from fsm_agent.drivers.aio_watchdog import LoopWatchdog
from fsm_agent.testing import NonStreamingBody, Scenario, Stall, StreamingUnsupported, ToolCall

__all__ = ["aleaks", "aspy"]

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

WRITE = ToolCall("write_file", '{"path": "a.txt", "text": "hello"}', arg_fragment=5)


def stalled_to(result_or_records: Any) -> int:
    records = getattr(result_or_records, "records", result_or_records)
    return sum(1 for record in records if record.dest == "stalled")


# -- WD-1 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("callbacks", ["plain", "coroutine"])
def test_wd1_stall_before_text_is_retried(
    aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy, callbacks: str
) -> None:
    aleaks.emulator.script(
        Scenario.build("Hello.", faults=[Stall(1, seconds=10)]), Scenario.build("Hello again.")
    )
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.4)
    got = Collect() if callbacks == "plain" else AsyncCollect()

    async def main() -> None:
        result = await astream(aleaks, session, got, activity=True)
        assert (result.content, result.attempts, result.stub) == ("Hello again.", 2, False)
        assert got.text == "Hello again." and stalled_to(result) == 1
        assert any(s.startswith("stalled") for s in got.statuses)

    aleaks.run(main)
    assert session.stale_streak == 0
    aspy.assert_each_closed_once(2)


def test_wd1_stall_exhausted_raises_and_streak_grows(aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy) -> None:
    aleaks.emulator.script(Scenario.build("Hello.", faults=[Stall(1, seconds=10)]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3, retries=1)

    async def main() -> None:
        with pytest.raises(fsm_agent.StreamStalledError) as caught:
            await astream(aleaks, session, Collect())
        assert isinstance(caught.value, TimeoutError)
        assert not isinstance(caught.value, asyncio.CancelledError)

    aleaks.run(main)
    assert len(aleaks.emulator.requests) == 2 and session.stale_streak == 2
    aspy.assert_each_closed_once(2)


def test_wd1_stall_after_text_gives_stub(aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy) -> None:
    scenario = Scenario.build(
        "One two three four five six seven.", faults=[Stall(2, seconds=10, kind="text")]
    )
    aleaks.emulator.script(scenario, Scenario.build("never"))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3)
    got = Collect()

    async def main() -> None:
        result = await astream(aleaks, session, got)
        assert result.stub and result.content == got.text.strip() and result.finish_reason == "length"
        assert result.attempts == 1 and stalled_to(result) == 1

    aleaks.run(main)
    assert len(aleaks.emulator.requests) == 1 and session.stale_streak == 0
    aspy.assert_each_closed_once(1)


def test_wd1_stall_mid_tool_call_retried_with_marker(aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy) -> None:
    stalled = Scenario.build("Writing.", tool_calls=[WRITE], faults=[Stall(2, seconds=10, kind="tool_args")])
    aleaks.emulator.script(stalled, Scenario.build("Writing.", tool_calls=[WRITE]))
    got = AsyncCollect()

    async def main() -> None:
        result = await astream(aleaks, fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3), got)
        assert sum("reconnecting" in t for t in got.texts) == 1
        assert [(c.name, c.arguments) for c in result.tool_calls] == [("write_file", WRITE.arguments)]
        assert result.attempts == 2 and not result.stub

    aleaks.run(main)
    aspy.assert_each_closed_once(2)


def test_wd1_stall_mid_tool_call_exhausted_stub_with_warning(aleaks: AsyncLeakCheck) -> None:
    stalled = Scenario.build("Writing.", tool_calls=[WRITE], faults=[Stall(2, seconds=10, kind="tool_args")])
    aleaks.emulator.script(stalled)
    got = Collect()

    async def main() -> None:
        result = await astream(aleaks, fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3, retries=0), got)
        assert result.stub and result.dropped_tool_names == ["write_file"]
        assert "Stream stalled mid tool-call" in got.texts[-1] and result.content.endswith(got.texts[-1])

    aleaks.run(main)


PINGS = {
    "comment": b": ping\n\n",
    "bare-data": b"data:\n\n",
    "event-ping": b"event: ping\n\n",
    "event-ping-with-data": b'event: ping\ndata: {"type": "ping"}\n\n',
}


@pytest.mark.parametrize("kind", sorted(PINGS))
def test_wd1_pings_do_not_keep_a_dead_stream_alive(aleaks: AsyncLeakCheck, kind: str) -> None:
    frames = (sse(chunk({"role": "assistant", "content": ""})), sse(chunk({"content": "Visible text."})))
    frames += (PINGS[kind],) * 200  # 10 s of pings
    aleaks.emulator.script(Scenario(raw=frames, frame_delay=0.05), Scenario.build("never"))

    async def main() -> None:
        started = time.monotonic()
        session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3)
        result = await astream(aleaks, session, Collect(), activity=True)
        assert time.monotonic() - started < 0.3 + PROMPTLY  # the pings did not keep it alive
        assert stalled_to(result) == 1 and result.stub and result.content == "Visible text."

    aleaks.run(main)


def test_wd1_slow_but_steady_events_are_not_a_stall(aleaks: AsyncLeakCheck) -> None:
    """Each event 0.2 s after the last, 1.2 s in all, stale_timeout=0.4: the lazily re-aimed timer
    must follow the activity, never fire."""
    pieces = [f"piece {i}. " for i in range(5)]
    frames = (
        sse(chunk({"role": "assistant", "content": ""})),
        *(sse(chunk({"content": p})) for p in pieces),
        sse(chunk({}, finish_reason="stop")),
        DONE,
    )
    aleaks.emulator.script(Scenario(raw=frames, frame_delay=0.2))
    got = Collect()

    async def main() -> None:
        result = await astream(aleaks, fsm_agent.Session(backoff=INSTANT, stale_timeout=0.4), got)
        assert result.content == "".join(pieces) and result.attempts == 1
        assert stalled_to(result) == 0 and got.statuses == []

    aleaks.run(main)


def test_wd1_silence_before_response_headers_is_a_stall(aleaks: AsyncLeakCheck) -> None:
    aleaks.emulator.script(Scenario.build("x", faults=[NonStreamingBody(), Stall(0, seconds=10)]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.4, retries=0)

    async def main() -> None:
        started = time.monotonic()
        with pytest.raises(fsm_agent.StreamStalledError):
            await astream(aleaks, session, Collect())
        assert time.monotonic() - started < 0.4 + PROMPTLY

    aleaks.run(main)
    assert session.stale_streak == 1


# -- WD-3 ------------------------------------------------------------------------------------------


def test_wd3_breaker_trips_before_any_connection(aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy) -> None:
    aleaks.emulator.script(Scenario.build("x", faults=[Stall(1, seconds=10)]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3, stale_giveup=2, retries=0)

    async def main() -> None:
        for expected_streak in (1, 2):
            with pytest.raises(fsm_agent.StreamStalledError):
                await astream(aleaks, session, Collect())
            assert session.stale_streak == expected_streak
        with pytest.raises(fsm_agent.ProviderUnresponsiveError) as caught:
            await astream(aleaks, session, Collect())
        assert isinstance(caught.value, RuntimeError) and "unresponsive" in str(caught.value)

    aleaks.run(main)
    assert len(aleaks.emulator.requests) == 2
    aspy.assert_each_closed_once(2)


def test_wd3_success_resets_the_streak(aleaks: AsyncLeakCheck) -> None:
    aleaks.emulator.script(Scenario.build("x", faults=[Stall(1, seconds=10)]), Scenario.build("Back."))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3, stale_giveup=2, retries=0)

    async def main() -> None:
        with pytest.raises(fsm_agent.StreamStalledError):
            await astream(aleaks, session, Collect())
        assert session.stale_streak == 1
        assert (await astream(aleaks, session, Collect())).content == "Back."

    aleaks.run(main)
    assert session.stale_streak == 0


# -- WD-4: on time, without busy polling -----------------------------------------------------------


def test_wd4_abort_within_quarter_second_without_polling(aleaks: AsyncLeakCheck) -> None:
    aleaks.emulator.script(Scenario.build("Hello.", faults=[Stall(1, seconds=10)]))
    stale = 0.5
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=stale, retries=0)
    last_activity: list[float] = []
    stalled_at: list[float] = []

    def on_activity(_: str) -> None:
        last_activity.append(time.monotonic())

    async def on_status(message: str) -> None:
        if message.startswith("stalled"):
            stalled_at.append(time.monotonic())

    async def main() -> float:
        cpu_before = time.process_time()
        with pytest.raises(fsm_agent.StreamStalledError):
            await session.astream(aleaks.client(), params(), on_activity=on_activity, on_status=on_status)
        return time.process_time() - cpu_before

    cpu_used = aleaks.run(main)
    assert last_activity and stalled_at
    late = stalled_at[0] - (last_activity[-1] + stale)
    # WD-4's 0.25 s is the virtual-clock tests' (test_overhead.py, test_async_watchdog.py); here: this
    # deadline fired, not an earlier look nor a later one, whatever the machine's load.
    assert -0.01 <= late < PROMPTLY, f"stall noticed {late:+.3f} s after the deadline"
    assert cpu_used < 0.25, f"{cpu_used:.3f} s of CPU during a {stale} s wait: busy polling?"


def test_wd4_timer_wakes_at_deadlines_only() -> None:
    """The stall timer is re-aimed lazily: 50 touches in 0.25 s cost no timer work, only a wake-up
    at each deadline passed, and it fires on the deadline measured from the last touch. On the
    loop's virtual clock (tests/virtual_time.py): to the tick, whatever the machine's load."""
    fired: list[float] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        watchdog = LoopWatchdog(0.2)
        woke: list[float] = []
        original = watchdog._check_stale

        def counting_check() -> None:
            woke.append(loop.time())
            original()

        watchdog._check_stale = counting_check  # type: ignore[method-assign]
        watchdog.arm(stale=True)
        started = loop.time()
        try:
            for _ in range(50):
                await asyncio.sleep(0.005)
                watchdog.touch()
            last = loop.time()
            await asyncio.sleep(1.0)
        except asyncio.CancelledError:
            assert watchdog.claim()
            fired.append(loop.time() - last)
        finally:
            watchdog.disarm()
        assert watchdog.fired == "stale"
        # A wake-up at each deadline it moved on from (one per 0.2 s of touching: at 0.2 s, then at
        # 0.2 s past the touch it found there), none per touch, and the last on the deadline itself.
        assert len(woke) == 3 and woke[0] == pytest.approx(started + 0.2, abs=1e-5)
        assert woke[1] == pytest.approx(started + 0.195 + 0.2, abs=1e-5)
        assert woke[2] == pytest.approx(last + 0.2, abs=1e-5)
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]

    run_on_virtual_time(main)
    assert fired == [pytest.approx(0.2, abs=1e-5)]  # WD-4: on the deadline


def test_wd4_two_hundred_async_watchdogs_each_fire_at_their_own_deadline() -> None:
    """200 requests on one loop, each blocked on a read that never answers, some with provider
    activity, some interrupted from another task: each read is cancelled at its own deadline (or its
    interrupt) to the tick, never before (WD-4, RES-11)."""
    rng = random.Random(26)
    ended: dict[int, tuple[float, str | None]] = {}

    async def one(n: int, stale: float, touches: list[float], interrupt_at: float | None) -> None:
        loop = asyncio.get_running_loop()
        watchdog = LoopWatchdog(stale)
        watchdog.start()
        if interrupt_at is not None:
            loop.call_at(interrupt_at, watchdog.interrupt)
        for when in touches:
            loop.call_at(when, watchdog.touch)
        watchdog.arm(stale=True)
        try:
            await loop.create_future()  # a read that never answers
        except asyncio.CancelledError:
            assert watchdog.claim()
            ended[n] = (loop.time(), watchdog.fired)
        finally:
            watchdog.disarm()
            watchdog.stop()

    plans = []
    for n in range(200):
        stale = rng.uniform(0.1, 5.0)
        touches = sorted(rng.uniform(0, stale) for _ in range(rng.choice((0, 0, 1, 3))))
        deadline = (touches[-1] if touches else 0.0) + stale
        interrupt_at = rng.uniform(0, deadline) if n % 20 == 0 else None
        plans.append((n, stale, touches, interrupt_at, deadline))

    async def main() -> None:
        await asyncio.gather(*(one(n, stale, touches, at) for n, stale, touches, at, _ in plans))

    run_on_virtual_time(main)
    for n, _, _, interrupt_at, deadline in plans:
        when, why = ended[n]
        if interrupt_at is not None:
            assert (why, when) == ("interrupt", pytest.approx(interrupt_at, abs=1e-5)), n
        else:
            assert (why, when) == ("stale", pytest.approx(deadline, abs=1e-5)), n


@pytest.mark.parametrize(("caller_cancels", "ours"), [(False, True), (True, False)])
def test_a_cancellation_is_claimed_only_when_it_is_ours_alone(caller_cancels: bool, ours: bool) -> None:
    """The stall timer and the caller cancel at once: the caller's CancelledError must win."""

    async def main() -> tuple[bool, str | None]:
        made: list[LoopWatchdog] = []

        async def request() -> tuple[bool, str | None]:
            watchdog = LoopWatchdog(30)
            made.append(watchdog)
            watchdog.arm(stale=True)
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                return watchdog.claim(), watchdog.fired
            finally:
                watchdog.disarm()
            raise AssertionError("not cancelled")

        task = asyncio.create_task(request())
        await asyncio.sleep(0.01)
        made[0]._fire("stale")
        if caller_cancels:
            task.cancel()
        return await task

    assert asyncio.run(main()) == (ours, "stale")


def test_fsm6_a_silent_fallback_request_is_a_stall(aleaks: AsyncLeakCheck) -> None:
    """RES-9's plain request is bounded like an attempt: no answer within stale_timeout fails it."""
    aleaks.emulator.script(
        Scenario.build("x", faults=[StreamingUnsupported()]),
        Scenario.build("x", faults=[NonStreamingBody(), Stall(0, seconds=10)]),
    )
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.5)

    async def main() -> None:
        started = time.monotonic()
        with pytest.raises(fsm_agent.StreamStalledError, match="non-streaming request"):
            await astream(aleaks, session, Collect())
        assert time.monotonic() - started < 0.5 + PROMPTLY

    aleaks.run(main)
    assert len(aleaks.emulator.requests) == 2 and aleaks.emulator.requests[1].stream is False


def test_wd1_a_slow_coroutine_callback_is_not_a_stall(aleaks: AsyncLeakCheck) -> None:
    answer = "Hello there, this is a long answer with several words in it."
    aleaks.emulator.script(Scenario.build(answer))
    # 0.5 s, not less: the open phase must see its first event within it on a loaded machine.
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.5)
    statuses: list[str] = []
    calls = 0

    async def on_text(text: str) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            await asyncio.sleep(1.0)  # twice the stale timeout, inside the caller's code

    async def main() -> fsm_agent.StreamResult:
        client = aleaks.client()
        return await session.astream(client, params(), on_text=on_text, on_status=statuses.append)

    result = aleaks.run(main)
    assert (result.content, result.stub, result.attempts) == (answer, False, 1)
    assert statuses == [] and session.stale_streak == 0
