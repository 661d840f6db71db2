"""WD-1, WD-3, WD-4 for `astream()`: the event loop's timers find stalls (no thread, no polling), the
session counts them, the breaker trips — the sync matrix of test_chat_watchdog.py, on the asyncio
driver with the real `openai.AsyncOpenAI` client. Stale timeouts are kept at 0.3-0.5 s.

The stall, breaker and deadline behaviours every provider shares run on every provider and driver
in tests/matrix/test_shared_behaviours.py; here the event loop's watchdog itself."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from helpers import INSTANT, PROMPTLY, Collect, params
from test_async_support import AsyncLeakCheck, aleaks, astream
from virtual_time import run_on_virtual_time

import fsm_agent
from fsm_agent._internal.drivers.aio_watchdog import LoopWatchdog
from fsm_agent.testing import NonStreamingBody, Scenario, Stall, StreamingUnsupported

__all__ = ["aleaks"]

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


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
