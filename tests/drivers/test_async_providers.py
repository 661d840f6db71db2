"""`astream()` for the other providers, on the same machine: OpenAI Responses, Anthropic Messages and
the native Gemini API with their real async SDK clients (`AsyncOpenAI`, `AsyncAnthropic`,
`genai.Client().aio`), Bedrock with a real boto3 client run in a worker thread (boto3 has no async
client). One matrix for all four: the answer
equals the sync path's, RES-3 reconnect, RES-9 fallback, cancellation and RES-11 interrupt while
the provider is silent — each stream closed exactly once, nothing left behind. (WD-1 and WD-3 on every
provider and driver: tests/matrix/test_shared_behaviours.py.)"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import anthropic
import boto3
import botocore.config
import openai
import pytest
from google import genai
from helpers import INSTANT, PROMPTLY, Collect, wait_until
from provider_clients import boto_busy, close_client, genai_async_busy
from test_async_support import AsyncLeakCheck, aleaks, busy_connections

import fsm_agent
from fsm_agent._internal.providers import anthropic as anthropic_adapter
from fsm_agent._internal.providers import bedrock, gemini, openai_responses
from fsm_agent._internal.trace.sinks import MemorySink
from fsm_agent.testing import (
    BedrockAccessDenied,
    DropMidFrame,
    Emulator,
    Fault,
    NonStreamingBody,
    Scenario,
    Stall,
    StreamingUnsupported,
    ToolCall,
)

__all__ = ["aleaks"]

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

WRITE = ToolCall("write_file", '{"path": "notes/ä.txt", "text": "héllo 😀"}', arg_fragment=5)
FULL = Scenario.build("The weather is sunny today.", reasoning="User wants weather.", tool_calls=[WRITE])


_genai_busy = genai_async_busy
_boto_busy = boto_busy
_boto_close = close_client


@dataclass(frozen=True)
class Kit:
    """One provider: how a caller makes its client, its request, and the adapter method to spy on."""

    name: str
    adapter: type
    opener: str  # "aopen" (async SDK) or "open" (run in a worker thread)
    unsupported: Fault

    def client(self, leaks: AsyncLeakCheck) -> Any:
        emu = leaks.emulator
        if self.name == "responses":
            made: Any = openai.AsyncOpenAI(base_url=emu.openai_base_url, api_key="sk-test", max_retries=0)
            return leaks.adopt(made, busy_connections, lambda c: c.close())
        if self.name == "anthropic":
            made = anthropic.AsyncAnthropic(
                base_url=emu.anthropic_base_url, api_key="sk-ant-test", max_retries=0
            )
            return leaks.adopt(made, busy_connections, lambda c: c.close())
        if self.name == "gemini":
            made = genai.Client(api_key="AIza-test", http_options={"base_url": emu.gemini_base_url}).aio
            return leaks.adopt(made, _genai_busy, lambda c: c.aclose())
        made = boto3.client(
            "bedrock-runtime",
            endpoint_url=emu.bedrock_endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
            config=botocore.config.Config(retries={"max_attempts": 1}),
        )
        return leaks.adopt(made, _boto_busy, _boto_close)

    def sync_client(self, emu: Emulator) -> Any:
        if self.name == "responses":
            return openai.OpenAI(base_url=emu.openai_base_url, api_key="sk-test", max_retries=0)
        if self.name == "anthropic":
            return anthropic.Anthropic(base_url=emu.anthropic_base_url, api_key="sk-ant-test", max_retries=0)
        if self.name == "gemini":
            return genai.Client(api_key="AIza-test", http_options={"base_url": emu.gemini_base_url})
        return None  # Bedrock: the async path uses the same (sync) boto3 client

    def params(self) -> dict[str, Any]:
        if self.name == "responses":
            return {"model": "gpt-5-mini", "input": "hi"}
        if self.name == "anthropic":
            return {
                "model": "claude-sonnet-4-6",
                "max_tokens": 256,
                "messages": [{"role": "user", "content": "hi"}],
            }
        if self.name == "gemini":
            return {"model": "gemini-2.5-flash", "contents": "hi"}
        return {
            "modelId": "us.anthropic.claude-sonnet-4-5-v1:0",
            "messages": [{"role": "user", "content": [{"text": "hi"}]}],
        }

    def api(self) -> dict[str, str]:
        """Responses shares AsyncOpenAI with Chat Completions, so it is named (SPEC §1); the other
        two are inferred from the client."""
        return {"api": "responses"} if self.name == "responses" else {}


KITS = {
    "responses": Kit("responses", openai_responses.ResponsesAdapter, "aopen", StreamingUnsupported()),
    "anthropic": Kit("anthropic", anthropic_adapter.AnthropicAdapter, "aopen", StreamingUnsupported()),
    "bedrock": Kit("bedrock", bedrock.BedrockAdapter, "open", BedrockAccessDenied()),
    "gemini": Kit("gemini", gemini.GeminiAdapter, "aopen", StreamingUnsupported()),
}


@pytest.fixture(params=sorted(KITS))
def kit(request: pytest.FixtureRequest) -> Kit:
    return KITS[request.param]


@pytest.fixture
def opened(kit: Kit, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every attempt the provider's adapter opened (async, or sync in a worker thread)."""
    attempts: list[Any] = []
    original = getattr(kit.adapter, kit.opener)
    if kit.opener == "aopen":

        async def record_async(self: Any, *args: Any, **kwargs: Any) -> Any:
            attempts.append(await original(self, *args, **kwargs))
            return attempts[-1]

        monkeypatch.setattr(kit.adapter, "aopen", record_async)
    else:

        def record(self: Any, *args: Any, **kwargs: Any) -> Any:
            attempts.append(original(self, *args, **kwargs))
            return attempts[-1]

        monkeypatch.setattr(kit.adapter, "open", record)
    yield attempts


