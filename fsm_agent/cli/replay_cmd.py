"""`fsm-agent replay FILE`: replay a trace offline and print its timeline (TR-3, TR-4).

One line per transition: time, attempt, source -> dest, trigger, the delivered text so far and the
guards that decided it, and — for a request over several routes (RT-1) — the route of each step;
then how the request ended. `--retries`, `--stale-timeout`, `--unsupported`, `--stale-giveup` and
`--routes N` (only the first N routes) replay it under other settings and show where it would
diverge and how it would have ended. Exit status: 0 when every step matched, 1 on a mismatch (or a
divergence under other settings), 2 when the trace cannot be read. Needs no network and no provider SDK.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

__all__ = ["add_arguments", "format_report", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a trace file (JSON Lines) written with Session(trace=…)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--request", default=None, help="replay only this request id")
    parser.add_argument("--retries", type=int, default=None, help="what if retries had been N")
    parser.add_argument("--stale-timeout", type=float, default=None, help="what if stale_timeout had been S")
    parser.add_argument("--unsupported", choices=("fallback", "raise"), default=None)
    parser.add_argument("--stale-giveup", type=int, default=None)
    parser.add_argument("--backoff-base", type=float, default=None, help="what if Backoff(base=S)")
    parser.add_argument("--backoff-cap", type=float, default=None, help="what if Backoff(cap=S)")
    parser.add_argument("--max-wait", type=float, default=None, help="what if Backoff(max_wait=S)")
    parser.add_argument(
        "--routes", type=int, default=None, help="what if only the first N routes had been given"
    )


def run(args: argparse.Namespace) -> int:
    from ..errors import TraceFormatError
    from ..trace.replay import replay

    settings: dict[str, Any] = {
        "retries": args.retries,
        "stale_timeout": args.stale_timeout,
        "unsupported": args.unsupported,
        "stale_giveup": args.stale_giveup,
        "backoff_base": args.backoff_base,
        "backoff_cap": args.backoff_cap,
        "max_wait": args.max_wait,
        "routes": args.routes,
    }
    try:
        report = replay(args.file, request_id=args.request, **settings)
    except TraceFormatError as exc:
        print(f"fsm-agent replay: {exc}", file=sys.stderr)
        return 2
    except (TypeError, ValueError) as exc:
        print(f"fsm-agent replay: {exc}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(report.as_dict(), sys.stdout, indent=2, default=repr)
        sys.stdout.write("\n")
    else:
        format_report(report, sys.stdout)
    return 0 if report.matched else 1


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


def _printable(name: str) -> str:
    """A route name from a trace, safe to print: no control characters or escape codes (SEC-7)."""
    return "".join(char if char.isprintable() else "?" for char in name[:64])


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
    route = f"{_printable(record.route or '-'):<{route_width}} " if route_width else ""
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


def format_report(report: Any, out: TextIO) -> None:
    overrides = report.overrides
    out.write(f"trace {report.source}: {len(report.requests)} request(s)\n")
    if overrides:
        out.write("what if: " + " ".join(f"{k}={v}" for k, v in overrides.items()) + "\n")
    for request in report.requests:
        settings = _settings_text(request.settings)
        out.write(f"\nrequest {request.request_id} ({request.mode} replay; {settings})\n")
        names = request.settings.get("route_names") or ()
        width = max(len("route"), *(len(_printable(name)) for name in names)) if len(names) > 1 else 0
        out.write(_columns(width))
        for step in request.steps:
            out.write(_step_line(step, width))
        if request.recorded_outcome is not None:
            out.write(f"  recorded outcome: {request.recorded_outcome.describe(would=False)}\n")
        if overrides and request.outcome is not None:
            out.write(f"  what-if outcome:  {request.outcome.describe(would=True)}\n")
        for note in request.notes:
            out.write(f"  note: {note}\n")
        mismatch = request.first_mismatch
        if mismatch is None:
            out.write(f"  replay: all {len(request.steps)} steps matched\n")
        else:
            verb = "diverges" if overrides else "MISMATCH"
            out.write(f"  replay {verb} at {mismatch.message}\n")
