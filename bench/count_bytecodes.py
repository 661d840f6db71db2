"""Where a short request's own work goes, counted exactly: bytecodes executed per request, by
module and by function (a tool for cutting the per-request cost, not a benchmark).

Run: .venv/bin/python bench/count_bytecodes.py [anthropic|chat] [--requests 3] [--top 40]

The request is `bench_short.py`'s: Anthropic's 14-frame tool call, or Chat's one-chunk answer,
through the real SDK client over an in-memory transport. After a warm-up, `sys.settrace` counts
every opcode the interpreter runs (`f_trace_opcodes`), per code object. Unlike a clock or
callgrind's instruction count (which moves by ~3 % between runs here, with the collector's
timing), the count is the same on every run and every machine for the same code and inputs, so a
cut of a few hundred bytecodes shows. It does not weigh what one bytecode costs (a `str.split`
is one call), so confirm a cut with `bench_short.py`.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_short as short

import fsm_agent
from fsm_agent.testing.anthropic_wire import AnthropicWire
from fsm_agent.testing.chat import ChatWire


def request(name: str) -> Any:
    session = fsm_agent.Session()
    if name == "anthropic":
        body, _ = short.render(AnthropicWire(), "anthropic", "/v1/messages", short.ANTHROPIC, short.TOOL10)
        return short.ours(session, short.anthropic_client(body, retries=0), short.ANTHROPIC, short.TOOL10)
    body, _ = short.render(ChatWire(), "chat", "/v1/chat/completions", short.CHAT, short.TINY)
    return short.ours(session, short.openai_client(body, retries=0), short.CHAT, short.TINY)


def where(filename: str) -> str:
    """A code object's file as a short group: our module, a third-party package, or the stdlib's."""
    if "/fsm_agent/" in filename:
        return "fsm_agent/" + filename.rsplit("/fsm_agent/", 1)[1].replace("_internal/", "")
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1].split("/", 1)[0]
    return "stdlib/" + filename.rsplit("/", 1)[-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("request", nargs="?", choices=("anthropic", "chat"), default="anthropic")
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--top", type=int, default=40)
    opts = parser.parse_args()
    run = request(opts.request)
    for _ in range(30):  # first-use costs (imports, compiled checks, the engine) are not per request
        run()
    counts: collections.Counter[tuple[str, int, str]] = collections.Counter()

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            counts[(code.co_filename, code.co_firstlineno, code.co_name)] += 1
        return tracer

    sys.settrace(tracer)
    try:
        for _ in range(opts.requests):
            run()
    finally:
        sys.settrace(None)
    per = opts.requests
    modules: collections.Counter[str] = collections.Counter()
    for (filename, _, _), count in counts.items():
        modules[where(filename)] += count
    total = sum(counts.values()) / per
    ours = sum(count for module, count in modules.items() if module.startswith("fsm_agent/")) / per
    print(f"{opts.request}: {total:,.0f} bytecodes a request, {ours:,.0f} of them fsm_agent's")
    for module, count in modules.most_common(25):
        print(f"  {module:<50} {count / per:9,.0f}")
    print("fsm_agent's functions:")
    mine = [(count, key) for key, count in counts.items() if "/fsm_agent/" in key[0]]
    for count, (filename, line, function) in sorted(mine, reverse=True)[: opts.top]:
        print(f"  {count / per:9,.0f}  {where(filename)}:{line} {function}")


if __name__ == "__main__":
    main()