def closed_once(attempts: list[Any], count: int) -> None:
    assert len(attempts) == count, f"{len(attempts)} attempts opened, wanted {count}"
    assert all(a.closed and a.close_calls == 1 for a in attempts), [
        (a.closed, a.close_calls) for a in attempts
    ]


def test_answer_equals_the_sync_path(aleaks: AsyncLeakCheck, kit: Kit, opened: list[Any]) -> None:
    aleaks.emulator.script(FULL, cycle=True)
    sync_client = kit.sync_client(aleaks.emulator)
    got = Collect()
    session = fsm_agent.Session(backoff=INSTANT)

    async def main() -> tuple[Any, Any]:
        client = kit.client(aleaks)
        result = await session.astream(client, kit.params(), **kit.api(), **got.callbacks(activity=True))
        blocking = sync_client if sync_client is not None else client
        try:
            expected = await asyncio.to_thread(partial(session.stream, blocking, kit.params(), **kit.api()))
        finally:
            if sync_client is not None:  # before the leak check: its pool keeps the socket alive
                sync_client.close()
        return result, expected

    result, expected = aleaks.run(main)
    keys = ("content", "reasoning", "finish_reason", "usage", "streamed", "attempts", "stub")
    assert {k: getattr(result, k) for k in keys} == {k: getattr(expected, k) for k in keys}
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("write_file", WRITE.arguments)]
    assert [(c.name, c.arguments) for c in expected.tool_calls] == [("write_file", WRITE.arguments)]
    assert [(r.trigger, r.dest) for r in result.records] == [(r.trigger, r.dest) for r in expected.records]
    assert got.text == FULL.text and got.tools == [(0, "write_file")] and got.activity
    assert type(result.raw) is type(expected.raw)
    closed_once(opened[:1], 1)


def test_res3_drop_mid_tool_call_reconnects(aleaks: AsyncLeakCheck, kit: Kit, opened: list[Any]) -> None:
    text = "Let me write the file."
    cut = Scenario.build(text, tool_calls=[WRITE], faults=[DropMidFrame(2, kind="tool_args")])
    aleaks.emulator.script(cut, Scenario.build(text, tool_calls=[WRITE]))
    got = Collect()

    async def main() -> Any:
        return await fsm_agent.Session(backoff=INSTANT).astream(
            kit.client(aleaks), kit.params(), **kit.api(), **got.callbacks()
        )

    result = aleaks.run(main)
    markers = [t for t in got.texts if "reconnecting" in t]
    assert len(markers) == 1 and got.text == text + markers[0] + text
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("write_file", WRITE.arguments)]
    assert result.attempts == 2 and not result.stub
    closed_once(opened, 2)


