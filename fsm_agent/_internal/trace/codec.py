"""Normalized events <-> plain JSON values, for wire recording (TR-2) and replay (TR-3).

Encoding keeps every fact the machine reads and the content a replay reproduces (text, reasoning,
tool-call fragments); it drops what cannot be written safely: SDK response objects are reduced to
their type name, error messages are redacted (TR-5). Decoding builds only the event dataclasses of
`fsm_agent._internal.events` from checked primitive values: nothing in a trace is ever imported, evaluated or
unpickled (TR-6). A foreign exception comes back as a `RecordedError` subclass that bears the
recorded class name and carries the recorded `ErrorKind`, so the guards decide as they did.
Never performs I/O.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

from .. import errors as _errors
from ..errors import ErrorKind, ProviderStreamError, ToolInputError, classify, status_of
from ..events import (
    AttemptClosed,
    AttemptFailed,
    ChoiceDelta,
    FallbackDelivered,
    FallbackFinished,
    FinishedResponse,
    FinishReason,
    Interrupt,
    Keepalive,
    ReasoningDelta,
    RefusalDelta,
    ResponseMeta,
    RouteLoaded,
    StaleTimeout,
    Start,
    StreamEnd,
    StreamPosition,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    UsageReport,
    WaitOver,
)
from ..redact import error_text, redact
from ..result import Usage, built

__all__ = [
    "EVENT_KINDS",
    "CodecError",
    "RecordedError",
    "RecordedResponse",
    "decode_event",
    "encode_event",
    "error_for",
]

_MAX_MESSAGE = 4096
_MAX_DEPTH = 32


class CodecError(ValueError):
    """A recorded event has the wrong shape; the reader turns it into TraceFormatError."""


class RecordedError(Exception):
    """Stands for a recorded foreign exception during replay; its class bears the recorded name."""

    kind: ErrorKind | None = None
    module: str | None = None
    status: int | None = None
    code: str | None = None

    @property
    def status_code(self) -> int | None:
        """The recorded HTTP status, where an SDK error keeps it (RT-2 decides on it)."""
        return self.status


class RecordedResponse:
    """Stands for a finished SDK response object, of which a trace keeps only the type name."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"RecordedResponse({self.type_name!r})"


