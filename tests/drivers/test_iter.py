"""The iterator API (WR-3): `Session.iter()` / `aiter()` yield typed events, and a consumer that
stops early ends the request once, leaving nothing open. Real openai clients over loopback."""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

import helpers
import openai
import pytest
from helpers import AttemptSpy, LeakCheck

import fsm_agent
from fsm_agent.testing import DropMidFrame, Emulator, HttpError, Scenario, ScriptedToolCall

leaks = helpers.leaks
spy = helpers.spy

CALL = ScriptedToolCall("read", '{"path": "a.txt"}')
PARAMS = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}
RECOVERED = ["text", "tool_call", "marker", "status", "text", "tool_call", "tool_args", "final"]
LONG = Scenario.build("word " * 400, frame_delay=0.002)


def session() -> fsm_agent.Session:
    return fsm_agent.Session(backoff=fsm_agent.Backoff(base=0))


def kinds(events: list[Any]) -> list[str]:
    return [event.kind for event in events]


def test_iter_yields_typed_events_in_order_and_the_result_last(emulator: Emulator, leaks: LeakCheck) -> None:
    emulator.script(
        Scenario.build("Let me check.", tool_calls=[CALL], faults=[DropMidFrame(0, kind="tool_args")]),
        Scenario.build("Let me check.", tool_calls=[CALL]),
    )
    stream = session().iter(leaks.client(), PARAMS)
    events = list(stream)
    assert kinds(events) == [
        "text",
        "tool_call",
        "marker",
        "status",
        "text",
        "tool_call",
        "tool_args",
        "final",
    ]
    marker = events[2]
    assert isinstance(marker, fsm_agent.MarkerEvent) and marker.restarts and "reconnecting" in marker.text
    assert events[6] == fsm_agent.ToolArgsEvent(0, "read", {"path": "a.txt"})
    final = events[-1]
    assert isinstance(final, fsm_agent.FinalEvent) and final.result is stream.result
    assert final.result.attempts == 2 and final.result.tool_calls[0].arguments == '{"path": "a.txt"}'
    leaks.assert_clean()


def test_iter_raises_the_requests_error_after_the_events_before_it(
    emulator: Emulator, leaks: LeakCheck
) -> None:
    emulator.script(Scenario(faults=(HttpError(400),)))
    with pytest.raises(openai.BadRequestError):
        list(session().iter(leaks.client(), PARAMS))
    leaks.assert_clean()


@pytest.mark.parametrize("how", ["break_and_drop", "close", "with_block", "garbage"])
def test_iter_stopped_early_closes_the_stream_once(
    emulator: Emulator, leaks: LeakCheck, spy: AttemptSpy, how: str
) -> None:
    emulator.script(LONG)
    client = leaks.client()
    stream = session().iter(client, PARAMS)
    if how == "with_block":
        with stream as events:
            next(events)
    else:
        for _ in stream:
            break
        if how == "close":
            stream.close()
            stream.close()  # idempotent
        elif how == "garbage":
            cycle: list[Any] = [stream]
            cycle.append(cycle)
            del cycle
        del stream
        gc.collect()
    leaks.assert_clean()  # the request ended: nothing left running or open
    spy.assert_each_closed_once(1)


def test_iter_waits_for_a_slow_consumer_without_a_stall(emulator: Emulator, leaks: LeakCheck) -> None:
    # The hand-off is bounded: the request waits for room inside its callback, where the watchdog
    # holds (WD-1), so a consumer slower than the stale timeout is no stall.
    emulator.script(Scenario.build("x" * 64, chunk_size=1))
    stream = fsm_agent.Session(stale_timeout=0.2).iter(leaks.client(), PARAMS)
    stream._channel.capacity = 2  # a tiny hand-off: the request waits on the consumer
    texts = []
    for event in stream:
        if event.kind == "text":
            texts.append(event.text)
            if len(texts) == 3:
                threading.Event().wait(0.3)  # longer than the stale timeout
    assert "".join(texts) == "x" * 64
    assert stream.result is not None and stream.result.attempts == 1
    leaks.assert_clean()


# -- async --------------------------------------------------------------------------------------------
def aclient(emulator: Emulator) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=emulator.openai_base_url, api_key="sk-test", max_retries=0)


