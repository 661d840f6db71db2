"""Trace sinks: where a session's transition records (and, opt-in, its wire events) are written.

A sink is any object with `record_wire: bool`, `write_record(record)`, `write_event(request_id,
event, t)` and `close()`. `Session(trace=PATH)` appends JSON Lines to PATH, created owner-only
(SEC-3); `Session(trace=sink)` takes any sink; `MemorySink` keeps everything for tests.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, Protocol

from .records import SCHEMA_VERSION, TransitionRecord

__all__ = ["JsonlSink", "MemorySink", "TraceSink", "encode_event", "resolve_sink"]


class TraceSink(Protocol):
    record_wire: bool

    def write_record(self, record: TransitionRecord) -> None: ...

    def write_event(self, request_id: str, event: object, t: float) -> None: ...

    def close(self) -> None: ...


def encode_event(event: object) -> dict[str, Any]:
    """A normalized event as a JSON-ready dict: its kind and its fields."""
    out: dict[str, Any] = {"kind": type(event).__name__}
    if is_dataclass(event):
        for f in fields(event):
            value = getattr(event, f.name)
            if isinstance(value, BaseException):
                value = {"type": type(value).__name__, "message": str(value)}
            elif is_dataclass(value) and not isinstance(value, type):
                value = {f2.name: getattr(value, f2.name) for f2 in fields(value)}
            elif isinstance(value, tuple):
                value = [encode_event(item) for item in value]
            elif value is not None and not isinstance(value, (str, int, float, bool, dict, list)):
                value = repr(value)[:200]
            out[f.name] = value
    return out


class MemorySink:
    """Keeps records and events in lists (tests, the CLI)."""

    def __init__(self, record_wire: bool = False) -> None:
        self.record_wire = record_wire
        self.records: list[TransitionRecord] = []
        self.events: list[tuple[str, dict[str, Any], float]] = []

    def write_record(self, record: TransitionRecord) -> None:
        self.records.append(record)

    def write_event(self, request_id: str, event: object, t: float) -> None:
        self.events.append((request_id, encode_event(event), t))

    def close(self) -> None:
        pass


class JsonlSink:
    """Appends one JSON object per line; the file is created readable by its owner only."""

    def __init__(self, path: str | os.PathLike[str], record_wire: bool = False) -> None:
        self.path = Path(path)
        self.record_wire = record_wire
        self._lock = threading.Lock()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8")

    def _write(self, line: dict[str, Any]) -> None:
        text = json.dumps(line, ensure_ascii=False, default=repr)
        with self._lock:
            self._file.write(text + "\n")
            self._file.flush()

    def write_record(self, record: TransitionRecord) -> None:
        self._write({"type": "transition", **record.as_dict()})

    def write_event(self, request_id: str, event: object, t: float) -> None:
        self._write(
            {"type": "event", "schema": SCHEMA_VERSION, "request_id": request_id, "t": round(t, 6),
             "event": encode_event(event)}
        )

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()


def resolve_sink(trace: Any) -> TraceSink | None:
    if trace is None:
        return None
    if isinstance(trace, (str, os.PathLike)):
        return JsonlSink(trace)
    if hasattr(trace, "write_record"):
        return trace  # type: ignore[no-any-return]
    raise TypeError("trace must be a path or an object with write_record()/write_event()")
