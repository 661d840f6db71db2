"""ACC-1..8 and ACC-4 end to end: the real `openai` client on the emulator over loopback HTTP,
plus a hypothesis test of argument assembly over arbitrary splits (wire pipeline → machine)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import helpers
import pytest
from helpers import DONE, INSTANT, Collect, LeakCheck, chunk, params, sse
from hypothesis import given, settings
from hypothesis import strategies as st

import fsm_agent
from fsm_agent._internal.context import RequestContext
from fsm_agent._internal.events import FinishReason, Start, StreamEnd, ToolCallDelta
from fsm_agent._internal.providers.openai_chat import ChatTranslator
from fsm_agent._internal.request import RequestMachine
from fsm_agent._internal.wire.pipeline import WirePipeline
from fsm_agent.testing import (
    ChatShape,
    Emulator,
    Refusal,
    Scenario,
    Text,
    ToolCall,
    Usage,
)

leaks = helpers.leaks  # the fixture, shared from tests/helpers.py

ARGS = (
    '{"path": "docs/naïve-文件.md", "text": "héllo wörld 😀🎉 — ünïcødé ✓ 日本語テキスト", '
    '"emoji": "👩‍💻🧑🏽‍🚀", "ascii": "plain ascii text, quotes \\" and backslash \\\\", "n": [1, 2, 3]}'
)


def run(leaks: LeakCheck, scenario: Scenario | tuple[Scenario, ...], **kwargs: Any) -> tuple[Any, Collect]:
    scenarios = scenario if isinstance(scenario, tuple) else (scenario,)
    leaks.emulator.script(*scenarios)
    got = Collect()
    session = kwargs.pop("session", None) or fsm_agent.Session(backoff=INSTANT)
    client = leaks.client()
    result = session.stream(client, params(), **got.callbacks(), **kwargs)
    leaks.assert_clean()
    return result, got


# -- ACC-1 / ACC-5 / ACC-7: text, reasoning, usage, identity ----------------------------------------


def test_text_answer(leaks: LeakCheck) -> None:
    text = "The quick brown fox jumps over the lazy dog, twice: naïve café 😀."
    result, got = run(leaks, Scenario.build(text, usage=Usage(11, 7, cached_tokens=3), id="chatcmpl-x1"))
    assert result.content == text
    assert got.texts and all(isinstance(piece, str) and piece for piece in got.texts)
    assert got.text == text
    assert result.finish_reason == "stop"
    assert result.tool_calls == []
    assert result.reasoning is None and result.refusal is None
    assert result.usage == fsm_agent.Usage(11, 7, 18, 3)
    assert result.model == "gpt-4.1-mini" and result.id == "chatcmpl-x1"
    assert (result.attempts, result.streamed, result.stub) == (1, True, False)
    assert got.statuses == []  # CB-5
    message = result.to_chat_completion().choices[0].message
    assert message.content == text and message.tool_calls is None


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_then_text(leaks: LeakCheck, field: str) -> None:
    scenario = Scenario.build(
        "Answer.", reasoning="Let me think about this step by step.", chat=ChatShape(reasoning_field=field)
    )
    result, got = run(leaks, scenario)
    assert result.reasoning == "Let me think about this step by step."
    assert "".join(got.reasoning) == result.reasoning and len(got.reasoning) > 1
    assert result.content == "Answer."
    # reasoning is delivered before the answer, and never through on_text
    kinds = [kind for kind, _ in got.order]
    assert kinds.index("text") > max(i for i, kind in enumerate(kinds) if kind == "reasoning")
    assert result.to_chat_completion().choices[0].message.reasoning_content == result.reasoning


def test_usage_from_choiceless_last_chunk(leaks: LeakCheck) -> None:
    result, _ = run(leaks, Scenario.build("Hello.", usage=Usage(100, 5, cached_tokens=40)))
    body = leaks.emulator.requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert result.usage == fsm_agent.Usage(100, 5, 105, 40)
    assert result.finish_reason == "stop"


def test_finish_reason_and_usage_in_raw_choiceless_chunks(leaks: LeakCheck) -> None:
    """ACC-7: finish_reason read from a chunk with nothing else; usage from a chunk with `choices: []`."""
    frames = (
        sse(chunk({"content": "Hi"})),
        sse({"id": "chatcmpl-raw", "choices": [{"index": 0, "finish_reason": "length"}]}),
        sse(chunk(choices=False, usage={"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4})),
        DONE,
    )
    result, _ = run(leaks, Scenario(raw=frames))
    assert (result.content, result.finish_reason) == ("Hi", "length")
    assert result.usage == fsm_agent.Usage(3, 1, 4, None)


# -- ACC-6: refusal ------------------------------------------------------------------------------


def test_refusal_only_is_an_answer(leaks: LeakCheck) -> None:
    result, got = run(leaks, Scenario.build(refusal="I can't help with that request."))
    assert result.refusal == "I can't help with that request."
    assert result.content == result.refusal
    assert result.finish_reason == "content_filter"
    assert result.attempts == 1 and not result.stub
    assert got.statuses == []
    assert result.to_chat_completion().choices[0].message.refusal == result.refusal


def test_refusal_beside_content(leaks: LeakCheck) -> None:
    scenario = Scenario(steps=(Text("Here is part of it."), Refusal("I won't do the rest.")))
    result, _ = run(leaks, scenario)
    assert result.content == "Here is part of it."
    assert result.finish_reason == "stop"
    assert result.refusal == "I won't do the rest."
    assert result.provider_data["refusal"] == "I won't do the rest."


# -- ACC-8 / ACC-2 / ACC-3: shapes of compatible hosts ---------------------------------------------


def test_sparse_deltas(leaks: LeakCheck) -> None:
    scenario = Scenario.build(
        "Sparse text here.",
        reasoning="hm",
        tool_calls=[ToolCall("lookup", '{"q": "x"}')],
        chat=ChatShape(sparse=True),
    )
    result, got = run(leaks, scenario)
    assert result.content == "Sparse text here."
    assert result.reasoning == "hm"
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("lookup", '{"q": "x"}')]
    assert result.finish_reason == "tool_calls"
    assert got.tools == [(0, "lookup")]


def test_list_content_flattened_before_and_after_a_tool_call(leaks: LeakCheck) -> None:
    scenario = Scenario(
        steps=(
            Text("Before the call. "),
            ToolCall("write_file", '{"path": "a.txt"}'),
            Text("After the call."),
        ),
        chat=ChatShape(content_blocks=True),
    )
    result, got = run(leaks, scenario)
    assert all(isinstance(piece, str) for piece in got.texts)
    assert got.text == "Before the call. After the call."
    assert result.content == "Before the call. After the call."
    assert [c.name for c in result.tool_calls] == ["write_file"]
    # the text after the tool call was delivered after on_tool_call (CB-3)
    kinds = [kind for kind, _ in got.order]
    assert kinds.index("tool") < len(kinds) - 1 and kinds[-1] == "text"


def test_parallel_tool_calls(leaks: LeakCheck) -> None:
    calls = [
        ToolCall("read_file", '{"path": "a.txt"}', id="call_a"),
        ToolCall("read_file", '{"path": "b.txt"}', id="call_b"),
        ToolCall("get_time", '{"tz": "Europe/Zurich"}', id="call_c", arg_fragment=3),
    ]
    result, got = run(leaks, Scenario.build("Reading both.", tool_calls=calls))
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("call_a", "read_file", '{"path": "a.txt"}'),
        ("call_b", "read_file", '{"path": "b.txt"}'),
        ("call_c", "get_time", '{"tz": "Europe/Zurich"}'),
    ]
    assert got.tools == [(0, "read_file"), (1, "read_file"), (2, "get_time")]
    assert result.finish_reason == "tool_calls"
    view = result.to_chat_completion().choices[0].message.tool_calls
    assert [call.function.name for call in view] == ["read_file", "read_file", "get_time"]


def test_arguments_before_name(leaks: LeakCheck) -> None:
    scenario = Scenario.build(
        tool_calls=[ToolCall("search", '{"query": "fsm"}', arg_fragment=4)],
        chat=ChatShape(args_before_name=True),
    )
    result, got = run(leaks, scenario)
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("search", '{"query": "fsm"}')]
    assert got.tools == [(0, "search")]  # fired once, when the name became known


def test_name_resent_in_full_is_not_appended(leaks: LeakCheck) -> None:
    frames = (
        sse(chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "run", "arguments": ""}}]})),
        sse(chunk({"tool_calls": [{"index": 0, "function": {"name": "run", "arguments": '{"a"'}}]})),
        sse(
            chunk(
                {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "run", "arguments": ": 1}"}}]}
            )
        ),
        sse(chunk({}, finish_reason="tool_calls")),
        DONE,
    )
    result, got = run(leaks, Scenario(raw=frames))
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [("c1", "run", '{"a": 1}')]
    assert got.tools == [(0, "run")]


def test_integer_tool_ids_become_strings(leaks: LeakCheck) -> None:
    scenario = Scenario.build(
        tool_calls=[ToolCall("a", "{}"), ToolCall("b", '{"x": 1}')], chat=ChatShape(integer_tool_ids=True)
    )
    result, _ = run(leaks, scenario)
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("0", "a", "{}"),
        ("1", "b", '{"x": 1}'),
    ]
    assert all(isinstance(c.id, str) for c in result.tool_calls)


def test_gemini_no_index_and_extra_content(leaks: LeakCheck) -> None:
    extra = {"google": {"thought_signature": "c2lnbmF0dXJl"}}
    scenario = Scenario.build(
        "Calling tools.",
        tool_calls=[
            ToolCall("get_weather", '{"city": "Zürich"}', id="g1", extra_content=extra),
            ToolCall("get_time", '{"tz": "CET"}', id="g2"),
        ],
        chat=ChatShape(no_tool_index=True),
    )
    result, got = run(leaks, scenario)
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("g1", "get_weather", '{"city": "Zürich"}'),
        ("g2", "get_time", '{"tz": "CET"}'),
    ]
    assert result.tool_calls[0].extra == {"extra_content": extra}
    assert result.tool_calls[1].extra is None
    assert [name for _, name in got.tools] == ["get_weather", "get_time"]


# -- ACC-4: byte-exact arguments ---------------------------------------------------------------------


@pytest.mark.parametrize("size", [len(ARGS), 64, 7, 3, 1])
def test_arguments_byte_exact_for_fragment_size(leaks: LeakCheck, size: int) -> None:
    scenario = Scenario.build("Writing.", tool_calls=[ToolCall("write_file", ARGS, arg_fragment=size)])
    result, _ = run(leaks, scenario)
    assert result.tool_calls[0].arguments.encode() == ARGS.encode()
    assert json.loads(result.tool_calls[0].arguments) == json.loads(ARGS)


def _escaped_fragments(text: str, size: int) -> list[str]:
    """`text` JSON-escaped with ensure_ascii (emoji as surrogate pairs), cut every `size` UTF-16 units."""
    units = text.encode("utf-16-le", "surrogatepass")
    pieces = [units[i : i + 2 * size] for i in range(0, len(units), 2 * size)]
    return [json.dumps(p.decode("utf-16-le", "surrogatepass"), ensure_ascii=True) for p in pieces]


@pytest.mark.parametrize("size", [64, 7, 3, 1])
def test_arguments_byte_exact_when_fragments_split_surrogate_pairs(leaks: LeakCheck, size: int) -> None:
    """Hosts that escape non-ASCII send emoji as \\ud83d\\ude00; a fragment may end between the halves.
    The frames also reach the client split inside multi-byte UTF-8 characters of the raw bytes."""
    frames = [
        sse(chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "w", "arguments": ""}}]}))
    ]
    for escaped in _escaped_fragments(ARGS, size):
        frames.append(
            (
                '{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":'
                f'{{"arguments":{escaped}}}}}]}}}}]}}'
            )
            .join(["data: ", "\n\n"])
            .encode()
        )
    frames.append(sse(chunk({}, finish_reason="tool_calls")))
    frames.append(DONE)
    result, _ = run(leaks, Scenario(raw=tuple(frames)))
    assert result.tool_calls[0].arguments.encode() == ARGS.encode()


def test_arguments_byte_exact_with_utf8_split_across_writes(leaks: LeakCheck) -> None:
    """Literal UTF-8 frames written 5 bytes at a time: writes end inside multi-byte characters."""
    head = {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "w", "arguments": ""}}]}
    body = b"".join(
        [_literal(chunk(head))]
        + [
            _literal(chunk({"tool_calls": [{"index": 0, "function": {"arguments": ARGS[i : i + 5]}}]}))
            for i in range(0, len(ARGS), 5)
        ]
    )
    assert any(b >= 0x80 for b in body)
    writes = tuple(body[i : i + 5] for i in range(0, len(body), 5))
    frames = (*writes, sse(chunk({}, finish_reason="tool_calls")), DONE)
    result, _ = run(leaks, Scenario(raw=frames))
    assert result.tool_calls[0].arguments.encode() == ARGS.encode()


def _literal(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


# hypothesis: any split of the argument text (at the character level and in the transport bytes)
# assembles byte-identical. Runs the real wire pipeline and machine, without sockets.
_ALPHABET = st.sampled_from(list('ab {}":,\\é文😀🎉\u200d\n'))


def _assemble(text: str, cuts: list[int], byte_cuts: list[int], escaped: bool) -> str:
    bounds = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    frames = [sse(chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "t"}}]}))]
    for piece in pieces:
        delta = {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
        payload = json.dumps(chunk(delta), ensure_ascii=escaped)
        frames.append(f"data: {payload}\n\n".encode())
    frames.append(sse(chunk({}, finish_reason="tool_calls")))
    frames.append(DONE)
    wire = b"".join(frames)
    points = sorted({0, len(wire), *(c % (len(wire) + 1) for c in byte_cuts)})
    machine = RequestMachine(RequestContext(), request_id="hypothesis")
    machine.feed(Start(), 0.0)
    pipeline = WirePipeline(ChatTranslator())
    for a, b in itertools.pairwise(points):
        for event in pipeline.feed(wire[a:b]):
            machine.feed(event, 0.0)
    for event in pipeline.end():
        machine.feed(event, 0.0)
    assert machine.result is not None
    return machine.result.tool_calls[0].arguments


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(_ALPHABET, min_size=1, max_size=40),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=12),
    byte_cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12),
    escaped=st.booleans(),
)
def test_hypothesis_arbitrary_splits_assemble_byte_exact(
    text: str, cuts: list[int], byte_cuts: list[int], escaped: bool
) -> None:
    assert _assemble(text, cuts, byte_cuts, escaped).encode() == text.encode()


@settings(max_examples=40, deadline=None)
@given(
    text=st.text(st.sampled_from(list("xé😀🎉")), min_size=1, max_size=16),
    unit_cuts=st.lists(st.integers(min_value=0, max_value=64), max_size=8),
)
def test_hypothesis_surrogate_half_splits_through_machine(text: str, unit_cuts: list[int]) -> None:
    """Fragments cut between the two UTF-16 halves of an emoji (escaped JSON) still re-pair."""
    units = text.encode("utf-16-le", "surrogatepass")
    n = len(units) // 2
    points = sorted({0, n, *(c % (n + 1) for c in unit_cuts)})
    machine = RequestMachine(RequestContext(), request_id="surrogates")
    machine.feed(Start(), 0.0)
    for a, b in itertools.pairwise(points):
        piece = units[2 * a : 2 * b].decode("utf-16-le", "surrogatepass")
        machine.feed(ToolCallDelta(index=0, id="c", name="t", arguments=piece), 0.0)
    machine.feed(FinishReason("tool_calls"), 0.0)
    machine.feed(StreamEnd(frames=1), 0.0)
    assert machine.result is not None
    assert machine.result.tool_calls[0].arguments.encode() == text.encode()


def test_surrogate_halves_in_separate_events_rejoin() -> None:
    machine = RequestMachine(RequestContext(), request_id="pair")
    machine.feed(Start(), 0.0)
    for piece in ['{"e": "', "\ud83d", "\ude00", '"}']:
        machine.feed(ToolCallDelta(index=0, id="c", name="t", arguments=piece), 0.0)
    machine.feed(FinishReason("tool_calls"), 0.0)
    machine.feed(StreamEnd(frames=5), 0.0)
    assert machine.result is not None
    assert machine.result.tool_calls[0].arguments == '{"e": "😀"}'


def test_emulator_fixture_is_fresh(emulator: Emulator) -> None:
    assert emulator.requests == [] and emulator.open_connections == 0
