"""The provider x driver matrix's harness: one `Lane` is one API (chat, responses, anthropic, bedrock,
gemini) driven by one driver (`stream()` or `astream()`), with its real SDK client on the emulator.

A test body is written once, in plain calls: `lane.stream(session, got)` is `session.stream(...)` on
the sync lanes and `session.astream(...)` on the async ones, each call run to its end on the lane's
one event loop (an `asyncio.Runner`, so a session's later requests share the loop and the async
client, as a caller's would). The async SDK clients are made inside that loop; Bedrock's async lane
is the sync boto3 client the async driver runs in a worker thread (boto3 has no async client).

For routes (RT-, RC-): `lane.client_of(other_emulator)` is one more client of the lane's API (made,
closed and checked with the lane's own), `lane.route(client, model)` a `Route` of the lane's params
with another model, and `lane.stream_routes(session, routes, got)` one request over them.

`lane.attempts` holds every attempt the API's adapter opened (`open`, or `aopen` when the driver
awaits it), `lane.assert_closed_once(n)` proves each stream was closed exactly once, and
`lane.assert_clean()` that the request left nothing behind: no task still pending on the loop, no
response still open in a caller's pool, no connection open on the emulator once the caller's
clients are closed, no thread besides those alive before.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import helpers
import openai
import pytest
from google import genai
from helpers import AttemptSpy, Collect, assert_emulator_and_threads_idle
from provider_clients import (
    anthropic_client,
    bedrock_client,
    bedrock_client_without_retries,
    boto_busy,
    close_client,
    genai_async_busy,
    openai_client,
)
from test_async_support import AsyncAttemptSpy, AsyncCollect

import fsm_agent
from fsm_agent._internal.providers import anthropic as anthropic_adapter
from fsm_agent._internal.providers import bedrock, gemini, openai_chat, openai_responses
from fsm_agent.testing import Emulator

APIS = ("chat", "responses", "anthropic", "bedrock", "gemini")
DRIVERS = ("sync", "async")

ADAPTERS: dict[str, type] = {
    "chat": openai_chat.ChatCompletionsAdapter,
    "responses": openai_responses.ResponsesAdapter,
    "anthropic": anthropic_adapter.AnthropicAdapter,
    "bedrock": bedrock.BedrockAdapter,
    "gemini": gemini.GeminiAdapter,
}


def _no_busy_check(_: Any) -> int:
    return 0  # google-genai's sync client: its pool is closed with it, the emulator then checked idle


class Lane:
    def __init__(self, api: str, driver: str, emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
        self.api = api
        self.driver = driver
        self.emulator = emulator
        self.coroutine_callbacks = False
        self.threads_before = set(threading.enumerate())
        self.attempts: list[Any] = []
        # (client, busy connections, close -> None or an awaitable)
        self._clients: list[tuple[Any, Callable[[Any], int], Callable[[Any], Any]]] = []
        self._own: Any = None  # the lane's own client, among `_clients`
        self._runner = asyncio.Runner() if driver == "async" else None
        self._spy(monkeypatch)

    def __repr__(self) -> str:
        return f"Lane({self.api}-{self.driver})"

    # -- the caller's side -----------------------------------------------------------------------

    def params(self) -> dict[str, Any]:
        if self.api == "chat":
            return helpers.params()
        if self.api == "responses":
            return {"model": "gpt-5-mini", "input": "hi"}
        if self.api == "anthropic":
            return {
                "model": "claude-sonnet-4-6",
                "max_tokens": 256,
                "messages": [{"role": "user", "content": "hi"}],
            }
        if self.api == "gemini":
            return {"model": "gemini-2.5-flash", "contents": "hi"}
        return {
            "modelId": "us.anthropic.claude-sonnet-4-5-v1:0",
            "messages": [{"role": "user", "content": [{"text": "hi"}]}],
        }

    def collect(self) -> Collect:
        """The callback recorder: coroutine callbacks on a lane that asks for them."""
        return AsyncCollect() if self.coroutine_callbacks else Collect()

    def client(self) -> Any:
        """The caller's client of this lane (made on first use; the same one for later requests)."""
        if self._own is None:
            if self._runner is None:
                self._clients.append(self._sync_client())
            else:
                self._clients.append(self._runner.run(self._async_client()))
            self._own = self._clients[-1][0]
        return self._own

    def stream(
        self, session: fsm_agent.Session, got: Collect | None = None, *, activity: bool = False, **kwargs: Any
    ) -> Any:
        """One request through this lane's driver, to its end (or its exception)."""
        callbacks = got.callbacks(activity=activity) if got is not None else {}
        request = kwargs.pop("params", None) or self.params()
        if self.api == "responses":
            kwargs.setdefault("api", "responses")  # it shares the OpenAI client with Chat (SPEC §1)
        client = self.client()
        if self._runner is None:
            return session.stream(client, request, **callbacks, **kwargs)
        return self._runner.run(session.astream(client, request, **callbacks, **kwargs))

    # -- routes (RT-, RC-) -----------------------------------------------------------------------

    def client_of(self, emulator: Emulator) -> Any:
        """One more client of this lane's API on `emulator` (another route's), closed and checked
        with the lane's own; Bedrock's without botocore's own retries, so that each attempt of
        ours is one request the emulator sees."""
        if self._runner is None:
            made = self._sync_client(emulator, bedrock_retries=False)
        else:
            made = self._runner.run(self._async_client(emulator, bedrock_retries=False))
        self._clients.append(made)
        return made[0]

    def route(self, client: Any, model: str, **options: Any) -> fsm_agent.Route:
        """A route of this lane's params with `model` (each model is an endpoint of its own, HL-1)."""
        params = self.params()
        params["modelId" if self.api == "bedrock" else "model"] = model
        if self.api == "responses":
            options.setdefault("api", "responses")
        return fsm_agent.Route(client, params, **options)

    def stream_routes(
        self, session: fsm_agent.Session, routes: list[fsm_agent.Route], got: Collect | None = None
    ) -> Any:
        """One request over `routes` through this lane's driver, to its end (or its exception)."""
        callbacks = got.callbacks() if got is not None else {}
        if self._runner is None:
            return session.stream(routes, **callbacks)
        return self._runner.run(session.astream(routes, **callbacks))

    # -- the checks ------------------------------------------------------------------------------

    def assert_closed_once(self, count: int | None = None) -> None:
        helpers.assert_each_closed_once(self.attempts, count)

    def assert_clean(self, timeout: float = 2.0) -> None:
        if self._runner is not None:
            self._runner.run(self._aclean())
            self._runner.close()
        else:
            for client, busy, _ in self._clients:
                assert busy(client) == 0, "a response was left open in the caller's pool"
            for client, _, close in self._clients:
                close(client)
        self._clients.clear()
        self._own = None
        assert_emulator_and_threads_idle(self.emulator, self.threads_before, timeout)

    def close(self) -> None:
        """After the test, whatever it left: close the clients and the loop (no check)."""
        try:
            if self._runner is not None and self._clients:
                self._runner.run(self._aclose_all())
            else:
                for client, _, close in self._clients:
                    close(client)
        finally:
            self._clients.clear()
            self._own = None
            if self._runner is not None:
                self._runner.close()

    # -- the parts -------------------------------------------------------------------------------

    def _spy(self, monkeypatch: pytest.MonkeyPatch) -> None:
        adapter = ADAPTERS[self.api]
        # On Chat Completions, as its own tests always did, each attempt's byte stream is watched too:
        # `lane.errors` holds every exception it raised (the very object the caller's error wraps).
        spy: Any = (
            (AsyncAttemptSpy() if self.driver == "async" else AttemptSpy()) if self.api == "chat" else None
        )
        self.errors: list[BaseException] = spy.errors if spy is not None else []
        attempts = self.attempts
        if self.driver == "async" and self.api != "bedrock":
            original_aopen = adapter.aopen

            async def aopen_and_record(self: Any, *args: Any, **kwargs: Any) -> Any:
                attempt = await original_aopen(self, *args, **kwargs)
                attempts.append(spy.watch(attempt) if spy is not None else attempt)
                return attempts[-1]

            monkeypatch.setattr(adapter, "aopen", aopen_and_record)
            return
        original_open = adapter.open

        def open_and_record(self: Any, *args: Any, **kwargs: Any) -> Any:
            attempt = original_open(self, *args, **kwargs)
            attempts.append(spy.watch(attempt) if spy is not None else attempt)
            return attempts[-1]

        monkeypatch.setattr(adapter, "open", open_and_record)

    def _sync_client(
        self, emu: Emulator | None = None, *, bedrock_retries: bool = True
    ) -> tuple[Any, Callable[[Any], int], Callable[[Any], Any]]:
        emu = emu or self.emulator
        if self.api == "bedrock" and not bedrock_retries:
            return bedrock_client_without_retries(emu), boto_busy, close_client
        if self.api in ("chat", "responses"):
            return openai_client(emu), helpers.busy_connections, close_client
        if self.api == "anthropic":
            return anthropic_client(emu), helpers.busy_connections, close_client  # the same pool shape
        if self.api == "bedrock":
            return bedrock_client(emu), boto_busy, close_client
        made = genai.Client(api_key="AIza-test", http_options={"base_url": emu.gemini_base_url})
        return made, _no_busy_check, close_client

    async def _async_client(
        self, emu: Emulator | None = None, *, bedrock_retries: bool = True
    ) -> tuple[Any, Callable[[Any], int], Callable[[Any], Any]]:
        emu = emu or self.emulator
        if self.api == "bedrock" and not bedrock_retries:
            return bedrock_client_without_retries(emu), boto_busy, close_client
        if self.api in ("chat", "responses"):
            made: Any = openai.AsyncOpenAI(base_url=emu.openai_base_url, api_key="sk-test", max_retries=0)
            return made, helpers.busy_connections, lambda c: c.close()
        if self.api == "anthropic":
            made = anthropic.AsyncAnthropic(
                base_url=emu.anthropic_base_url, api_key="sk-ant-test", max_retries=0
            )
            return made, helpers.busy_connections, lambda c: c.close()
        if self.api == "bedrock":
            return bedrock_client(emu), boto_busy, close_client
        made = genai.Client(api_key="AIza-test", http_options={"base_url": emu.gemini_base_url}).aio
        return made, genai_async_busy, lambda c: c.aclose()

    async def _aclean(self) -> None:
        await asyncio.sleep(0)  # let callbacks already scheduled run
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert not others, f"tasks left behind: {others}"
        for client, busy, _ in self._clients:
            assert busy(client) == 0, "a response was left open in the caller's pool"
        for client, _, _ in self._clients:
            is_closed = getattr(client, "is_closed", None)
            assert is_closed is None or is_closed() is False, "the library closed the caller's client"
        await self._aclose_all()

    async def _aclose_all(self) -> None:
        for client, _, close in self._clients:
            closing = close(client)
            if closing is not None:
                await closing


def lane_params(
    apis: tuple[str, ...] = APIS, drivers: tuple[str, ...] = DRIVERS, *, coroutine_callbacks: bool = False
) -> list[Any]:
    """`pytest.param`s for the lanes `apis` x `drivers`, ids like `chat-sync`; with
    `coroutine_callbacks`, each async lane once more with coroutine callbacks (`chat-async-coro`)."""
    out = [pytest.param((api, driver, False), id=f"{api}-{driver}") for api in apis for driver in drivers]
    if coroutine_callbacks and "async" in drivers:
        out += [pytest.param((api, "async", True), id=f"{api}-async-coro") for api in apis]
    return out


@pytest.fixture
def lane(
    request: pytest.FixtureRequest, emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Lane]:
    """The lane of the test's `lane` parameter (`@pytest.mark.parametrize("lane", lane_params(...),
    indirect=True)`)."""
    api, driver, coroutine_callbacks = request.param
    made = Lane(api, driver, emulator, monkeypatch)
    made.coroutine_callbacks = coroutine_callbacks
    yield made
    made.close()
