"""Shapes real provider streams send (docs/behaviour.md, "Shapes of real streams"): each played by
the emulator's `real_streams` builders over loopback HTTP to the real SDK clients, sync and async,
and read as the provider's own SDK reads it — a stream the SDK accepts is never refused, an action
the provider waits for is never "stop" — plus one differential test: for every fixture, fsm_agent's
reading equals the SDK stream helper's (`ChatCompletionStreamState`, `responses.stream()`,
`messages.stream().get_final_message()`, google-genai's chunks folded), or differs only where a rule
of docs/behaviour.md says why."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
from google import genai
from helpers import INSTANT
from openai.lib.streaming.chat import ChatCompletionStreamState

import fsm_agent
from fsm_agent._internal.partial_json import PartialJson
from fsm_agent.testing import Emulator, Scenario, real_streams

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic on the SDK's own typing

MODES = ["sync", "async"]
MESSAGES: Any = [{"role": "user", "content": "go"}]
PARAMS: dict[str, dict[str, Any]] = {
    "chat_completions": {"model": "emu-real", "messages": MESSAGES},
    "responses": {"model": "gpt-5", "input": "go"},
    "anthropic_messages": {"model": "claude-emulated", "max_tokens": 64, "messages": MESSAGES},
    "gemini_generate_content": {"model": "gemini-2.5-pro", "contents": "go"},
}


def _sync_client(api: str, emu: Emulator) -> Any:
    if api in ("chat_completions", "responses"):
        return openai.OpenAI(base_url=emu.openai_base_url, api_key="sk-test", max_retries=0)
    if api == "anthropic_messages":
        return anthropic.Anthropic(base_url=emu.anthropic_base_url, api_key="sk-ant-test", max_retries=0)
    return genai.Client(api_key="AIza-test", http_options={"base_url": emu.gemini_base_url})


def _async_client(api: str, emu: Emulator) -> Any:
    if api in ("chat_completions", "responses"):
        return openai.AsyncOpenAI(base_url=emu.openai_base_url, api_key="sk-test", max_retries=0)
    if api == "anthropic_messages":
        return anthropic.AsyncAnthropic(base_url=emu.anthropic_base_url, api_key="sk-ant-test", max_retries=0)
    return genai.Client(api_key="AIza-test", http_options={"base_url": emu.gemini_base_url}).aio


def stream(
    emu: Emulator, api: str, scenario: Scenario, mode: str, **callbacks: Any
) -> fsm_agent.StreamResult:
    """The scenario through fsm_agent with the real SDK client of `api` (retries left at the
    default, so a refused stream would show as more than one request)."""
    emu.script(scenario, then=Scenario.build("a retry was made"))
    session = fsm_agent.Session(backoff=INSTANT)
    if mode == "sync":
        client = _sync_client(api, emu)
        try:
            return session.stream(client, PARAMS[api], api=api, **callbacks)
        finally:
            client.close()

    async def run() -> fsm_agent.StreamResult:
        client = _async_client(api, emu)
        try:
            return await session.astream(client, PARAMS[api], api=api, **callbacks)
        finally:
            await (client.aclose() if hasattr(client, "aclose") else client.close())

    return asyncio.run(run())


def one_request(emu: Emulator) -> None:
    assert len(emu.requests) == 1, "the stream was refused and retried"


GROQ_ERROR = {
    "message": "Failed to call a function. Please adjust your prompt. See 'failed_generation'.",
    "type": "invalid_request_error",
    "code": "tool_use_failed",
    "failed_generation": '<function=get_weather{"city": "Paris"}</function>',
}
ACTION_ITEMS: list[dict[str, Any]] = [
    {
        "type": "apply_patch_call",
        "id": "apc_1",
        "call_id": "call_patch",
        "status": "completed",
        "operation": {"type": "update_file", "path": "src/app.py", "diff": "@@\n-a\n+b\n"},
    },
    {
        "type": "local_shell_call",
        "id": "lsh_1",
        "call_id": "call_local",
        "status": "completed",
        "action": {"type": "exec", "command": ["ls", "-la"], "env": {}, "timeout_ms": 5000},
    },
    {
        "type": "shell_call",
        "id": "sh_1",
        "call_id": "call_shell",
        "status": "completed",
        "action": {"commands": ["pytest -q"], "timeout_ms": 60000, "max_output_length": 4096},
    },
    {
        "type": "computer_call",
        "id": "cu_1",
        "call_id": "call_computer",
        "status": "completed",
        "action": {"type": "click", "button": "left", "x": 120, "y": 48},
        "pending_safety_checks": [],
    },
    {
        "type": "custom_tool_call",
        "id": "ctc_1",
        "call_id": "call_custom",
        "name": "run_sql",
        "input": "SELECT 1;",
    },
    {
        "type": "mcp_approval_request",
        "id": "mcpr_1",
        "name": "delete_row",
        "arguments": '{"table": "users", "id": 7}',
        "server_label": "db",
    },
]
TOOL_SEARCH = {
    "type": "tool_search_call",
    "id": "ts_1",
    "call_id": None,
    "arguments": {"query": "weather tools", "limit": 3},
    "execution": "server",
    "status": "completed",
}
WEATHER_ARGS = {
    "location": "Boston, MA",
    "days": 3,
    "units": {"temp": "C"},
    "tags": ["rain", "wind"],
    "ok": True,
}

# Every fixture: (api, scenario). One (or two) per class of the issue this file guards.
FIXTURES: dict[str, tuple[str, Scenario]] = {
    "1-whole-message-start": (
        "anthropic_messages",
        real_streams.anthropic_whole_message_start([("run_query", {"sql": "select 1"}), ("ping", {})]),
    ),
    "2-gemini-partial-args": (
        "gemini_generate_content",
        real_streams.gemini_streamed_call("get_weather", WEATHER_ARGS),
    ),
    "3-tool-search-then-function": (
        "responses",
        real_streams.responses_items([TOOL_SEARCH], function_calls=[("get_weather", '{"city": "Paris"}')]),
    ),
    "4-action-items": ("responses", real_streams.responses_items(ACTION_ITEMS)),
    "5-mistral-thinking": (
        "chat_completions",
        real_streams.chat_thinking_blocks("The user wants 2+2. That is 4.", "The answer is 4."),
    ),
    "6-tool-without-input": (
        "anthropic_messages",
        real_streams.anthropic_tool_without_input("now", text="Checking."),
    ),
    "7-max-tokens-in-tool-input": (
        "anthropic_messages",
        real_streams.anthropic_cut_at_max_tokens(
            "write_file", '{"path": "a.txt", "text": "hello wo', text="Saving."
        ),
    ),
    "7-max-tokens-no-block-stop": (
        "anthropic_messages",
        real_streams.anthropic_cut_at_max_tokens("write_file", '{"path": "a.txt", "te', block_stop=False),
    ),
    "8-error-after-text": (
        "chat_completions",
        real_streams.chat_error_after_text("Let me check the weather.", GROQ_ERROR),
    ),
    "8-error-after-finish": (
        "chat_completions",
        real_streams.chat_error_after_finish(
            "Done.", GROQ_ERROR, {"prompt_tokens": 31, "completion_tokens": 2, "total_tokens": 33}
        ),
    ),
    "9-integer-chunk-id": ("chat_completions", real_streams.chat_integer_id("Hello there, friend.")),
    "legacy-function-call": (
        "chat_completions",
        real_streams.chat_legacy_function_call("get_weather", '{"city": "Zürich", "days": 2}'),
    ),
}


# -- one test per class, sync and async -------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_1_message_start_holding_the_whole_answer_is_the_answer(emulator: Emulator, mode: str) -> None:
    api, scenario = FIXTURES["1-whole-message-start"]
    result = stream(emulator, api, scenario, mode)
    one_request(emulator)
    assert [(c.id, c.name, json.loads(c.arguments)) for c in result.tool_calls] == [
        ("toolu_emu0", "run_query", {"sql": "select 1"}),
        ("toolu_emu1", "ping", {}),
    ]
    assert (result.finish_reason, result.stub, result.attempts) == ("tool_calls", False, 1)
    assert result.usage is not None and (result.usage.input_tokens, result.usage.output_tokens) == (12, 30)
    assert result.raw.content[0].caller.type == "code_execution_20250825"  # the block kept whole


@pytest.mark.parametrize("mode", MODES)
def test_2_gemini_streamed_function_arguments_assembled_by_path(emulator: Emulator, mode: str) -> None:
    api, scenario = FIXTURES["2-gemini-partial-args"]
    seen: list[Any] = []
    result = stream(emulator, api, scenario, mode, on_tool_args=lambda index, name, value: seen.append(value))
    one_request(emulator)
    (call,) = result.tool_calls
    assert call.name == "get_weather" and json.loads(call.arguments) == WEATHER_ARGS
    assert (result.finish_reason, result.attempts) == ("tool_calls", 1)
    assert len(seen) > 3 and seen[-1] == WEATHER_ARGS  # ACC-11: the arguments seen growing
    assert {"location": "Bost"} in seen or any(v.get("location", "").startswith("Bo") for v in seen[:-1])


@pytest.mark.parametrize("mode", MODES)
def test_3_responses_item_that_is_not_a_function_call_is_not_checked_as_one(
    emulator: Emulator, mode: str
) -> None:
    api, scenario = FIXTURES["3-tool-search-then-function"]
    result = stream(emulator, api, scenario, mode)
    one_request(emulator)
    assert [(c.name, c.arguments, c.type) for c in result.tool_calls] == [
        ("get_weather", '{"city": "Paris"}', "function")
    ]
    assert result.finish_reason == "tool_calls"
    assert result.raw.output[0].type == "tool_search_call"  # passed through to raw


@pytest.mark.parametrize("mode", MODES)
def test_4_responses_actions_for_the_client_are_tool_calls(emulator: Emulator, mode: str) -> None:
    api, scenario = FIXTURES["4-action-items"]
    named: list[tuple[int, str]] = []
    result = stream(
        emulator, api, scenario, mode, on_tool_call=lambda index, name: named.append((index, name))
    )
    one_request(emulator)
    assert result.finish_reason == "tool_calls"  # never "stop": the provider waits for the client
    assert [(c.type, c.id, c.name) for c in result.tool_calls] == [
        ("apply_patch_call", "call_patch", "apply_patch"),
        ("local_shell_call", "call_local", "local_shell"),
        ("shell_call", "call_shell", "shell"),
        ("computer_call", "call_computer", "computer"),
        ("custom_tool_call", "call_custom", "run_sql"),
        ("mcp_approval_request", "mcpr_1", "delete_row"),
    ]
    inputs = [json.loads(c.arguments) for c in result.tool_calls]
    assert inputs[0] == {"operation": ACTION_ITEMS[0]["operation"]}
    assert inputs[2] == {"action": ACTION_ITEMS[2]["action"]}
    assert inputs[4] == {"input": "SELECT 1;"}
    assert inputs[5] == {"arguments": '{"table": "users", "id": 7}', "server_label": "db"}
    assert [name for _, name in named] == [c.name for c in result.tool_calls]


@pytest.mark.parametrize("mode", MODES)
def test_5_mistral_thinking_blocks_are_reasoning(emulator: Emulator, mode: str) -> None:
    api, scenario = FIXTURES["5-mistral-thinking"]
    texts: list[str] = []
    result = stream(emulator, api, scenario, mode, on_text=texts.append)
    assert result.reasoning == "The user wants 2+2. That is 4."
    assert result.content == "The answer is 4." == "".join(texts)
    assert (result.finish_reason, result.attempts) == ("stop", 1)


@pytest.mark.parametrize("mode", MODES)
def test_6_tool_without_arguments_gives_an_empty_object(emulator: Emulator, mode: str) -> None:
    api, scenario = FIXTURES["6-tool-without-input"]
    result = stream(emulator, api, scenario, mode)
    (call,) = result.tool_calls
    assert (call.name, call.arguments) == ("now", "{}")
    assert (result.content, result.finish_reason) == ("Checking.", "tool_calls")


@pytest.mark.parametrize("fixture", ["7-max-tokens-in-tool-input", "7-max-tokens-no-block-stop"])
@pytest.mark.parametrize("mode", MODES)
def test_7_max_tokens_inside_a_tool_input_is_a_complete_answer(
    emulator: Emulator, mode: str, fixture: str
) -> None:
    api, scenario = FIXTURES[fixture]
    statuses: list[str] = []
    result = stream(emulator, api, scenario, mode, on_status=statuses.append)
    one_request(emulator)  # no retry: two more generations would be billed for the same answer
    (call,) = result.tool_calls
    assert call.incomplete and call.name == "write_file"
    assert call.arguments.startswith('{"path": "a.txt", "te')  # kept as sent
    assert (result.finish_reason, result.stub, result.attempts) == ("length", False, 1)
    assert result.usage is not None and (result.usage.input_tokens, result.usage.output_tokens) == (30, 64)
    assert not any("stall" in status.lower() for status in statuses)


@pytest.mark.parametrize("mode", MODES)
def test_8_in_stream_error_after_text_keeps_its_words(emulator: Emulator, mode: str) -> None:
    api, scenario = FIXTURES["8-error-after-text"]
    result = stream(emulator, api, scenario, mode)
    assert result.stub and result.content == "Let me check the weather."
    assert result.error is not None and result.error["code"] == "tool_use_failed"
    assert GROQ_ERROR["message"] in result.error["message"]
    assert result.error["body"]["failed_generation"] == GROQ_ERROR["failed_generation"]


@pytest.mark.parametrize("mode", MODES)
def test_8_error_chunk_after_the_finish_keeps_its_usage(emulator: Emulator, mode: str) -> None:
    api, scenario = FIXTURES["8-error-after-finish"]
    result = stream(emulator, api, scenario, mode)
    one_request(emulator)
    assert (result.content, result.finish_reason, result.stub) == ("Done.", "stop", False)
    assert result.usage == fsm_agent.Usage(31, 2, 33, None)
    assert result.error is not None and result.error["code"] == "tool_use_failed"


@pytest.mark.parametrize("mode", MODES)
def test_9_integer_chunk_id_is_read_not_refused(emulator: Emulator, mode: str) -> None:
    api, scenario = FIXTURES["9-integer-chunk-id"]
    result = stream(emulator, api, scenario, mode)
    one_request(emulator)
    assert (result.content, result.finish_reason, result.id) == ("Hello there, friend.", "stop", "1234567890")


# -- the differential test -------------------------------------------------------------------------------
Reading = dict[str, Any]


def _parsed(arguments: str, incomplete: bool) -> Any:
    if not incomplete:
        return json.loads(arguments)
    reader = PartialJson()
    reader.feed(arguments)
    return reader.value()


def ours(result: fsm_agent.StreamResult) -> Reading:
    usage = result.usage
    return {
        "content": result.content or None,
        "reasoning": result.reasoning or None,
        "tool_calls": [(c.name, _parsed(c.arguments, c.incomplete)) for c in result.tool_calls],
        "finish_reason": result.finish_reason,
        "usage": None if usage is None else (usage.input_tokens, usage.output_tokens),
        "error": result.error["body"]["message"] if result.error else None,
    }


def _error_reading(exc: Exception) -> Reading:
    return {"error": getattr(exc, "message", str(exc))}


def sdk_chat(emu: Emulator) -> Reading:
    client = openai.OpenAI(base_url=emu.openai_base_url, api_key="sk-test", max_retries=0)
    state = ChatCompletionStreamState()
    try:
        for chunk in client.chat.completions.create(**PARAMS["chat_completions"], stream=True):
            state.handle_chunk(chunk)
    except openai.APIError as exc:
        return _error_reading(exc)
    finally:
        client.close()
    final = state.get_final_completion()
    choice = final.choices[0]
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls or []]
    legacy = choice.message.function_call
    if legacy is not None:
        calls.append((legacy.name, json.loads(legacy.arguments)))
    return {
        "content": choice.message.content or None,
        "reasoning": None,
        "tool_calls": calls,
        "finish_reason": choice.finish_reason,
        "usage": None if final.usage is None else (final.usage.prompt_tokens, final.usage.completion_tokens),
        "error": None,
    }


_ANTHROPIC_STOPS = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}


def sdk_anthropic(emu: Emulator) -> Reading:
    client = anthropic.Anthropic(base_url=emu.anthropic_base_url, api_key="sk-ant-test", max_retries=0)
    try:
        with client.messages.stream(**PARAMS["anthropic_messages"]) as events:
            message = events.get_final_message()
    finally:
        client.close()
    text = "".join(b.text for b in message.content if b.type == "text")
    thinking = "".join(b.thinking for b in message.content if b.type == "thinking")
    return {
        "content": text or None,
        "reasoning": thinking or None,
        "tool_calls": [(b.name, b.input) for b in message.content if b.type == "tool_use"],
        "finish_reason": _ANTHROPIC_STOPS.get(str(message.stop_reason), message.stop_reason),
        "usage": (message.usage.input_tokens, message.usage.output_tokens),
        "error": None,
    }


def _sdk_action(item: Any) -> tuple[str, Any] | None:
    """The SDK's typed item as the (name, input) docs/behaviour.md says a client action becomes."""
    names = {
        "apply_patch_call": "apply_patch",
        "local_shell_call": "local_shell",
        "shell_call": "shell",
        "computer_call": "computer",
        "custom_tool_call": "custom_tool",
        "mcp_approval_request": "mcp_approval",
    }
    if item.type not in names:
        return None
    fields = item.model_dump(exclude_unset=True)
    name = fields.get("name") or names[item.type]
    bookkeeping = {"type", "id", "call_id", "status", "created_by", "name"}
    return name, {key: value for key, value in fields.items() if key not in bookkeeping}


