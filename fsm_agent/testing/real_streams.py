"""Scenarios that play shapes real providers send and a scripted answer does not (EMU-1).

Each builder returns a `Scenario` of verbatim frames in the provider's published wire
format, so a user's test can drive an SDK client through exactly that shape:

```python
from fsm_agent.testing import Emulator, real_streams

with Emulator() as emu:
    emu.script(real_streams.anthropic_whole_message_start([("run_code", {"code": "1+1"})]))
    ...
```

The shapes (see docs/behaviour.md, "Shapes of real streams"):

- ``anthropic_whole_message_start``: a ``message_start`` whose message already holds the whole
  answer (tool_use blocks with a ``caller``, the stop reason), then only ``message_stop``.
- ``gemini_streamed_call``: Vertex's streamed function-call arguments (``partialArgs`` by JSON
  path, the call opened with ``willContinue`` and closed by an empty ``functionCall``).
- ``responses_items``: a Responses stream of arbitrary output items (``tool_search_call``,
  ``apply_patch_call``, ``shell_call``, ``computer_call``, …) and function calls.
- ``chat_thinking_blocks``: Mistral's ``delta.content`` lists with ``thinking`` blocks.
- ``anthropic_tool_without_input``: a tool call with ``input: {}`` and one empty ``partial_json``.
- ``anthropic_cut_at_max_tokens``: a tool input cut by ``max_tokens``, the stop reason saying so.
- ``chat_error_after_text`` / ``chat_error_after_finish``: an error chunk in the stream, after
  visible text, or after the finish reason with the usage on the same chunk.
- ``chat_integer_id``: chunks whose ``id`` is a JSON integer.
- ``chat_legacy_function_call``: the legacy ``functions`` form, ``delta.function_call``.

Never imports fsm_agent's own translators: these are the provider's bytes, written from its
published formats, for the library to read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from fsm_agent.testing.frames import sse
from fsm_agent.testing.scenario import Scenario

__all__ = [
    "anthropic_cut_at_max_tokens",
    "anthropic_tool_without_input",
    "anthropic_whole_message_start",
    "arguments_text",
    "chat_error_after_finish",
    "chat_error_after_text",
    "chat_integer_id",
    "chat_legacy_function_call",
    "chat_thinking_blocks",
    "gemini_streamed_call",
    "responses_items",
]

_DONE = b"data: [DONE]\n\n"


def _raw(frames: Sequence[bytes]) -> Scenario:
    return Scenario(raw=tuple(frames), frame_delay=0)


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


# -- Anthropic Messages -----------------------------------------------------------------------------
def _anthropic_message(
    content: list[Any], stop_reason: str | None, usage: Mapping[str, int]
) -> dict[str, Any]:
    return {
        "id": "msg_emu_real",
        "type": "message",
        "role": "assistant",
        "model": "claude-emulated",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": dict(usage),
    }


def anthropic_whole_message_start(
    tool_calls: Sequence[tuple[str, Mapping[str, Any]]],
    *,
    text: str | None = None,
    caller: Mapping[str, Any] | None = None,
    usage: Mapping[str, int] | None = None,
) -> Scenario:
    """Programmatic tool calling: `message_start` holds every block (tool_use blocks carrying
    ``caller``, default a code-execution caller) and ``stop_reason: "tool_use"``; then only
    ``message_stop``."""
    content: list[Any] = [{"type": "text", "text": text}] if text else []
    who = dict(caller or {"type": "code_execution_20250825", "tool_id": "srvtoolu_emu0"})
    for number, (name, arguments) in enumerate(tool_calls):
        content.append(
            {
                "type": "tool_use",
                "id": f"toolu_emu{number}",
                "name": name,
                "input": dict(arguments),
                "caller": who,
            }
        )
    message = _anthropic_message(content, "tool_use", usage or {"input_tokens": 12, "output_tokens": 30})
    return _raw(
        [
            sse({"type": "message_start", "message": message}, "message_start"),
            sse({"type": "message_stop"}, "message_stop"),
        ]
    )


def _anthropic_stream(blocks: list[list[bytes]], stop_reason: str, usage: Mapping[str, int]) -> Scenario:
    start = _anthropic_message([], None, {"input_tokens": usage.get("input_tokens", 0), "output_tokens": 1})
    frames = [sse({"type": "message_start", "message": start}, "message_start")]
    for block in blocks:
        frames.extend(block)
    frames.append(
        sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": usage.get("output_tokens", 0)},
            },
            "message_delta",
        )
    )
    frames.append(sse({"type": "message_stop"}, "message_stop"))
    return _raw(frames)


def _text_block(index: int, text: str) -> list[bytes]:
    return [
        sse(
            {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
            "content_block_start",
        ),
        *(
            sse(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": piece},
                },
                "content_block_delta",
            )
            for piece in _pieces(text, 8)
        ),
        sse({"type": "content_block_stop", "index": index}, "content_block_stop"),
    ]


def _tool_block(index: int, name: str, fragments: Sequence[str], stop: bool = True) -> list[bytes]:
    start = {"type": "tool_use", "id": f"toolu_emu{index}", "name": name, "input": {}}
    frames = [
        sse({"type": "content_block_start", "index": index, "content_block": start}, "content_block_start")
    ]
    for fragment in fragments:
        delta = {"type": "input_json_delta", "partial_json": fragment}
        frames.append(
            sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
        )
    if stop:
        frames.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    return frames


def anthropic_tool_without_input(name: str, *, text: str | None = None) -> Scenario:
    """A tool that takes no arguments: its block starts with ``input: {}`` and streams one empty
    ``partial_json``."""
    blocks = [_text_block(0, text)] if text else []
    blocks.append(_tool_block(len(blocks), name, [""]))
    return _anthropic_stream(blocks, "tool_use", {"input_tokens": 20, "output_tokens": 9})


def anthropic_cut_at_max_tokens(
    name: str, arguments_prefix: str, *, text: str | None = None, block_stop: bool = True
) -> Scenario:
    """The answer reaches ``max_tokens`` inside a tool's input: the input streamed so far is
    ``arguments_prefix`` (not whole JSON), the block stops (unless ``block_stop`` is False), and
    ``message_delta`` says ``stop_reason: "max_tokens"`` with the usage."""
    blocks = [_text_block(0, text)] if text else []
    blocks.append(_tool_block(len(blocks), name, _pieces(arguments_prefix, 7), stop=block_stop))
    return _anthropic_stream(blocks, "max_tokens", {"input_tokens": 30, "output_tokens": 64})


# -- Gemini (Vertex) ----------------------------------------------------------------------------------
def _gemini_chunk(parts: list[Any], finish: str | None = None, usage: bool = False) -> bytes:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    chunk: dict[str, Any] = {
        "candidates": [candidate],
        "modelVersion": "gemini-2.5-pro",
        "responseId": "emu-real",
    }
    if usage:
        chunk["usageMetadata"] = {"promptTokenCount": 11, "candidatesTokenCount": 17, "totalTokenCount": 28}
    return sse(chunk)


def _partial_args(value: Any, path: str, piece: int) -> Iterator[dict[str, Any]]:
    """The partial arguments of `value` at `path`, in document order, strings in pieces."""
    if isinstance(value, dict):
        for key, inner in value.items():
            step = f".{key}" if key.isidentifier() else f"['{key}']"
            yield from _partial_args(inner, path + step, piece)
    elif isinstance(value, list):
        for number, inner in enumerate(value):
            yield from _partial_args(inner, f"{path}[{number}]", piece)
    elif isinstance(value, str):
        pieces = _pieces(value, piece)
        for number, text in enumerate(pieces):
            yield {"jsonPath": path, "stringValue": text, "willContinue": number < len(pieces) - 1}
    elif isinstance(value, bool):
        yield {"jsonPath": path, "boolValue": value}
    elif value is None:
        yield {"jsonPath": path, "nullValue": "NULL_VALUE"}
    else:
        yield {"jsonPath": path, "numberValue": value}


def gemini_streamed_call(
    name: str, arguments: Mapping[str, Any], *, text: str | None = None, string_piece: int = 4
) -> Scenario:
    """Vertex's ``streamFunctionCallArguments``: ``functionCall {name, willContinue: true}``, then
    one chunk per partial argument (``functionCall {partialArgs: [...], willContinue: true}``, no
    name; strings split every ``string_piece`` characters), then an empty ``functionCall {}`` and
    the finish reason with the usage."""
    frames = [_gemini_chunk([{"text": text}])] if text else []
    frames.append(_gemini_chunk([{"functionCall": {"name": name, "willContinue": True}}]))
    for partial in _partial_args(dict(arguments), "$", string_piece):
        frames.append(_gemini_chunk([{"functionCall": {"partialArgs": [partial], "willContinue": True}}]))
    frames.append(_gemini_chunk([{"functionCall": {}}], finish="STOP", usage=True))
    return _raw(frames)


# -- OpenAI Responses ---------------------------------------------------------------------------------
def responses_items(
    items: Sequence[Mapping[str, Any]],
    *,
    function_calls: Sequence[tuple[str, str]] = (),
    usage: Mapping[str, int] | None = None,
) -> Scenario:
    """A Responses stream whose output is ``items`` (any item types, each sent whole in
    ``output_item.added`` / ``output_item.done``) followed by function calls (name, arguments)
    streamed as argument deltas; ``response.completed`` holds them all."""
    counter = iter(range(10_000))
    frames: list[bytes] = []

    def send(event: dict[str, Any]) -> None:
        event["sequence_number"] = next(counter)
        frames.append(sse(event, event["type"]))

    base = {"id": "resp_emu_real", "object": "response", "created_at": 1, "model": "gpt-5", "output": []}
    send({"type": "response.created", "response": {**base, "status": "in_progress"}})
    output: list[dict[str, Any]] = []
    for item in items:
        whole = dict(item)
        position = len(output)
        send({"type": "response.output_item.added", "output_index": position, "item": whole})
        send({"type": "response.output_item.done", "output_index": position, "item": whole})
        output.append(whole)
    for number, (name, arguments) in enumerate(function_calls):
        position = len(output)
        item_id = f"fc_emu{number}"
        opened = {
            "type": "function_call",
            "id": item_id,
            "call_id": f"call_emu{number}",
            "name": name,
            "arguments": "",
            "status": "in_progress",
        }
        send({"type": "response.output_item.added", "output_index": position, "item": opened})
        for piece in _pieces(arguments, 5):
            send(
                {
                    "type": "response.function_call_arguments.delta",
                    "output_index": position,
                    "item_id": item_id,
                    "delta": piece,
                }
            )
        send(
            {
                "type": "response.function_call_arguments.done",
                "output_index": position,
                "item_id": item_id,
                "arguments": arguments,
            }
        )
        done = {**opened, "arguments": arguments, "status": "completed"}
        send({"type": "response.output_item.done", "output_index": position, "item": done})
        output.append(done)
    counts = dict(usage or {"input_tokens": 40, "output_tokens": 25})
    counts.setdefault("total_tokens", counts.get("input_tokens", 0) + counts.get("output_tokens", 0))
    final = {**base, "status": "completed", "output": output, "usage": counts}
    send({"type": "response.completed", "response": final})
    return _raw(frames)


# -- Chat Completions (OpenAI-compatible hosts) ---------------------------------------------------------
def _chunk(
    delta: Mapping[str, Any] | None,
    finish: str | None = None,
    *,
    chunk_id: Any = "chatcmpl-emu-real",
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": chunk_id,
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "emu-real",
    }
    body["choices"] = [] if delta is None else [{"index": 0, "delta": dict(delta), "finish_reason": finish}]
    body.update(extra)
    return body


def chat_thinking_blocks(thinking: str, text: str, *, piece: int = 6) -> Scenario:
    """Mistral's reasoning models: ``delta.content`` as a list of blocks, the reasoning in
    ``{"type": "thinking", "thinking": [{"type": "text", "text": …}]}`` blocks, then text blocks."""
    frames = [sse(_chunk({"role": "assistant", "content": ""}))]
    for part in _pieces(thinking, piece):
        block = {"type": "thinking", "thinking": [{"type": "text", "text": part}]}
        frames.append(sse(_chunk({"content": [block]})))
    for part in _pieces(text, piece):
        frames.append(sse(_chunk({"content": [{"type": "text", "text": part}]})))
    frames.append(sse(_chunk({}, "stop")))
    frames.append(sse(_chunk(None, usage={"prompt_tokens": 9, "completion_tokens": 21, "total_tokens": 30})))
    frames.append(_DONE)
    return _raw(frames)


def chat_error_after_text(text: str, error: Mapping[str, Any]) -> Scenario:
    """Visible text, then a chunk holding only ``error`` (Groq's ``tool_use_failed`` shape); no
    finish reason, no ``[DONE]``."""
    frames = [sse(_chunk({"role": "assistant", "content": ""}))]
    frames.extend(sse(_chunk({"content": part})) for part in _pieces(text, 8))
    frames.append(sse({"error": dict(error)}))
    return _raw(frames)


def chat_error_after_finish(text: str, error: Mapping[str, Any], usage: Mapping[str, int]) -> Scenario:
    """A whole answer with its finish reason, then one chunk holding both ``usage`` and an
    ``error``."""
    frames = [sse(_chunk({"role": "assistant", "content": text})), sse(_chunk({}, "stop"))]
    frames.append(sse(_chunk(None, usage=dict(usage), error=dict(error))))
    return _raw(frames)


def chat_integer_id(text: str, *, chunk_id: int = 1234567890) -> Scenario:
    """A plain answer whose chunks carry an integer ``id``."""
    frames = [sse(_chunk({"role": "assistant", "content": ""}, chunk_id=chunk_id))]
    frames.extend(sse(_chunk({"content": part}, chunk_id=chunk_id)) for part in _pieces(text, 8))
    frames.append(sse(_chunk({}, "stop", chunk_id=chunk_id)))
    frames.append(
        sse(
            _chunk(
                None,
                chunk_id=chunk_id,
                usage={"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
            )
        )
    )
    frames.append(_DONE)
    return _raw(frames)


def chat_legacy_function_call(name: str, arguments: str, *, piece: int = 6) -> Scenario:
    """The legacy ``functions`` form: ``delta.function_call`` with the name, then argument pieces,
    then ``finish_reason: "function_call"``."""
    frames = [
        sse(_chunk({"role": "assistant", "content": None, "function_call": {"name": name, "arguments": ""}}))
    ]
    for part in _pieces(arguments, piece):
        frames.append(sse(_chunk({"function_call": {"arguments": part}})))
    frames.append(sse(_chunk({}, "function_call")))
    frames.append(_DONE)
    return _raw(frames)


def arguments_text(arguments: Mapping[str, Any]) -> str:
    """Arguments as the compact JSON text the streamed-argument builders produce."""
    return json.dumps(dict(arguments), ensure_ascii=False, separators=(",", ":"))
