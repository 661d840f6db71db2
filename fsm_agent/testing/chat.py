"""OpenAI Chat Completions wire format (``POST /v1/chat/completions``): streaming
``chat.completion.chunk`` frames ending in ``data: [DONE]``, the finished ``chat.completion`` body,
and OpenAI-style error bodies. Shape options (``ChatShape``) mimic OpenAI-compatible hosts."""

from __future__ import annotations

from typing import Any

from fsm_agent.testing import faults as F
from fsm_agent.testing.frames import Frame, RequestContext, Wire, sse
from fsm_agent.testing.scenario import Block, Scenario, ToolCall

_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("invalid_request_error", "model_not_found"),
    422: ("invalid_request_error", None),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


def chat_usage(sc: Scenario) -> dict[str, Any] | None:
    u = sc.usage
    if u is None:
        return None
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.total_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
    }


def tool_id(tc: ToolCall, index: int, sc: Scenario, ctx: RequestContext) -> str | int:
    if tc.id is not None:
        return tc.id
    if sc.chat.integer_tool_ids:
        return index
    return f"call_emu{ctx.seq}_{index}"


class ChatWire(Wire):
    """Renders scenarios as Chat Completions chunks / bodies."""

    api = "chat_completions"

    def _id(self, sc: Scenario, ctx: RequestContext) -> str:
        return sc.id or f"chatcmpl-emu{ctx.seq}"

    def _chunk(self, sc: Scenario, ctx: RequestContext, choices: list[dict[str, Any]]) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": self._id(sc, ctx),
            "object": "chat.completion.chunk",
            "created": ctx.created,
            "model": ctx.model(sc),
        }
        if not sc.chat.sparse:
            chunk["system_fingerprint"] = sc.chat.system_fingerprint
        chunk["choices"] = choices
        if ctx.include_usage and not sc.chat.sparse:
            chunk["usage"] = None
        return chunk

    def _delta(self, sc: Scenario, ctx: RequestContext, delta: dict[str, Any], kind: str) -> Frame:
        choice: dict[str, Any] = {"index": 0, "delta": delta}
        if not sc.chat.sparse:
            choice["logprobs"] = None
            choice["finish_reason"] = None
        return Frame(sse(self._chunk(sc, ctx, [choice])), kind)

    def _content(self, sc: Scenario, text: str) -> Any:
        return [{"type": "text", "text": text}] if sc.chat.content_blocks else text

    def _tool_frames(self, sc: Scenario, ctx: RequestContext, block: Block) -> list[Frame]:
        tc = block.step
        assert isinstance(tc, ToolCall)
        shape = sc.chat
        head: dict[str, Any] = {}
        if not shape.no_tool_index:
            head["index"] = block.tool_index
        head["id"] = tool_id(tc, block.tool_index, sc, ctx)
        if not shape.sparse:
            head["type"] = "function"
        if tc.extra_content is not None:
            head["extra_content"] = dict(tc.extra_content)

        def more(function: dict[str, Any]) -> dict[str, Any]:
            item: dict[str, Any] = {} if shape.no_tool_index else {"index": block.tool_index}
            item["function"] = function
            return item

        def frame(item: dict[str, Any], kind: str) -> Frame:
            delta: dict[str, Any] = {"tool_calls": [item]}
            if not shape.sparse:
                delta = {"content": None, **delta}
            return self._delta(sc, ctx, delta, kind)

        frags = list(block.chunks)
        out: list[Frame] = []
        if shape.args_before_name and frags:
            out.append(frame({**head, "function": {"arguments": frags.pop(0)}}, "tool_args"))
            out.append(frame(more({"name": tc.name}), "tool_start"))
        else:
            fn: dict[str, Any] = {"name": tc.name}
            if not shape.sparse:
                fn["arguments"] = ""
            out.append(frame({**head, "function": fn}, "tool_start"))
        out.extend(frame(more({"arguments": frag}), "tool_args") for frag in frags)
        return out

    def stream_frames(self, sc: Scenario, ctx: RequestContext) -> list[Frame]:
        shape = sc.chat
        frames: list[Frame] = []
        if not shape.sparse:
            frames.append(
                self._delta(sc, ctx, {"role": "assistant", "content": "", "refusal": None}, "start")
            )
        for block in sc.blocks():
            if block.kind == "tool":
                frames.extend(self._tool_frames(sc, ctx, block))
                continue
            for chunk in block.chunks:
                if block.kind == "text":
                    delta: dict[str, Any] = {"content": self._content(sc, chunk)}
                elif block.kind == "reasoning":
                    delta = {shape.reasoning_field: chunk}
                    if not shape.sparse:
                        delta = {"content": None, **delta}
                else:
                    delta = {"refusal": chunk}
                    if not shape.sparse:
                        delta = {"content": None, **delta}
                frames.append(self._delta(sc, ctx, delta, block.kind))
        finish: dict[str, Any] = {"index": 0, "delta": {}}
        if not shape.sparse:
            finish["logprobs"] = None
        finish["finish_reason"] = sc.resolved_finish_reason()
        frames.append(Frame(sse(self._chunk(sc, ctx, [finish])), "finish"))
        usage = chat_usage(sc)
        if ctx.include_usage and usage is not None:
            last = self._chunk(sc, ctx, [])
            last["usage"] = usage
            frames.append(Frame(sse(last), "usage"))
        frames.append(Frame(b"data: [DONE]\n\n", "end"))
        return frames

    def json_body(self, sc: Scenario, ctx: RequestContext) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": self._content(sc, sc.text) if sc.text else None,
            "refusal": sc.refusal or None,
        }
        if sc.reasoning:
            message[sc.chat.reasoning_field] = sc.reasoning
        calls: list[dict[str, Any]] = []
        for i, tc in enumerate(sc.tool_calls):
            call: dict[str, Any] = {
                "id": tool_id(tc, i, sc, ctx),
                "type": "function",
                "function": {"name": tc.name, "arguments": tc.arguments},
            }
            if tc.extra_content is not None:
                call["extra_content"] = dict(tc.extra_content)
            calls.append(call)
        if calls:
            message["tool_calls"] = calls
        body: dict[str, Any] = {
            "id": self._id(sc, ctx),
            "object": "chat.completion",
            "created": ctx.created,
            "model": ctx.model(sc),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": sc.resolved_finish_reason(),
                }
            ],
            "usage": chat_usage(sc),
        }
        if sc.chat.system_fingerprint is not None:
            body["system_fingerprint"] = sc.chat.system_fingerprint
        return body

    def error_body(self, status: int, message: str) -> tuple[dict[str, Any], dict[str, str]]:
        etype, code = _ERROR_TYPES.get(
            status, ("server_error" if status >= 500 else "invalid_request_error", None)
        )
        return {"error": {"message": message, "type": etype, "param": None, "code": code}}, {}

    def stream_error_frame(self, fault: F.StreamError, sc: Scenario, ctx: RequestContext, seq: int) -> bytes:
        error = {"message": fault.message, "type": fault.error_type, "param": None, "code": fault.code}
        return sse({"error": error})

    def context_too_long(
        self, fault: F.ContextTooLong, ctx: RequestContext
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """Issue 25a: the host's 400 for a prompt over the model's context length."""
        asked = (
            f"However, you requested {fault.tokens} tokens "
            f"({fault.tokens} in the messages, 0 in the completion)."
        )
        if fault.host == "vllm":
            message = (
                f"This model's maximum context length is {fault.limit} tokens. {asked} "
                "Please reduce the length of the messages or completion."
            )
            return (
                400,
                {
                    "object": "error",
                    "message": message,
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                },
                {},
            )
        if fault.host == "deepseek":
            message = (
                f"This model's maximum context length is {fault.limit} tokens. {asked} "
                "Please reduce the length of the messages or completion."
            )
            error = {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_request_error",
            }
            return 400, {"error": error}, {}
        message = (
            f"This model's maximum context length is {fault.limit} tokens. However, your messages "
            f"resulted in {fault.tokens} tokens. Please reduce the length of the messages."
        )
        error = {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
        return 400, {"error": error}, {}
