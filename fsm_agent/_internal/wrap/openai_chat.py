"""Chat Completions out: the machine's events as `chat.completion.chunk` payloads, and as the
openai SDK's `ChatCompletionChunk` objects (WR-1, WR-2).

`ChatTranslator` is the API's one translator: events in, the wire's chunk payloads out (what a
proxy sends as `data:` lines). The answer's text streams as it arrives (through the `TextGate`);
tool calls are sent whole once the request has ended — an attempt lost mid call is retried by the
machine, so the caller never holds half a call — then the finish reason and, when the request
asked for it (`stream_options.include_usage`), the usage chunk. A stub's finish chunk has
`finish_reason: "length"` and an `fsm_agent` field saying it is incomplete, and why.
`ChatObjects` builds the SDK's objects: the SDK's own `construct_type` for every payload but the
text chunk, which a `Builder` makes equal to it at a fraction of the cost (bench/bench_wrap.py).
Never performs I/O.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from ..iterate.events import FinalEvent, MarkerEvent, ReasoningEvent, ResetEvent, TextEvent
from ..result import StreamResult
from .construct import Builder
from .text_gate import TextGate

__all__ = ["ChatObjects", "ChatTranslator", "incomplete_note"]


def incomplete_note(result: StreamResult) -> dict[str, Any] | None:
    """WR-2: what a stub's last chunk says of it (None for a whole answer)."""
    if not result.stub:
        return None
    return {
        "incomplete": True,
        "stub": True,
        "dropped_tool_names": list(result.dropped_tool_names),
        "error": result.error,
        "attempts": result.attempts,
    }


class ChatTranslator:
    """The machine's events as Chat Completions chunk payloads."""

    __slots__ = ("_created", "_id", "_meta", "_model", "_started", "_usage", "gate")

    def __init__(self, meta: Any, params: dict[str, Any], *, markers: bool = True) -> None:
        self._meta = meta
        self._model = params.get("model")
        self._created = int(time.time())
        options = params.get("stream_options")
        self._usage = bool(isinstance(options, dict) and options.get("include_usage"))
        self._id: str | None = None
        self._started = False
        self.gate = TextGate(markers)

    def head(self) -> tuple[str, int, str]:
        """The chunks' id, created and model: the provider's once it has said them."""
        if self._id is None:
            meta = self._meta
            self._id = meta.response_id or f"chatcmpl-fsm{uuid.uuid4().hex[:24]}"
            self._model = meta.model or self._model
        return self._id, self._created, self._model or ""

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        if not self._started:
            self._started = True
            delta = {"role": "assistant", **delta}
        chunk_id, created, model = self.head()
        return {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
        }

    def event(self, event: Any) -> list[dict[str, Any]]:
        kind = type(event)
        if kind is TextEvent:
            return [self.chunk({"content": piece}) for piece in self.gate.text(event.text)]
        if kind is ReasoningEvent:
            return [self.chunk({"reasoning_content": event.text})]
        if kind is MarkerEvent or kind is ResetEvent:
            return [self.chunk({"content": piece}) for piece in self.gate.library(event)]
        if kind is FinalEvent:
            return self.final(event.result)
        return []  # tool calls are sent whole at the end; statuses are the session's

    def final(self, result: StreamResult) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if not self._started and result.content and not result.stub:
            out.append(self.chunk({"content": result.content}))  # a plain fallback's answer (RES-9)
        if result.refusal:
            out.append(self.chunk({"refusal": result.refusal}))
        for index, call in enumerate(result.tool_calls):
            function = {"name": call.name, "arguments": call.arguments}
            item = {"index": index, "id": call.id, "type": "function", "function": function}
            out.append(self.chunk({"tool_calls": [item]}))
        last = self.chunk({}, result.finish_reason or "stop")
        note = incomplete_note(result)
        if note is not None:
            last["fsm_agent"] = note
        out.append(last)
        usage = result.usage
        if self._usage and usage is not None:
            chunk_id, created, model = self.head()
            payload: dict[str, Any] = {
                "prompt_tokens": usage.input_tokens,
                "completion_tokens": usage.output_tokens,
                "total_tokens": usage.total_tokens,
            }
            if usage.cached_tokens is not None:
                payload["prompt_tokens_details"] = {"cached_tokens": usage.cached_tokens}
            out.append(
                {
                    "id": chunk_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": payload,
                }
            )
        return out


class ChatObjects:
    """`ChatTranslator`'s payloads as the openai SDK's `ChatCompletionChunk` objects."""

    __slots__ = ("_choice", "_chunk", "_construct", "_delta", "_type", "translator")

    def __init__(self, translator: ChatTranslator) -> None:
        from openai._models import construct_type
        from openai.types.chat import ChatCompletionChunk
        from openai.types.chat.chat_completion_chunk import Choice, ChoiceDelta

        self.translator = translator
        self._construct = construct_type
        self._type = ChatCompletionChunk
        self._chunk, self._choice, self._delta = _builders(ChatCompletionChunk, Choice, ChoiceDelta)

    def text(self, text: str) -> list[Any]:
        """The chunks of a text delta, built directly (equal to `build` of their payloads)."""
        translator = self.translator
        pieces = translator.gate.text(text)
        if not translator._started:
            return [self.build(translator.chunk({"content": piece})) for piece in pieces]
        chunk_id, created, model = translator.head()
        chunk, choice, delta = self._chunk, self._choice, self._delta
        return [
            chunk(
                id=chunk_id,
                object="chat.completion.chunk",
                created=created,
                model=model,
                choices=[choice(index=0, delta=delta(content=piece), finish_reason=None, logprobs=None)],
            )
            for piece in pieces
        ]

    def build(self, payload: dict[str, Any]) -> Any:
        return self._construct(type_=self._type, value=payload)


_BUILDERS: dict[type[Any], Builder] = {}


def _builders(*classes: type[Any]) -> list[Builder]:
    found = []
    for cls in classes:
        builder = _BUILDERS.get(cls)
        if builder is None:
            builder = _BUILDERS[cls] = Builder(cls)
        found.append(builder)
    return found
