"""AWS Bedrock Converse wire format: ``POST /model/{modelId}/converse-stream`` as event-stream
messages (messageStart, contentBlockStart/Delta/Stop, messageStop, metadata, exception messages),
``POST /model/{modelId}/converse`` as JSON, and restJson error responses (``x-amzn-ErrorType``).
Keepalives do not exist on this wire (they are skipped); refusal steps are sent as text."""

from __future__ import annotations

from typing import Any

from fsm_agent.testing import faults as F
from fsm_agent.testing.anthropic_wire import tool_input
from fsm_agent.testing.eventstream import corrupt_crc, event_message, exception_message
from fsm_agent.testing.frames import Frame, RequestContext, Wire, dumps
from fsm_agent.testing.scenario import Block, Reasoning, Scenario, ToolCall

STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filtered",
}

ERROR_TYPES = {
    400: "ValidationException",
    401: "UnrecognizedClientException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
    529: "ServiceUnavailableException",
}


def _error_headers(error_type: str) -> dict[str, str]:
    return {
        "x-amzn-ErrorType": f"{error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/",
        "x-amzn-RequestId": "00000000-0000-0000-0000-000000000000",
    }


def access_denied(ctx: RequestContext) -> tuple[dict[str, Any], dict[str, str]]:
    """403 body denying the streaming operation, as Bedrock words it."""
    message = (
        "User: arn:aws:iam::123456789012:user/emulator is not authorized to perform: "
        f"bedrock:InvokeModelWithResponseStream on resource: arn:aws:bedrock:us-east-1::foundation-model/"
        f"{ctx.model_id or 'emulator-model'}"
    )
    return {"message": message}, _error_headers("AccessDeniedException")


def _tool_id(tc: ToolCall, index: int, ctx: RequestContext) -> str:
    return str(tc.id) if tc.id is not None else f"tooluse_emu{ctx.seq}_{index}"


class BedrockWire(Wire):
    """Renders scenarios as Bedrock ConverseStream event-stream messages / Converse bodies."""

    api = "bedrock_converse"
    stream_content_type = "application/vnd.amazon.eventstream"

    def _event(self, name: str, payload: dict[str, Any], kind: str) -> Frame:
        return Frame(event_message(name, dumps(payload).encode()), kind)

    def _usage(self, sc: Scenario) -> dict[str, Any] | None:
        u = sc.usage
        if u is None:
            return None
        usage = {
            "inputTokens": u.input_tokens - u.cached_tokens,
            "outputTokens": u.output_tokens,
            "totalTokens": u.total_tokens,
        }
        if u.cached_tokens:
            usage["cacheReadInputTokens"] = u.cached_tokens
            usage["cacheWriteInputTokens"] = 0
        return usage

    def _stop_reason(self, sc: Scenario) -> str:
        reason = sc.resolved_finish_reason()
        return STOP_REASONS.get(reason, reason)

    def _block_frames(self, block: Block, index: int, ctx: RequestContext) -> list[Frame]:
        frames: list[Frame] = []
        where = {"contentBlockIndex": index}
        if block.kind == "tool":
            tc = block.step
            assert isinstance(tc, ToolCall)
            start = {"toolUse": {"toolUseId": _tool_id(tc, block.tool_index, ctx), "name": tc.name}}
            frames.append(self._event("contentBlockStart", {**where, "start": start}, "tool_start"))
            for chunk in block.chunks:
                frames.append(
                    self._event(
                        "contentBlockDelta", {**where, "delta": {"toolUse": {"input": chunk}}}, "tool_args"
                    )
                )
            frames.append(self._event("contentBlockStop", where, "tool_end"))
            return frames
        for chunk in block.chunks:
            delta: dict[str, Any] = {"text": chunk}
            if block.kind == "reasoning":
                delta = {"reasoningContent": {"text": chunk}}
            frames.append(self._event("contentBlockDelta", {**where, "delta": delta}, block.kind))
        if isinstance(block.step, Reasoning):
            delta = {"reasoningContent": {"signature": block.step.signature}}
            frames.append(self._event("contentBlockDelta", {**where, "delta": delta}, "signature"))
        frames.append(self._event("contentBlockStop", where, "block"))
        return frames

    def stream_frames(self, sc: Scenario, ctx: RequestContext) -> list[Frame]:
        frames = [self._event("messageStart", {"role": "assistant"}, "start")]
        for index, block in enumerate(sc.blocks()):
            frames.extend(self._block_frames(block, index, ctx))
        frames.append(self._event("messageStop", {"stopReason": self._stop_reason(sc)}, "finish"))
        usage = self._usage(sc)
        if usage is not None:
            frames.append(self._event("metadata", {"usage": usage, "metrics": {"latencyMs": 42}}, "usage"))
        return frames

    def json_body(self, sc: Scenario, ctx: RequestContext) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        for block in sc.blocks():
            step = block.step
            if isinstance(step, Reasoning):
                content.append(
                    {"reasoningContent": {"reasoningText": {"text": step.text, "signature": step.signature}}}
                )
            elif isinstance(step, ToolCall):
                tool = {"toolUseId": _tool_id(step, block.tool_index, ctx), "name": step.name}
                content.append({"toolUse": {**tool, "input": tool_input(step.arguments)}})
            else:
                content.append({"text": block.text})
        body: dict[str, Any] = {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": self._stop_reason(sc),
            "metrics": {"latencyMs": 42},
        }
        usage = self._usage(sc)
        body["usage"] = (
            usage if usage is not None else {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
        )
        return body

    def error_body(self, status: int, message: str) -> tuple[dict[str, Any], dict[str, str]]:
        etype = ERROR_TYPES.get(status, "InternalServerException" if status >= 500 else "ValidationException")
        return {"message": message}, _error_headers(etype)

    def reject_stream_options(
        self, status: int, ctx: RequestContext
    ) -> tuple[dict[str, Any], dict[str, str]]:
        body = {"message": "Malformed input request: extraneous key [stream_options] is not permitted"}
        return body, _error_headers("ValidationException")

    def stream_error_frame(self, fault: F.StreamError, sc: Scenario, ctx: RequestContext, seq: int) -> bytes:
        payload: dict[str, Any] = {"message": fault.message}
        if fault.bedrock_exception == "modelStreamErrorException":
            payload.update({"originalStatusCode": 500, "originalMessage": fault.message})
        return exception_message(fault.bedrock_exception, dumps(payload).encode())

    def malformed_frame(self, payload: str) -> bytes:
        return event_message("contentBlockDelta", payload.encode())

    def keepalive(self, kind: F.KeepaliveKind) -> bytes | None:
        return None

    def corrupt(self, frame: bytes) -> bytes:
        return corrupt_crc(frame)

    def context_too_long(
        self, fault: F.ContextTooLong, ctx: RequestContext
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """Issue 25a: Bedrock's 400 ValidationException for an input over the model's limit."""
        return (
            400,
            {"message": "Input is too long for requested model."},
            _error_headers("ValidationException"),
        )
