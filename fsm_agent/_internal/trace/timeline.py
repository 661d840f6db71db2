"""The readable timeline of a replay (TR-4): what `fsm-agent replay` prints and `str(report)` is.

One line per transition: time, attempt, source -> dest, trigger, the delivered text so far and the
guards that decided it; then how each request ended and where a replay diverged. Pure formatting:
writes only to the stream it is given.
"""

from __future__ import annotations

import io
import re
from typing import Any, TextIO

__all__ = ["format_report", "safe_text", "timeline"]

# C0 and C1 controls, DEL, and the format characters that reorder or hide text on a terminal
# (bidi overrides and isolates, zero-width marks, line and paragraph separators).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")


def safe_text(text: object) -> str:
    """`text` with every control character escaped (SEC-7): nothing in a trace can move the
    cursor, recolour or retitle the user's terminal, or break a timeline line."""
    return _UNSAFE.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
        str(text),
    )


class _SafeOut:
    """A text stream whose every line is written with its control characters escaped (SEC-7), and
    cut to `width` columns (a terminal's: its last column shows `…`) when a width is given."""

    def __init__(self, out: TextIO, width: int | None = None) -> None:
        self._out = out
        self._width = width if width is None else max(width, 20)

    def write(self, text: str) -> int:
        lines = [safe_text(line) for line in text.split("\n")]
        if self._width is not None:
            lines = [line if len(line) <= self._width else line[: self._width - 1] + "…" for line in lines]
        return self._out.write("\n".join(lines))


def timeline(report: Any) -> str:
    """The timeline of `report` as one string."""
    out = io.StringIO()
    format_report(report, out)
    return out.getvalue()


# -- the timeline ---------------------------------------------------------------------------------------
def _deciding(record: Any) -> str:
    """The guards of the row that fired; for an unguarded row after guarded ones, why they failed."""
    from ..diagram import row_for
    from ..machine import TABLE

    index = row_for(record)
    if index is None:
        return " ".join(f"{name}={'T' if value else 'F'}" for name, value in record.guards.items())
    row = TABLE[index]
    named = [*row.get("conditions", ()), *(f"!{name}" for name in row.get("unless", ()))]
    if named:
        return " ".join(named)
    if record.guards:  # the catch-all row: show the guard values that ruled out the rows above
        return "else: " + " ".join(f"{name}={'T' if value else 'F'}" for name, value in record.guards.items())
    return ""


def _settings_text(settings: dict[str, Any]) -> str:
    names = ("retries", "stale_timeout", "unsupported", "stale_giveup", "backoff_base", "max_wait", "routes")
    return " ".join(
        f"{name}={settings[name]:g}" if isinstance(settings[name], float) else f"{name}={settings[name]}"
        for name in names
        if settings.get(name) is not None
    )


def _wait_text(record: Any) -> str:
    """BO-4: a step into `waiting` shows how long and why."""
    if record.dest != "waiting":
        return ""
    wait_s, source = record.inputs.get("wait_s"), record.inputs.get("wait_source")
    if not isinstance(wait_s, (int, float)) or isinstance(wait_s, bool):
        return ""
    from ..backoff import WAIT_SOURCES

    shown = source if source in WAIT_SOURCES else "?"  # SEC-7: nothing from a trace printed raw
    return f"  [wait {wait_s:.3f} s, {shown}]"


def _columns(route_width: int) -> str:
    route = f"{'route':<{route_width}} " if route_width else ""
    return (
        f"  {'step':>4} {'t (s)':>8} {'att':>3}  {route}{'source -> dest':<34} {'trigger':<17} "
        f"{'chars':>6}  guards\n"
    )


def _step_line(step: Any, route_width: int = 0) -> str:
    record = step.shown
    mark = "  " if step.matched else "!!"
    if step.replayed is None:
        chars = "-"
    elif step.delivered_chars is not None:
        chars = str(step.delivered_chars)
    else:
        chars = str(record.visible_chars)
    move = f"{record.source} -> {record.dest}"
    route = f"{safe_text((record.route or '-')[:64]):<{route_width}} " if route_width else ""
    line = (
        f"{mark}{step.index:>4} {record.t:8.3f} {record.attempt:>3}  {route}{move:<34} "
        f"{record.trigger:<17} {chars:>6}  {_deciding(record)}{_wait_text(record)}\n"
    )
    if step.matched:
        return line
    if step.replayed is None:
        return line + "        (the replay did not reach this recorded step)\n"
    if step.recorded is None:
        return line + "        (the recording has no such step)\n"
    want = step.recorded
    return line + f"        recorded: {want.source} -> {want.dest} [{want.trigger}]  {_deciding(want)}\n"


def format_report(report: Any, out: TextIO, width: int | None = None) -> None:
    """The timeline, every field escaped of control characters (SEC-7); each line cut to `width`
    columns when given (a terminal's width; a pipe gets whole lines)."""
    _format_report(report, _SafeOut(out, width))  # type: ignore[arg-type]


def _format_report(report: Any, out: TextIO) -> None:
    overrides = report.overrides
    out.write(f"trace {safe_text(report.source)}: {len(report.requests)} request(s)\n")
    if overrides:
        out.write("what if: " + " ".join(f"{k}={v}" for k, v in overrides.items()) + "\n")
    for request in report.requests:
        settings = _settings_text(request.settings)
        out.write(
            f"\nrequest {safe_text(request.request_id)} ({request.mode} replay; {safe_text(settings)})\n"
        )
        names = request.settings.get("route_names") or ()
        width = max(len("route"), *(len(safe_text(name[:64])) for name in names)) if len(names) > 1 else 0
        out.write(_columns(width))
        for step in request.steps:
            out.write(_step_line(step, width))
        if request.recorded_outcome is not None:
            out.write(f"  recorded outcome: {safe_text(request.recorded_outcome.describe(would=False))}\n")
        if overrides and request.outcome is not None:
            out.write(f"  what-if outcome:  {safe_text(request.outcome.describe(would=True))}\n")
        if request.cost is not None and len(request.cost.attempts) > 1:  # COST-1
            from ..cost import cost_summary

            out.write("  what the faults cost:\n")
            for line in cost_summary(request.cost):
                out.write(f"    {safe_text(line)}\n")
        for note in request.notes:
            out.write(f"  note: {safe_text(note)}\n")
        mismatch = request.first_mismatch
        if mismatch is None:
            out.write(f"  replay: all {len(request.steps)} steps matched\n")
        else:
            verb = "diverges" if overrides else "MISMATCH"
            out.write(f"  replay {verb} at {safe_text(mismatch.message)}\n")