# -- encoding ---------------------------------------------------------------------------------------
def _plain(value: Any, depth: int = 0) -> Any:
    """Provider extras as JSON values, strings redacted; anything else reduced to its type name."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return redact(value)
    if depth >= _MAX_DEPTH:
        return "<too deep>"
    if isinstance(value, dict):
        return {str(key): _plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item, depth + 1) for item in value]
    return f"<{type(value).__name__}>"


def encode_error(error: BaseException, from_callback: bool, kind: ErrorKind | None) -> dict[str, Any]:
    if kind is None and not from_callback:
        kind = classify(error)
    code = getattr(error, "code", None)
    return {
        "type": type(error).__name__,
        "module": type(error).__module__,
        "message": error_text(error, _MAX_MESSAGE),
        "kind": kind.value if kind is not None else None,
        "status": status_of(error),
        "code": code if isinstance(code, str) else None,
    }


def encode_event(event: object) -> dict[str, Any]:
    """One event as a JSON-ready dict: `kind` plus its fields (None fields left out)."""
    cls = type(event)
    if cls is TextDelta or cls is ReasoningDelta or cls is RefusalDelta:
        return {"kind": cls.__name__, "text": event.text}  # type: ignore[attr-defined]
    if cls is ToolCallDelta:
        assert isinstance(event, ToolCallDelta)
        out: dict[str, Any] = {"kind": "ToolCallDelta", "index": event.index}
        if event.id is not None:
            out["id"] = event.id
        if event.name is not None:
            out["name"] = event.name
        if event.arguments is not None:
            out["arguments"] = event.arguments
        if event.extra is not None:
            out["extra"] = _plain(event.extra)
        if event.type is not None:
            out["type"] = event.type
        return out
    encoder = _ENCODERS.get(cls)
    if encoder is None:
        raise CodecError(f"no trace encoding for event {cls.__name__}")
    return {"kind": cls.__name__, **encoder(event)}


def _usage_fields(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "cached_tokens": usage.cached_tokens,
    }


def _meta_fields(event: ResponseMeta) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if event.id is not None:
        out["id"] = event.id
    if event.model is not None:
        out["model"] = event.model
    if event.provider_data is not None:
        out["provider_data"] = _plain(event.provider_data)
    if event.raw is not None:  # an SDK object: only its type is kept
        out["raw"] = {"type": type(built(event.raw)).__name__}
    return out


_ENCODERS: dict[type, Callable[[Any], dict[str, Any]]] = {
    ToolCallEnd: lambda e: {"index": e.index},
    FinishReason: lambda e: {"reason": e.reason},
    UsageReport: lambda e: {"usage": _usage_fields(e.usage)},
    ResponseMeta: _meta_fields,
    StreamPosition: lambda e: {"sequence_number": e.sequence_number},
    Keepalive: lambda e: {},
    StreamEnd: lambda e: {
        "frames": e.frames,
        "keepalives": e.keepalives,
        **({} if getattr(e, "complete", True) else {"complete": False}),  # absent: complete
    },
    FinishedResponse: lambda e: {"response": {"type": type(e.response).__name__}},
    Start: lambda e: {},
    StaleTimeout: lambda e: {
        "stale_timeout": e.stale_timeout,
        **({} if e.phase is None else {"stall_phase": e.phase, "stall_clock": e.clock}),  # WD-8
    },
    Interrupt: lambda e: {},
    AttemptClosed: lambda e: {},
    RouteLoaded: lambda e: {
        "index": e.index,
        "stale_streak": e.stale_streak,
        "streaming_disabled": e.streaming_disabled,
        "stream_options_unsupported": e.stream_options_unsupported,
        "cooldown_s": e.cooldown_s,
        "breaker_probe": e.breaker_probe,
        "breaker_retry_at": e.breaker_retry_at,
        **({"capacity_wait_s": e.capacity_wait_s} if e.capacity_wait_s else {}),
    },
    FallbackDelivered: lambda e: {},
    AttemptFailed: lambda e: {
        "error": encode_error(e.error, e.from_callback, e.kind),
        "from_callback": e.from_callback,
        **({} if e.hint is None else {"hint": e.hint, "hint_source": e.hint_source}),
    },
    WaitOver: lambda e: {},
    FallbackFinished: lambda e: {
        "events": [encode_event(item) for item in e.events],
        "response": {"type": type(e.response).__name__},
    },
    ChoiceDelta: lambda e: {"choice": e.choice, "event": encode_event(e.event)},
}


# -- decoding ---------------------------------------------------------------------------------------
def _str(fields: dict[str, Any], name: str, optional: bool = False) -> Any:
    value = fields.get(name)
    if isinstance(value, str) or (optional and value is None):
        return value
    raise CodecError(f"{name!r} must be a string, not {type(value).__name__}")


def _int(fields: dict[str, Any], name: str, optional: bool = False) -> Any:
    value = fields.get(name)
    if (isinstance(value, int) and not isinstance(value, bool)) or (optional and value is None):
        return value
    raise CodecError(f"{name!r} must be an integer, not {type(value).__name__}")


def _number(fields: dict[str, Any], name: str) -> float:
    value = fields.get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise CodecError(f"{name!r} must be a number, not {type(value).__name__}")


def _dict(fields: dict[str, Any], name: str, optional: bool = False) -> Any:
    value = fields.get(name)
    if isinstance(value, dict) or (optional and value is None):
        return value
    raise CodecError(f"{name!r} must be an object, not {type(value).__name__}")


def _usage(fields: dict[str, Any]) -> UsageReport:
    usage = _dict(fields, "usage")
    names = ("input_tokens", "output_tokens", "total_tokens", "cached_tokens")
    return UsageReport(Usage(**{name: _int(usage, name, optional=True) for name in names}))


def _tool_delta(fields: dict[str, Any]) -> ToolCallDelta:
    return ToolCallDelta(
        _int(fields, "index"),
        _str(fields, "id", True),
        _str(fields, "name", True),
        _str(fields, "arguments", True),
        _dict(fields, "extra", True),
        _str(fields, "type", True),
    )


def _response(fields: dict[str, Any], name: str = "response") -> RecordedResponse:
    return RecordedResponse(_str(_dict(fields, name), "type"))


def _fallback(fields: dict[str, Any]) -> FallbackFinished:
    items = fields.get("events")
    if not isinstance(items, list):
        raise CodecError("'events' must be a list")
    events = tuple(decode_event(item) for item in items)
    if not all(type(event) in _WIRE_TYPES for event in events):
        raise CodecError("a fallback answer may hold only wire events")
    return FallbackFinished(events, _response(fields))  # type: ignore[arg-type]


def _stream_end(fields: dict[str, Any]) -> StreamEnd:
    complete = fields.get("complete", True)
    if not isinstance(complete, bool):
        raise CodecError("'complete' must be a boolean")
    if complete:
        return StreamEnd(_int(fields, "frames"), _int(fields, "keepalives"))
    return StreamEnd(_int(fields, "frames"), _int(fields, "keepalives"), complete=False)


def _failed(fields: dict[str, Any]) -> AttemptFailed:
    spec = _dict(fields, "error")
    from_callback = fields.get("from_callback", False)
    if not isinstance(from_callback, bool):
        raise CodecError("'from_callback' must be a boolean")
    kind_name = _str(spec, "kind", True)
    try:
        kind = ErrorKind(kind_name) if kind_name is not None else None
    except ValueError:
        raise CodecError(f"unknown error kind {kind_name!r}") from None
    error = error_for(
        _str(spec, "type"),
        _str(spec, "message", True) or "",
        kind=kind,
        module=_str(spec, "module", True),
        status=_int(spec, "status", True),
        code=_str(spec, "code", True),
    )
    hint = fields.get("hint")
    if hint is not None:
        hint = _number(fields, "hint")
        source = _str(fields, "hint_source")
        if source not in ("retry-after-ms", "retry-after"):
            raise CodecError(f"unknown hint source {source!r}")
        return AttemptFailed(error, from_callback, None if from_callback else kind, hint, source)
    return AttemptFailed(error, from_callback, None if from_callback else kind)


def _choice(fields: dict[str, Any]) -> ChoiceDelta:
    inner = decode_event(_dict(fields, "event"))
    if type(inner) not in (TextDelta, ReasoningDelta, RefusalDelta, ToolCallDelta, FinishReason):
        raise CodecError("a choice may hold only text, reasoning, refusal, tool-call or finish events")
    return ChoiceDelta(_int(fields, "choice"), inner)


def _bool(fields: dict[str, Any], name: str) -> bool:
    value = fields.get(name, False)
    if isinstance(value, bool):
        return value
    raise CodecError(f"{name!r} must be a boolean, not {type(value).__name__}")


def _route_loaded(fields: dict[str, Any]) -> RouteLoaded:
    index, streak = _int(fields, "index"), _int(fields, "stale_streak")
    if index < 0 or streak < 0:
        raise CodecError("'index' and 'stale_streak' must not be negative")
    cooldown = _number(fields, "cooldown_s") if "cooldown_s" in fields else 0.0
    retry_at = fields.get("breaker_retry_at")
    if retry_at is not None:
        retry_at = _number(fields, "breaker_retry_at")
    if cooldown < 0 or cooldown != cooldown:
        raise CodecError("'cooldown_s' must be a number >= 0")
    capacity = _number(fields, "capacity_wait_s") if "capacity_wait_s" in fields else 0.0
    if capacity < 0 or capacity != capacity:
        raise CodecError("'capacity_wait_s' must be a number >= 0")
    return RouteLoaded(
        index,
        streak,
        _bool(fields, "streaming_disabled"),
        _bool(fields, "stream_options_unsupported"),
        cooldown,
        _bool(fields, "breaker_probe"),
        retry_at,
        capacity_wait_s=capacity,
    )


_DECODERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "TextDelta": lambda f: TextDelta(_str(f, "text")),
    "ReasoningDelta": lambda f: ReasoningDelta(_str(f, "text")),
    "RefusalDelta": lambda f: RefusalDelta(_str(f, "text")),
    "ToolCallDelta": _tool_delta,
    "ToolCallEnd": lambda f: ToolCallEnd(_int(f, "index")),
    "FinishReason": lambda f: FinishReason(_str(f, "reason")),
    "UsageReport": _usage,
    "ResponseMeta": lambda f: ResponseMeta(
        _str(f, "id", True),
        _str(f, "model", True),
        _dict(f, "provider_data", True),
        _response(f, "raw") if f.get("raw") is not None else None,
    ),
    "Keepalive": lambda f: Keepalive(),
    "StreamPosition": lambda f: StreamPosition(_int(f, "sequence_number")),
    "StreamEnd": _stream_end,
    "FinishedResponse": lambda f: FinishedResponse(_response(f)),
    "Start": lambda f: Start(),
    "StaleTimeout": lambda f: StaleTimeout(
        _number(f, "stale_timeout"), _str(f, "stall_phase", True), _str(f, "stall_clock", True)
    ),
    "Interrupt": lambda f: Interrupt(),
    "AttemptClosed": lambda f: AttemptClosed(),
    "RouteLoaded": lambda f: _route_loaded(f),
    "WaitOver": lambda f: WaitOver(),
    "FallbackDelivered": lambda f: FallbackDelivered(),
    "AttemptFailed": _failed,
    "FallbackFinished": _fallback,
    "ChoiceDelta": _choice,
}
EVENT_KINDS = frozenset(_DECODERS)
_WIRE_TYPES = (
    TextDelta,
    ReasoningDelta,
    RefusalDelta,
    ToolCallDelta,
    ToolCallEnd,
    FinishReason,
    UsageReport,
    ResponseMeta,
    Keepalive,
    StreamEnd,
    FinishedResponse,
    ChoiceDelta,
    StreamPosition,
)


def decode_event(fields: Any) -> object:
    """The event a recorded dict describes; CodecError when its shape is wrong."""
    if type(fields) is not dict:
        raise CodecError("an event must be an object")
    kind = fields.get("kind")
    if kind == "TextDelta":  # the bulk of a wire recording: skip the table lookup
        text = fields.get("text")
        if type(text) is str:
            return TextDelta(text)
    decoder = _DECODERS.get(kind) if isinstance(kind, str) else None
    if decoder is None:
        raise CodecError(f"unknown event kind {kind!r}")
    return decoder(fields)


# -- stand-ins for recorded exceptions ------------------------------------------------------------
# Our own errors and a few built-ins are rebuilt as themselves (looked up by name in a fixed
# table, never imported from a recorded module path); any other class becomes a RecordedError
# subclass that bears the recorded name.
_OWN: dict[str, type[BaseException]] = {
    name: cls
    for name in _errors.__all__
    if isinstance(cls := getattr(_errors, name), type) and issubclass(cls, BaseException)
}
_BUILTIN_NAMES = ("InterruptedError", "TimeoutError", "ConnectionError", "EOFError", "ValueError")
_BUILTINS: dict[str, type[BaseException]] = {name: getattr(builtins, name) for name in _BUILTIN_NAMES}
_STAND_INS: dict[str, type[RecordedError]] = {}


def _stand_in_class(name: str) -> type[RecordedError]:
    cls = _STAND_INS.get(name)
    if cls is None:
        if not name.isidentifier() or len(name) > 100:
            raise CodecError(f"{name!r} is not a class name")
        cls = type(name, (RecordedError,), {"__module__": "fsm_agent.trace.recorded"})
        _STAND_INS[name] = cls
    return cls


def error_for(
    type_name: str,
    message: str,
    *,
    kind: ErrorKind | None = None,
    module: str | None = None,
    status: int | None = None,
    code: str | None = None,
) -> BaseException:
    """An exception standing for a recorded one: same class name, same message, same kind."""
    if type_name == "ToolInputError":
        return ToolInputError(message)
    if type_name == "ProviderStreamError":
        return ProviderStreamError(message, code=code, transient=kind is ErrorKind.TRANSIENT)
    own = _OWN.get(type_name) or _BUILTINS.get(type_name)
    if own is not None and own not in (ProviderStreamError, ToolInputError):
        try:
            return own(message)
        except TypeError:  # a constructor with required keywords: fall back to a stand-in
            pass
    error = _stand_in_class(type_name)(message)
    error.kind, error.module, error.status, error.code = kind, module, status, code
    return error