def test_aiter_yields_the_same_events_as_iter(emulator: Emulator) -> None:
    async def main() -> list[str]:
        client = aclient(emulator)
        emulator.script(
            Scenario.build("Let me check.", tool_calls=[CALL], faults=[DropMidFrame(0, kind="tool_args")]),
            Scenario.build("Let me check.", tool_calls=[CALL]),
        )
        stream = session().aiter(client, PARAMS)
        events = [event async for event in stream]
        assert stream.result is not None and stream.result.attempts == 2
        await client.close()
        return kinds(events)

    assert asyncio.run(main()) == [
        "text",
        "tool_call",
        "marker",
        "status",
        "text",
        "tool_call",
        "tool_args",
        "final",
    ]
    assert emulator.wait_idle(2.0)


def test_a_nudge_wakes_the_async_wait_empty_handed_once_and_loses_no_event(emulator: Emulator) -> None:
    # The proxy's keepalive timer wakes its wait with `nudge()` (PX-4): the wait returns None once
    # per nudge (a nudge given while nobody waits is kept for the next wait), and events already
    # waiting come before it; every event of the answer still arrives, in order.
    async def main() -> tuple[list[Any], list[str]]:
        client = aclient(emulator)
        emulator.script(Scenario.build("Let me check.", tool_calls=[CALL]))
        stream = session().aiter(client, PARAMS)
        stream.nudge()  # before the request has started: kept
        got: list[Any] = [await stream.next_or_nudged()]
        event = await stream.next_or_nudged()  # no nudge pending: waits for the first event
        got.append(event)
        stream.nudge()
        while True:
            try:
                event = await stream.next_or_nudged()
            except StopAsyncIteration:
                break
            got.append(event)
        await client.close()
        return got, kinds([e for e in got if e is not None])

    got, events = asyncio.run(main())
    assert got[0] is None and got[1] is not None
    assert sum(e is None for e in got) == 2  # one per nudge
    assert events == ["text", "tool_call", "tool_args", "final"]
    assert emulator.wait_idle(2.0)


@pytest.mark.parametrize("how", ["aclose", "async_with", "cancel", "garbage"])
def test_aiter_stopped_early_ends_the_request(emulator: Emulator, how: str) -> None:
    async def main() -> None:
        client = aclient(emulator)
        emulator.script(LONG)
        stream = session().aiter(client, PARAMS)
        if how == "aclose":
            async for _ in stream:
                break
            await stream.aclose()
            await stream.aclose()
        elif how == "async_with":
            async with stream as events:
                await events.__anext__()
        elif how == "cancel":
            first = asyncio.Event()

            async def consume() -> None:
                async for _ in stream:
                    first.set()

            task = asyncio.ensure_future(consume())
            await first.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        else:
            async for _ in stream:
                break
            task = stream._task
            del stream
            gc.collect()
            assert task is not None
            with pytest.raises(asyncio.CancelledError):
                await task
        for _ in range(100):  # the request's task has ended; its stream was closed (shielded)
            if not [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                break
            await asyncio.sleep(0.01)
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
        await client.close()

    asyncio.run(main())
    assert emulator.wait_idle(2.0), f"{emulator.open_connections} connection(s) left open"


def test_a_restarted_answer_reaches_the_iterator_as_a_reset(emulator: Emulator, leaks: LeakCheck) -> None:
    # RC-4 with WR-2/WR-3: the shown text is withdrawn (ResetEvent), then the whole new answer.
    cut = Scenario.build("Half an answ", chunk_size=4, faults=[DropMidFrame(3)])
    emulator.script(cut, Scenario.build("A whole new answer."))
    restarting = fsm_agent.Session(
        backoff=fsm_agent.Backoff(base=0), recovery=fsm_agent.Recovery(restart=True)
    )
    events = list(restarting.iter(leaks.client(), PARAMS))
    resets = [event for event in events if isinstance(event, fsm_agent.ResetEvent)]
    assert [reset.shown for reset in resets] == ["Half an "]
    after = events[events.index(resets[0]) :]
    assert "".join(e.text for e in after if isinstance(e, fsm_agent.TextEvent)) == "A whole new answer."
    assert events[-1].result.content == "A whole new answer."
    emulator.script(cut, Scenario.build("A whole new answer."))
    wrapped = fsm_agent.wrap(leaks.client(), restarting)
    chunks = list(wrapped.chat.completions.create(**PARAMS, stream=True))
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text.startswith("Half an ") and "restarting" in text and text.endswith("A whole new answer.")
    leaks.assert_clean()
