"""OpenTelemetry spans, span events and metrics for each request (OT-1..3).

One more consumer of a request's transition records, beside the log and the trace sinks: it never
sees an event the machine did not record, so it cannot tell a different story. Per request
(`RequestTelemetry`): a span named per the GenAI semantic conventions ("chat gpt-4.1"), current
while the request runs (so the caller's own instrumentation nests under it); a child span per
attempt, per non-streaming fallback and per wait; one span event `fsm_agent.transition` per
record; the result's (or the error's) attributes at the end; then the metrics of OT-2.

The session imports this module only when telemetry is on and a tracer or meter provider is set
(`observe.sdk_configured`), so without one nothing here is ever loaded. Tracer and meter come from
the global providers, and once the application has set one, no code of ours changes.

Never raises into a request and never changes its outcome (OT-3): every entry point catches what
the SDK (a broken processor or exporter) or this module raises, and logs it. Never records prompt
or completion text unless the application opts in (`Session(telemetry_content=True)` or the GenAI
convention's `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`). Never performs the request's I/O.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from contextvars import Token
from types import TracebackType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from .observe import sdk_configured
from .redact import error_text, traceback_text
from .result import StreamResult
from .telemetry_attributes import (
    attempt_cost_attributes,
    cost_attributes,
    input_attributes,
    output_messages,
    request_attributes,
    response_attributes,
    server_of,
)
from .trace.records import TransitionRecord

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "RequestTelemetry",
    "Telemetry",
    "capture_content_from_env",
    "sdk_configured",
]

log = logging.getLogger("fsm_agent")

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_CAPTURE_ON = frozenset({"true", "1", "yes", "on", "span_only", "span_and_event"})

# gen_ai.operation.name and gen_ai.provider.name per API (the conventions' well-known values).
_OPERATION = {"gemini_generate_content": "generate_content"}
_PROVIDER = {
    "chat_completions": "openai",
    "responses": "openai",
    "anthropic_messages": "anthropic",
    "bedrock_converse": "aws.bedrock",
    "gemini_generate_content": "gcp.gemini",
}
# The machine's states grouped into the phases that get a child span: an attempt (its stream is
# open), the non-streaming fallback request, and a wait between attempts (BO-2, when present).
_PHASE_OF = {
    "connecting": "attempt",
    "streaming_text": "attempt",
    "streaming_tool": "attempt",
    "finishing": "attempt",
    "fallback": "fallback",
    "waiting": "wait",
}
# Entering one of these states is counted (OT-2). "switching" and "waiting" exist once routes and
# back-off are in the table; counting by name keeps this module independent of the table.
_COUNTED = {
    "retrying": "retries",
    "stalled": "stalls",
    "stubbing": "stubs",
    "fallback": "fallbacks",
    "switching": "route_switches",
}
# The transition that delivered the first output chunk of the request (time to first chunk).
_FIRST_CHUNK_TRIGGERS = frozenset({"text", "tool_start"})

# The GenAI conventions' advised bucket boundaries.
_DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
_TOKEN_BUCKETS = [float(4**n) for n in range(14)]


def capture_content_from_env() -> bool:
    """The GenAI convention's switch: content is captured only when it says so."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in _CAPTURE_ON


class _Instruments:
    """The metric instruments of OT-2, made once per process from the global meter provider."""

    def __init__(self) -> None:
        meter = metrics.get_meter("fsm_agent")
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.first_chunk = meter.create_histogram(
            "gen_ai.client.operation.time_to_first_chunk",
            unit="s",
            description="Time from the request's start to the first output chunk delivered.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self.counters = {
            "retries": meter.create_counter(
                "fsm_agent.retries", unit="{retry}", description="Attempts retried after a failure."
            ),
            "stalls": meter.create_counter(
                "fsm_agent.stalls", unit="{stall}", description="Attempts the watchdog found silent."
            ),
            "stubs": meter.create_counter(
                "fsm_agent.stubs", unit="{stub}", description="Requests ended with a stub (RES-4/5)."
            ),
            "fallbacks": meter.create_counter(
                "fsm_agent.fallbacks",
                unit="{fallback}",
                description="Requests served by the non-streaming fallback (RES-9).",
            ),
            "route_switches": meter.create_counter(
                "fsm_agent.route_switches", unit="{switch}", description="Switches to the next route."
            ),
        }