def sdk_responses(emu: Emulator) -> Reading:
    client = openai.OpenAI(base_url=emu.openai_base_url, api_key="sk-test", max_retries=0)
    try:
        with client.responses.stream(**PARAMS["responses"]) as events:
            final = events.get_final_response()
    finally:
        client.close()
    calls: list[tuple[str, Any]] = []
    for item in final.output:
        if item.type == "function_call":
            calls.append((item.name, json.loads(item.arguments)))
        else:
            action = _sdk_action(item)
            if action is not None:
                calls.append(action)
    usage = final.usage
    return {
        "content": final.output_text or None,
        "reasoning": None,
        "tool_calls": calls,
        # The SDK has no finish reason: a completed response with calls waits for the client.
        "finish_reason": "tool_calls" if calls else "stop",
        "usage": None if usage is None else (usage.input_tokens, usage.output_tokens),
        "error": None,
    }


def _put(target: dict[str, Any], path: str, value: Any, append: bool) -> None:
    """Test oracle: set `value` at a simple JSON path (`$.a.b[0].c`) of `target`."""
    keys: list[Any] = []
    for part in path[2:].replace("]", "").replace("[", ".").split("."):
        keys.append(int(part) if part.isdigit() else part)
    node: Any = target
    for key, following in itertools.pairwise(keys):
        empty: Any = [] if isinstance(following, int) else {}
        if isinstance(node, list):
            while len(node) <= key:
                node.append(empty)
            node = node[key]
        else:
            node = node.setdefault(key, empty)
    last = keys[-1]
    if isinstance(node, list):
        while len(node) <= last:
            node.append(None)
        node[last] = node[last] + value if append and isinstance(node[last], str) else value
    else:
        node[last] = node[last] + value if append and isinstance(node.get(last), str) else value


