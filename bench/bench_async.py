"""Async benchmark (issue 7): 500 concurrent `astream()` requests against the emulator.

Each request streams 200 text chunks and one tool call over real loopback HTTP with the real
`openai.AsyncOpenAI` client. Printed, side by side in one run (medians of several runs):

- every result byte-exact (content and tool-call arguments) — or the script exits non-zero;
- wall time of the 500 concurrent requests;
- CPU time per chunk of the client process, concurrent vs one request alone (goal: within 1.5x);
- peak memory per concurrent stream (tracemalloc peak over the run / 500, in a separate run,
  since tracing slows everything down; plus the process's RSS growth).

The emulator runs in a child process, so its CPU is not counted as ours (the machine has 2 cores:
one serves, one streams). Its listen backlog is raised in that child (the stdlib default of 5
makes most of 500 simultaneous connects wait a SYN retry of 1 s or more): see `_EMULATOR`.

Run: .venv/bin/python bench/bench_async.py [--concurrency 500] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import openai

import fsm_agent

ROOT = Path(__file__).resolve().parent.parent
TEXT_CHUNKS = 200
CHUNK = 8  # characters per text chunk
TEXT = "".join(f"w{i:03d}-é. " for i in range(TEXT_CHUNKS))  # 8 characters each, one multi-byte
ARGUMENTS = '{"path": "notes/bench.txt", "text": "' + "abcdefghij" * 30 + ' 😀"}'
ARG_FRAGMENT = 40
PARAMS = {"model": "bench-model", "messages": [{"role": "user", "content": "hi"}]}

_EMULATOR = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from fsm_agent.testing import Emulator, Scenario, Text, ToolCall
scenario = Scenario(
    steps=(
        Text({TEXT!r}, chunk_size={CHUNK}),
        ToolCall("write_file", {ARGUMENTS!r}, arg_fragment={ARG_FRAGMENT}),
    ),
)
with Emulator(default=scenario) as emu:
    print(emu.openai_base_url, flush=True)
    sys.stdin.read()  # serve until the parent closes our stdin
"""