_instruments: _Instruments | None = None
_instruments_lock = threading.Lock()
_warned = False


def _instruments_now() -> _Instruments:
    global _instruments
    if _instruments is None:
        with _instruments_lock:  # concurrent first requests make them once
            if _instruments is None:
                _instruments = _Instruments()
    return _instruments


def _failed(where: str) -> None:
    """Telemetry broke (a processor, an exporter, or this module): say so once, carry on (OT-3)."""
    global _warned
    if not _warned:
        _warned = True
        log.warning(
            "fsm_agent telemetry failed in %s; ignored (the request is unaffected)", where, exc_info=True
        )
    else:
        log.debug("fsm_agent telemetry failed in %s; ignored", where, exc_info=True)


class Telemetry:
    """A session's telemetry settings; `request()` makes each request's observer."""

    def __init__(self, capture_content: bool | None = None) -> None:
        self.capture_content = capture_content_from_env() if capture_content is None else capture_content
        self._tracer = trace.get_tracer("fsm_agent")

    def request(
        self, *, api: str, model: str | None, params: Mapping[str, Any], client: Any
    ) -> RequestTelemetry:
        return RequestTelemetry(self, api=api, model=model, params=params, client=client)


class RequestTelemetry:
    """One request's span tree and metrics. Use as a context manager around the driver's run; feed it
    every record (`on_record`) and, on success, the result (`succeeded`). Never raises."""

    def __init__(
        self, telemetry: Telemetry, *, api: str, model: str | None, params: Mapping[str, Any], client: Any
    ) -> None:
        self._telemetry = telemetry
        self._api = api
        self._params = params
        operation = _OPERATION.get(api, "chat")
        self.name = f"{operation} {model}" if model else operation
        self.base: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": _PROVIDER.get(api, api),
        }
        if model:
            self.base["gen_ai.request.model"] = model
        try:
            self.base.update(server_of(client, api))
        except Exception:
            _failed("reading the server address")
        self.span: Span | None = None
        self._token: Token[Context] | None = None
        self._t0 = 0.0
        self._phase: tuple[str, Span, Token[Context]] | None = None  # name, span, context token
        self._counts: dict[str, int] = {}
        self._attempts = 0
        self._first_chunk: float | None = None
        self._route: str | None = None
        self._ok = False
        self._response: dict[str, Any] = {}
        self._tokens: dict[str, int] = {}

    # -- the request's lifetime -------------------------------------------------------------------
    def __enter__(self) -> RequestTelemetry:
        try:
            attributes = {**self.base, "gen_ai.request.stream": True, **request_attributes(self._params)}
            if self._telemetry.capture_content:
                attributes.update(input_attributes(self._api, self._params))
            span = self._telemetry._tracer.start_span(self.name, kind=SpanKind.CLIENT, attributes=attributes)
            self.span = span
            self._token = otel_context.attach(trace.set_span_in_context(span))
        except Exception:
            _failed("starting the request span")
        self._t0 = time.perf_counter()  # after the span's start: its times hold the measured ones
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        duration = time.perf_counter() - self._t0
        try:
            self._end_phase(None)
        except Exception:
            _failed("ending a child span")
        try:
            if error is not None:
                self._end_failed(error)
            if self.span is not None:
                self.span.end()
        except Exception:
            _failed("ending the request span")
        finally:
            token, self._token = self._token, None
            if token is not None:
                try:
                    otel_context.detach(token)
                except Exception:
                    _failed("detaching the request's context")
        try:
            self._emit_metrics(duration, error)
        except Exception:
            _failed("recording the metrics")

    # -- the machine's records ----------------------------------------------------------------------
    def on_record(self, record: TransitionRecord) -> None:
        try:
            self._record(record)
        except Exception:
            _failed("recording a transition")

    def _record(self, record: TransitionRecord) -> None:
        dest = record.dest
        counted = _COUNTED.get(dest)
        if counted is not None and dest != record.source:
            self._counts[counted] = self._counts.get(counted, 0) + 1
        if self._first_chunk is None and record.trigger in _FIRST_CHUNK_TRIGGERS:
            self._first_chunk = time.perf_counter() - self._t0
        route = _record_fact(record, "route")
        if route is not None:
            self._route = str(route)
        span = self.span
        if span is None or not span.is_recording():
            self._phases(record, None)
            return
        try:
            span.add_event("fsm_agent.transition", _event_attributes(record))
            stall = _stall_attributes(record)
            if stall:  # WD-8: the request's span says its (latest) stall's phase and clock
                span.set_attributes(stall)
        finally:  # the child spans follow the machine even when the event could not be added
            self._phases(record, span)

    def _phases(self, record: TransitionRecord, parent: Span | None) -> None:
        """End the phase the record leaves and start the one it enters (one child span each)."""
        phase = _PHASE_OF.get(record.dest)
        if phase == "attempt" and record.dest == "connecting":
            self._attempts += 1
        open_phase = self._phase
        if open_phase is not None and (open_phase[0] != phase or record.dest == "connecting"):
            self._end_phase(record)
        if phase is None or self._phase is not None or parent is None:
            return
        attributes: dict[str, Any] = {"fsm_agent.phase": phase}
        if phase == "attempt":
            attributes["fsm_agent.attempt"] = self._attempts
        elif phase == "wait":
            attributes.update(_wait_attributes(record))
        if self._route is not None:
            attributes["fsm_agent.route"] = self._route
        child = self._telemetry._tracer.start_span(
            f"fsm_agent.{phase}", context=trace.set_span_in_context(parent), attributes=attributes
        )
        # Current while it lasts, so that what the SDK traces itself (the anthropic SDK's own span,
        # an HTTP instrumentation) nests under the attempt that made the call. The machine is fed
        # on the thread (task) that entered the request, so attach and detach pair up there.
        self._phase = (phase, child, otel_context.attach(trace.set_span_in_context(child)))

    def _end_phase(self, record: TransitionRecord | None) -> None:
        open_phase, self._phase = self._phase, None
        if open_phase is None:
            return
        _, child, token = open_phase
        otel_context.detach(token)
        if record is not None:
            child.set_attribute("fsm_agent.outcome", record.dest)
            error = record.inputs.get("error")
            if error and record.dest not in ("done", "finishing"):
                child.set_attribute("error.type", str(error))
                child.set_status(Status(StatusCode.ERROR, str(error)))
        child.end()

    # -- the end ------------------------------------------------------------------------------------
    def succeeded(self, result: StreamResult) -> None:
        """The request returned `result`: its attributes go on the span (call before leaving)."""
        try:
            self._ok = True
            self._response, self._tokens = response_attributes(result)
            span = self.span
            if span is None or not span.is_recording():
                return
            attributes: dict[str, Any] = {
                **self._response,
                "fsm_agent.attempts": result.attempts,
                "fsm_agent.stub": result.stub,
                "fsm_agent.streamed": result.streamed,
                "fsm_agent.route": self._route_name(result),
            }
            if result.finish_reason:
                attributes["gen_ai.response.finish_reasons"] = [result.finish_reason]
            usage = result.usage
            if usage is not None:
                for key, value in (
                    ("gen_ai.usage.input_tokens", usage.input_tokens),
                    ("gen_ai.usage.output_tokens", usage.output_tokens),
                    ("gen_ai.usage.cache_read.input_tokens", usage.cached_tokens),
                ):
                    if value is not None:
                        attributes[key] = value
            if result.dropped_tool_names:
                attributes["fsm_agent.dropped_tool_names"] = list(result.dropped_tool_names)
            if self._first_chunk is not None:
                attributes["gen_ai.response.time_to_first_chunk"] = self._first_chunk
            if self._telemetry.capture_content:
                attributes["gen_ai.output.messages"] = json.dumps(output_messages(result), ensure_ascii=False)
            if result.cost is not None:  # COST-1: the ledger's totals, and one event per attempt
                attributes.update(cost_attributes(result.cost))
                for line in result.cost.attempts:
                    span.add_event("fsm_agent.attempt.cost", attempt_cost_attributes(line))
            span.set_attributes(attributes)
        except Exception:
            _failed("recording the result")

    def _end_failed(self, error: BaseException) -> None:
        span = self.span
        if span is None or not span.is_recording():
            return
        span.set_attributes(
            {
                "error.type": type(error).__qualname__,
                "fsm_agent.attempts": self._attempts,
                "fsm_agent.stub": False,
                "fsm_agent.route": self._route_name(None),
            }
        )
        # SEC-9: the event's message and stack trace as the trace has them: redacted
        redacted = {"exception.message": error_text(error), "exception.stacktrace": traceback_text(error)}
        span.record_exception(error, attributes=redacted)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error_text(error)}"))

    def _route_name(self, result: StreamResult | None) -> str:
        # RT-1: the route that answered; without routes, the name a route would have by default.
        route = getattr(result, "route", None) if result is not None else None
        if route:
            return str(route)
        if self._route is not None:
            return self._route
        model = self.base.get("gen_ai.request.model")
        return f"{self._api}:{model}" if model else self._api

    def _emit_metrics(self, duration: float, error: BaseException | None) -> None:
        instruments = _instruments_now()
        attributes = dict(self.base)
        if error is not None:
            attributes["error.type"] = type(error).__qualname__
        elif self._ok:
            model = self._response.get("gen_ai.response.model")
            if model:
                attributes["gen_ai.response.model"] = model
        instruments.duration.record(duration, attributes)
        if self._first_chunk is not None:
            instruments.first_chunk.record(self._first_chunk, attributes)
        for name, count in self._counts.items():
            instruments.counters[name].add(count, self.base)
        for token_type, count in self._tokens.items():
            instruments.tokens.record(count, {**attributes, "gen_ai.token.type": token_type})