def sdk_gemini(emu: Emulator) -> Reading:
    """google-genai's chunks folded: text joined, a named call opens a call, its partial arguments
    (typed by the SDK, not assembled by it) set by path, the last finish reason and usage."""
    client = genai.Client(api_key="AIza-test", http_options={"base_url": emu.gemini_base_url})
    text, calls, finish, usage = "", [], None, None
    continuing: set[str] = set()
    try:
        for chunk in client.models.generate_content_stream(**PARAMS["gemini_generate_content"]):
            candidate = chunk.candidates[0]
            for part in candidate.content.parts or []:
                if part.text:
                    text += part.text
                call = part.function_call
                if call is None:
                    continue
                if call.name:
                    calls.append((call.name, dict(call.args or {})))
                    continuing = set()
                for partial in call.partial_args or []:
                    value = next(
                        (
                            v
                            for v in (partial.string_value, partial.number_value, partial.bool_value)
                            if v is not None
                        ),
                        None,
                    )
                    _put(calls[-1][1], partial.json_path, value, partial.json_path in continuing)
                    if partial.will_continue:
                        continuing.add(partial.json_path)
                    else:
                        continuing.discard(partial.json_path)
            if candidate.finish_reason is not None:
                finish = candidate.finish_reason.value
            if chunk.usage_metadata is not None:
                meta = chunk.usage_metadata
                usage = (meta.prompt_token_count, meta.candidates_token_count)
    finally:
        client.close()
    reason = {"STOP": "tool_calls" if calls else "stop", "MAX_TOKENS": "length"}.get(str(finish), finish)
    return {
        "content": text or None,
        "reasoning": None,
        "tool_calls": calls,
        "finish_reason": reason,
        "usage": usage,
        "error": None,
    }


