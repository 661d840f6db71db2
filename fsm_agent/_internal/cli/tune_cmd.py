"""`fsm-agent tune TRACES...`: the watchdog's deadlines learned from wire-recorded traces (WD-9).

Prints, per (api, host, model, phase), how many silences the traces show, their distribution
(p50, p90, the chosen percentile, max) and the deadline it recommends — the percentile times the
margin, rounded up to two significant digits, with at least `--min-samples` samples — then, per
endpoint, a `fsm_agent.Timeouts(...)` line to paste. `--json` for machines. A directory is read for its
`*.jsonl` files. Exit status: 0, or 2 when a trace cannot be read. Needs no network and no SDK.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from .args import positive_int

__all__ = ["add_arguments", "run"]


def _fraction_over_one(text: str) -> float:
    value = float(text)
    if not value >= 1.0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number >= 1, not {text!r}")
    return value


def _percent(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 100.0:
        raise argparse.ArgumentTypeError(f"must be a percentile in (0, 100], not {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "traces", nargs="+", help="trace files (JSON Lines, wire-recorded) or directories of them"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--percentile", type=_percent, default=99.0, help="the high percentile (default 99)")
    parser.add_argument(
        "--margin", type=_fraction_over_one, default=1.5, help="times the percentile (default 1.5)"
    )
    parser.add_argument(
        "--min-samples",
        type=positive_int,
        default=20,
        help="fewer silences than this: no recommendation (20)",
    )


def _files(paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for name in paths:
        path = Path(name)
        found.extend(sorted(path.glob("*.jsonl")) if path.is_dir() else [path])
    return found


def run(args: argparse.Namespace) -> int:
    from ..errors import TraceFormatError
    from ..trace.reader import read_trace
    from ..trace.timeline import safe_text
    from ..trace.tune import tune

    traces = []
    for path in _files(args.traces):
        try:
            traces.append(read_trace(str(path)))
        except (TraceFormatError, OSError, ValueError) as exc:
            print(f"fsm-agent tune: {safe_text(exc)}", file=sys.stderr)
            return 2
    report = tune(traces, percentile=args.percentile, margin=args.margin, min_samples=args.min_samples)
    if args.json:
        json.dump(report.as_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        write_text(report.as_dict(), sys.stdout)
    return 0


def _seconds(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}"


def write_text(report: dict[str, Any], out: TextIO) -> None:
    """The report as a table per endpoint, then the line to paste."""
    q = f"p{report['percentile']:g}"
    out.write(
        f"{report['requests']} request(s); silences per phase, in seconds; recommended = {q} x "
        f"{report['margin']:g}, with >= {report['min_samples']} samples\n"
    )
    if report["requests_without_wire"]:
        out.write(
            f"({report['requests_without_wire']} request(s) without a wire recording: nothing to learn)\n"
        )
    by_endpoint: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for group in report["groups"]:
        by_endpoint.setdefault((group["api"], group["host"], group["model"]), []).append(group)
    snippets = {(e["api"], e["host"], e["model"]): e["timeouts"] for e in report["timeouts"]}
    for (api, host, model), groups in by_endpoint.items():
        out.write(f"\n{api} {host} {model}\n")
        out.write(
            f"  {'phase':<12}{'samples':>8}{'censored':>9}{'p50':>9}{'p90':>9}{q:>9}{'max':>9}  recommended\n"
        )
        for g in groups:
            rec = "-" if g["recommended"] is None else f"{g['recommended']:g}"
            out.write(
                f"  {g['phase']:<12}{g['samples']:>8}{g['censored']:>9}{_seconds(g['p50']):>9}"
                f"{_seconds(g['p90']):>9}{_seconds(g[q]):>9}{_seconds(g['max']):>9}  {rec}\n"
            )
        fields = ", ".join(f"{name}={value:g}" for name, value in snippets[(api, host, model)].items())
        out.write(f"  fsm_agent.Timeouts({fields})\n")
