"""RES-1..10 and ACC-10 for `astream()`: the sync Chat Completions matrix (test_chat_resilience.py),
run by the asyncio driver with the real `openai.AsyncOpenAI` client on the emulator over loopback
HTTP, each with plain and with coroutine callbacks. Every test proves nothing was left behind:
no task, no open response, no connection, no thread."""

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
    HttpError,
    KeepaliveOnly,
    MalformedFrame,
    NonStreamingBody,
    RejectStreamOptions,
    Scenario,
    StreamError,
    StreamingUnsupported,
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


def test_res1_res2_silent_retries_then_success(
    aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy, got: Collect
) -> None:
    cut = Scenario.build("Hello there.", faults=[DropAfter(1)])
    aleaks.emulator.script(cut, cut, Scenario.build("Hello there."))

    async def main() -> None:
        result = await astream(aleaks, fsm_agent.Session(backoff=INSTANT), got)
        assert (result.content, result.attempts, result.stub) == ("Hello there.", 3, False)
        assert got.text == "Hello there."
        assert sum("retrying" in s for s in got.statuses) == 2

    aleaks.run(main)
    assert len(aleaks.emulator.requests) == 3
    aspy.assert_each_closed_once(3)


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


def test_res1_http_500_is_transient(aleaks: AsyncLeakCheck) -> None:
    aleaks.emulator.script(Scenario.build("x", faults=[HttpError(500)]), Scenario.build("Recovered."))

    async def main() -> None:
        result = await astream(aleaks, fsm_agent.Session(backoff=INSTANT, retries=4), Collect())
        assert (result.content, result.attempts) == ("Recovered.", 2)

    aleaks.run(main)


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


def test_res5_exhausted_mid_tool_call_stub_with_warning(
    aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy, got: Collect
) -> None:
    aleaks.emulator.script(
        Scenario.build("Saving now.", tool_calls=[WRITE], faults=[DropMidFrame(1, kind="tool_args")])
    )

    async def main() -> None:
        result = await astream(aleaks, fsm_agent.Session(backoff=INSTANT), got)
        assert sum("reconnecting" in t for t in got.texts) == 2
        warning = got.texts[-1]
        assert (
            "Stream stalled mid tool-call" in warning
            and "write_file" in warning
            and "not executed" in warning
        )
        assert result.content == "Saving now." + warning
        assert result.stub and result.tool_calls == [] and result.dropped_tool_names == ["write_file"]

    aleaks.run(main)
    assert len(aleaks.emulator.requests) == 3
    aspy.assert_each_closed_once(3)


def test_res5_names_first_three_tools_then_more(aleaks: AsyncLeakCheck) -> None:
    tools = [ToolCall(f"tool_{i}", f'{{"i": {i}}}') for i in range(5)]
    aleaks.emulator.script(
        Scenario.build("Running.", tool_calls=tools, faults=[DropMidFrame(4, kind="tool_args")])
    )
    got = Collect()

    async def main() -> None:
        result = await astream(aleaks, fsm_agent.Session(backoff=INSTANT, retries=0), got)
        assert result.dropped_tool_names == [f"tool_{i}" for i in range(5)]
        assert "tool_0, tool_1, tool_2 +2 more" in got.texts[-1]

    aleaks.run(main)


def test_res6_whitespace_only_exhausted_raises_original(
    aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy
) -> None:
    aleaks.emulator.script(Scenario.build(" \n\t ", faults=[DropAfter(1, kind="text")]))
    got = Collect()

    async def main() -> None:
        with pytest.raises(openai.APIConnectionError) as caught:
            await astream(aleaks, fsm_agent.Session(backoff=INSTANT), got)
        assert caught.value.__cause__ is aspy.errors[-1]  # the SDK's own error; the transport's as its cause

    aleaks.run(main)
    assert len(aleaks.emulator.requests) == 3 and got.text.strip() == ""
    aspy.assert_each_closed_once(3)


def test_res6_whitespace_only_then_retried(aleaks: AsyncLeakCheck) -> None:
    aleaks.emulator.script(
        Scenario.build(" \n\t ", faults=[DropAfter(1, kind="text")]), Scenario.build("Real.")
    )
    got = Collect()

    async def main() -> None:
        result = await astream(aleaks, fsm_agent.Session(backoff=INSTANT), got)
        assert (result.content, result.stub, result.attempts) == ("Real.", False, 2)
        assert not any("reconnecting" in t for t in got.texts)

    aleaks.run(main)


# -- RES-7: not transient before delivery → raised at once -----------------------------------------


