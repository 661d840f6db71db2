"""`fsm-agent diagram`: write the machine's state diagrams, or one trace's path over them (DG-1, DG-3).

Writes request.mmd and request.dot (and request.svg when Graphviz is installed) from the table
the machine runs. With `--trace FILE`, writes FILE's path over the machine instead. Needs no
provider SDK.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        default=None,
        help="output directory (default: diagrams/; with --trace, the current directory)",
    )
    parser.add_argument("--trace", default=None, help="draw this trace's path over the machine")
    parser.add_argument("--request", default=None, help="with --trace: only this request id")
    parser.add_argument("--no-svg", action="store_true", help="do not run Graphviz even if installed")


def run(args: argparse.Namespace) -> int:
    svg = not args.no_svg
    try:
        return _run(args, svg)
    except BrokenPipeError:  # stdout's reader left: the command's own concern (exit 141)
        raise
    except OSError as exc:  # the output directory cannot be created or written
        where = exc.filename or args.out
        print(f"fsm-agent diagram: cannot write {where}: {exc.strerror or exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, svg: bool) -> int:
    from ..diagram import write_diagrams, write_overlay
    from ..errors import TraceFormatError
    from ..trace.reader import read_trace
    from ..trace.timeline import safe_text  # SEC-7: a file name's control characters, escaped

    out = sys.stdout
    if args.trace is None:
        paths = write_diagrams(Path(args.out or "diagrams"), svg=svg)
    else:
        try:
            trace = read_trace(args.trace)
        except TraceFormatError as exc:
            print(f"fsm-agent diagram: {safe_text(exc)}", file=sys.stderr)
            return 2
        requests = list(trace.requests.values())
        if args.request is not None:
            requests = [found for found in requests if found.request_id == args.request]
            if not requests:
                missing = f"no request {args.request!r} in {args.trace}"
                print(f"fsm-agent diagram: {safe_text(missing)}", file=sys.stderr)
                return 2
        records = [record for found in requests for record in found.records]
        stem = f"{Path(args.trace).stem}.overlay"
        paths, taken = write_overlay(records, Path(args.out or "."), stem=stem, svg=svg)
        steps = sum(taken.edges.values())
        out.write(f"{taken.requests} request(s), {steps} transition(s) drawn over the machine\n")
        if taken.unmatched:
            out.write(f"warning: {len(taken.unmatched)} record(s) match no row of the table (not drawn)\n")
    for path in paths:
        out.write(f"wrote {safe_text(path)}\n")
    if svg and not any(path.suffix == ".svg" for path in paths):
        out.write("no SVG: Graphviz `dot` is not installed\n")
    return 0