def frames_per_request() -> int:
    tool_frames = 1 + -(-len(ARGUMENTS) // ARG_FRAGMENT)  # name frame + argument fragments
    return 1 + TEXT_CHUNKS + tool_frames + 2  # role chunk, text, tool, finish, usage


async def one(session: fsm_agent.Session, client: openai.AsyncOpenAI) -> bool:
    result = await session.astream(client, PARAMS)
    calls = result.tool_calls
    return (
        result.content == TEXT
        and len(calls) == 1
        and calls[0].name == "write_file"
        and calls[0].arguments == ARGUMENTS
        and result.attempts == 1
    )


def new_client(base_url: str, concurrency: int) -> openai.AsyncOpenAI:
    import httpx2

    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    return openai.AsyncOpenAI(
        base_url=base_url,
        api_key="sk-bench",
        max_retries=0,
        http_client=httpx2.AsyncClient(limits=limits, timeout=60.0),
    )


async def alone(base_url: str, repeats: int) -> list[float]:
    """CPU seconds of single requests, one after the other (connection warm, as in the batch)."""
    session = fsm_agent.Session()
    client = new_client(base_url, 1)
    cpu: list[float] = []
    try:
        assert await one(session, client)  # warm-up: connection, imports, caches
        for _ in range(repeats):
            before = time.process_time()
            ok = await one(session, client)
            cpu.append(time.process_time() - before)
            assert ok, "a single request's result was not byte-exact"
    finally:
        await client.close()
    return cpu


def sync_alone(base_url: str, repeats: int) -> list[float]:
    """The same single requests through the sync driver, for scale."""
    session = fsm_agent.Session()
    client = openai.OpenAI(base_url=base_url, api_key="sk-bench", max_retries=0)
    cpu: list[float] = []
    try:
        session.stream(client, PARAMS)
        for _ in range(repeats):
            before = time.process_time()
            result = session.stream(client, PARAMS)
            cpu.append(time.process_time() - before)
            assert result.content == TEXT and result.tool_calls[0].arguments == ARGUMENTS
    finally:
        client.close()
    return cpu


async def concurrent(base_url: str, concurrency: int) -> tuple[float, float, int]:
    """(wall s, CPU s, exact results) of `concurrency` requests started together."""
    session = fsm_agent.Session()
    client = new_client(base_url, concurrency)
    try:
        gc.collect()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        outcomes = await asyncio.gather(*(one(session, client) for _ in range(concurrency)))
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    finally:
        await client.close()
    return wall, cpu, sum(outcomes)


async def memory(base_url: str, concurrency: int) -> tuple[int, int]:
    """(tracemalloc peak bytes during the concurrent run, its baseline before)."""
    session = fsm_agent.Session()
    client = new_client(base_url, concurrency)
    try:
        await one(session, client)
        gc.collect()
        tracemalloc.start()
        baseline, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        outcomes = await asyncio.gather(*(one(session, client) for _ in range(concurrency)))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert all(outcomes)
    finally:
        await client.close()
    return peak, baseline


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--alone", type=int, default=30, help="single requests for the baseline")
    args = parser.parse_args()
    n = args.concurrency
    chunks = frames_per_request()

    emulator = subprocess.Popen(
        [sys.executable, "-c", _EMULATOR], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert emulator.stdout is not None
        base_url = emulator.stdout.readline().strip()
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        single = asyncio.run(alone(base_url, args.alone))
        single_sync = sync_alone(base_url, args.alone)
        batches = [asyncio.run(concurrent(base_url, n)) for _ in range(args.runs)]
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak, baseline = asyncio.run(memory(base_url, n))
    finally:
        assert emulator.stdin is not None
        emulator.stdin.close()
        emulator.wait(10)

    exact = [ok for _, _, ok in batches]
    cpu_alone = statistics.median(single) / chunks
    cpu_batch = statistics.median(cpu / (n * chunks) for _, cpu, _ in batches)
    wall = statistics.median(w for w, _, _ in batches)
    print(
        f"async benchmark: {n} concurrent astream() requests, {chunks} frames each "
        f"({TEXT_CHUNKS} text chunks + one tool call), real AsyncOpenAI over loopback HTTP"
    )
    print(f"  byte-exact results           : {min(exact)}/{n} in every one of {args.runs} runs")
    print(
        f"  wall time, {n} concurrent    : {wall:.2f} s (median of {args.runs}; "
        f"runs {', '.join(f'{w:.2f}' for w, _, _ in batches)})"
    )
    print(f"  throughput                   : {n * chunks / wall:,.0f} chunks/s, {n / wall:,.0f} requests/s")
    print(f"  CPU per chunk, alone         : {cpu_alone * 1e6:.1f} µs (median of {args.alone} requests)")
    print(f"  CPU per chunk, concurrent    : {cpu_batch * 1e6:.1f} µs (median of {args.runs} runs)")
    print(f"  ratio concurrent / alone     : {cpu_batch / cpu_alone:.2f}x (goal: within 1.5x)")
    cpu_sync = statistics.median(single_sync) / chunks
    print(
        f"  for scale, sync stream() alone: {cpu_sync * 1e6:.1f} µs per chunk "
        f"(async alone / sync alone: {cpu_alone / cpu_sync:.2f}x)"
    )
    print(
        f"  peak memory per stream       : {(peak - baseline) / n / 1024:.1f} KiB "
        f"(tracemalloc peak {peak / 2**20:.1f} MiB over baseline {baseline / 2**20:.1f} MiB)"
    )
    print(
        f"  RSS growth over the runs     : {(rss1 - rss0) / 1024:.1f} MiB "
        f"({(rss1 - rss0) / n:.1f} KiB per concurrent stream)"
    )
    return 0 if min(exact) == n else 1


if __name__ == "__main__":
    sys.exit(main())