SDK_READERS: dict[str, Callable[[Emulator], Reading]] = {
    "chat_completions": sdk_chat,
    "anthropic_messages": sdk_anthropic,
    "responses": sdk_responses,
    "gemini_generate_content": sdk_gemini,
}


def where_rules_differ(name: str, mine: Reading, sdk: Reading) -> Reading:
    """The SDK's reading, changed only where a rule of docs/behaviour.md ("Shapes of real
    streams") says fsm_agent reads the stream otherwise, each change named by its rule."""
    expected = dict(sdk)
    if name == "5-mistral-thinking":
        # "Reasoning from whichever field": the SDK types `delta.content` as a string and loses
        # the blocks (content ""); fsm_agent reads thinking blocks as reasoning, text as text.
        assert sdk["content"] is None and sdk["reasoning"] is None
        expected.update(content="The answer is 4.", reasoning="The user wants 2+2. That is 4.")
    elif name.startswith("7-"):
        # "Cut at the output limit": the SDK's partial parse drops a string cut short; fsm_agent
        # keeps the arguments as sent (read here as far as they came), so it holds more.
        ((sdk_name, sdk_input),) = sdk["tool_calls"]
        ((my_name, my_input),) = mine["tool_calls"]
        assert my_name == sdk_name and sdk_input.items() <= my_input.items()
        expected["tool_calls"] = mine["tool_calls"]
    elif name == "8-error-after-text":
        # "Errors keep their words": the SDK raises and keeps nothing; fsm_agent keeps the text
        # the user saw as a stub (RES-4, `finish_reason` "length") with the provider's words.
        assert set(sdk) == {"error"}
        expected = {**mine, "error": sdk["error"]}
        assert mine["content"] == "Let me check the weather." and mine["finish_reason"] == "length"
    elif name == "8-error-after-finish":
        # The same rule: the answer was whole before the error, so it is kept with its usage.
        assert set(sdk) == {"error"}
        expected = {**mine, "error": sdk["error"]}
        assert mine["content"] == "Done." and mine["usage"] == (31, 2)
    return expected


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_differential_reading_equals_the_sdk_helpers(emulator: Emulator, name: str) -> None:
    api, scenario = FIXTURES[name]
    mine = ours(stream(emulator, api, scenario, "sync"))
    emulator.reset()
    emulator.script(scenario)
    sdk = SDK_READERS[api](emulator)
    assert mine == where_rules_differ(name, mine, sdk)


