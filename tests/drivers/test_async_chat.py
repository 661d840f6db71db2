"""RES-1..10 and ACC-10 for `astream()`: the sync Chat Completions matrix (test_chat_resilience.py),
run by the asyncio driver with the real `openai.AsyncOpenAI` client on the emulator over loopback
HTTP, each with plain and with coroutine callbacks. Every test proves nothing was left behind:
no task, no open response, no connection, no thread. (The tests both drivers share run once, on
each: tests/matrix/test_shared_behaviours.py.)"""

from __future__ import annotations

import copy
from typing import Any

import openai
import pytest
from helpers import INSTANT, Collect, params
from test_async_support import AsyncAttemptSpy, AsyncCollect, AsyncLeakCheck, aleaks, aspy, astream

import fsm_agent
from fsm_agent.testing import (
    DropAfter,
    DropMidFrame,
    RejectStreamOptions,
    Scenario,
    StreamError,
    ToolCall,
)

__all__ = ["aleaks", "aspy"]

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")  # a coroutine never awaited fails

WRITE = ToolCall("write_file", '{"path": "notes/a.txt", "text": "héllo 😀"}', arg_fragment=6)


@pytest.fixture(params=["plain", "coroutine"])
def got(request: pytest.FixtureRequest) -> Collect:
    """The caller's callbacks: plain functions, or coroutines (awaited in order)."""
    return Collect() if request.param == "plain" else AsyncCollect()


# -- RES-1 / RES-2: silent retry before anything visible -------------------------------------------


def test_res1_exhausted_raises_the_original_error(aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy) -> None:
    aleaks.emulator.script(Scenario.build("Hello there.", faults=[DropAfter(1)]))
    got = Collect()

    async def main() -> None:
        with pytest.raises(openai.APIConnectionError) as caught:
            await astream(aleaks, fsm_agent.Session(backoff=INSTANT), got)
        assert caught.value.__cause__ is aspy.errors[-1]  # the SDK's own error; the transport's as its cause

    aleaks.run(main)
    assert len(aleaks.emulator.requests) == 3 and got.texts == []
    aspy.assert_each_closed_once(3)


# -- RES-3 / RES-4 / RES-5 / RES-6 -----------------------------------------------------------------


def test_res3_mid_tool_call_retry_with_marker(
    aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy, got: Collect
) -> None:
    cut = Scenario.build(
        "Let me write the file.", tool_calls=[WRITE], faults=[DropMidFrame(2, kind="tool_args")]
    )
    aleaks.emulator.script(cut, Scenario.build("Let me write the file.", tool_calls=[WRITE]))

    async def main() -> None:
        result = await astream(aleaks, fsm_agent.Session(backoff=INSTANT), got)
        markers = [t for t in got.texts if "reconnecting" in t]
        assert len(markers) == 1
        before, _, after = got.text.partition(markers[0])
        assert before == after == "Let me write the file." == result.content
        assert [(c.name, c.arguments) for c in result.tool_calls] == [("write_file", WRITE.arguments)]
        assert result.tool_calls[0].id == "call_emu2_0"
        assert (result.attempts, result.stub, result.finish_reason) == (2, False, "tool_calls")
        assert got.tools == [(0, "write_file"), (0, "write_file")]

    aleaks.run(main)
    aspy.assert_each_closed_once(2)


def test_res4_text_only_drop_gives_stub(aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy, got: Collect) -> None:
    scenario = Scenario.build(
        "  One two three four five six seven eight nine ten. ", faults=[DropAfter(2, kind="text")]
    )
    aleaks.emulator.script(scenario, Scenario.build("must not be requested"))

    async def main() -> None:
        result = await astream(aleaks, fsm_agent.Session(backoff=INSTANT), got)
        assert got.text.strip() and result.content == got.text.strip()
        assert result.stub is True and result.finish_reason == "length"
        assert result.tool_calls == [] and result.dropped_tool_names == [] and result.attempts == 1

    aleaks.run(main)
    assert len(aleaks.emulator.requests) == 1
    aspy.assert_each_closed_once(1)


