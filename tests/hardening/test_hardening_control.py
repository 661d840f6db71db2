"""Interrupts that always win, SDK-native errors, and astream factories (issue 12, classes 5, 6, 9),
on every API through the real SDK clients over loopback.

SEC-8: once an interrupt is set no callback runs and `InterruptedError` is raised, even when the
rest of the answer sits in the read already; an interrupt issued while `stream()` still prepares
the request is honoured. Section 1: a transport error that exhausts the retries is the SDK's own
connection error (the transport's as `__cause__`); a `StopIteration` raised by a callback reaches
the caller as itself (CB-6). `astream()` awaits a coroutine-function factory and runs a plain one
in a worker thread, never on the loop.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from hardening_kit import KITS, ApiKit
from helpers import PROMPTLY, assert_emulator_and_threads_idle, threads_since

import fsm_agent
import fsm_agent._internal.providers.anthropic_events  # imported now, not on a loop being timed
import fsm_agent._internal.providers.openai_responses
from fsm_agent.testing import DropAfter, DropMidFrame, Emulator, HttpError, Scenario, Stall


@pytest.fixture(params=sorted(KITS))
def kit(request: pytest.FixtureRequest) -> ApiKit:
    return KITS[request.param]


@pytest.fixture
def idle_after(emulator: Emulator) -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    assert_emulator_and_threads_idle(emulator, before, 3.0)


def assert_threads_idle(before: set[threading.Thread], timeout: float) -> None:
    """No thread of the library left running (the emulator's own connection threads aside)."""

    def ours() -> list[threading.Thread]:
        return [t for t in threads_since(before) if not t.name.startswith("fsm-emulator")]

    deadline = time.monotonic() + timeout
    while ours() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not ours()


class AfterInterrupt:
    """Callbacks that interrupt on the first text, and remember anything delivered after that."""

    def __init__(self, interrupt: Any) -> None:
        self._interrupt = interrupt
        self.interrupted = False
        self.late: list[Any] = []

    def _seen(self, kind: str, value: Any) -> None:
        if self.interrupted:
            self.late.append((kind, value))

    def on_text(self, text: str) -> None:
        self._seen("text", text)
        if not self.interrupted:
            self.interrupted = True
            self._interrupt()

    def on_reasoning(self, text: str) -> None:
        self._seen("reasoning", text)

    def on_tool_call(self, index: int, name: str) -> None:
        self._seen("tool", name)

    def callbacks(self) -> dict[str, Any]:
        return {"on_text": self.on_text, "on_reasoning": self.on_reasoning, "on_tool_call": self.on_tool_call}


# -- class 5: interrupts (SEC-8) ---------------------------------------------------------------------------
RUNS = 25  # per API and driver: 4 APIs x (sync + async) x 25 = 200 runs


def test_interrupt_wins_over_a_buffered_answer_sync(
    emulator: Emulator, idle_after: None, kit: ApiKit
) -> None:
    client = kit.client(emulator)
    session = fsm_agent.Session(retries=0)
    try:
        for run in range(RUNS):
            emulator.script(kit.scenario([kit.body()]))  # the whole answer in one write: one read
            event = threading.Event()
            got = AfterInterrupt(session.interrupt if run % 2 else event.set)
            with pytest.raises(InterruptedError):
                session.stream(client, kit.params, **kit.api, interrupt=event, **got.callbacks())
            assert got.interrupted and got.late == [], (run, got.late)
    finally:
        kit.close(client)


def test_interrupt_wins_over_a_buffered_answer_async(
    emulator: Emulator, idle_after: None, kit: ApiKit
) -> None:
    async def main() -> None:
        client = kit.async_client(emulator)
        session = fsm_agent.Session(retries=0)
        try:
            for run in range(RUNS):
                emulator.script(kit.scenario([kit.body()]))
                event = threading.Event()
                got = AfterInterrupt(session.interrupt if run % 2 else event.set)
                with pytest.raises(InterruptedError):
                    await session.astream(client, kit.params, **kit.api, interrupt=event, **got.callbacks())
                assert got.interrupted and got.late == [], (run, got.late)
        finally:
            await kit.aclose(client)

    asyncio.run(main())


def _silent(kit: ApiKit) -> Scenario:
    return Scenario.build("Late answer.", faults=[Stall(frames=0, seconds=2.0)])


class _Shared:
    """The caller's client handed out by a factory without being closed with the attempt, so the
    factory — called inside `stream()` while it plans — can start the interrupter from there."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def close(self) -> None:
        """The shared client outlives each request."""


class AsyncShared(_Shared):
    """`_Shared` for an async SDK client (the driver tells async clients by their class name)."""

    async def close(self) -> None:  # type: ignore[override]
        """The shared client outlives each request."""


def _interrupting_factory(client: Any, session: fsm_agent.Session, delay: float, fired: list[float]) -> Any:
    def interrupt() -> None:
        fired.append(time.monotonic())
        session.interrupt()

    def factory() -> Any:
        threading.Timer(delay, interrupt).start()  # `delay` after stream() was entered
        return AsyncShared(client) if type(client).__name__.startswith("Async") else _Shared(client)

    return factory


def test_interrupt_in_the_first_50ms_ends_promptly_sync(
    emulator: Emulator, idle_after: None, kit: ApiKit
) -> None:
    client = kit.client(emulator)
    rng = random.Random(12)
    try:
        for _ in range(RUNS):
            emulator.script(_silent(kit))
            session = fsm_agent.Session(retries=0)
            fired: list[float] = []
            factory = _interrupting_factory(client, session, rng.uniform(0, 0.05), fired)
            with pytest.raises(InterruptedError):
                session.stream(factory, kit.params, **kit.api)
            ended = time.monotonic()
            assert ended - fired[0] < PROMPTLY, ended - fired[0]
    finally:
        kit.close(client)


def test_interrupt_in_the_first_50ms_ends_promptly_async(
    emulator: Emulator, idle_after: None, kit: ApiKit
) -> None:
    rng = random.Random(21)

    async def main() -> None:
        client = kit.async_client(emulator)
        try:
            for _ in range(RUNS):
                emulator.script(_silent(kit))
                session = fsm_agent.Session(retries=0)
                fired: list[float] = []
                factory = _interrupting_factory(client, session, rng.uniform(0, 0.05), fired)
                with pytest.raises(InterruptedError):
                    await session.astream(factory, kit.params, **kit.api)
                ended = time.monotonic()
                assert ended - fired[0] < PROMPTLY, ended - fired[0]
        finally:
            await kit.aclose(client)

    asyncio.run(main())


def test_interrupt_while_the_request_is_planned(emulator: Emulator, idle_after: None, kit: ApiKit) -> None:
    """The factory (say, a lazy SDK import) takes 40 ms; an interrupt at 10 ms is honoured: nothing
    is sent."""
    session = fsm_agent.Session(retries=0)
    made: list[Any] = []

    def factory() -> Any:
        time.sleep(0.04)
        made.append(kit.client(emulator))
        return made[-1]

    timer = threading.Timer(0.01, session.interrupt)
    timer.start()
    with pytest.raises(InterruptedError):
        session.stream(factory, kit.params, **kit.api)
    timer.join()
    assert emulator.requests == []
    for client in made:
        kit.close(client)


# -- class 6: errors of the SDK's own types (section 1) ------------------------------------------------------
FAULTS = {
    "drop-before-any-frame": DropAfter(0),
    "drop-after-a-frame": DropAfter(1),
    "drop-mid-frame": DropMidFrame(1),
    "http-500": HttpError(500),
}


def _sdk_catches(kit: ApiKit, exc: BaseException, status: bool) -> bool:
    if kit.name in ("chat_completions", "responses"):
        return isinstance(exc, openai.APIStatusError if status else openai.APIConnectionError)
    if kit.name == "anthropic_messages":
        return isinstance(exc, anthropic.APIStatusError if status else anthropic.APIConnectionError)
    # boto3: botocore's status errors; a dropped event stream is urllib3's ProtocolError, exactly
    # what the bare client raises when the same stream is cut.
    import botocore.exceptions
    import urllib3.exceptions

    return isinstance(exc, botocore.exceptions.ClientError if status else urllib3.exceptions.ProtocolError)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_exhausted_faults_raise_the_sdks_own_error(
    emulator: Emulator, idle_after: None, kit: ApiKit, fault: str
) -> None:
    emulator.script(Scenario.build("Hello there.", faults=[FAULTS[fault]]), cycle=True)
    client = kit.client(emulator)
    try:
        with pytest.raises(Exception) as caught:
            session = fsm_agent.Session(retries=1, backoff=fsm_agent.Backoff(base=0))
            session.stream(client, kit.params, **kit.api)
    finally:
        kit.close(client)
    exc = caught.value
    assert _sdk_catches(kit, exc, status=fault == "http-500"), f"{type(exc).__module__}.{type(exc).__name__}"
    if kit.name != "bedrock_converse" and fault != "http-500":
        assert type(exc.__cause__).__module__.startswith("httpx"), exc.__cause__  # the transport's error
    assert len(emulator.requests) >= 2  # botocore may retry a 500 itself inside one attempt


def test_exhausted_faults_raise_the_sdks_own_error_async(emulator: Emulator, idle_after: None) -> None:
    async def main() -> None:
        for name in ("chat_completions", "anthropic_messages"):
            kit = KITS[name]
            emulator.script(Scenario.build("Hello there.", faults=[DropAfter(1)]), cycle=True)
            client = kit.async_client(emulator)
            try:
                with pytest.raises(Exception) as caught:
                    await fsm_agent.Session(retries=1, backoff=fsm_agent.Backoff(base=0)).astream(
                        client, kit.params, **kit.api
                    )
            finally:
                await kit.aclose(client)
            assert _sdk_catches(kit, caught.value, status=False), type(caught.value)
            assert caught.value.__cause__ is not None

    asyncio.run(main())


def test_stop_iteration_from_a_callback_propagates_unchanged(
    emulator: Emulator, idle_after: None, kit: ApiKit
) -> None:
    emulator.script(kit.scenario([kit.body()]))
    client = kit.client(emulator)
    raised = StopIteration("the caller's own")

    def on_text(text: str) -> None:
        raise raised

    try:
        with pytest.raises(StopIteration) as caught:
            fsm_agent.Session().stream(client, kit.params, **kit.api, on_text=on_text)
    finally:
        kit.close(client)
    assert caught.value is raised


# -- class 9: astream factories ------------------------------------------------------------------------------
def _ticks(times: list[float]) -> asyncio.Task[None]:
    """Note the time every 10 ms, for as long as the event loop is free to run."""

    async def ticker() -> None:
        while True:
            times.append(time.monotonic())
            await asyncio.sleep(0.01)

    return asyncio.ensure_future(ticker())


def test_astream_runs_a_plain_factory_in_a_worker_thread(emulator: Emulator, kit: ApiKit) -> None:
    """Building a client can block (imports, certificates): never on the event loop."""
    before = set(threading.enumerate())
    threads: list[threading.Thread] = []
    made: list[Any] = []

    slept: list[float] = []

    def factory() -> Any:
        threads.append(threading.current_thread())
        slept.append(time.monotonic())
        time.sleep(0.3)  # a slow client construction
        slept.append(time.monotonic())
        made.append(kit.async_client(emulator))
        return made[-1]

    async def main() -> Any:
        emulator.script(kit.scenario([kit.body()]), kit.scenario([kit.body()]))
        ticks: list[float] = []
        ticker = _ticks(ticks)
        try:
            result = await fsm_agent.Session().astream(factory, kit.params, **kit.api)
        finally:
            ticker.cancel()
        loop_thread = threading.current_thread()
        assert threads and all(thread is not loop_thread for thread in threads)
        began, ended = slept[0], slept[1]
        # The loop went on while the first factory call slept (on the loop, it could not tick).
        assert any(began + 0.05 < tick < ended - 0.05 for tick in ticks)
        return result

    result = asyncio.run(main())
    assert result.content == "Hello there."
    for client in made:
        if kit.name == "bedrock_converse":
            kit.close(client)
        else:
            assert client.is_closed()  # a factory's client is closed with its attempt
    if kit.name == "bedrock_converse":
        # Known, older than issue 12 and left alone here: a boto3 client made by a factory for
        # astream() leaves its last connection to the garbage collector (a connection/response
        # reference cycle); threads are still checked.
        assert_threads_idle(before, 3.0)
    else:
        assert_emulator_and_threads_idle(emulator, before, 3.0)


def test_astream_awaits_a_coroutine_function_factory(emulator: Emulator, idle_after: None) -> None:
    kit = KITS["anthropic_messages"]
    made: list[Any] = []

    async def factory() -> Any:
        await asyncio.sleep(0)
        made.append(kit.async_client(emulator))
        return made[-1]

    async def main() -> Any:
        emulator.script(kit.scenario([kit.body()]))
        return await fsm_agent.Session().astream(factory, kit.params)

    assert asyncio.run(main()).content == "Hello there."
    assert len(made) == 1 and made[0].is_closed()
