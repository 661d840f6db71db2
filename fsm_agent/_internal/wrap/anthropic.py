"""Anthropic Messages out: the machine's events as the raw stream events, as payloads and as the
anthropic SDK's event objects (WR-1, WR-2).

`AnthropicTranslator` is the API's one translator: `message_start` (the provider's id and model,
the input tokens counted so far), each block of thinking or text opened, streamed and closed as
the answer moves on, then each tool call whole (`content_block_start` of a `tool_use`, its input
in one `input_json_delta`, `content_block_stop`), `message_delta` with the native stop reason and
the output tokens, and `message_stop`. A stub's `message_delta` says `stop_reason: "max_tokens"`
and carries an `fsm_agent` field saying it is incomplete. Never performs I/O.
"""

from __future__ import annotations

from typing import Any

from ..iterate.events import FinalEvent, MarkerEvent, ReasoningEvent, ResetEvent, TextEvent
from ..result import StreamResult
from .construct import Builder
from .openai_chat import incomplete_note
from .text_gate import TextGate

__all__ = ["AnthropicBetaObjects", "AnthropicObjects", "AnthropicTranslator"]

_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}


class AnthropicTranslator:
    """The machine's events as Anthropic raw stream event payloads."""

    def __init__(self, meta: Any, params: dict[str, Any], *, markers: bool = True) -> None:
        self._meta = meta
        self._model = params.get("model")
        self._started = False
        self._index = -1  # the open block's index
        self._open: str | None = None  # "text" or "thinking"
        self._thinking = -1  # the index of the last thinking block
        self.gate = TextGate(markers)

    def _start(self) -> list[dict[str, Any]]:
        if self._started:
            return []
        self._started = True
        meta = self._meta
        usage = meta.usage
        cached = (usage.cached_tokens or 0) if usage is not None else 0
        message: dict[str, Any] = {
            "id": meta.response_id or "msg_fsm",
            "type": "message",
            "role": "assistant",
            "model": meta.model or self._model or "",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": ((usage.input_tokens or 0) - cached) if usage is not None else 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": cached,
                "output_tokens": 1 if usage is not None else 0,
            },
        }
        return [{"type": "message_start", "message": message}]

    def _block(self, kind: str) -> list[dict[str, Any]]:
        out = self._start()
        if self._open == kind:
            return out
        out += self._close()
        self._index += 1
        self._open = kind
        block = {"type": "text", "text": ""} if kind == "text" else {"type": "thinking", "thinking": ""}
        if kind == "thinking":
            block["signature"] = ""
            self._thinking = self._index
        out.append({"type": "content_block_start", "index": self._index, "content_block": block})
        return out

    def _close(self) -> list[dict[str, Any]]:
        if self._open is None:
            return []
        self._open = None
        return [{"type": "content_block_stop", "index": self._index}]

    def text_delta(self, piece: str) -> dict[str, Any]:
        return {
            "type": "content_block_delta",
            "index": self._index,
            "delta": {"type": "text_delta", "text": piece},
        }

    def event(self, event: Any) -> list[dict[str, Any]]:
        kind = type(event)
        if kind is TextEvent or kind is MarkerEvent or kind is ResetEvent:
            pieces = self.gate.text(event.text) if kind is TextEvent else self.gate.library(event)
            if not pieces:
                return []
            out = self._block("text")
            out.extend(self.text_delta(piece) for piece in pieces)
            return out
        if kind is ReasoningEvent:
            out = self._block("thinking")
            delta = {"type": "thinking_delta", "thinking": event.text}
            out.append({"type": "content_block_delta", "index": self._index, "delta": delta})
            return out
        if kind is FinalEvent:
            return self.final(event.result)
        return []

    def final(self, result: StreamResult) -> list[dict[str, Any]]:
        out = self._start()
        if self._index < 0 and result.content and not result.stub:
            out += self._block("text")  # a plain fallback's answer (RES-9)
            out.append(self.text_delta(result.content))
        # The signature is known at the end only: sent on its thinking block, also when that block
        # has closed already (text followed it), for the caller to send the thinking back.
        signatures = result.provider_data.get("thinking_signatures") or []
        if signatures and self._thinking >= 0:
            delta = {"type": "signature_delta", "signature": signatures[-1]}
            out.append({"type": "content_block_delta", "index": self._thinking, "delta": delta})
        out += self._close()
        for call in result.tool_calls:
            self._index += 1
            block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
            out.append({"type": "content_block_start", "index": self._index, "content_block": block})
            delta = {"type": "input_json_delta", "partial_json": call.arguments}
            out.append({"type": "content_block_delta", "index": self._index, "delta": delta})
            out.append({"type": "content_block_stop", "index": self._index})
        stop = result.provider_data.get("stop_reason") if not result.stub else None
        if not isinstance(stop, str):
            stop = _STOP.get(result.finish_reason or "stop", "end_turn")
        message_delta: dict[str, Any] = {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": result.provider_data.get("stop_sequence")},
            "usage": self._final_usage(result),
        }
        note = incomplete_note(result)
        if note is not None:
            message_delta["fsm_agent"] = note
        out.append(message_delta)
        out.append({"type": "message_stop"})
        return out

    @staticmethod
    def _final_usage(result: StreamResult) -> dict[str, Any]:
        """The counts of the last `message_delta`: cumulative, as the API's are, so they also say
        the input counts that `message_start` may not have known yet (the stream had only begun)."""
        usage = result.usage
        if usage is None:
            return {"output_tokens": 0}
        cached = usage.cached_tokens or 0
        written = result.provider_data.get("cache_creation_input_tokens") or 0
        counts: dict[str, Any] = {
            "input_tokens": (usage.input_tokens or 0) - cached - written,
            "cache_read_input_tokens": cached,
            "output_tokens": usage.output_tokens or 0,
        }
        if written:
            counts["cache_creation_input_tokens"] = written
        return counts


