"""Replay benchmark (issue 5): replay speed of a recorded 20,000-event trace against the live run.

Run: .venv/bin/python bench/bench_replay.py   (or `make bench`).

The stream: 20,000 Chat Completions chunks of text, then a short tool call (the adapter turns each
text chunk into a TextDelta and reports the response identity once: ~20,000 events). Measured side
by side in one process, runs interleaved, medians of 5:

- live, from memory: the real `openai` client reading the stream from an in-memory transport
  through `Session.stream` (no network), without a trace;
- live, from memory, with wire recording (this run writes the trace that is replayed);
- live over loopback HTTP: the same frames served by the built-in emulator (for context);
- replay: `fsm_agent.replay(path)` reads that trace and re-drives a fresh machine, comparing
  every transition (and `read_trace` alone, the reading part of it).

Prints events per second and the ratios. Nothing here asserts on time.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import chat_body, memory_openai_client

import fsm_agent
from fsm_agent._internal.trace.reader import read_trace
from fsm_agent.testing import Emulator, Scenario

PARAMS = {"model": "bench-model", "messages": [{"role": "user", "content": "hi"}]}
TEXT_CHUNKS = 20_000
RUNS = 5


def timed(fn: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    import openai

    body, text, _ = chat_body(text_chunks=TEXT_CHUNKS, args_total=200, arg_fragment=20)
    client = memory_openai_client(body)
    frames = tuple(block + b"\n\n" for block in body.split(b"\n\n") if block)
    with tempfile.TemporaryDirectory() as tmp, Emulator() as emulator:
        emulator.script(Scenario(raw=frames), then=Scenario(raw=frames))
        http_client = openai.OpenAI(base_url=emulator.openai_base_url, api_key="sk-bench", max_retries=0)
        path = Path(tmp) / "bench.jsonl"

        def live() -> None:
            assert fsm_agent.Session().stream(client, PARAMS).content == text

        def live_http() -> None:
            assert fsm_agent.Session().stream(http_client, PARAMS).content == text

        def live_recording() -> None:
            if path.exists():
                path.unlink()
            session = fsm_agent.Session(trace=path, record_wire=True)
            result = session.stream(client, PARAMS)
            assert session.trace is not None
            session.trace.close()
            assert result.content == text

        def replay() -> None:
            report = fsm_agent.replay(path)
            assert report.matched and report.outcome is not None and report.outcome.content == text

        def read_only() -> None:
            read_trace(path)

        live_recording()
        (request,) = read_trace(path).requests.values()
        events = request.event_count
        size = os.path.getsize(path)
        runs: dict[str, list[float]] = {"live": [], "http": [], "record": [], "replay": [], "read": []}
        for _ in range(RUNS):  # interleaved, so that a busy moment of the machine hits all alike
            runs["live"].append(timed(live))
            runs["http"].append(timed(live_http))
            runs["record"].append(timed(live_recording))
            runs["replay"].append(timed(replay))
            runs["read"].append(timed(read_only))
        http_client.close()
    med = {name: statistics.median(times) for name, times in runs.items()}
    print(f"replay benchmark: {events:,} events ({size / 1e6:.1f} MB trace), medians of {RUNS} runs")
    rows = [
        ("live run from memory, no trace", "live"),
        ("live run from memory, wire recording", "record"),
        ("live run over loopback HTTP (emulator)", "http"),
        ("replay (read + re-drive + compare)", "replay"),
        ("  of which reading the trace", "read"),
    ]
    for label, name in rows:
        print(f"  {label:<40} {med[name] * 1e3:8.1f} ms  {events / med[name]:12,.0f} events/s")
    print(f"  replay vs live run from memory:            {med['live'] / med['replay']:5.2f}x  (goal >= 5x)")
    print(f"  replay vs the recording live run:          {med['record'] / med['replay']:5.2f}x")
    print(f"  replay vs live run over loopback HTTP:     {med['http'] / med['replay']:5.2f}x")
    print(f"  wire recording cost on the live run:       {med['record'] / med['live']:5.2f}x")


if __name__ == "__main__":
    main()