def test_differential_can_fail(emulator: Emulator) -> None:
    """The comparison sees a difference: a stream whose tool call differs from the fixture's."""
    api, scenario = FIXTURES["6-tool-without-input"]
    mine = ours(stream(emulator, api, scenario, "sync"))
    emulator.reset()
    emulator.script(real_streams.anthropic_tool_without_input("later", text="Checking."))
    assert mine != where_rules_differ("6-tool-without-input", mine, sdk_anthropic(emulator))


# -- the pieces behind the rules, fed directly -----------------------------------------------------------
def _anthropic_frames(scenario: Scenario) -> bytes:
    assert scenario.raw is not None
    return b"".join(f if isinstance(f, bytes) else f.encode() for f in scenario.raw)


def _pipeline_events(data: bytes) -> list[Any]:
    from fsm_agent._internal.events import AttemptFailed
    from fsm_agent._internal.providers.anthropic_events import AnthropicTranslator
    from fsm_agent._internal.wire.pipeline import WirePipeline

    pipeline = WirePipeline(AnthropicTranslator())
    events = pipeline.feed(data)
    if any(isinstance(event, AttemptFailed) for event in events):
        return events  # the driver reads no further after a failure
    return [*events, *pipeline.end()]


@pytest.mark.parametrize("after", ["tool_use", "cut"])
def test_7_input_that_is_not_json_without_the_limit_is_still_prv_a4(after: str) -> None:
    """PRV-A4 holds unless the stop reason says the output limit: the same cut input followed by
    `stop_reason: tool_use`, or by nothing at all, is a `ToolInputError`, after no finish event."""
    from fsm_agent._internal.events import AttemptFailed, FinishReason, StreamEnd

    _, scenario = FIXTURES["7-max-tokens-in-tool-input"]
    data = _anthropic_frames(scenario)
    head, _, _ = data.partition(b"event: message_delta")
    if after == "tool_use":
        data = data.replace(b'"stop_reason":"max_tokens"', b'"stop_reason":"tool_use"')
    else:
        data = head
    events = _pipeline_events(data)
    failed = [event for event in events if isinstance(event, AttemptFailed)]
    assert len(failed) == 1 and isinstance(failed[0].error, fsm_agent.ToolInputError)
    assert events[-1] is failed[0]  # the failure is last: no finish, no end after it
    assert not any(isinstance(event, (FinishReason, StreamEnd)) for event in events)


