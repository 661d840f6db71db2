"""Responses out: the machine's events as Responses stream events, as payloads and as the openai
SDK's event objects (WR-1, WR-2).

`ResponsesTranslator` is the API's one translator. It opens with `response.created` and
`response.in_progress`, streams the reasoning summary and the answer's text as items of their own
(`response.output_item.added`, the part, the deltas), closes them at the end, then sends each tool
call whole as a `function_call` item (added, its arguments in one delta, done) and ends with
`response.completed`, whose response is the provider's own final response when the answer came
whole (the SDK's `get_final_response()` returns it), else one built from the `StreamResult`:
`response.incomplete` with `status: "incomplete"` and an `fsm_agent` field for a stub. Item ids
of the streamed items are the translator's own (`msg_fsm…`), the final response's the provider's.
Never performs I/O.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from ..iterate.events import FinalEvent, MarkerEvent, ReasoningEvent, ResetEvent, TextEvent
from ..result import StreamResult, built
from .construct import Builder
from .openai_chat import incomplete_note
from .text_gate import TextGate

__all__ = ["ResponsesObjects", "ResponsesTranslator"]

_FINISH_TO_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


class ResponsesTranslator:
    """The machine's events as Responses stream event payloads."""

    def __init__(self, meta: Any, params: dict[str, Any], *, markers: bool = True) -> None:
        self._meta = meta
        self._params = params
        self._model = params.get("model")
        self._created = int(time.time())
        self._id: str | None = None
        self._seq = 0
        self._started = False
        self._outputs: list[dict[str, Any]] = []  # the items sent so far, done
        self._open: str | None = None  # "message" or "reasoning": the item being streamed
        self._open_id = ""
        self._open_text: list[str] = []
        self.gate = TextGate(markers)

    # -- the frame of every event --------------------------------------------------------------------
    def _event(self, payload: dict[str, Any]) -> dict[str, Any]:
        payload["sequence_number"] = self._seq
        self._seq += 1
        return payload

    def _response(self, status: str) -> dict[str, Any]:
        if self._id is None:
            self._id = self._meta.response_id or f"resp_fsm{uuid.uuid4().hex[:24]}"
            self._model = self._meta.model or self._model
        return {
            "id": self._id,
            "object": "response",
            "created_at": self._created,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": self._params.get("instructions"),
            "model": self._model or "",
            "output": [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": None,
            "metadata": {},
        }

    def _start(self) -> list[dict[str, Any]]:
        if self._started:
            return []
        self._started = True
        return [
            self._event({"type": "response.created", "response": self._response("in_progress")}),
            self._event({"type": "response.in_progress", "response": self._response("in_progress")}),
        ]

    # -- the items being streamed ---------------------------------------------------------------------
    def _where(self) -> dict[str, Any]:
        return {"item_id": self._open_id, "output_index": len(self._outputs)}

    def _open_item(self, kind: str) -> list[dict[str, Any]]:
        out = self._start()
        if self._open == kind:
            return out
        out += self._close_item()
        self._open, self._open_text = kind, []
        index = len(self._outputs)
        if kind == "message":
            self._open_id = f"msg_fsm{index}"
            item: dict[str, Any] = {"id": self._open_id, "type": "message", "status": "in_progress"}
            item["role"] = "assistant"
            item["content"] = []
            part: dict[str, Any] = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            added = {"type": "response.content_part.added", **self._where(), "content_index": 0, "part": part}
        else:
            self._open_id = f"rs_fsm{index}"
            item = {"id": self._open_id, "type": "reasoning", "summary": []}
            part = {"type": "summary_text", "text": ""}
            added = {"type": "response.reasoning_summary_part.added", **self._where(), "summary_index": 0}
            added["part"] = part
        out.append(self._event({"type": "response.output_item.added", "output_index": index, "item": item}))
        out.append(self._event(added))
        return out

    def _close_item(self) -> list[dict[str, Any]]:
        kind = self._open
        if kind is None:
            return []
        text = "".join(self._open_text)
        where = self._where()
        out: list[dict[str, Any]] = []
        if kind == "message":
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            out.append(
                self._event(
                    {
                        "type": "response.output_text.done",
                        **where,
                        "content_index": 0,
                        "text": text,
                        "logprobs": [],
                    }
                )
            )
            out.append(
                self._event({"type": "response.content_part.done", **where, "content_index": 0, "part": part})
            )
            item: dict[str, Any] = {"id": self._open_id, "type": "message", "status": "completed"}
            item["role"] = "assistant"
            item["content"] = [part]
        else:
            part = {"type": "summary_text", "text": text}
            where["summary_index"] = 0
            out.append(self._event({"type": "response.reasoning_summary_text.done", **where, "text": text}))
            out.append(self._event({"type": "response.reasoning_summary_part.done", **where, "part": part}))
            item = {"id": self._open_id, "type": "reasoning", "summary": [part]}
        out.append(
            self._event(
                {"type": "response.output_item.done", "output_index": len(self._outputs), "item": item}
            )
        )
        self._outputs.append(item)
        self._open = None
        return out

    def text_delta(self, piece: str) -> dict[str, Any]:
        """The `response.output_text.delta` of a piece of the answer (its message item is open)."""
        self._open_text.append(piece)
        where = {"item_id": self._open_id, "output_index": len(self._outputs), "content_index": 0}
        return self._event({"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []})

    # -- events ---------------------------------------------------------------------------------------
    def event(self, event: Any) -> list[dict[str, Any]]:
        kind = type(event)
        if kind is TextEvent or kind is MarkerEvent or kind is ResetEvent:
            pieces = self.gate.text(event.text) if kind is TextEvent else self.gate.library(event)
            if not pieces:
                return []
            out = self._open_item("message")
            out.extend(self.text_delta(piece) for piece in pieces)
            return out
        if kind is ReasoningEvent:
            out = self._open_item("reasoning")
            self._open_text.append(event.text)
            where = {**self._where(), "summary_index": 0}
            out.append(
                self._event({"type": "response.reasoning_summary_text.delta", **where, "delta": event.text})
            )
            return out
        if kind is FinalEvent:
            return self.final(event.result)
        return []

    def final(self, result: StreamResult) -> list[dict[str, Any]]:
        out = self._start()
        if not self._outputs and self._open is None and result.content and not result.stub:
            out += self._open_item("message")  # a plain fallback's answer (RES-9)
            out.append(self.text_delta(result.content))
        out += self._close_item()
        whole = self._whole_response(result)
        # A call's item keeps the provider's id, which the SDK's helper checks against the final
        # response's (the streamed text's items have ids of their own, which it does not).
        item_ids = {
            item.get("call_id"): item.get("id")
            for item in (whole or {}).get("output") or ()
            if isinstance(item, dict) and item.get("type") == "function_call"
        }
        for call in result.tool_calls:
            index = len(self._outputs)
            item = {
                "id": item_ids.get(call.id) or f"fc_fsm{index}",
                "type": "function_call",
                "status": "in_progress",
                "call_id": call.id,
                "name": call.name,
                "arguments": "",
            }
            where = {"item_id": item["id"], "output_index": index}
            out.append(
                self._event({"type": "response.output_item.added", "output_index": index, "item": item})
            )
            delta = {"type": "response.function_call_arguments.delta", **where, "delta": call.arguments}
            out.append(self._event(delta))
            done = {"type": "response.function_call_arguments.done", **where, "arguments": call.arguments}
            out.append(self._event({**done, "name": call.name}))
            item = {**item, "status": "completed", "arguments": call.arguments}
            out.append(
                self._event({"type": "response.output_item.done", "output_index": index, "item": item})
            )
            self._outputs.append(item)
        response = whole if whole is not None else self._built_response(result)
        out.append(self._event({"type": f"response.{response['status']}", "response": response}))
        return out

    def error_event(self, detail: dict[str, Any]) -> dict[str, Any]:
        """The API's `error` event, next in the stream's sequence (the proxy's in-band end, PX-5):
        `code`, `message`, `param` as the API sends them, and `error`, the OpenAI error object."""
        event = {"type": "error", "code": detail.get("code"), "message": detail.get("message")}
        event["param"] = None
        event["error"] = detail
        return self._event(event)

    @staticmethod
    def _whole_response(result: StreamResult) -> dict[str, Any] | None:
        """The provider's own final response, when the answer came whole."""
        raw = None if result.stub else built(result.raw)
        if raw is not None and hasattr(raw, "to_dict"):
            whole: dict[str, Any] = raw.to_dict()
            return whole
        return None

    def _built_response(self, result: StreamResult) -> dict[str, Any]:
        """The final response built from the `StreamResult` (a stub, a plain fallback's answer)."""
        response = self._response("completed")
        response["output"] = list(self._outputs)
        usage = result.usage
        if usage is not None:
            response["usage"] = {
                "input_tokens": usage.input_tokens,
                "input_tokens_details": {"cached_tokens": usage.cached_tokens or 0},
                "output_tokens": usage.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.total_tokens,
            }
        reason = _FINISH_TO_INCOMPLETE.get(result.finish_reason or "")
        if result.stub or reason is not None:
            response["status"] = "incomplete"
            response["incomplete_details"] = {"reason": reason or "max_output_tokens"}
        note = incomplete_note(result)
        if note is not None:
            response["fsm_agent"] = note
        return response


class ResponsesObjects:
    """`ResponsesTranslator`'s payloads as the openai SDK's Responses stream event objects."""

    def __init__(self, translator: ResponsesTranslator) -> None:
        from openai._models import construct_type
        from openai.types.responses import ResponseStreamEvent, ResponseTextDeltaEvent

        self.translator = translator
        self._construct = construct_type
        self._type = ResponseStreamEvent
        self._delta = Builder(ResponseTextDeltaEvent)

    def text(self, text: str) -> list[Any]:
        translator = self.translator
        pieces = translator.gate.text(text)
        if not pieces:
            return []
        if translator._open != "message":
            out = [self.build(payload) for payload in translator._open_item("message")]
            return out + [self.build(translator.text_delta(piece)) for piece in pieces]
        delta = self._delta
        built_events = []
        for piece in pieces:
            payload = translator.text_delta(piece)
            payload.pop("type")
            built_events.append(delta(type="response.output_text.delta", **payload))
        return built_events

    def build(self, payload: dict[str, Any]) -> Any:
        return self._construct(type_=self._type, value=payload)
