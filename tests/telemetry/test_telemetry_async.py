"""OT-1 for `astream()`: the request span is a child of the span the calling task is in (also with
several requests in flight at once, each under its own caller), and a cancelled request ends its span
with the error recorded. Real async SDK clients against the emulator, the real OpenTelemetry SDK."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import openai
from opentelemetry.trace import StatusCode
from otel_support import Otel, otel

import fsm_agent
from fsm_agent.testing import Emulator, Scenario, Stall

__all__ = ["otel"]

CHAT = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}


def _ours(otel: Otel) -> list[Any]:
    return [s for s in otel.spans() if s.instrumentation_scope.name == "fsm_agent"]


def test_async_requests_nest_under_their_callers_span(otel: Otel, emulator: Emulator) -> None:
    emulator.script(Scenario.build("Hello there.", frame_delay=0.01), cycle=True)

    async def turn(session: fsm_agent.Session, client: openai.AsyncOpenAI, name: str) -> Any:
        with otel.tracer.start_as_current_span(name) as caller:
            result = await session.astream(client, dict(CHAT))
        return caller.get_span_context().span_id, result

    async def main() -> list[Any]:
        client = openai.AsyncOpenAI(base_url=emulator.openai_base_url, api_key="sk-test", max_retries=0)
        try:
            session = fsm_agent.Session()
            return await asyncio.gather(*(turn(session, client, f"turn {i}") for i in range(3)))
        finally:
            await client.close()

    turns = asyncio.run(main())
    roots = [s for s in _ours(otel) if s.name == "chat gpt-4.1"]
    assert len(roots) == 3
    assert sorted(r.parent.span_id for r in roots if r.parent) == sorted(span_id for span_id, _ in turns)
    for root in roots:
        attempts = [
            s for s in _ours(otel) if s.parent is not None and s.parent.span_id == root.context.span_id
        ]
        assert [s.name for s in attempts] == ["fsm_agent.attempt"]
        assert root.attributes["gen_ai.response.model"] == "gpt-4.1"
        assert [e.attributes["fsm_agent.dest"] for e in root.events if e.name == "fsm_agent.transition"][
            -1
        ] == "done"


def test_async_anthropic_sdk_span_nests_under_the_attempt(otel: Otel, emulator: Emulator) -> None:
    emulator.script(Scenario.build("Hello there."))

    async def main() -> None:
        client = anthropic.AsyncAnthropic(
            base_url=emulator.anthropic_base_url, api_key="sk-ant", max_retries=0
        )
        try:
            params = {"model": "claude-x", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
            await fsm_agent.Session().astream(client, params)
        finally:
            await client.close()

    asyncio.run(main())
    spans = otel.spans()
    (attempt,) = [s for s in spans if s.name == "fsm_agent.attempt"]
    sdk = [s for s in spans if s.instrumentation_scope.name != "fsm_agent"]
    assert sdk and all(s.parent is not None and s.parent.span_id == attempt.context.span_id for s in sdk)


def test_a_cancelled_request_ends_its_span_with_the_error(otel: Otel, emulator: Emulator) -> None:
    emulator.script(Scenario.build("Hello there.", faults=[Stall(1, seconds=10)]))

    async def main() -> None:
        client = openai.AsyncOpenAI(base_url=emulator.openai_base_url, api_key="sk-test", max_retries=0)
        try:
            task = asyncio.ensure_future(fsm_agent.Session(stale_timeout=30).astream(client, dict(CHAT)))
            await asyncio.sleep(0.3)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            else:  # pragma: no cover - the stall outlasts the test
                raise AssertionError("the request was not cancelled")
        finally:
            await client.close()

    asyncio.run(main())
    (root,) = [s for s in _ours(otel) if s.name == "chat gpt-4.1"]
    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes["error.type"] == "CancelledError"
    assert [e.attributes["fsm_agent.trigger"] for e in root.events if e.name == "fsm_agent.transition"][
        -1
    ] == "interrupt"
    assert [e.attributes["exception.type"] for e in root.events if e.name == "exception"] == [
        "asyncio.exceptions.CancelledError"
    ]
    (attempt,) = [s for s in _ours(otel) if s.name == "fsm_agent.attempt"]
    assert attempt.end_time is not None and attempt.status.status_code is StatusCode.ERROR