def test_7_keepalives_do_not_decide_a_pending_input_error() -> None:
    from fsm_agent._internal.events import AttemptFailed, FinishReason, ToolCallEnd

    _, scenario = FIXTURES["7-max-tokens-in-tool-input"]
    data = _anthropic_frames(scenario).replace(
        b"event: message_delta", b'event: ping\ndata: {"type": "ping"}\n\n:\n\nevent: message_delta'
    )
    events = _pipeline_events(data)
    assert not any(isinstance(event, AttemptFailed) for event in events)
    assert FinishReason("length") in events and ToolCallEnd(0) in events


@pytest.mark.parametrize("api", ["anthropic_messages", "responses"])
def test_9_a_numeric_response_id_is_read_as_text(api: str) -> None:
    from fsm_agent._internal.events import ResponseMeta
    from fsm_agent._internal.providers.anthropic_events import AnthropicTranslator
    from fsm_agent._internal.providers.openai_responses import ResponsesTranslator

    if api == "anthropic_messages":
        message = {"id": 42, "type": "message", "model": "m", "content": [], "usage": {"input_tokens": 1}}
        events = AnthropicTranslator().payload({"type": "message_start", "message": message})
    else:
        response = {"id": 42, "object": "response", "model": "m", "status": "in_progress", "output": []}
        events = ResponsesTranslator().payload({"type": "response.created", "response": response})
    assert events[0] == ResponseMeta(id="42", model="m")


