"""Bedrock ConverseStream out: the machine's events as the stream's event dicts, which is what
botocore hands out too (WR-1, WR-2), and the stand-in of a boto3 `bedrock-runtime` client.

`BedrockTranslator` is the API's one translator: `messageStart`, each text or reasoning block
opened, streamed and stopped, then each tool call whole (`contentBlockStart` with its `toolUse`,
its input in one delta, `contentBlockStop`), `messageStop` with the native stop reason (a stub's
says `max_tokens` and carries an `fsm_agent` field), and `metadata` with the usage.
`converse_stream(**kwargs)` returns its `{"stream": ..., "ResponseMetadata": ...}` dict and
`converse(**kwargs)` botocore's answer dict, both run by the session (`plain.py`); every other
call and attribute is the client's own. Never performs I/O.
"""

from __future__ import annotations

from typing import Any

from ..iterate.events import FinalEvent, MarkerEvent, ReasoningEvent, ResetEvent, TextEvent
from ..result import StreamResult
from .clients import Forward, call_params
from .openai_chat import incomplete_note
from .text_gate import TextGate

__all__ = ["BedrockObjects", "BedrockTranslator", "WrappedBedrock"]

_STOP = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filtered",
}


class BedrockTranslator:
    """The machine's events as ConverseStream event dicts."""

    def __init__(self, meta: Any, params: dict[str, Any], *, markers: bool = True) -> None:
        self._meta = meta
        self._started = False
        self._index = -1
        self._open: str | None = None  # "text" or "reasoning"
        self.gate = TextGate(markers)

    def _start(self) -> list[dict[str, Any]]:
        if self._started:
            return []
        self._started = True
        return [{"messageStart": {"role": "assistant"}}]

    def _block(self, kind: str) -> list[dict[str, Any]]:
        out = self._start()
        if self._open != kind:
            out += self._close()
            self._index += 1
            self._open = kind
        return out

    def _close(self) -> list[dict[str, Any]]:
        if self._open is None:
            return []
        self._open = None
        return [{"contentBlockStop": {"contentBlockIndex": self._index}}]

    def text_delta(self, piece: str) -> dict[str, Any]:
        return {"contentBlockDelta": {"delta": {"text": piece}, "contentBlockIndex": self._index}}

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
            out = self._block("reasoning")
            delta = {"reasoningContent": {"text": event.text}}
            out.append({"contentBlockDelta": {"delta": delta, "contentBlockIndex": self._index}})
            return out
        if kind is FinalEvent:
            return self.final(event.result)
        return []

    def final(self, result: StreamResult) -> list[dict[str, Any]]:
        out = self._start()
        if self._index < 0 and result.content and not result.stub:
            out += self._block("text")  # a plain fallback's answer (RES-9)
            out.append(self.text_delta(result.content))
        out += self._close()
        for call in result.tool_calls:
            self._index += 1
            start = {"toolUse": {"toolUseId": call.id, "name": call.name}}
            out.append({"contentBlockStart": {"start": start, "contentBlockIndex": self._index}})
            delta = {"toolUse": {"input": call.arguments}}
            out.append({"contentBlockDelta": {"delta": delta, "contentBlockIndex": self._index}})
            out.append({"contentBlockStop": {"contentBlockIndex": self._index}})
        stop = None if result.stub else result.provider_data.get("stop_reason")
        if not isinstance(stop, str):
            stop = _STOP.get(result.finish_reason or "stop", "end_turn")
        message_stop: dict[str, Any] = {"stopReason": stop}
        note = incomplete_note(result)
        if note is not None:
            message_stop["fsm_agent"] = note
        out.append({"messageStop": message_stop})
        usage = result.usage
        if usage is not None:
            counts = {
                "inputTokens": usage.input_tokens or 0,
                "outputTokens": usage.output_tokens or 0,
                "totalTokens": usage.total_tokens or 0,
            }
            out.append({"metadata": {"usage": counts, "metrics": {"latencyMs": 0}}})
        return out


class BedrockObjects:
    """botocore's objects of a ConverseStream are the event dicts themselves."""

    def __init__(self, translator: BedrockTranslator) -> None:
        self.translator = translator

    def text(self, text: str) -> list[Any]:
        return self.translator.event(TextEvent(text))

    @staticmethod
    def build(payload: dict[str, Any]) -> Any:
        return payload


class WrappedBedrock(Forward):
    """A boto3 `bedrock-runtime` client with `converse_stream` and `converse` run by a session."""

    def converse(self, **kwargs: Any) -> dict[str, Any]:
        """WR-1: `converse` run by the session; botocore's own answer dict back."""
        answer: dict[str, Any] = self._runner.plain(self._inner, call_params(kwargs), "bedrock_converse")
        return answer

    def converse_stream(self, **kwargs: Any) -> dict[str, Any]:
        stream = self._runner.stream(
            self._inner, call_params(kwargs), "bedrock_converse", BedrockTranslator, BedrockObjects
        )
        return {
            "stream": stream,
            "ResponseMetadata": {"HTTPStatusCode": 200, "HTTPHeaders": {}, "RetryAttempts": 0},
        }
