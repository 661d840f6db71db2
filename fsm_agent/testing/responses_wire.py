"""OpenAI Responses wire format (``POST /v1/responses``): the typed SSE event sequence with
``sequence_number`` (``response.created`` … output items, text / refusal / reasoning-summary /
function-call-argument deltas … ``response.completed`` or ``response.incomplete``), in-stream
``response.failed`` / ``error`` events, the finished Response body, and OpenAI error bodies."""

from __future__ import annotations

from typing import Any

from fsm_agent.testing import faults as F
from fsm_agent.testing.chat import ChatWire
from fsm_agent.testing.frames import Frame, RequestContext, sse
from fsm_agent.testing.scenario import Block, Scenario, ToolCall

_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


class _Seq:
    def __init__(self) -> None:
        self.n = 0

    def frame(self, event: dict[str, Any], kind: str) -> Frame:
        event["sequence_number"] = self.n
        self.n += 1
        return Frame(sse(event, event["type"]), kind)


class ResponsesWire(ChatWire):
    """Renders scenarios as Responses API events / bodies (errors shared with Chat)."""

    api = "responses"

    def _id(self, sc: Scenario, ctx: RequestContext) -> str:
        return sc.id or f"resp_emu{ctx.seq}"

    def response_id(self, sc: Scenario, ctx: RequestContext) -> str:
        """The id of the response this request is answered with (RC-2: its stored frames' key)."""
        return self._id(sc, ctx)

    def _usage(self, sc: Scenario) -> dict[str, Any] | None:
        u = sc.usage
        if u is None:
            return None
        return {
            "input_tokens": u.input_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": u.output_tokens,
            "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
            "total_tokens": u.total_tokens,
        }

    def _response(
        self, sc: Scenario, ctx: RequestContext, status: str, output: list[dict[str, Any]], final: bool
    ) -> dict[str, Any]:
        incomplete = None
        if status == "incomplete":
            incomplete = {"reason": _INCOMPLETE.get(sc.resolved_finish_reason(), "max_output_tokens")}
        return {
            "id": self._id(sc, ctx),
            "object": "response",
            "created_at": ctx.created,
            "status": status,
            "error": None,
            "incomplete_details": incomplete,
            "instructions": None,
            "max_output_tokens": None,
            "model": ctx.model(sc),
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": {"effort": None, "summary": None},
            "store": False,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": self._usage(sc) if final else None,
            "user": None,
            "metadata": {},
            **({"background": True} if ctx.body.get("background") is True else {}),
        }

    def _final_status(self, sc: Scenario) -> str:
        return "incomplete" if sc.resolved_finish_reason() in _INCOMPLETE else "completed"

    def _item(self, block: Block, out_index: int, ctx: RequestContext, done: bool) -> dict[str, Any]:
        status = "completed" if done else "in_progress"
        text = block.text if done else ""
        if block.kind == "tool":
            tc = block.step
            assert isinstance(tc, ToolCall)
            call_id = str(tc.id) if tc.id is not None else f"call_emu{ctx.seq}_{block.tool_index}"
            return {
                "id": f"fc_emu{ctx.seq}_{out_index}",
                "type": "function_call",
                "status": status,
                "call_id": call_id,
                "name": tc.name,
                "arguments": text,
            }
        if block.kind == "reasoning":
            summary = [{"type": "summary_text", "text": text}] if done else []
            return {"id": f"rs_emu{ctx.seq}_{out_index}", "type": "reasoning", "summary": summary}
        return {
            "id": f"msg_emu{ctx.seq}_{out_index}",
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": [self._part(block, text)] if done else [],
        }

    def _part(self, block: Block, text: str) -> dict[str, Any]:
        if block.kind == "refusal":
            return {"type": "refusal", "refusal": text}
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def _block_frames(self, seq: _Seq, block: Block, oi: int, ctx: RequestContext) -> list[Frame]:
        item = self._item(block, oi, ctx, done=False)
        iid = item["id"]
        added_kind = "tool_start" if block.kind == "tool" else "block"
        frames = [
            seq.frame({"type": "response.output_item.added", "output_index": oi, "item": item}, added_kind)
        ]
        where: dict[str, Any] = {"item_id": iid, "output_index": oi}
        if block.kind == "tool":
            for chunk in block.chunks:
                ev = {"type": "response.function_call_arguments.delta", **where, "delta": chunk}
                frames.append(seq.frame(ev, "tool_args"))
            done = {"type": "response.function_call_arguments.done", **where, "arguments": block.text}
            done["name"] = item["name"]
            frames.append(seq.frame(done, "tool_end"))
        elif block.kind == "reasoning":
            where["summary_index"] = 0
            part = {"type": "summary_text", "text": ""}
            frames.append(
                seq.frame({"type": "response.reasoning_summary_part.added", **where, "part": part}, "block")
            )
            for chunk in block.chunks:
                ev = {"type": "response.reasoning_summary_text.delta", **where, "delta": chunk}
                frames.append(seq.frame(ev, "reasoning"))
            text_done = {"type": "response.reasoning_summary_text.done", **where, "text": block.text}
            frames.append(seq.frame(text_done, "block"))
            part_done = {
                "type": "response.reasoning_summary_part.done",
                **where,
                "part": {**part, "text": block.text},
            }
            frames.append(seq.frame(part_done, "block"))
        else:
            where["content_index"] = 0
            added = {"type": "response.content_part.added", **where, "part": self._part(block, "")}
            frames.append(seq.frame(added, "block"))
            refusal = block.kind == "refusal"
            for chunk in block.chunks:
                if refusal:
                    ev = {"type": "response.refusal.delta", **where, "delta": chunk}
                else:
                    ev = {"type": "response.output_text.delta", **where, "delta": chunk, "logprobs": []}
                frames.append(seq.frame(ev, block.kind))
            if refusal:
                done_ev = {"type": "response.refusal.done", **where, "refusal": block.text}
            else:
                done_ev = {"type": "response.output_text.done", **where, "text": block.text, "logprobs": []}
            frames.append(seq.frame(done_ev, "block"))
            part_ev = {"type": "response.content_part.done", **where, "part": self._part(block, block.text)}
            frames.append(seq.frame(part_ev, "block"))
        item_done = {
            "type": "response.output_item.done",
            "output_index": oi,
            "item": self._item(block, oi, ctx, True),
        }
        frames.append(seq.frame(item_done, "block"))
        return frames

    def stream_frames(self, sc: Scenario, ctx: RequestContext) -> list[Frame]:
        seq = _Seq()
        frames = [
            seq.frame(
                {"type": "response.created", "response": self._response(sc, ctx, "in_progress", [], False)},
                "start",
            ),
            seq.frame(
                {
                    "type": "response.in_progress",
                    "response": self._response(sc, ctx, "in_progress", [], False),
                },
                "start",
            ),
        ]
        blocks = sc.blocks()
        for oi, block in enumerate(blocks):
            frames.extend(self._block_frames(seq, block, oi, ctx))
        status = self._final_status(sc)
        output = [self._item(b, i, ctx, True) for i, b in enumerate(blocks)]
        final = self._response(sc, ctx, status, output, True)
        frames.append(seq.frame({"type": f"response.{status}", "response": final}, "finish"))
        return frames

    def json_body(self, sc: Scenario, ctx: RequestContext) -> dict[str, Any]:
        output = [self._item(b, i, ctx, True) for i, b in enumerate(sc.blocks())]
        return self._response(sc, ctx, self._final_status(sc), output, True)

    def stream_error_frame(self, fault: F.StreamError, sc: Scenario, ctx: RequestContext, seq: int) -> bytes:
        if fault.responses_event == "error":
            event = {
                "type": "error",
                "code": fault.code,
                "message": fault.message,
                "param": None,
                "sequence_number": seq,
            }
            return sse(event, "error")
        response = self._response(sc, ctx, "failed", [], False)
        response["error"] = {"code": fault.code, "message": fault.message}
        return sse(
            {"type": "response.failed", "response": response, "sequence_number": seq}, "response.failed"
        )

    def malformed_frame(self, payload: str) -> bytes:
        return f"event: response.output_text.delta\ndata: {payload}\n\n".encode()

    def context_too_long(
        self, fault: F.ContextTooLong, ctx: RequestContext
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """Issue 25a: the Responses API's 400 for an input over the model's context window."""
        error = {
            "message": (
                "Your input exceeds the context window of this model. Please adjust your input and try again."
            ),
            "type": "invalid_request_error",
            "param": "input",
            "code": "context_length_exceeded",
        }
        return 400, {"error": error}, {}
