"""Wire-neutral plumbing shared by every renderer: frames, request context, the ``Wire`` base
class, SSE encoding, default error bodies, and the send plan that applies faults to frames."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fsm_agent.testing import faults as F
from fsm_agent.testing.scenario import Scenario

STATUS_MESSAGES: dict[int, str] = {
    400: "Invalid request.",
    401: "Incorrect API key provided.",
    403: "You are not allowed to perform this request.",
    404: "The requested resource was not found.",
    408: "The request timed out.",
    413: "Request too large.",
    422: "Unprocessable request.",
    429: "Rate limit reached. Please try again later.",
    500: "The server had an error while processing your request.",
    502: "Bad gateway.",
    503: "The service is temporarily unavailable.",
    529: "Overloaded",
}


def status_message(status: int) -> str:
    return STATUS_MESSAGES.get(status, f"HTTP {status}")


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def sse(data: Mapping[str, Any] | str, event: str | None = None) -> bytes:
    """One SSE frame: optional ``event:`` line, one ``data:`` line, blank line."""
    payload = data if isinstance(data, str) else dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


@dataclass(frozen=True)
class Frame:
    """One wire frame (complete bytes) tagged with the kind of content it carries."""

    data: bytes
    kind: str


@dataclass(frozen=True)
class RequestContext:
    """What a renderer may know about the request it answers."""

    api: str
    path: str
    body: Mapping[str, Any]
    seq: int
    created: int
    stream: bool
    model_id: str = ""

    def model(self, scenario: Scenario) -> str:
        if scenario.model is not None:
            return scenario.model
        model = self.body.get("model") if isinstance(self.body, Mapping) else None
        if isinstance(model, str) and model:
            return model
        return self.model_id or "emulator-model"

    @property
    def include_usage(self) -> bool:
        opts = self.body.get("stream_options")
        return isinstance(opts, Mapping) and opts.get("include_usage") is True


class Wire:
    """Base class of a wire format renderer. Subclasses override the rendering hooks."""

    api = ""
    stream_content_type = "text/event-stream"

    def stream_frames(self, sc: Scenario, ctx: RequestContext) -> list[Frame]:
        raise NotImplementedError

    def json_body(self, sc: Scenario, ctx: RequestContext) -> dict[str, Any]:
        raise NotImplementedError

    def error_body(self, status: int, message: str) -> tuple[dict[str, Any], dict[str, str]]:
        """JSON body and extra headers of an HTTP error response."""
        raise NotImplementedError

    def context_too_long(
        self, fault: F.ContextTooLong, ctx: RequestContext
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """Status, JSON body and extra headers of the API's "the prompt does not fit" answer."""
        raise NotImplementedError

    def stream_error_frame(self, fault: F.StreamError, sc: Scenario, ctx: RequestContext, seq: int) -> bytes:
        raise NotImplementedError

    def malformed_frame(self, payload: str) -> bytes:
        return f"data: {payload}\n\n".encode()

    def keepalive(self, kind: F.KeepaliveKind) -> bytes | None:
        if kind == "comment":
            return b": ping\n\n"
        if kind == "data":
            return b"data:\n\n"
        if kind == "event":
            return b"event: ping\n\n"
        return b'event: ping\ndata: {"type":"ping"}\n\n'

    def corrupt(self, frame: bytes) -> bytes:
        """A frame with a broken checksum; SSE has none, so unchanged."""
        return frame

    def reject_stream_options(
        self, status: int, ctx: RequestContext
    ) -> tuple[dict[str, Any], dict[str, str]]:
        if status == 422:
            detail = {
                "type": "extra_forbidden",
                "loc": ["body", "stream_options"],
                "msg": "Extra inputs are not permitted",
                "input": ctx.body.get("stream_options"),
            }
            return {"detail": [detail]}, {}
        body = {
            "error": {
                "message": "Unrecognized request argument supplied: stream_options",
                "type": "invalid_request_error",
                "param": "stream_options",
                "code": None,
            }
        }
        return body, {}


# ---------------------------------------------------------------------------- send plan


@dataclass(frozen=True)
class Write:
    data: bytes