# -- RES-8: stream_options -------------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 422])
def test_res8_stream_options_rejected_retried_without(aleaks: AsyncLeakCheck, status: int) -> None:
    aleaks.emulator.script(Scenario.build("Hello.", faults=[RejectStreamOptions(status)]))
    session = fsm_agent.Session(backoff=INSTANT, retries=0)
    caller_params = params(stream_options={"include_usage": True})
    snapshot = copy.deepcopy(caller_params)
    got = Collect()

    async def main() -> None:
        result = await astream(aleaks, session, got, params=caller_params)
        assert result.content == "Hello."
        again = await astream(aleaks, session, Collect())  # the session remembers
        assert again.content == "Hello." and again.attempts == 1

    aleaks.run(main)
    first, second, third = aleaks.emulator.requests
    assert first.body["stream_options"] == {"include_usage": True}
    assert "stream_options" not in second.body and second.body["stream"] is True
    assert "stream_options" not in third.body
    assert session.stream_options_unsupported is True and session.streaming_disabled is False
    assert any("stream_options" in s for s in got.statuses)
    assert caller_params == snapshot


# -- RES-10 / ACC-10 -------------------------------------------------------------------------------


def test_acc10_in_stream_error_retried_then_raised_with_code(aleaks: AsyncLeakCheck) -> None:
    flagged = StreamError(
        1, message="Your prompt was flagged.", code="content_policy_violation", error_type="x"
    )
    aleaks.emulator.script(
        Scenario.build("x", faults=[StreamError(1)]), Scenario.build("x", faults=[flagged])
    )

    async def main() -> None:
        with pytest.raises(fsm_agent.ProviderStreamError) as caught:
            await astream(aleaks, fsm_agent.Session(backoff=INSTANT), Collect())
        assert caught.value.code == "content_policy_violation"
        assert "Your prompt was flagged." in str(caught.value)

    aleaks.run(main)
    assert len(aleaks.emulator.requests) == 2


# -- the result is the same object the sync path builds --------------------------------------------


def test_full_answer_matches_the_sync_path(aleaks: AsyncLeakCheck) -> None:
    call = ToolCall("write_file", WRITE.arguments, id="call_fixed", arg_fragment=6)
    scenario = Scenario.build(
        "Hello there, friend.", reasoning="think first", tool_calls=[call], id="chatcmpl-x"
    )
    aleaks.emulator.script(scenario, cycle=True)
    sync_client = openai.OpenAI(base_url=aleaks.emulator.openai_base_url, api_key="sk-test", max_retries=0)
    try:
        expected = fsm_agent.Session(backoff=INSTANT).stream(sync_client, params())
    finally:
        sync_client.close()

    async def main() -> Any:
        return await astream(aleaks, fsm_agent.Session(backoff=INSTANT), Collect())

    result = aleaks.run(main)
    assert result.to_chat_completion() == expected.to_chat_completion()
    assert (result.reasoning, result.usage, result.streamed) == (expected.reasoning, expected.usage, True)
    assert [(r.trigger, r.source, r.dest) for r in result.records] == [
        (r.trigger, r.source, r.dest) for r in expected.records
    ]


def test_res1_factory_clients_closed_with_their_attempts(aleaks: AsyncLeakCheck) -> None:
    """With a factory, every attempt gets its own async client, closed (awaited) before the next."""
    aleaks.emulator.script(Scenario.build("x", faults=[DropAfter(1)]), Scenario.build("Recovered."))
    made: list[openai.AsyncOpenAI] = []
    closed_before_next: list[bool] = []

    def factory() -> openai.AsyncOpenAI:
        closed_before_next.extend(client.is_closed() for client in made)
        made.append(
            openai.AsyncOpenAI(base_url=aleaks.emulator.openai_base_url, api_key="sk-test", max_retries=0)
        )
        return made[-1]

    async def main() -> None:
        result = await fsm_agent.Session(backoff=INSTANT).astream(factory, params())
        assert (result.content, result.attempts) == ("Recovered.", 2)

    aleaks.run(main)
    assert len(made) == 2 and closed_before_next == [True]
    assert all(client.is_closed() for client in made)
