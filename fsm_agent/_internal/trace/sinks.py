"""Trace sinks: where a session's transition records (and, opt-in, its wire events) are written.

A sink is any object with `record_wire: bool`, `write_record(record)`, `write_event(request_id,
event, t, attempt, state)` (called only when `record_wire` is on), optionally
`write_request(request_id, header)`, and `close()`. `Session(trace=PATH)` appends JSON Lines to
PATH, created readable by its owner only (SEC-3); `Session(trace=sink)` takes any sink;
`MemorySink` keeps the very lines a file would hold, for tests and in-process replay.

Wire events are batched: the events a request's machine is fed between two of its transitions
share one `events` line, written just before the transition record they led to (or when the batch
grows large), and consecutive text (reasoning) deltas share one item of it, a run: their texts in
one list, their times in another. That keeps wire recording cheap and the trace fast to replay.
The line shapes are in docs/trace-format.md. Sinks never see request parameters, headers or client
settings, so credentials cannot reach a trace (TR-5).
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import weakref
from pathlib import Path
from typing import Any, Protocol

from ..events import ReasoningDelta, RefusalDelta, ResponseMeta, TextDelta
from .records import SCHEMA_VERSION, TransitionRecord

__all__ = [
    "EventRecorder",
    "JsonlSink",
    "MemorySink",
    "SinkTap",
    "TraceSink",
    "escaped",
    "resolve_sink",
    "write_request_header",
]

_log = logging.getLogger("fsm_agent")
_dumps = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode
_quote = json.encoder.encode_basestring_ascii
_BATCH_EVENTS = 1000
_BATCH_CHARS = 256 * 1024
_FLUSH_AT = 64 * 1024
_TEXT_KINDS: dict[type, str]
_TEXT_KINDS = {TextDelta: "TextDelta", ReasoningDelta: "ReasoningDelta", RefusalDelta: "RefusalDelta"}
_RUN_KINDS: dict[type, str]
_RUN_KINDS = {TextDelta: "TextDelta", ReasoningDelta: "ReasoningDelta"}  # consecutive ones share an item


class TraceSink(Protocol):
    record_wire: bool

    def write_record(self, record: TransitionRecord) -> None: ...

    def write_event(self, request_id: str, event: object, t: float, attempt: int, state: str) -> None: ...

    def close(self) -> None: ...


def event_item(event: object, t: float) -> str:
    """One event of an `events` line: `[t, kind]` or `[t, kind, payload]`, as JSON text."""
    t = round(t, 6)
    cls = type(event)
    kind = _TEXT_KINDS.get(cls)
    if kind is not None:
        return f'[{t!r},"{kind}",{_quote(event.text)}]'  # type: ignore[attr-defined]
    if cls is ResponseMeta:
        meta: ResponseMeta = event  # type: ignore[assignment]
        if (
            type(meta.id) is str
            and type(meta.model) is str
            and meta.provider_data is None
            and meta.raw is None
        ):
            # Chat Completions sends one with every chunk: skip the general encoder.
            return f'[{t!r},"ResponseMeta",{{"id":{_quote(meta.id)},"model":{_quote(meta.model)}}}]'
    # The general encoder (and its module) only when a sink records such an event: a request
    # whose trace holds no wire events never imports the codec.
    from .codec import encode_event

    fields = encode_event(event)
    kind = fields.pop("kind")
    item = [t, kind, fields] if fields else [t, kind]
    try:
        return _dumps(item)
    except (TypeError, ValueError, RecursionError):
        # SEC-6: a value JSON cannot hold (NaN, 1e999 as a float, an object, a non-string key) is
        # written escaped, as text, rather than fail the request it belongs to.
        return _dumps(escaped(item))


def escaped(value: Any, depth: int = 0) -> Any:
    """`value` as JSON can hold it: non-finite floats and foreign objects as their repr, keys as
    strings, nesting past 32 levels cut."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth >= 32:
        return "<too deep>"
    if isinstance(value, dict):
        return {str(key): escaped(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [escaped(item, depth + 1) for item in value]
    return f"<{type(value).__name__}>"


def write_request_header(sink: Any, machine: Any, **facts: Any) -> None:
    """Announce a request to `sink`: the settings and session memory its machine starts with.

    `facts` adds what the session resolved outside the machine (api, model, stale_timeout).
    Replay rebuilds the machine from this line; a sink without `write_request` is skipped.
    """
    write = getattr(sink, "write_request", None)
    if write is None:
        return
    ctx = machine.ctx
    stale_timeout = facts.pop("stale_timeout", None)
    header = {
        **facts,
        "record_wire": bool(getattr(sink, "record_wire", False)),
        "settings": {
            "retries": ctx.retries,
            "unsupported": ctx.unsupported,
            "stale_giveup": ctx.stale_giveup,
            "stale_timeout": stale_timeout,
            "backoff_base": ctx.backoff_base,
            "backoff_cap": ctx.backoff_cap,
            "max_wait": ctx.max_wait_setting,  # None: BO-3's default bounds
            "seed": ctx.seed,
            # RC-1 / RC-3: the recovery ladder (issue 25b)
            "recover_resume": ctx.recover_resume,
            "recover_continue": ctx.recover_continue,
            "recover_restart": ctx.recover_restart,
            "final_raise": ctx.final_raise,
            "route_prefill": list(ctx.route_prefill),
            **({"plain": True} if ctx.plain else {}),  # WR-1: only a plain request's header says it
        },
        "memory": {
            "stale_streak": ctx.stale_streak,
            "streaming_disabled": ctx.streaming_disabled,
            "stream_options_unsupported": ctx.stream_options_unsupported,
            "cooldown_s": ctx.cooldown_s,
            "breaker_probe": ctx.breaker_probe,
            **({"capacity_wait_s": ctx.capacity_wait_s} if ctx.capacity_wait_s else {}),  # CAP-2
        },
    }
    write(machine.request_id, header)


class SinkTap:
    """One request's way to the log and its trace sink (SEC-6): recording never changes an outcome.
    A record the log cannot take is dropped with a warning; a sink that fails is logged once and
    detached from the request, which goes on as if it had none."""

    __slots__ = ("_log", "_recorder", "_sink")

    def __init__(self, sink: TraceSink | None, log: Any) -> None:
        self._sink = sink
        self._log = log
        self._recorder: EventRecorder | None = None

    def watch(self, recorder: EventRecorder) -> None:
        self._recorder = recorder

    def record(self, record: TransitionRecord) -> None:
        try:
            self._log(record)
        except Exception:
            _log.warning("logging a transition record failed; record dropped", exc_info=True)
        sink = self._sink
        if sink is not None:
            try:
                sink.write_record(record)
            except Exception:
                self._detach("a transition record")

    def event(self, event: object, t: float) -> None:
        recorder = self._recorder
        if recorder is not None and self._sink is not None:
            try:
                recorder(event, t)
            except Exception:
                self._detach("a wire event")

    def _detach(self, what: str) -> None:
        self._sink = None
        _log.warning("the trace sink failed writing %s; detached from this request", what, exc_info=True)


class EventRecorder:
    """The machine's `on_event` hook under wire recording: every event fed, with where it met the
    machine (attempt number and state), goes to the sink before the machine applies it."""

    __slots__ = ("_machine", "_request_id", "_sink", "_state", "_state_name")

    def __init__(self, sink: TraceSink, request_id: str) -> None:
        self._sink = sink
        self._request_id = request_id
        self._machine: Any = None
        self._state: Any = None
        self._state_name = ""

    def attach(self, machine: Any) -> None:
        self._machine = machine

    def __call__(self, event: object, t: float) -> None:
        machine = self._machine
        state = machine.state
        if state is not self._state:  # Enum.value is slow; the state changes rarely
            self._state, self._state_name = state, state.value
        self._sink.write_event(self._request_id, event, t, machine.ctx.attempt, self._state_name)


class _Batch:
    """One request's pending `events` line: its items, and the run of deltas being gathered."""

    __slots__ = ("attempt", "chars", "count", "items", "run_kind", "run_texts", "run_times", "state")

    def __init__(self, attempt: int, state: str) -> None:
        self.attempt = attempt
        self.state = state
        self.items: list[str] = []
        self.count = 0  # events, a run counting each of its deltas
        self.chars = 0
        self.run_kind = ""  # "TextDelta" or "ReasoningDelta" while a run is gathered
        self.run_texts: list[str] = []  # JSON strings
        self.run_times: list[str] = []  # JSON numbers

    def end_run(self) -> None:
        """Close the run of deltas into one item: `[t, kind, [text, …], [t, …]]` (or a plain
        `[t, kind, text]` for a single delta)."""
        texts, times = self.run_texts, self.run_times
        if len(texts) == 1:
            self.items.append(f'[{times[0]},"{self.run_kind}",{texts[0]}]')
        elif texts:
            self.items.append(f'[{times[0]},"{self.run_kind}",[{",".join(texts)}],[{",".join(times)}]]')
        self.run_kind = ""
        self.run_texts = []
        self.run_times = []


class _LineSink:
    """The line shapes and the batching of wire events; subclasses say where a line goes."""

    def __init__(self, record_wire: bool) -> None:
        self.record_wire = record_wire
        self._lock = threading.Lock()
        self._batches: dict[str, _Batch] = {}

    def _emit(self, line: str, flush: bool) -> None:
        raise NotImplementedError

    def _flush_batch(self, request_id: str) -> None:
        batch = self._batches.pop(request_id, None)
        if batch is None:
            return
        if batch.run_kind:
            batch.end_run()
        self._emit(
            f'{{"schema":{SCHEMA_VERSION},"type":"events","request_id":{_quote(request_id)},'
            f'"attempt":{batch.attempt},"state":"{batch.state}","events":[{",".join(batch.items)}]}}',
            False,
        )

    def write_request(self, request_id: str, header: dict[str, Any]) -> None:
        line = _dumps({"schema": SCHEMA_VERSION, "type": "request", "request_id": request_id, **header})
        with self._lock:
            self._emit(line, True)

    def write_cost(self, request_id: str, cost: dict[str, Any]) -> None:
        """COST-1: the request's ledger, once it has ended (a `cost` line, after its records)."""
        line = _dumps({"schema": SCHEMA_VERSION, "type": "cost", "request_id": request_id, "cost": cost})
        with self._lock:
            self._flush_batch(request_id)
            self._emit(line, True)

    def write_record(self, record: TransitionRecord) -> None:
        line = _dumps({"schema": SCHEMA_VERSION, "type": "transition", **record.as_dict()})
        with self._lock:
            self._flush_batch(record.request_id)  # the events that led to it come first
            self._emit(line, True)

    def write_event(self, request_id: str, event: object, t: float, attempt: int, state: str) -> None:
        run_kind = _RUN_KINDS.get(type(event))
        if run_kind is not None:  # the bulk of a recording: gathered into a run of deltas
            text, time = _quote(event.text), repr(round(t, 6))  # type: ignore[attr-defined]
            item = ""
        else:
            item = event_item(event, t)
        with self._lock:
            batch = self._batches.get(request_id)
            if batch is not None and (batch.attempt != attempt or batch.state != state):
                self._flush_batch(request_id)
                batch = None
            if batch is None:
                batch = self._batches[request_id] = _Batch(attempt, state)
            if run_kind is not None:
                if batch.run_kind != run_kind:
                    if batch.run_kind:
                        batch.end_run()
                    batch.run_kind = run_kind
                batch.run_texts.append(text)
                batch.run_times.append(time)
                batch.chars += len(text) + len(time) + 2
            else:
                if batch.run_kind:
                    batch.end_run()
                batch.items.append(item)
                batch.chars += len(item)
            batch.count += 1
            if batch.count >= _BATCH_EVENTS or batch.chars >= _BATCH_CHARS:
                self._flush_batch(request_id)

    def flush(self) -> None:
        """Write out every pending batch of wire events."""
        with self._lock:
            for request_id in list(self._batches):
                self._flush_batch(request_id)
            self._emit("", True)


class MemorySink(_LineSink):
    """Keeps the lines a trace file would hold, as text (tests, the CLI, in-process replay)."""

    def __init__(self, record_wire: bool = False) -> None:
        super().__init__(record_wire)
        self.lines: list[str] = []

    def __repr__(self) -> str:
        return f"MemorySink(record_wire={self.record_wire}, lines={len(self.lines)})"

    def _emit(self, line: str, flush: bool) -> None:
        if line:
            self.lines.append(line)

    @property
    def records(self) -> list[TransitionRecord]:
        from .reader import read_trace  # the reader checks the lines as it would a file's

        self.flush()
        return [record for found in read_trace(self).requests.values() for record in found.records]

    def text(self) -> str:
        """The trace as a file would hold it."""
        self.flush()
        return "".join(line + "\n" for line in self.lines)

    def close(self) -> None:
        self.flush()


class _Output:
    """The sink's file descriptor and pending bytes; flushed and closed exactly once."""

    __slots__ = ("buffer", "fd")

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd
        self.buffer = bytearray()

    def flush(self) -> None:
        if self.fd is None or not self.buffer:
            return
        view = memoryview(self.buffer)
        try:
            while view:
                written = os.write(self.fd, view)
                view = view[written:]
        finally:
            view.release()
            self.buffer.clear()

    def close(self) -> None:
        if self.fd is None:
            return
        try:
            self.flush()
        finally:
            fd, self.fd = self.fd, None
            os.close(fd)


class JsonlSink(_LineSink):
    """Appends one JSON object per line to a file created readable by its owner only (SEC-3).

    Request headers and transition records are written through at once, each preceded by the
    batch of wire events that led to it; the file is flushed and closed by `close()`, or when the
    sink is garbage-collected.
    """

    def __init__(self, path: str | os.PathLike[str], record_wire: bool = False) -> None:
        super().__init__(record_wire)
        self.path = Path(path)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self._out = _Output(fd)
        self._finalizer = weakref.finalize(self, _Output.close, self._out)

    def __repr__(self) -> str:
        shown = str(self.path)
        shown = shown if len(shown) <= 120 else "…" + shown[-119:]
        return f"JsonlSink({shown!r}, record_wire={self.record_wire})"

    def _emit(self, line: str, flush: bool) -> None:
        out = self._out
        if out.fd is None:
            raise ValueError(f"the trace sink for {self.path} is closed")
        if line:
            out.buffer += line.encode("ascii")
            out.buffer += b"\n"
        if flush or len(out.buffer) >= _FLUSH_AT:
            out.flush()

    def close(self) -> None:
        with self._lock:
            if self._out.fd is None:
                return
            for request_id in list(self._batches):
                self._flush_batch(request_id)
            self._finalizer()


def resolve_sink(trace: Any, record_wire: bool = False) -> TraceSink | None:
    """`Session(trace=…)`: None, a path (a new `JsonlSink`), or a sink object."""
    if trace is None:
        if record_wire:
            raise ValueError("record_wire=True needs a trace (a path or a sink)")
        return None
    if isinstance(trace, (str, os.PathLike)):
        return JsonlSink(trace, record_wire=record_wire)
    if hasattr(trace, "write_record"):
        if record_wire and not getattr(trace, "record_wire", False):
            raise ValueError("this sink does not record the wire; create it with record_wire=True")
        return trace  # type: ignore[no-any-return]
    raise TypeError("trace must be a path or an object with write_record()/write_event()")
