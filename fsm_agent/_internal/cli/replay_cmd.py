"""`fsm-agent replay FILE`: replay a trace offline and print its timeline (TR-3, TR-4).

One line per transition: time, attempt, source -> dest, trigger, the delivered text so far and the
guards that decided it, and — for a request over several routes (RT-1) — the route of each step;
then how the request ended. `--retries`, `--stale-timeout`, `--unsupported`, `--stale-giveup` and
`--routes N` (only the first N routes) and `--timeouts PHASE=S,...` (WD-10: which attempts would
have stalled, and when) replay it under other settings and show where it would
diverge and how it would have ended. Exit status: 0 when every step matched, 1 on a mismatch (or a
divergence under other settings), 2 when the trace cannot be read. Needs no network and no provider SDK.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from typing import Any

from ..trace.timeline import format_report, safe_text
from .args import non_negative_int, non_negative_seconds, positive_int, positive_seconds

__all__ = ["add_arguments", "format_report", "run", "safe_text", "terminal_width"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a trace file (JSON Lines) written with Session(trace=…)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--request", default=None, help="replay only this request id")
    parser.add_argument("--retries", type=non_negative_int, default=None, help="what if retries had been N")
    parser.add_argument(
        "--stale-timeout", type=positive_seconds, default=None, help="what if stale_timeout had been S"
    )
    parser.add_argument("--unsupported", choices=("fallback", "raise"), default=None)
    parser.add_argument("--stale-giveup", type=non_negative_int, default=None)
    parser.add_argument(
        "--backoff-base", type=non_negative_seconds, default=None, help="what if Backoff(base=S)"
    )
    parser.add_argument(
        "--backoff-cap", type=non_negative_seconds, default=None, help="what if Backoff(cap=S)"
    )
    parser.add_argument(
        "--max-wait", type=non_negative_seconds, default=None, help="what if Backoff(max_wait=S)"
    )
    parser.add_argument(
        "--routes", type=positive_int, default=None, help="what if only the first N routes had been given"
    )
    parser.add_argument(
        "--prices",
        default=None,
        metavar="FILE",
        help="price the cost summary with this JSON table: {model: [input, output] USD per million tokens}",
    )
    parser.add_argument(
        "--timeouts",
        type=timeouts_argument,
        default=None,
        metavar="PHASE=S,...",
        help="what if the watchdog's deadlines had been these (Timeouts fields: first_event, text, ...)",
    )


def timeouts_argument(text: str) -> Any:
    """`first_event=20,text=60` as a `Timeouts` (WD-10)."""
    from ..deadlines import Timeouts

    fields: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in Timeouts.__dataclass_fields__:
            raise argparse.ArgumentTypeError(
                f"expected PHASE=SECONDS,... with a Timeouts field, not {part!r}"
            )
        try:
            fields[name] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number of seconds, not {value!r}") from None
    try:
        return Timeouts(**fields)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
        "timeouts": args.timeouts,
    }
    try:
        prices = _prices_table(args.prices) if args.prices is not None else None
        report = replay(args.file, request_id=args.request, prices=prices, **settings)
    except (TraceFormatError, TypeError, ValueError) as exc:
        print(f"fsm-agent replay: {safe_text(exc)}", file=sys.stderr)
        return 2
    except (RecursionError, MemoryError, LookupError, AttributeError) as exc:
        # SEC-7: a hostile trace that still trips the reader is a bad trace (exit 2), not a traceback.
        print(
            f"fsm-agent replay: cannot read {safe_text(args.file)}: {type(exc).__name__}: {safe_text(exc)}",
            file=sys.stderr,
        )
        return 2
    if args.json:  # exact: JSON escapes every control character itself
        json.dump(report.as_dict(), sys.stdout, indent=2, default=repr)
        sys.stdout.write("\n")
    else:
        format_report(report, sys.stdout, width=terminal_width(sys.stdout))
    return 0 if report.matched else 1


def _prices_table(path: str) -> Any:
    """COST-1: the `--prices` file, a JSON object of model -> [input, output] USD per million tokens."""
    try:
        with open(path, encoding="utf-8") as file:
            table = json.load(file)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the prices file {path}: {exc}") from None
    if not isinstance(table, dict):
        raise ValueError("the prices file must hold a JSON object: {model: [input, output], ...}")
    return table


def terminal_width(out: Any) -> int | None:
    """The columns of the terminal `out` writes to (COLUMNS wins, as for every CLI); None for a
    pipe or a file, which get whole lines."""
    isatty = getattr(out, "isatty", None)
    if not (callable(isatty) and isatty()):
        return None
    return shutil.get_terminal_size().columns
