"""The harness of the async driver tests (`astream()` with real `openai.AsyncOpenAI` clients on the
emulator), and the tests proving the harness itself can fail.

`AsyncLeakCheck.run(main)` runs one test body under `asyncio.run` and then proves the request left
nothing behind: no task but the test's own still pending, no response still open in a caller's
connection pool, no connection open on the emulator once the caller's clients are closed, no
thread besides those alive before. `AsyncAttemptSpy` records every attempt the Chat Completions
adapter opened through `aopen` (each must be closed exactly once) and every exception its byte
stream raised. Plain `asyncio.run`, no pytest-asyncio: one loop per test, closed at its end.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from helpers import Collect, assert_each_closed_once, assert_emulator_and_threads_idle, params, threads_since

import fsm_agent
from fsm_agent._internal.providers import openai_chat
from fsm_agent._internal.providers.base import AsyncAttempt
from fsm_agent.testing import Emulator, Scenario, Stall

__all__ = [
    "AsyncAttemptSpy",
    "AsyncCollect",
    "AsyncLeakCheck",
    "aleaks",
    "aspy",
    "astream",
    "busy_connections",
]


def busy_connections(client: openai.AsyncOpenAI) -> int:
    """HTTP connections of `client`'s pool still serving a request (a response never closed)."""
    pool = client._client._transport._pool  # httpx2.AsyncHTTPTransport → httpcore2.AsyncConnectionPool
    return sum(1 for conn in pool.connections if not conn.is_idle() and not conn.is_closed())


@dataclass
class AsyncLeakCheck:
    emulator: Emulator
    clients: list[openai.AsyncOpenAI] = field(default_factory=list)
    threads_before: set[threading.Thread] = field(default_factory=lambda: set(threading.enumerate()))
    # other callers' clients: (client, its busy-connection count, how to close it)
    adopted: list[tuple[Any, Callable[[Any], int], Callable[[Any], Any]]] = field(default_factory=list)

    def adopt(self, client: Any, busy: Callable[[Any], int], close: Callable[[Any], Any]) -> Any:
        """Check and close another kind of caller's client (AsyncAnthropic, boto3) like ours."""
        self.adopted.append((client, busy, close))
        return client

    def client(self, **kwargs: Any) -> openai.AsyncOpenAI:
        """A caller's async client (make it inside the running loop); closed by `run()`."""
        made = openai.AsyncOpenAI(
            base_url=self.emulator.openai_base_url, api_key="sk-test", max_retries=0, **kwargs
        )
        self.clients.append(made)
        return made

    def run(self, main: Callable[[], Awaitable[Any]], *, timeout: float = 2.0) -> Any:
        async def body() -> Any:
            try:
                return await main()
            finally:
                await self._aclean()

        value = asyncio.run(body())
        self.assert_clean(timeout)
        return value

    async def _aclean(self) -> None:
        await asyncio.sleep(0)  # let callbacks already scheduled run
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert not others, f"tasks left behind: {others}"
        for client in self.clients:
            assert busy_connections(client) == 0, "a response was left open in the caller's pool"
        for client in self.clients:
            assert client.is_closed() is False, "the library closed the caller's client"
            await client.close()
        for client, busy, _ in self.adopted:
            assert busy(client) == 0, "a response was left open in the caller's pool"
        for client, _, close in self.adopted:
            closing = close(client)
            if closing is not None:
                await closing

    def extra_threads(self) -> list[threading.Thread]:
        return threads_since(self.threads_before)

    def assert_clean(self, timeout: float = 2.0) -> None:
        assert_emulator_and_threads_idle(self.emulator, self.threads_before, timeout)


@pytest.fixture
def aleaks(emulator: Emulator) -> Iterator[AsyncLeakCheck]:
    yield AsyncLeakCheck(emulator)


class AsyncAttemptSpy:
    """Every AsyncAttempt the Chat Completions adapter's `aopen` returned, and its stream's errors."""

    def __init__(self) -> None:
        self.attempts: list[AsyncAttempt] = []
        self.errors: list[BaseException] = []

    def watch(self, attempt: AsyncAttempt) -> AsyncAttempt:
        self.attempts.append(attempt)
        if attempt.chunks is not None:
            attempt.chunks = self._recording(attempt.chunks)
        return attempt

    async def _recording(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        try:
            async for chunk in chunks:
                yield chunk
        except Exception as exc:
            self.errors.append(exc)
            raise
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()

    def assert_each_closed_once(self, count: int | None = None) -> None:
        assert_each_closed_once(self.attempts, count)


@pytest.fixture
def aspy(monkeypatch: pytest.MonkeyPatch) -> AsyncAttemptSpy:
    recorder = AsyncAttemptSpy()
    original = openai_chat.ChatCompletionsAdapter.aopen

    async def aopen_and_record(self: Any, *args: Any, **kwargs: Any) -> AsyncAttempt:
        return recorder.watch(await original(self, *args, **kwargs))

    monkeypatch.setattr(openai_chat.ChatCompletionsAdapter, "aopen", aopen_and_record)
    return recorder


class AsyncCollect(Collect):
    """`Collect` whose callbacks are coroutines (each yields to the loop once before recording)."""

    def callbacks(self, *, activity: bool = False) -> dict[str, Callable[..., Any]]:
        plain = super().callbacks(activity=activity)
        return {name: _as_coroutine(fn) for name, fn in plain.items()}


def _as_coroutine(fn: Callable[..., Any]) -> Callable[..., Awaitable[None]]:
    async def callback(*args: Any) -> None:
        await asyncio.sleep(0)
        fn(*args)

    return callback


async def astream(
    leaks: AsyncLeakCheck, session: fsm_agent.Session, got: Collect, **kwargs: Any
) -> fsm_agent.StreamResult:
    client = kwargs.pop("client", None) or (leaks.clients[0] if leaks.clients else leaks.client())
    request = kwargs.pop("params", None) or params()
    activity = kwargs.pop("activity", False)
    return await session.astream(client, request, **got.callbacks(activity=activity), **kwargs)


# -- the harness can fail --------------------------------------------------------------------------


def test_harness_catches_a_task_left_behind(aleaks: AsyncLeakCheck) -> None:
    async def main() -> None:
        asyncio.get_running_loop().create_task(asyncio.sleep(5))

    with pytest.raises(AssertionError, match="tasks left behind"):
        aleaks.run(main)


def test_harness_catches_a_response_left_open(aleaks: AsyncLeakCheck) -> None:
    aleaks.emulator.script(Scenario.build("Hello.", faults=[Stall(1, seconds=10)]))

    async def main() -> None:
        client = aleaks.client()
        manager = client.chat.completions.with_streaming_response.create(**params(), stream=True)
        await manager.__aenter__()
        try:
            with pytest.raises(AssertionError, match="left open in the caller's pool"):
                await aleaks._aclean()
        finally:
            await manager.__aexit__(None, None, None)
            aleaks.clients.clear()
            await client.close()

    asyncio.run(main())
    aleaks.assert_clean()


def test_harness_catches_a_thread_left_running(aleaks: AsyncLeakCheck) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="leaky")
    thread.start()
    try:
        with pytest.raises(AssertionError, match="threads left running"):
            aleaks.assert_clean(timeout=0.05)
    finally:
        stop.set()
        thread.join()
