"""The emulator's request handler: routes each HTTP request to a wire renderer, records it, and
serves the next scripted scenario — error answers, finished JSON bodies, or a chunked stream executed
from the send plan (writes, pauses, stalls that end when the server stops, abrupt closes)."""

from __future__ import annotations

import contextlib
import json
import math
import re
import selectors
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from fsm_agent.testing import faults as F
from fsm_agent.testing.frames import (
    Abort,
    Action,
    Frame,
    Pause,
    RequestContext,
    Silence,
    Wire,
    Write,
    build_plan,
    dumps,
    keepalive_plan,
    position,
    status_message,
)
from fsm_agent.testing.scenario import Scenario, continued, prefill_of

if TYPE_CHECKING:
    from fsm_agent.testing.server import EmulatorServer

_BEDROCK_PATH = re.compile(r"^/model/(?P<model>[^/]+)/(?P<op>converse|converse-stream)$")
# Gemini API (/v1beta/models/M:op) and Vertex AI (…/publishers/google/models/M:op) paths.
_RESPONSE_PATH = re.compile(r"/responses/(?P<id>[^/]+)$")  # RC-2: reading a stored response on
_GEMINI_PATH = re.compile(r"/models/(?P<model>[^/:]+):(?P<op>streamGenerateContent|generateContent)$")


