"""Reading a trace: JSON Lines in, checked records and decoded events out, grouped by request.

The reader is the trust boundary of replay (TR-6). It reads the file in fixed-size blocks, so a
single enormous line costs at most `max_line` bytes of memory before it is refused; every line must
be a JSON object of a schema version this library knows, with fields of the documented types; any
defect raises `TraceFormatError` naming the file and the line. Values are only ever checked and
copied into our own dataclasses: nothing from a trace is imported, evaluated or unpickled. The
items of an `events` line are decoded by `items.py`, which keeps runs of text deltas as `DeltaRun`s.
"""

from __future__ import annotations

import gc
import io
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO, NamedTuple

from ..effects import EFFECTS
from ..errors import TraceFormatError
from ..guards import GUARDS
from ..machine import TRIGGER_ALIASES, TRIGGERS, State
from .codec import CodecError
from .items import DeltaRun, decode_items
from .records import SCHEMA_VERSION, TransitionRecord

__all__ = [
    "MAX_LINE_BYTES",
    "DeltaRun",
    "EventBatch",
    "RecordedEvent",
    "RequestHeader",
    "RequestTrace",
    "Trace",
    "iter_lines",
    "read_trace",
]

MAX_LINE_BYTES = 16 * 1024 * 1024
_BLOCK = 1024 * 1024
_STATES = frozenset(state.value for state in State)


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """The settings and session memory a request's machine started with (its `request` line)."""

    request_id: str
    settings: dict[str, Any]
    memory: dict[str, Any]
    record_wire: bool = False
    api: str | None = None
    model: str | None = None
    line: int = 0
    routes: tuple[str, ...] = ()  # RT-1: the names of the request's routes, in order
    route_retries: tuple[int | None, ...] = ()  # RC-8: each route's own cap on its retries
    # each route as the header lists it (name, api, model, host: what `fsm-agent tune` groups by)
    route_details: tuple[dict[str, Any], ...] = ()


class RecordedEvent(NamedTuple):
    """One event as the machine was fed it: when, in which attempt and state."""

    t: float
    attempt: int
    state: str
    event: object
    line: int


@dataclass(slots=True)
class EventBatch:
    """The events of one `events` line: fed in one attempt and state, in order.

    An entry of `events` is an event, or a `DeltaRun` standing for several consecutive deltas
    (its entry in `times` is then the time of its first delta)."""

    attempt: int
    state: str
    line: int
    times: list[float]
    events: list[object]

    def __iter__(self) -> Iterator[tuple[float, object]]:
        """(t, event) for every single event of the line, runs taken apart."""
        for t, event in zip(self.times, self.events, strict=True):
            if type(event) is DeltaRun:
                yield from zip(event.times, event.deltas(), strict=True)
            else:
                yield t, event


@dataclass(slots=True)
class RequestTrace:
    request_id: str
    header: RequestHeader | None = None
    records: list[TransitionRecord] = field(default_factory=list)
    record_lines: list[int] = field(default_factory=list)
    batches: list[EventBatch] = field(default_factory=list)
    cost: dict[str, Any] | None = None  # COST-1: the ledger the request ended with (its `cost` line)

    @property
    def has_wire(self) -> bool:
        return bool(self.batches)

    @property
    def events(self) -> list[RecordedEvent]:
        """Every recorded event, one by one (runs of deltas taken apart)."""
        return [
            RecordedEvent(t, batch.attempt, batch.state, event, batch.line)
            for batch in self.batches
            for t, event in batch
        ]

    @property
    def event_count(self) -> int:
        return sum(
            len(event) if type(event) is DeltaRun else 1 for batch in self.batches for event in batch.events
        )


@dataclass(slots=True)
class Trace:
    source: str
    requests: dict[str, RequestTrace] = field(default_factory=dict)

    def request(self, request_id: str) -> RequestTrace:
        found = self.requests.get(request_id)
        if found is None:
            found = self.requests[request_id] = RequestTrace(request_id)
        return found


class _LineError(Exception):
    pass


