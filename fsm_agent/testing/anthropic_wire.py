"""Anthropic Messages wire format (``POST /v1/messages``): the SSE event sequence
(``message_start``, ``ping``, ``content_block_start/delta/stop`` with text, thinking, signature and
input-JSON deltas, ``message_delta``, ``message_stop``), the finished Message body, and Anthropic
error bodies. Refusal steps are sent as text (the API has no refusal delta). ``NoBlockStop`` leaves
blocks of a kind open (no ``content_block_stop``) while the message goes on to its end."""

from __future__ import annotations

import json
from typing import Any

from fsm_agent.testing import faults as F
from fsm_agent.testing.frames import Frame, RequestContext, Wire, sse
from fsm_agent.testing.scenario import Block, Reasoning, Scenario, ToolCall

STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def tool_input(arguments: str) -> Any:
    """The parsed tool input for finished bodies; invalid JSON gives ``{}``."""
    try:
        return json.loads(arguments) if arguments else {}
    except ValueError:
        return {}


def _tool_id(tc: ToolCall, index: int, ctx: RequestContext) -> str:
    return str(tc.id) if tc.id is not None else f"toolu_emu{ctx.seq}_{index}"


class AnthropicWire(Wire):
    """Renders scenarios as Anthropic Messages events / bodies."""

    api = "anthropic_messages"

    def _id(self, sc: Scenario, ctx: RequestContext) -> str:
        return sc.id or f"msg_emu{ctx.seq}"

    def _usage(self, sc: Scenario, *, output: int | None = None) -> dict[str, Any]:
        u = sc.usage
        if u is None:
            return {"input_tokens": 0, "output_tokens": 0}
        return {
            "input_tokens": u.input_tokens - u.cached_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": u.cached_tokens,
            "output_tokens": u.output_tokens if output is None else output,
        }

    def _stop_reason(self, sc: Scenario) -> str:
        reason = sc.resolved_finish_reason()
        return STOP_REASONS.get(reason, reason)

    def _start_block(self, block: Block, ctx: RequestContext) -> dict[str, Any]:
        if block.kind == "reasoning":
            return {"type": "thinking", "thinking": "", "signature": ""}
        if block.kind == "tool":
            tc = block.step
            assert isinstance(tc, ToolCall)
            return {
                "type": "tool_use",
                "id": _tool_id(tc, block.tool_index, ctx),
                "name": tc.name,
                "input": {},
            }
        return {"type": "text", "text": ""}

    def stream_frames(self, sc: Scenario, ctx: RequestContext) -> list[Frame]:
        message: dict[str, Any] = {
            "id": self._id(sc, ctx),
            "type": "message",
            "role": "assistant",
            "model": ctx.model(sc),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self._usage(sc, output=1 if sc.usage is not None else 0),
        }
        frames = [
            Frame(sse({"type": "message_start", "message": message}, "message_start"), "start"),
            Frame(sse({"type": "ping"}, "ping"), "ping"),
        ]
        unclosed = {fault.kind for fault in sc.faults_of(F.NoBlockStop)}
        for index, block in enumerate(sc.blocks()):
            start = {
                "type": "content_block_start",
                "index": index,
                "content_block": self._start_block(block, ctx),
            }
            frames.append(
                Frame(sse(start, "content_block_start"), "tool_start" if block.kind == "tool" else "block")
            )
            for chunk in block.chunks:
                if block.kind == "tool":
                    delta: dict[str, Any] = {"type": "input_json_delta", "partial_json": chunk}
                    kind = "tool_args"
                elif block.kind == "reasoning":
                    delta, kind = {"type": "thinking_delta", "thinking": chunk}, "reasoning"
                else:
                    delta, kind = {"type": "text_delta", "text": chunk}, block.kind
                event = {"type": "content_block_delta", "index": index, "delta": delta}
                frames.append(Frame(sse(event, "content_block_delta"), kind))
            if isinstance(block.step, Reasoning):
                delta = {"type": "signature_delta", "signature": block.step.signature}
                event = {"type": "content_block_delta", "index": index, "delta": delta}
                frames.append(Frame(sse(event, "content_block_delta"), "signature"))
            if block.kind in unclosed:
                continue
            stop = {"type": "content_block_stop", "index": index}
            frames.append(
                Frame(sse(stop, "content_block_stop"), "tool_end" if block.kind == "tool" else "block")
            )
        usage = {"output_tokens": sc.usage.output_tokens if sc.usage is not None else 0}
        delta_event = {
            "type": "message_delta",
            "delta": {"stop_reason": self._stop_reason(sc), "stop_sequence": None},
            "usage": usage,
        }
        frames.append(Frame(sse(delta_event, "message_delta"), "finish"))
        frames.append(Frame(sse({"type": "message_stop"}, "message_stop"), "end"))
        return frames

    def json_body(self, sc: Scenario, ctx: RequestContext) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        for block in sc.blocks():
            step = block.step
            if isinstance(step, Reasoning):
                content.append({"type": "thinking", "thinking": step.text, "signature": step.signature})
            elif isinstance(step, ToolCall):
                content.append(
                    {
                        "type": "tool_use",
                        "id": _tool_id(step, block.tool_index, ctx),
                        "name": step.name,
                        "input": tool_input(step.arguments),
                    }
                )
            else:
                content.append({"type": "text", "text": block.text})
        return {
            "id": self._id(sc, ctx),
            "type": "message",
            "role": "assistant",
            "model": ctx.model(sc),
            "content": content,
            "stop_reason": self._stop_reason(sc),
            "stop_sequence": None,
            "usage": self._usage(sc),
        }

    def error_body(self, status: int, message: str) -> tuple[dict[str, Any], dict[str, str]]:
        etype = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": etype, "message": message}}, {}

    def stream_error_frame(self, fault: F.StreamError, sc: Scenario, ctx: RequestContext, seq: int) -> bytes:
        return sse({"type": "error", "error": {"type": fault.error_type, "message": fault.message}}, "error")

    def malformed_frame(self, payload: str) -> bytes:
        return f"event: content_block_delta\ndata: {payload}\n\n".encode()

    def context_too_long(
        self, fault: F.ContextTooLong, ctx: RequestContext
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """Issue 25a: Anthropic's 400 for a prompt over the model's context window."""
        message = f"prompt is too long: {fault.tokens} tokens > {fault.limit} maximum"
        body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
        return 400, {**body, "request_id": f"req_emu{ctx.seq}"}, {}