def test_res9_streaming_unavailable_falls_back(aleaks: AsyncLeakCheck, kit: Kit) -> None:
    aleaks.emulator.script(Scenario(steps=FULL.steps, faults=(kit.unsupported,)))
    session = fsm_agent.Session(backoff=INSTANT)
    got = Collect()

    async def main() -> Any:
        return await session.astream(kit.client(aleaks), kit.params(), **kit.api(), **got.callbacks())

    result = aleaks.run(main)
    assert (result.content, result.streamed) == (FULL.text, False)
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("write_file", WRITE.arguments)]
    assert got.texts == [FULL.text] and session.streaming_disabled
    assert any("falling back" in s for s in got.statuses)


def test_cancel_while_silent_closes_once_and_propagates(
    aleaks: AsyncLeakCheck, kit: Kit, opened: list[Any]
) -> None:
    aleaks.emulator.script(Scenario.build("One two three four.", faults=[Stall(2, kind="text", seconds=10)]))
    sink = MemorySink()
    got = Collect()

    async def main() -> None:
        session = fsm_agent.Session(backoff=INSTANT, stale_timeout=30, trace=sink)
        task = asyncio.create_task(
            session.astream(kit.client(aleaks), kit.params(), **kit.api(), **got.callbacks())
        )
        while not got.texts:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.1)
        cancelled_at = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - cancelled_at < PROMPTLY

    aleaks.run(main)
    assert (sink.records[-1].trigger, sink.records[-1].dest) == ("interrupt", "failed")
    closed_once(opened, 1)


def test_res11_interrupt_from_another_thread_while_silent(
    aleaks: AsyncLeakCheck, kit: Kit, opened: list[Any]
) -> None:
    aleaks.emulator.script(Scenario.build("One two three four.", faults=[Stall(2, kind="text", seconds=10)]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=30)
    got = Collect()
    fired_at: list[float] = []

    def interrupter() -> None:
        if wait_until(lambda: bool(got.texts), 3.0):
            time.sleep(0.1)
            fired_at.append(time.monotonic())
            session.interrupt()

    async def main() -> float:
        thread = threading.Thread(target=interrupter, name="test-interrupter")
        thread.start()
        try:
            with pytest.raises(InterruptedError):
                await session.astream(kit.client(aleaks), kit.params(), **kit.api(), **got.callbacks())
            return time.monotonic()
        finally:
            await asyncio.to_thread(thread.join)

    raised_at = aleaks.run(main)
    assert fired_at and raised_at - fired_at[0] < PROMPTLY
    assert len(aleaks.emulator.requests) == 1
    closed_once(opened, 1)


def test_res11_interrupt_before_the_response_headers(aleaks: AsyncLeakCheck, kit: Kit) -> None:
    """The provider accepts the request and never answers: no stream yet, the open is cut short
    (for Bedrock: the worker thread's socket is shut down, so the thread ends as well)."""
    aleaks.emulator.script(Scenario.build("x", faults=[NonStreamingBody(), Stall(0, seconds=10)]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=30)

    async def main() -> None:
        task = asyncio.create_task(session.astream(kit.client(aleaks), kit.params(), **kit.api()))
        while not aleaks.emulator.requests:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.1)
        fired_at = time.monotonic()
        session.interrupt()
        with pytest.raises(InterruptedError):
            await task
        assert time.monotonic() - fired_at < PROMPTLY
        # botocore retries the aborted request by itself (max_attempts=1 here); the worker's
        # socket is shut down again while the loop runs, so the worker ends soon after
        deadline = time.monotonic() + 3.0
        while any(t.name == "fsm-agent-attempt" for t in threading.enumerate()):
            assert time.monotonic() < deadline, "the worker thread is still opening"
            await asyncio.sleep(0.01)

    aleaks.run(main, timeout=1.0)
