"""Run one streaming request under the live display: the part `demo` and `stream` share.

It opens the trace file, builds the session with a display sink, turns Ctrl-C into an interrupt of
the request (RES-11: the stream is closed, the summary says "interrupted", exit status 130), runs
`Session.stream()` with the view's callbacks, and ends with the summary. It never decides what the
request does on a fault: that is the session's.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, TextIO

from ..result import StreamResult
from ..routes import Route
from ..session import Session
from ..trace.sinks import JsonlSink
from .args import OutputError, UsageError, os_error_text
from .display import View, make_view
from .progress import DisplaySink, Progress, summarize
from .trace_dir import new_trace_path

__all__ = ["RequestSpec", "new_trace_path", "run_request"]


@dataclass
class RequestSpec:
    """One request as the command line asked for it."""

    client: Any
    params: dict[str, Any]
    api: str
    header: Sequence[str] = ()
    trace_path: str | None = None
    record_wire: bool = False
    retries: int | None = None
    stale_timeout: float | None = None
    interrupt_after: float | None = None  # the interrupt demo interrupts itself
    no_color: bool = False
    fallbacks: Sequence[Route] = ()  # RT-1: routes tried after this one (--fallback, provider-down)


class _Interrupter:
    """Interrupts the session's request on Ctrl-C, or after `after` seconds (the interrupt demo).

    The SIGINT handler only sets events: it may run between any two bytecodes of the request's
    thread, so it must take no lock that thread could hold. A helper thread wakes on the event and
    calls `session.interrupt()` (RES-11) at once; `requested`, passed to `stream(interrupt=...)`,
    also covers a request that had not registered with the session yet. A second Ctrl-C raises
    KeyboardInterrupt.
    """

    def __init__(self, session: Session, after: float | None) -> None:
        self.session = session
        self.reason: str | None = None
        self.requested = threading.Event()
        self._ctrl_c = threading.Event()
        self._wake = threading.Event()
        self._done = False
        self._helper = threading.Thread(target=self._run, name="fsm-agent-cli-interrupt", daemon=True)
        self._timer: threading.Timer | None = None
        if after is not None:
            self._timer = threading.Timer(after, self._fire, args=("the demo's timer",))
            self._timer.daemon = True
        self._previous: Any = None

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self._ctrl_c.is_set():
            raise KeyboardInterrupt
        self.reason = self.reason or "Ctrl-C"
        self._ctrl_c.set()
        self.requested.set()
        self._wake.set()

    def _fire(self, reason: str) -> None:
        self.reason = self.reason or reason
        self.requested.set()
        self._wake.set()

    def _run(self) -> None:
        self._wake.wait()
        if not self._done:
            self.session.interrupt()

    def __enter__(self) -> _Interrupter:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        self._helper.start()
        if self._timer is not None:
            self._timer.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._previous is not None:  # first, so that no handler can run inside _wake.set()
            signal.signal(signal.SIGINT, self._previous)
        if self._timer is not None:
            self._timer.cancel()
        self._done = True
        self._wake.set()
        self._helper.join()


def run_request(spec: RequestSpec, out: TextIO | None = None) -> int:
    """Stream `spec` with the live display on `out` (stdout); returns the exit status."""
    out = sys.stdout if out is None else out
    progress = Progress()
    view = make_view(out, progress, no_color=spec.no_color)
    file_sink = _open_trace(spec.trace_path, spec.record_wire) if spec.trace_path else None
    sink = DisplaySink(view, file_sink)
    result: StreamResult | None = None
    error: BaseException | None = None
    try:
        session = Session(retries=spec.retries, stale_timeout=spec.stale_timeout, trace=sink)
        progress.routes = 1 + len(spec.fallbacks)
        progress.max_attempts = (session.retries + 1) * progress.routes
        view.begin(spec.header)
        with _Interrupter(session, spec.interrupt_after) as interrupter:
            progress.start()
            try:
                result = _stream(session, spec, view, interrupter.requested)
            except Exception as exc:  # InterruptedError included: the summary tells
                error = exc
        if isinstance(error, InterruptedError):
            view.status(f"interrupted by {interrupter.reason or 'a signal'}; the stream was closed")
        summary = summarize(progress, result, error, spec.trace_path)
        view.end(result, summary)
    except KeyboardInterrupt:  # a second Ctrl-C while the first was being handled
        view.close()
        print("\ninterrupted", file=out, flush=True)
        return 130
    except BrokenPipeError:  # `fsm-agent … | head`: the reader left; so do we, quietly
        _detach(out)
        return 141
    except OutputError:  # a full device: told in one line by the command (exit 2)
        _detach(out)
        raise
    finally:
        view.close()
        sink.close()
    failure = sink.display_error
    if failure is not None:
        print(f"fsm-agent: the display failed: {type(failure).__name__}: {failure}", file=sys.stderr)
        return summary.exit_code or 1
    return summary.exit_code


def _open_trace(path: str, record_wire: bool) -> JsonlSink:
    """The trace file's sink; a path that cannot be written is one sentence (exit status 2)."""
    try:
        return JsonlSink(path, record_wire=record_wire)
    except OSError as exc:
        raise UsageError(f"cannot write the trace to {path}: {os_error_text(exc)}") from None


def _detach(out: TextIO) -> None:
    """Point a closed pipe's descriptor at /dev/null, so the exit's flush does not fail again."""
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _stream(session: Session, spec: RequestSpec, view: View, interrupt: threading.Event) -> StreamResult:
    callbacks: dict[str, Any] = {
        "on_text": view.text,
        "on_reasoning": view.reasoning,
        "on_tool_call": view.tool_call,
        "on_status": view.status,
        "interrupt": interrupt,
    }
    if spec.fallbacks:
        return session.stream([Route(spec.client, spec.params, spec.api), *spec.fallbacks], **callbacks)
    return session.stream(
        spec.client,
        spec.params,
        api=spec.api,
        on_text=view.text,
        on_reasoning=view.reasoning,
        on_tool_call=view.tool_call,
        on_status=view.status,
        interrupt=interrupt,
        on_tool_args=view.tool_args,
    )