# -- lines ------------------------------------------------------------------------------------------
def iter_lines(
    stream: BinaryIO, max_line: int = MAX_LINE_BYTES, name: str = "trace"
) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, bytes, ended by a newline) for each line, reading fixed-size blocks.

    A line longer than `max_line` bytes raises TraceFormatError as soon as the limit is passed,
    without reading the rest of it.
    """
    lineno = 0
    pending: list[bytes] = []
    pending_size = 0
    while True:
        block = stream.read(_BLOCK)
        if not block:
            break
        pieces = block.split(b"\n")
        tail = pieces.pop()
        for piece in pieces:
            lineno += 1
            if pending:
                piece = b"".join(pending) + piece
                pending.clear()
                pending_size = 0
            if len(piece) > max_line:
                raise _too_long(name, lineno, max_line)
            yield lineno, piece, True
        if tail:
            pending_size += len(tail)
            if pending_size > max_line:
                raise _too_long(name, lineno + 1, max_line)
            pending.append(tail)
    if pending:
        yield lineno + 1, b"".join(pending), False


def _too_long(name: str, lineno: int, max_line: int) -> TraceFormatError:
    return TraceFormatError(f"{name}, line {lineno}: line longer than {max_line} bytes; not read")


# -- checking one line --------------------------------------------------------------------------------
def _get(obj: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = obj.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, (int, float))):
        expected = kind.__name__ if isinstance(kind, type) else "number"
        raise _LineError(f"field {key!r} must be {expected}, not {type(value).__name__}")
    return value


def _record(obj: dict[str, Any]) -> TransitionRecord:
    """A transition line, every name in it checked against the table (SEC-7): nothing a trace
    says is called or trusted by name."""
    guards = _get(obj, "guards", dict)
    if not all(isinstance(value, bool) for value in guards.values()):
        raise _LineError("guard values must be booleans")
    unknown = [name for name in guards if name not in GUARDS]
    if unknown:
        raise _LineError(f"unknown guard {unknown[0]!r}")
    trigger = _get(obj, "trigger", str)
    trigger = TRIGGER_ALIASES.get(trigger, trigger)  # an older trace's name for today's trigger
    if trigger not in TRIGGERS:
        raise _LineError(f"unknown trigger {trigger!r}")
    for name in ("source", "dest"):
        if _get(obj, name, str) not in _STATES:
            raise _LineError(f"unknown state {obj[name]!r} in field {name!r}")
    cause = obj.get("cause", {})
    inputs = obj.get("inputs", {})
    if not isinstance(cause, dict) or not isinstance(inputs, dict):
        raise _LineError("fields 'cause' and 'inputs' must be objects")
    route = obj.get("route")
    if not isinstance(route, (str, type(None))):
        raise _LineError("field 'route' must be a string")
    effects = obj.get("effects", [])  # older traces have none
    if not isinstance(effects, list) or not all(isinstance(name, str) for name in effects):
        raise _LineError("field 'effects' must be a list of strings")
    unknown_effects = [name for name in effects if name not in EFFECTS]
    if unknown_effects:
        raise _LineError(f"unknown effect {unknown_effects[0]!r}")
    return TransitionRecord(
        request_id=_get(obj, "request_id", str),
        attempt=_get(obj, "attempt", int),
        seq=_get(obj, "seq", int),
        t=float(_get(obj, "t", (int, float))),
        trigger=trigger,
        source=_get(obj, "source", str),
        dest=_get(obj, "dest", str),
        guards=guards,
        visible_chars=_get(obj, "visible_chars", int),
        tools_in_flight=_get(obj, "tools_in_flight", int),
        cause=cause,
        inputs=inputs,
        route=route,
        effects=tuple(effects),
    )


def _route_cap(value: Any) -> int | None:
    """RC-8: a route's recorded cap on its retries (anything but a whole number >= 0: none)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _header(obj: dict[str, Any], lineno: int) -> RequestHeader:
    api, model = obj.get("api"), obj.get("model")
    if not isinstance(api, (str, type(None))) or not isinstance(model, (str, type(None))):
        raise _LineError("fields 'api' and 'model' must be strings")
    routes = obj.get("routes", [])
    if not isinstance(routes, list) or not all(
        isinstance(route, dict) and isinstance(route.get("name"), str) for route in routes
    ):
        raise _LineError("field 'routes' must be a list of objects with a 'name'")
    return RequestHeader(
        routes=tuple(route["name"] for route in routes),
        route_retries=tuple(_route_cap(route.get("retries")) for route in routes),
        route_details=tuple(
            {
                key: route.get(key)
                for key in ("name", "api", "model", "host")
                if isinstance(route.get(key), str)
            }
            for route in routes
        ),
        request_id=_get(obj, "request_id", str),
        settings=_get(obj, "settings", dict),
        memory=_get(obj, "memory", dict),
        record_wire=bool(obj.get("record_wire", False)),
        api=api,
        model=model,
        line=lineno,
    )