@pytest.mark.parametrize("mode", MODES)
def test_7_chat_tool_call_cut_at_length_is_marked_incomplete(emulator: Emulator, mode: str) -> None:
    """The same mark on Chat Completions: `finish_reason: length` inside a tool call's arguments."""
    from fsm_agent.testing.frames import sse

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return sse(
            {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice]}
        )

    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "write_file", "arguments": ""},
    }
    frames = (
        chunk({"role": "assistant", "tool_calls": [call]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path": "a.t'}}]}),
        chunk({}, "length"),
        b"data: [DONE]\n\n",
    )
    result = stream(emulator, "chat_completions", Scenario(raw=frames), mode)
    (cut,) = result.tool_calls
    assert (cut.arguments, cut.incomplete, result.finish_reason) == ('{"path": "a.t', True, "length")
    one_request(emulator)


@pytest.mark.parametrize("mode", MODES)
def test_legacy_function_call_is_a_tool_call(emulator: Emulator, mode: str) -> None:
    """A shape the SDK still reads: `delta.function_call` (the legacy `functions` form) is tool call
    0, not an answer with nothing to do."""
    api, scenario = FIXTURES["legacy-function-call"]
    result = stream(emulator, api, scenario, mode)
    (call,) = result.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Zürich", "days": 2})
    assert (result.finish_reason, result.attempts) == ("function_call", 1)