def _record_fact(record: TransitionRecord, name: str) -> Any:
    """A fact a record may carry as a field (newer records) or among its guard inputs."""
    value = getattr(record, name, None)
    if value is None:
        value = record.inputs.get(name)
    return value


def _wait_attributes(record: TransitionRecord) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    wait_s = _record_fact(record, "wait_s")
    if not isinstance(wait_s, int | float) or isinstance(wait_s, bool) or wait_s <= 0:
        return attributes  # no wait decided (records carry 0.0 then)
    attributes["fsm_agent.wait_s"] = float(wait_s)
    source = _record_fact(record, "wait_source")
    if source:
        attributes["fsm_agent.wait_source"] = str(source)
    return attributes


def _event_attributes(record: TransitionRecord) -> dict[str, Any]:
    """A transition as span-event attributes: what fired it, where it went, the deciding guards."""
    attributes: dict[str, Any] = {
        "fsm_agent.trigger": record.trigger,
        "fsm_agent.source": record.source,
        "fsm_agent.dest": record.dest,
        "fsm_agent.attempt": record.attempt,
        "fsm_agent.seq": record.seq,
        "fsm_agent.t": record.t,
        "fsm_agent.visible_chars": record.visible_chars,
        "fsm_agent.tools_in_flight": record.tools_in_flight,
    }
    if record.guards:
        attributes["fsm_agent.guards"] = [
            f"{name}={str(value).lower()}" for name, value in record.guards.items()
        ]
    cause = record.cause.get("kind")
    if cause:
        attributes["fsm_agent.cause"] = str(cause)
    error = record.inputs.get("error")
    if error:  # the error the guards read (not `error.type`: a retried error is no failed request)
        attributes["fsm_agent.error"] = str(error)
    route = _record_fact(record, "route")
    if route is not None:
        attributes["fsm_agent.route"] = str(route)
    attributes.update(_wait_attributes(record))
    attributes.update(_stall_attributes(record))
    return attributes


def _stall_attributes(record: TransitionRecord) -> dict[str, Any]:
    """WD-8: the phase and the clock of the deadline that stalled an attempt."""
    phase, clock = record.cause.get("stall_phase"), record.cause.get("stall_clock")
    if not isinstance(phase, str):
        return {}
    return {"fsm_agent.stall_phase": phase, "fsm_agent.stall_clock": str(clock)}