def _add(trace: Trace, obj: Any, lineno: int) -> None:
    if type(obj) is not dict:
        raise _LineError("a trace line must be a JSON object")
    schema = obj.get("schema")
    if schema != SCHEMA_VERSION:
        if isinstance(schema, int) and not isinstance(schema, bool) and schema > SCHEMA_VERSION:
            raise _LineError(
                f"schema version {schema} is newer than this fsm_agent reads ({SCHEMA_VERSION}); "
                "upgrade fsm_agent to replay it"
            )
        raise _LineError(f"no valid schema version (got {schema!r}, expected {SCHEMA_VERSION})")
    kind = obj.get("type")
    if kind == "events":
        request_id = obj.get("request_id")
        attempt = obj.get("attempt")
        state = obj.get("state")
        items = obj.get("events")
        if (
            type(request_id) is not str
            or type(attempt) is not int
            or type(state) is not str
            or state not in _STATES
            or type(items) is not list
        ):
            raise _LineError("an events line needs request_id, attempt, a known state and a list of events")
        try:
            times, events = decode_items(items)
        except CodecError as exc:
            raise _LineError(str(exc)) from None
        trace.request(request_id).batches.append(EventBatch(attempt, state, lineno, times, events))
    elif kind == "transition":
        record = _record(obj)
        found = trace.request(record.request_id)
        found.records.append(record)
        found.record_lines.append(lineno)
    elif kind == "request":
        header = _header(obj, lineno)
        found = trace.request(header.request_id)
        if found.header is not None or found.records or found.batches:
            raise _LineError(f"request {header.request_id} announced twice or after its records")
        found.header = header
    elif kind == "cost":  # COST-1: read as data only; replay prints it, never executes it
        request_id, cost = obj.get("request_id"), obj.get("cost")
        if type(request_id) is not str or type(cost) is not dict or type(cost.get("attempts")) is not list:
            raise _LineError("a cost line needs a request_id and a cost with its attempts")
        trace.request(request_id).cost = cost
    else:
        raise _LineError(f"unknown line type {kind!r}")


# -- the whole trace ----------------------------------------------------------------------------------
def _open_regular(name: str | bytes) -> Any:
    """`name` opened for reading if it is a regular file. A FIFO with no writer would block the
    reader forever, a device would never end: both are refused at once (TraceFormatError). Opened
    without blocking, then checked on the open descriptor (no race with a rename)."""
    fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise TraceFormatError(f"{os.fsdecode(name)}: is a directory, not a trace file")
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
            raise TraceFormatError(f"{os.fsdecode(name)}: is {kind}, not a regular trace file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_trace(source: Any, *, max_line: int = MAX_LINE_BYTES) -> Trace:
    """Read a trace from a path, an open binary file, or a sink that keeps `lines` (MemorySink)."""
    if isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        try:
            with _open_regular(name) as stream:
                return _read_stream(stream, name, max_line)
        except FileNotFoundError:
            raise TraceFormatError(f"{name}: no such trace file") from None
        except IsADirectoryError:
            raise TraceFormatError(f"{name}: is a directory, not a trace file") from None
        except OSError as exc:  # unreadable: permissions, a device, an I/O error
            raise TraceFormatError(f"{name}: cannot read the trace file: {exc.strerror or exc}") from None
    lines = getattr(source, "lines", None)
    if isinstance(lines, list):
        flush = getattr(source, "flush", None)
        if callable(flush):
            flush()
        encoded = "\n".join(lines).encode("ascii", "backslashreplace") + b"\n"
        return _read_stream(io.BytesIO(encoded), "memory trace", max_line)
    if hasattr(source, "read"):
        return _read_stream(source, getattr(source, "name", "trace"), max_line)
    raise TypeError("replay needs a trace path, an open binary file or a MemorySink")


def _read_stream(stream: BinaryIO, name: str, max_line: int) -> Trace:
    # A wire recording becomes many small acyclic objects; the cyclic collector would only rescan
    # them (a third of the reading time), so it pauses while a trace is read.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _parse_stream(stream, name, max_line)
    finally:
        if collecting:
            gc.enable()


def _parse_stream(stream: BinaryIO, name: str, max_line: int) -> Trace:
    trace = Trace(str(name))
    loads = json.loads
    for lineno, raw, ended in iter_lines(stream, max_line, str(name)):
        if not raw.strip():
            continue
        try:
            obj = loads(raw)
        except ValueError as exc:
            if not ended:
                raise TraceFormatError(
                    f"{name}, line {lineno}: truncated (the file ends inside this line)"
                ) from None
            raise TraceFormatError(f"{name}, line {lineno}: not valid JSON ({exc})") from None
        except RecursionError:
            raise TraceFormatError(f"{name}, line {lineno}: nested too deeply") from None
        try:
            _add(trace, obj, lineno)
        except _LineError as exc:
            raise TraceFormatError(f"{name}, line {lineno}: {exc}") from None
    return trace