@dataclass(frozen=True)
class Pause:
    """Wait ``seconds`` (frame delay or keepalive interval)."""

    seconds: float


@dataclass(frozen=True)
class Silence:
    """A stall: wait ``seconds``; ends early when the server stops or the client leaves."""

    seconds: float


@dataclass(frozen=True)
class Abort:
    """Close the connection abruptly, without ending the chunked body."""


Action = Write | Pause | Silence | Abort


def position(frames: Sequence[Frame], n: int, kind: str | None) -> int:
    """Index of the frame before which "after ``n`` frames (of ``kind``)" falls."""
    if kind is None:
        return max(0, min(n, len(frames)))
    idx = [i for i, f in enumerate(frames) if f.kind == kind]
    if 0 <= n < len(idx):
        return idx[n]
    if idx and n == len(idx):
        return idx[-1] + 1
    return len(frames)


def build_plan(
    frames: Sequence[Frame],
    wire: Wire,
    sc: Scenario,
    ctx: RequestContext,
    frame_delay: float,
) -> list[Action]:
    """Turn rendered frames plus the scenario's faults into the actions the server performs."""
    n = len(frames)
    stalls: dict[int, list[F.Stall]] = {}
    for s in sc.faults_of(F.Stall):
        stalls.setdefault(position(frames, s.frames, s.kind), []).append(s)
    malformed: dict[int, list[F.MalformedFrame]] = {}
    for m in sc.faults_of(F.MalformedFrame):
        malformed.setdefault(position(frames, m.frames, m.kind), []).append(m)
    errors = {position(frames, e.frames, e.kind): e for e in reversed(sc.faults_of(F.StreamError))}
    drops = {position(frames, d.frames, d.kind) for d in sc.faults_of(F.DropAfter)}
    mids = {position(frames, d.frame, d.kind) for d in sc.faults_of(F.DropMidFrame)}
    corrupt = {position(frames, c.frame, c.kind) for c in sc.faults_of(F.CorruptCrc)}
    keep = sc.faults_of(F.Keepalives)

    plan: list[Action] = []
    for i in range(n + 1):
        for stall in stalls.get(i, []):
            plan.append(Silence(stall.seconds))
            if stall.then == "drop":
                plan.append(Abort())
                return _truncate(plan, sc)
        for m in malformed.get(i, []):
            plan.append(Write(wire.malformed_frame(m.payload)))
        if i in errors:
            plan.append(Write(wire.stream_error_frame(errors[i], sc, ctx, i)))
            return _truncate(plan, sc)
        if i in drops or i == n:
            if i in drops:
                plan.append(Abort())
            return _truncate(plan, sc)
        for k in keep:
            if k.every > 0 and i % k.every == 0:
                ka = wire.keepalive(k.kind)
                if ka is not None:
                    plan.extend(Write(ka) for _ in range(k.count))
        data = frames[i].data
        if i in corrupt:
            data = wire.corrupt(data)
        if i > 0 and frame_delay > 0:
            plan.append(Pause(frame_delay))
        if i in mids:
            plan.append(Write(data[: len(data) // 2]))
            plan.append(Abort())
            return _truncate(plan, sc)
        plan.append(Write(data))
    return _truncate(plan, sc)


def keepalive_plan(wire: Wire, fault: F.KeepaliveOnly) -> list[Action]:
    plan: list[Action] = []
    ka = wire.keepalive(fault.kind)
    for i in range(fault.count):
        if i > 0 and fault.interval > 0:
            plan.append(Pause(fault.interval))
        if ka is not None:
            plan.append(Write(ka))
    return plan


def _truncate(plan: list[Action], sc: Scenario) -> list[Action]:
    """Apply ``DropAfterBytes``: cut the written bytes at the limit and abort there."""
    limits = [f.nbytes for f in sc.faults_of(F.DropAfterBytes)]
    if not limits:
        return plan
    budget = max(0, min(limits))
    out: list[Action] = []
    for action in plan:
        if isinstance(action, Write):
            if len(action.data) > budget:
                if budget:
                    out.append(Write(action.data[:budget]))
                out.append(Abort())
                return out
            budget -= len(action.data)
        out.append(action)
        if isinstance(action, Abort):
            return out
    return out
