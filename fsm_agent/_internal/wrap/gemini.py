"""Gemini generateContent out: the machine's events as `GenerateContentResponse` payloads and
objects (WR-1, WR-2), and the stand-in of a `google.genai.Client`.

`GeminiTranslator` is the API's one translator: each piece of text (or thought) a response of
one part, in the wire's camelCase form; at the end each tool call whole as a `functionCall` part,
then a last response with the finish reason (a stub's `MAX_TOKENS`, with an `fsm_agent` field)
and the usage. `GeminiObjects` builds the SDK's objects from them. `models.generate_content_stream`
and `aio.models.generate_content_stream` run through the session, and so do `generate_content`
and its `aio` twin (`plain.py`); every other call and attribute
is the client's own. Never performs I/O.
"""

from __future__ import annotations

import json
from typing import Any

from ..iterate.events import FinalEvent, MarkerEvent, ReasoningEvent, ResetEvent, TextEvent
from ..result import StreamResult
from .clients import Forward, Runner, call_params
from .openai_chat import incomplete_note
from .text_gate import TextGate

__all__ = ["GeminiObjects", "GeminiTranslator", "WrappedGemini"]

_FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY"}


class GeminiTranslator:
    """The machine's events as `GenerateContentResponse` payloads (the wire's JSON form)."""

    def __init__(self, meta: Any, params: dict[str, Any], *, markers: bool = True) -> None:
        self._meta = meta
        self._model = params.get("model")
        self.gate = TextGate(markers)

    def response(self, parts: list[dict[str, Any]], **candidate: Any) -> dict[str, Any]:
        meta = self._meta
        payload: dict[str, Any] = {
            "candidates": [{"content": {"role": "model", "parts": parts}, "index": 0, **candidate}],
            "modelVersion": meta.model or self._model,
        }
        if meta.response_id is not None:
            payload["responseId"] = meta.response_id
        return payload

    def event(self, event: Any) -> list[dict[str, Any]]:
        kind = type(event)
        if kind is TextEvent:
            return [self.response([{"text": piece}]) for piece in self.gate.text(event.text)]
        if kind is MarkerEvent or kind is ResetEvent:
            return [self.response([{"text": p}]) for p in self.gate.library(event)]
        if kind is ReasoningEvent:
            return [self.response([{"text": event.text, "thought": True}])]
        if kind is FinalEvent:
            return self.final(event.result)
        return []

    def final(self, result: StreamResult) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        for call in result.tool_calls:
            try:
                args = json.loads(call.arguments) if call.arguments else {}
            except ValueError:
                args = {}
            function_call: dict[str, Any] = {"name": call.name, "args": args}
            if call.id and not call.id.startswith("call_"):
                function_call["id"] = call.id
            part: dict[str, Any] = {"functionCall": function_call}
            signature = (call.extra or {}).get("thoughtSignature")
            if signature:
                part["thoughtSignature"] = signature
            parts.append(part)
        reason = _FINISH.get(result.finish_reason or "stop", "STOP")
        last = self.response(parts or [{"text": ""}], finishReason="MAX_TOKENS" if result.stub else reason)
        usage = result.usage
        if usage is not None:
            last["usageMetadata"] = {
                "promptTokenCount": usage.input_tokens,
                "candidatesTokenCount": usage.output_tokens,
                "totalTokenCount": usage.total_tokens,
            }
        note = incomplete_note(result)
        if note is not None:
            last["fsm_agent"] = note
        return [last]


class GeminiObjects:
    """`GeminiTranslator`'s payloads as google-genai's `GenerateContentResponse` objects."""

    def __init__(self, translator: GeminiTranslator) -> None:
        from google.genai import types

        self.translator = translator
        self._type = types.GenerateContentResponse

    def text(self, text: str) -> list[Any]:
        return [self.build(payload) for payload in self.translator.event(TextEvent(text))]

    def build(self, payload: dict[str, Any]) -> Any:
        note = payload.pop("fsm_agent", None)
        response = self._type.model_validate(payload)
        if note is not None:
            object.__setattr__(response, "fsm_agent", note)
        return response


class _Models(Forward):
    def __init__(self, inner: Any, runner: Runner, client: Any) -> None:
        super().__init__(inner, runner)
        object.__setattr__(self, "_client", client)

    def generate_content(self, **kwargs: Any) -> Any:
        """WR-1: `generate_content` run by the session; the SDK's `GenerateContentResponse` back
        (awaitable on `client.aio`)."""
        client = object.__getattribute__(self, "_client")
        return self._runner.plain(client, call_params(kwargs), "gemini_generate_content")

    def generate_content_stream(self, **kwargs: Any) -> Any:
        client = object.__getattribute__(self, "_client")
        stream = self._runner.stream(
            client, call_params(kwargs), "gemini_generate_content", GeminiTranslator, GeminiObjects
        )
        if self._runner.is_async:
            return _ready(stream)
        return stream


async def _ready(stream: Any) -> Any:
    return stream


class _Aio(Forward):
    @property
    def models(self) -> _Models:
        runner: Runner = self._runner
        async_runner = Runner(runner.session, runner.routes, markers=runner.markers, is_async=True)
        return _Models(self._inner.models, async_runner, self._inner)


class WrappedGemini(Forward):
    """A `google.genai.Client` with its streaming calls run by a session."""

    @property
    def models(self) -> _Models:
        return _Models(self._inner.models, self._runner, self._inner)

    @property
    def aio(self) -> _Aio:
        return _Aio(self._inner.aio, self._runner)