@dataclass(frozen=True)
class Request:
    """One request the emulator received. ``body`` is the parsed JSON (None when not JSON)."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    raw_body: bytes
    api: str | None
    stream: bool
    scenario: Scenario | None = field(default=None, repr=False)
    # when the request was read (time.monotonic()): lets a test see when a client sent what
    received_at: float = field(default_factory=time.monotonic, compare=False)


def hint_headers(err: F.HttpError) -> dict[str, str]:
    """The retry hint and x-should-retry headers an `HttpError` asks for, as of now."""
    headers: dict[str, str] = {}
    if err.retry_after is not None:
        if err.retry_after_form == "ms":
            headers["retry-after-ms"] = f"{err.retry_after * 1000:g}"
        elif err.retry_after_form == "http-date":
            when = math.ceil(time.time() + err.retry_after)
            headers["retry-after"] = formatdate(when, usegmt=True)
        else:
            headers["retry-after"] = f"{err.retry_after:g}"
    if err.should_retry is not None:
        headers["x-should-retry"] = "true" if err.should_retry else "false"
    return headers


def make_wires() -> dict[str, Wire]:
    from fsm_agent.testing.anthropic_wire import AnthropicWire
    from fsm_agent.testing.bedrock_wire import BedrockWire
    from fsm_agent.testing.chat import ChatWire
    from fsm_agent.testing.gemini_wire import GeminiWire
    from fsm_agent.testing.responses_wire import ResponsesWire

    wires: list[Wire] = [ChatWire(), ResponsesWire(), AnthropicWire(), BedrockWire(), GeminiWire()]
    return {w.api: w for w in wires}


def route(path: str) -> tuple[str | None, bool | None, str]:
    """(api, stream flag forced by the path or None, bedrock model id) for a request path."""
    m = _BEDROCK_PATH.match(path)
    if m:
        return "bedrock_converse", m.group("op") == "converse-stream", unquote(m.group("model"))
    m = _GEMINI_PATH.search(path)
    if m:
        return "gemini_generate_content", m.group("op") == "streamGenerateContent", unquote(m.group("model"))
    if path.endswith("/chat/completions"):
        return "chat_completions", None, ""
    if path.endswith("/responses"):
        return "responses", None, ""
    if path.endswith("/messages"):
        return "anthropic_messages", None, ""
    return None, None, ""


class EmulatorHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: EmulatorServer
    _seq = 0

    def setup(self) -> None:
        super().setup()
        with contextlib.suppress(OSError):  # every frame goes out at once, as a streaming server does
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        found = _RESPONSE_PATH.search(parts.path)
        if found is not None:
            self._resume(unquote(found.group("id")), parse_qs(parts.query))
            return
        self._record(b"", None, None, False, None)
        self._send_json(404, {"error": {"message": f"Unknown path {self.path}", "type": "not_found"}})

    def _resume(self, response_id: str, query: dict[str, list[str]]) -> None:
        """RC-2: `GET /v1/responses/{id}?stream=true&starting_after=N`: a background response's
        events after N, as they were stored (404 for an unknown id, the fault's status when it
        expired)."""
        stream = query.get("stream", ["false"])[0] == "true"
        self._record(b"", None, "responses", stream, None)
        emu = self.server.emulator
        wire = emu._wires["responses"]
        with emu._lock:
            stored = emu._background.get(response_id)
        if stored is None or not stream:
            body, headers = wire.error_body(404, f"Response with id '{response_id}' not found.")
            self._send_json(404, body, headers)
            return
        frames, expired = stored
        if expired is not None:
            body, headers = wire.error_body(expired.status, expired.message)
            self._send_json(expired.status, body, headers)
            return
        try:
            after = int(query.get("starting_after", ["-1"])[0])
        except ValueError:
            after = -1
        ctx = RequestContext("responses", self.path, {}, emu._count(), int(time.time()), True, "")
        delay = emu.frame_delay
        self._stream(wire.stream_content_type, build_plan(frames[after + 1 :], wire, Scenario(), ctx, delay))

    _extra_headers: Mapping[str, str] = {}  # issue 29: the rate-limit headers of this answer

    def end_headers(self) -> None:
        for name, value in self._extra_headers.items():
            self.send_header(name, value)
        super().end_headers()

    def do_POST(self) -> None:
        self._extra_headers = {}
        raw = self._read_body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path = urlsplit(self.path).path
        api, forced_stream, model_id = route(path)
        mapping = body if isinstance(body, dict) else {}
        stream = forced_stream if forced_stream is not None else mapping.get("stream") is True
        if api is None:
            self._record(raw, body, None, stream, None)
            self._send_json(404, {"error": {"message": f"Unknown path {path}", "type": "not_found"}})
            return
        emu = self.server.emulator
        limit = emu.rate_limit
        if limit is not None:  # issue 29: the route's rate limits, told in every answer's headers
            admitted, wait, self._extra_headers = limit.admit(mapping)
            if not admitted:
                self._record(raw, body, api, stream, None)
                own, headers = limit.refusal(wait)
                if own is None:
                    own, headers = emu._wires[api].error_body(
                        429, "Rate limit reached; please try again later."
                    )
                self._send_json(429, own, headers)
                return
        sc = emu._next_scenario()
        self._record(raw, body, api, stream, sc)
        self._seq = emu._count()
        ctx = RequestContext(api, path, mapping, self._seq, int(time.time()), stream, model_id)
        try:
            self._serve(sc, emu._wires[api], ctx)
        except OSError:
            self.close_connection = True

    def _record(self, raw: bytes, body: Any, api: str | None, stream: bool, sc: Scenario | None) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        req = Request(self.command, self.path, headers, body, raw, api, stream, sc)
        self.server.emulator._record(req)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    # ------------------------------------------------------------------ responses

    def _send_bytes(self, status: int, data: bytes, ctype: str, headers: Mapping[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", f"req_emu{self._seq}")
        self.send_header("request-id", f"req_emu{self._seq}")
        self.send_header("x-amzn-RequestId", f"00000000-0000-0000-0000-{self._seq:012d}")
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _send_json(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        if isinstance(body, bytes):
            data = body
        else:
            data = body.encode() if isinstance(body, str) else dumps(body).encode()
        self._send_bytes(status, data, "application/json", headers or {})

    def _serve(self, sc: Scenario, wire: Wire, ctx: RequestContext) -> None:
        silent = sc.fault(F.NoHeaders)
        if silent is not None:  # not even the headers: the client waits in its connect phase
            self._silence(silent.seconds)
            self._abort()
            return
        if self._route_fault(sc, wire, ctx):
            return
        prefill = prefill_of(ctx.api, ctx.body)
        if prefill is not None:  # RC-3: refused per model, or continued
            refuse = sc.fault(F.RefusePrefill)
            model = ctx.body.get("model") or ctx.model_id
            if refuse is not None and (refuse.models is None or model in refuse.models):
                body, headers = wire.error_body(refuse.status, refuse.message)
                self._send_json(refuse.status, body, headers)
                return
            if sc.continues:
                sc = continued(sc, prefill)
        if ctx.api == "responses" and ctx.stream and ctx.body.get("background") is True:
            # RC-2: the whole answer is stored, as a background response goes on server-side
            emu = self.server.emulator
            stored = (wire.stream_frames(sc, ctx), sc.fault(F.ExpireResume))
            with emu._lock:
                emu._background[wire.response_id(sc, ctx)] = stored  # type: ignore[attr-defined]
        err = sc.fault(F.HttpError)
        if err is not None and (ctx.stream or not err.stream_only):
            extra = {**hint_headers(err), **err.headers}
            if err.body is not None:
                self._send_json(err.status, err.body, extra)
            else:
                body, headers = wire.error_body(err.status, err.message or status_message(err.status))
                self._send_json(err.status, body, {**headers, **extra})
            return
        rso = sc.fault(F.RejectStreamOptions)
        if rso is not None and "stream_options" in ctx.body:
            body, headers = wire.reject_stream_options(rso.status, ctx)
            self._send_json(rso.status, body, headers)
            return
        if sc.fault(F.BedrockAccessDenied) is not None and ctx.api == "bedrock_converse" and ctx.stream:
            from fsm_agent.testing.bedrock_wire import access_denied

            body, headers = access_denied(ctx)
            self._send_json(403, body, headers)
            return
        unsupported = sc.fault(F.StreamingUnsupported)
        if unsupported is not None and ctx.stream:
            body, headers = wire.error_body(unsupported.status, unsupported.message)
            self._send_json(unsupported.status, body, headers)
            return
        delay = sc.frame_delay if sc.frame_delay is not None else self.server.emulator.frame_delay
        if sc.raw is not None:
            frames = [Frame(f.encode() if isinstance(f, str) else f, "raw") for f in sc.raw]
            self._stream(sc.raw_content_type, build_plan(frames, wire, sc, ctx, delay))
            return
        if not ctx.stream or sc.fault(F.NonStreamingBody) is not None:
            for stall in sc.faults_of(F.Stall):
                if not self._silence(stall.seconds) or stall.then == "drop":
                    self._abort()
                    return
            self._send_json(200, wire.json_body(sc, ctx))
            return
        if sc.fault(F.EmptyBody) is not None:
            self._stream(wire.stream_content_type, [])
            return
        only = sc.fault(F.KeepaliveOnly)
        if only is not None:
            self._stream(wire.stream_content_type, keepalive_plan(wire, only))
            return
        frames = wire.stream_frames(sc, ctx)
        end = sc.fault(F.EndAfter)
        if end is not None:
            frames = frames[: position(frames, end.frames, end.kind)]
        self._stream(wire.stream_content_type, build_plan(frames, wire, sc, ctx, delay))

    def _route_fault(self, sc: Scenario, wire: Wire, ctx: RequestContext) -> bool:
        """Issue 25a's faults (`NeverAnswers`, `Flapping`, `ContextTooLong`); True when one answered."""
        silent = sc.fault(F.NeverAnswers)
        if silent is not None:
            self._silence(silent.seconds)
            self._abort()
            return True
        flapping = sc.fault(F.Flapping)
        if flapping is not None and (ctx.seq - 1) % max(1, flapping.down + flapping.up) < flapping.down:
            body, headers = wire.error_body(flapping.status, status_message(flapping.status))
            self._send_json(flapping.status, body, headers)
            return True
        too_long = sc.fault(F.ContextTooLong)
        if too_long is not None:
            status, body, headers = wire.context_too_long(too_long, ctx)
            self._send_json(status, body, headers)
            return True
        return False

    def _stream(self, ctype: str, plan: Iterable[Action]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("x-request-id", f"req_emu{self._seq}")
        self.send_header("request-id", f"req_emu{self._seq}")
        self.send_header("x-amzn-RequestId", f"00000000-0000-0000-0000-{self._seq:012d}")
        self.end_headers()
        for action in plan:
            if isinstance(action, Write):
                if action.data:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(action.data), action.data))
            elif isinstance(action, Silence) and action.keepalive is not None:
                if not self._live_silence(action.seconds, action.keepalive, action.every):
                    self._abort()
                    return
            elif isinstance(action, Pause | Silence):
                if not self._silence(action.seconds):
                    self._abort()
                    return
            elif isinstance(action, Abort):
                self._abort()
                return
        self.wfile.write(b"0\r\n\r\n")

    def _live_silence(self, seconds: float, keepalive: bytes, every: float) -> bool:
        """A silence with a keepalive every `every` seconds (at least one, however late the server
        thread wakes: a live silence is never a dead one); False as `_silence`."""
        deadline = time.monotonic() + seconds
        while True:
            if not self._silence(min(every, max(deadline - time.monotonic(), 0.0))):
                return False
            self.wfile.write(b"%x\r\n%s\r\n" % (len(keepalive), keepalive))
            if deadline - time.monotonic() <= 0:
                return True

    def _silence(self, seconds: float) -> bool:
        """Wait; False when the server is stopping or the client closed the connection."""
        emu = self.server.emulator
        deadline = time.monotonic() + seconds
        with selectors.DefaultSelector() as sel:
            sel.register(emu._wake_r, selectors.EVENT_READ)
            sel.register(self.connection, selectors.EVENT_READ)
            while True:
                if emu._stopping.is_set():
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return True
                for key, _ in sel.select(left):
                    if key.fileobj is emu._wake_r:
                        return False
                    try:
                        peek = self.connection.recv(1, socket.MSG_PEEK)
                    except OSError:
                        return False
                    if not peek:
                        return False
                    sel.unregister(self.connection)  # pipelined bytes: stop watching, keep waiting

    def _abort(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