class AnthropicObjects:
    """`AnthropicTranslator`'s payloads as the anthropic SDK's raw stream event objects."""

    def __init__(self, translator: AnthropicTranslator) -> None:
        from anthropic._models import construct_type

        self.translator = translator
        self._construct = construct_type
        self._type, event, delta = self._types()
        self._event, self._delta = _builder(event), _builder(delta)

    @staticmethod
    def _types() -> tuple[Any, Any, Any]:
        from anthropic.types import RawContentBlockDeltaEvent, RawMessageStreamEvent, TextDelta

        return RawMessageStreamEvent, RawContentBlockDeltaEvent, TextDelta

    def text(self, text: str) -> list[Any]:
        translator = self.translator
        pieces = translator.gate.text(text)
        if not pieces:
            return []
        if translator._open != "text":
            out = [self.build(payload) for payload in translator._block("text")]
            return out + [self.build(translator.text_delta(piece)) for piece in pieces]
        event, delta, index = self._event, self._delta, translator._index
        return [
            event(type="content_block_delta", index=index, delta=delta(type="text_delta", text=piece))
            for piece in pieces
        ]

    def build(self, payload: dict[str, Any]) -> Any:
        return self._construct(type_=self._type, value=payload)


class AnthropicBetaObjects(AnthropicObjects):
    """The same payloads as the SDK's beta event objects (`client.beta.messages`)."""

    @staticmethod
    def _types() -> tuple[Any, Any, Any]:
        from anthropic.types.beta import (
            BetaRawContentBlockDeltaEvent,
            BetaRawMessageStreamEvent,
            BetaTextDelta,
        )

        return BetaRawMessageStreamEvent, BetaRawContentBlockDeltaEvent, BetaTextDelta


_BUILDERS: dict[Any, Builder] = {}


def _builder(cls: Any) -> Builder:
    found = _BUILDERS.get(cls)
    if found is None:
        found = _BUILDERS[cls] = Builder(cls)
    return found
