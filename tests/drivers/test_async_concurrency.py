"""Concurrent requests sharing one session: async ones on one loop, sync ones in threads beside
them. Session memory (stale_streak, stream_options_unsupported, streaming_disabled) stays
consistent — no lost update, nothing learned by one request hidden from the next — and
`session.interrupt()` ends exactly the requests in flight at that moment."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import openai
import pytest
from helpers import INSTANT, Collect, params
from test_async_support import AsyncLeakCheck, astream

import fsm_agent
from fsm_agent.testing import Emulator, RejectStreamOptions, Scenario, Stall, StreamingUnsupported

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


@pytest.fixture
def aleaks(emulator_factory: Callable[..., Emulator]) -> AsyncLeakCheck:
    return AsyncLeakCheck(emulator_factory())


def test_concurrent_stalls_each_counted_once(aleaks: AsyncLeakCheck) -> None:
    """12 async and 4 sync requests stall at once on one session: the streak is exactly 16."""
    aleaks.emulator.script(Scenario.build("Hello.", faults=[Stall(1, seconds=10)]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3, retries=0, stale_giveup=0)
    sync_client = openai.OpenAI(base_url=aleaks.emulator.openai_base_url, api_key="sk-test", max_retries=0)
    sync_errors: list[BaseException] = []

    def sync_request() -> None:
        try:
            session.stream(sync_client, params())
        except BaseException as exc:
            sync_errors.append(exc)

    async def main() -> None:
        threads = [threading.Thread(target=sync_request) for _ in range(4)]
        for thread in threads:
            thread.start()
        outcomes = await asyncio.gather(
            *(astream(aleaks, session, Collect()) for _ in range(12)), return_exceptions=True
        )
        for thread in threads:
            await asyncio.to_thread(thread.join)
        assert all(isinstance(o, fsm_agent.StreamStalledError) for o in outcomes), outcomes

    try:
        aleaks.run(main)
    finally:
        sync_client.close()
    assert len(sync_errors) == 4 and all(isinstance(e, fsm_agent.StreamStalledError) for e in sync_errors)
    assert session.stale_streak == 16


def test_concurrent_requests_learn_session_facts_once_for_all(aleaks: AsyncLeakCheck) -> None:
    aleaks.emulator.script(Scenario.build("Hello, all.", faults=[RejectStreamOptions(400)]))
    session = fsm_agent.Session(backoff=INSTANT, retries=0)

    async def main() -> None:
        results = await asyncio.gather(*(astream(aleaks, session, Collect()) for _ in range(10)))
        assert {r.content for r in results} == {"Hello, all."}
        # learned: a request made now sends no stream_options at all
        seen = len(aleaks.emulator.requests)
        await astream(aleaks, session, Collect())
        assert len(aleaks.emulator.requests) == seen + 1
        assert "stream_options" not in aleaks.emulator.requests[-1].body

    aleaks.run(main)
    assert session.stream_options_unsupported is True and session.streaming_disabled is False


def test_concurrent_fallbacks_and_streams_share_streaming_disabled(aleaks: AsyncLeakCheck) -> None:
    aleaks.emulator.script(Scenario.build("Plain for all.", faults=[StreamingUnsupported()]))
    session = fsm_agent.Session(backoff=INSTANT)

    async def main() -> None:
        results = await asyncio.gather(*(astream(aleaks, session, Collect()) for _ in range(8)))
        assert {(r.content, r.streamed) for r in results} == {("Plain for all.", False)}
        before = len(aleaks.emulator.requests)
        assert (await astream(aleaks, session, Collect())).streamed is False
        assert aleaks.emulator.requests[before].stream is False  # straight to the plain request

    aleaks.run(main)
    assert session.streaming_disabled is True


def test_interrupt_ends_every_request_in_flight_and_no_later_one(aleaks: AsyncLeakCheck) -> None:
    aleaks.emulator.script(Scenario.build("Hello.", faults=[Stall(1, seconds=10)]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=30)
    got = [Collect() for _ in range(6)]

    async def main() -> None:
        tasks = [asyncio.create_task(astream(aleaks, session, g, activity=True)) for g in got]
        while not all(g.activity for g in got):
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.05)
        session.interrupt()
        outcomes: list[Any] = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(o, InterruptedError) for o in outcomes), outcomes
        aleaks.emulator.script(Scenario.build("Later."))
        assert (await astream(aleaks, session, Collect())).content == "Later."

    aleaks.run(main)
