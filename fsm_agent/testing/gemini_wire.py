"""The native Gemini API wire (``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` and
``:generateContent``): each SSE frame one whole ``GenerateContentResponse`` (camelCase JSON) with
``candidates[0].content.parts`` (text, ``thought`` text, whole ``functionCall`` parts with a
``thoughtSignature`` on the first call), ``finishReason`` and ``usageMetadata`` on the last chunk,
``modelVersion`` / ``responseId`` on every chunk; in-stream errors as ``{"error": {...}}``; Google
error bodies (``code``, ``message``, ``status``, ``details``). Refusal steps are sent as text with
the finish reason SAFETY (the API has no refusal part).

The API sends a function call whole, in one frame, where the other wires stream its arguments in
fragments. So that a fault placed at the k-th argument fragment of a call means the same here, a
call's frame is followed by one empty frame per further fragment (nothing is written for them): a
cut "mid-arguments" lands after the call arrived and before the finish reason — still mid tool call
(the call is not final until the finish reason) — and ``DropMidFrame(0, kind="tool_args")`` cuts
the call's own frame in half."""

from __future__ import annotations

import base64
from typing import Any

from fsm_agent.testing import faults as F
from fsm_agent.testing.anthropic_wire import tool_input
from fsm_agent.testing.frames import Frame, RequestContext, Wire, sse
from fsm_agent.testing.scenario import Block, Scenario, ToolCall

FINISH_REASONS = {
    "stop": "STOP",
    "tool_calls": "STOP",
    "length": "MAX_TOKENS",
    "content_filter": "SAFETY",
}

STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

# StreamError codes of the other wires, as the Google status the same fault carries here.
_STREAM_STATUS = {
    "server_error": "INTERNAL",
    "api_error": "INTERNAL",
    "overloaded_error": "UNAVAILABLE",
    "rate_limit_error": "RESOURCE_EXHAUSTED",
}
_STATUS_CODES = {name: code for code, name in STATUS_NAMES.items()} | {"INTERNAL": 500}


def thought_signature(tc: ToolCall) -> str:
    """The emulator's thought signature of a call (base64, as the wire carries it)."""
    return base64.b64encode(f"emu-thought-signature:{tc.name}".encode()).decode("ascii")


def google_error(status: int, message: str, details: list[Any] | None = None) -> dict[str, Any]:
    """A Google API error body (`google.rpc.Status` in JSON)."""
    error: dict[str, Any] = {
        "code": status,
        "message": message,
        "status": STATUS_NAMES.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION"),
    }
    if details:
        error["details"] = details
    return {"error": error}


def retry_info(delay: str) -> dict[str, Any]:
    """The `RetryInfo` detail of a 429 body: how long the server asks the client to wait."""
    return {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}


class GeminiWire(Wire):
    """Renders scenarios as Gemini ``GenerateContentResponse`` chunks / bodies."""

    api = "gemini_generate_content"

    def _id(self, sc: Scenario, ctx: RequestContext) -> str:
        return sc.id or f"gemini-emu{ctx.seq}"

    def _usage(self, sc: Scenario) -> dict[str, Any] | None:
        u = sc.usage
        if u is None:
            return None
        usage: dict[str, Any] = {
            "promptTokenCount": u.input_tokens,
            "candidatesTokenCount": u.output_tokens - u.reasoning_tokens,
            "totalTokenCount": u.total_tokens,
        }
        if u.reasoning_tokens:
            usage["thoughtsTokenCount"] = u.reasoning_tokens
        if u.cached_tokens:
            usage["cachedContentTokenCount"] = u.cached_tokens
        return usage

    def _chunk(
        self, sc: Scenario, ctx: RequestContext, parts: list[dict[str, Any]], finish: bool = False
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        chunk: dict[str, Any] = {"candidates": [candidate]}
        if finish:
            candidate["finishReason"] = FINISH_REASONS.get(sc.resolved_finish_reason(), "OTHER")
            usage = self._usage(sc)
            if usage is not None:
                chunk["usageMetadata"] = usage
        chunk["modelVersion"] = ctx.model(sc)
        chunk["responseId"] = self._id(sc, ctx)
        return chunk

    def _call_part(self, tc: ToolCall, first: bool) -> dict[str, Any]:
        call: dict[str, Any] = {"name": tc.name, "args": tool_input(tc.arguments)}
        if tc.id is not None:
            call["id"] = str(tc.id)
        part: dict[str, Any] = {"functionCall": call}
        if first:  # the API signs the first function call of a turn only
            part["thoughtSignature"] = thought_signature(tc)
        return part

    def _block_parts(self, block: Block, chunk: str) -> dict[str, Any]:
        if block.kind == "reasoning":
            return {"text": chunk, "thought": True}
        return {"text": chunk}

    def stream_frames(self, sc: Scenario, ctx: RequestContext) -> list[Frame]:
        frames: list[Frame] = []
        for block in sc.blocks():
            if block.kind == "tool":
                tc = block.step
                assert isinstance(tc, ToolCall)
                part = self._call_part(tc, block.tool_index == 0)
                frames.append(Frame(sse(self._chunk(sc, ctx, [part])), "tool_args"))
                frames.extend(Frame(b"", "tool_args") for _ in block.chunks[1:])
                continue
            kind = "text" if block.kind == "refusal" else block.kind
            for chunk in block.chunks:
                frames.append(Frame(sse(self._chunk(sc, ctx, [self._block_parts(block, chunk)])), kind))
        frames.append(Frame(sse(self._chunk(sc, ctx, [{"text": ""}], finish=True)), "finish"))
        return frames

    def json_body(self, sc: Scenario, ctx: RequestContext) -> dict[str, Any]:
        parts: list[dict[str, Any]] = []
        if sc.reasoning:
            parts.append({"text": sc.reasoning, "thought": True})
        text = sc.text + sc.refusal
        if text:
            parts.append({"text": text})
        parts.extend(self._call_part(tc, i == 0) for i, tc in enumerate(sc.tool_calls))
        return self._chunk(sc, ctx, parts, finish=True)

    def error_body(self, status: int, message: str) -> tuple[dict[str, Any], dict[str, str]]:
        return google_error(status, message), {}

    def stream_error_frame(self, fault: F.StreamError, sc: Scenario, ctx: RequestContext, seq: int) -> bytes:
        status = _STREAM_STATUS.get(fault.code, fault.code.upper())
        error = {"code": _STATUS_CODES.get(status, 500), "message": fault.message, "status": status}
        return sse({"error": error})

    def context_too_long(
        self, fault: F.ContextTooLong, ctx: RequestContext
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """Issue 25a: the Gemini API's 400 INVALID_ARGUMENT for a prompt over the model's limit."""
        message = (
            f"The input token count ({fault.tokens}) exceeds the maximum number of tokens "
            f"allowed ({fault.limit})."
        )
        return 400, {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}, {}