@pytest.mark.parametrize(
    ("status", "error"),
    [(401, openai.AuthenticationError), (400, openai.BadRequestError), (404, openai.NotFoundError)],
)
def test_res7_client_errors_raised_at_once(
    aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy, status: int, error: type[Exception]
) -> None:
    aleaks.emulator.script(Scenario.build("x", faults=[HttpError(status)]), Scenario.build("never"))
    got = Collect()
    session = fsm_agent.Session(backoff=INSTANT)

    async def main() -> None:
        with pytest.raises(error) as caught:
            await astream(aleaks, session, got)
        assert caught.value.status_code == status  # type: ignore[attr-defined]

    aleaks.run(main)
    assert len(aleaks.emulator.requests) == 1 and got.statuses == [] and aspy.attempts == []
    assert (session.streaming_disabled, session.stream_options_unsupported, session.stale_streak) == (
        False,
        False,
        0,
    )


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


# -- RES-9: streaming unavailable → the non-streaming request, awaited -----------------------------

ANSWER = Scenario.build(
    "Plain answer.",
    reasoning="Thinking once.",
    tool_calls=[ToolCall("a", '{"x": 1}', id="t1"), ToolCall("b", "{}", id="t2")],
)
UNAVAILABLE = {
    "streaming-not-supported": (StreamingUnsupported(), 2),
    "keepalives-only": (KeepaliveOnly(3), 2),
    "json-answer": (NonStreamingBody(), 1),
}


@pytest.mark.parametrize("case", sorted(UNAVAILABLE))
def test_res9_fallback(aleaks: AsyncLeakCheck, case: str, got: Collect) -> None:
    fault, requests = UNAVAILABLE[case]
    aleaks.emulator.script(Scenario(steps=ANSWER.steps, faults=(fault,)))
    session = fsm_agent.Session(backoff=INSTANT)
    again = Collect()

    async def main() -> None:
        result = await astream(aleaks, session, got)
        assert got.texts == ["Plain answer."] and got.reasoning == ["Thinking once."]
        assert got.tools == [(0, "a"), (1, "b")]
        assert result.content == "Plain answer." and result.reasoning == "Thinking once."
        assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
            ("t1", "a", '{"x": 1}'),
            ("t2", "b", "{}"),
        ]
        assert result.streamed is False and result.stub is False
        aleaks.emulator.script(Scenario.build("Second answer."))
        later = await astream(aleaks, session, again)  # straight to the non-streaming request
        assert (later.content, later.streamed) == ("Second answer.", False)

    aleaks.run(main)
    assert session.streaming_disabled is True
    assert any("falling back" in s for s in got.statuses)
    reqs = aleaks.emulator.requests
    assert len(reqs) == requests + 1 and reqs[0].stream is True and reqs[-1].stream is False
    assert again.texts == ["Second answer."]


@pytest.mark.parametrize("case", sorted(UNAVAILABLE))
def test_res9_raise(aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy, case: str) -> None:
    fault, _ = UNAVAILABLE[case]
    aleaks.emulator.script(Scenario(steps=ANSWER.steps, faults=(fault,)))
    session = fsm_agent.Session(backoff=INSTANT, unsupported="raise")
    expected: type[Exception] = (
        openai.BadRequestError if case == "streaming-not-supported" else fsm_agent.StreamingUnsupportedError
    )

    async def main() -> None:
        with pytest.raises(expected):
            await astream(aleaks, session, Collect())

    aleaks.run(main)
    assert len(aleaks.emulator.requests) == 1 and session.streaming_disabled is True
    aspy.assert_each_closed_once()


# -- RES-10 / ACC-10 -------------------------------------------------------------------------------


@pytest.mark.parametrize("position", [0, 3])
def test_res10_non_json_frame(aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy, position: int) -> None:
    aleaks.emulator.script(
        Scenario.build("Some words come first here.", faults=[MalformedFrame(position)]),
        Scenario.build("never"),
    )
    session = fsm_agent.Session(backoff=INSTANT)
    got = Collect()

    async def main() -> None:
        with pytest.raises(fsm_agent.ProviderStreamError) as caught:
            await astream(aleaks, session, got)
        assert caught.value.code == "provider_stream_non_json_data"
        assert caught.value.raw_text == "{this is not json"

    aleaks.run(main)
    assert len(aleaks.emulator.requests) == 1 and got.statuses == []
    assert (session.streaming_disabled, session.stream_options_unsupported, session.stale_streak) == (
        False,
        False,
        0,
    )
    aspy.assert_each_closed_once(1)


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
