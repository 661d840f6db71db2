"""Chat Completions benchmarks (issue 2): per-chunk cost, linear growth, stall detection.

Run: .venv/bin/python bench/bench_chat.py   (or `make bench`). Prints ratios measured side by side
in one process; medians of 5 runs.
"""

from __future__ import annotations

import contextlib
import gc
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


from _common import chat_body, interleaved_times, median_time, memory_openai_client, ratios, spread

import fsm_agent
from fsm_agent._internal.accumulator import Accumulator

PARAMS = {"model": "bench-model", "messages": [{"role": "user", "content": "hi"}]}


def per_chunk_cost() -> None:
    # 20,000 chunks: 10,000 text chunks, then a tool call with 200 KB of arguments in 20-byte fragments.
    body, text, payload = chat_body(text_chunks=10_000, args_total=200_000, arg_fragment=20)
    chunks = body.count(b"\n\n")
    client = memory_openai_client(body)
    session = fsm_agent.Session()

    def run_fsm() -> None:
        result = session.stream(client, PARAMS)
        assert result.content == text and result.tool_calls[0].arguments == payload

    def run_sdk() -> None:
        stream = client.chat.completions.create(**PARAMS, stream=True)
        texts: list[str] = []
        args: list[str] = []
        for chunk in stream:
            if chunk.choices:
                delta = chunk.choices[0].delta
                if delta.content:
                    texts.append(delta.content)
                for call in delta.tool_calls or ():
                    if call.function and call.function.arguments:
                        args.append(call.function.arguments)
        assert "".join(texts) == text and "".join(args) == payload

    def run_floor() -> None:
        for block in body.split(b"\n\n"):
            if block and block != b"data: [DONE]":
                json.loads(block[6:])

    a, b, c = interleaved_times(run_fsm, run_sdk, run_floor)
    print(f"per-chunk cost, {chunks} chunks, medians of 5 interleaved runs [min..max]")
    print(f"  (a) session.stream()        {spread(a, chunks)} us/chunk")
    print(f"  (b) openai SDK stream loop  {spread(b, chunks)} us/chunk")
    print(f"  (c) SSE split + json.loads  {spread(c, chunks)} us/chunk")
    print(f"  a/b = {ratios(a, b)}  (goal <= 0.25)    a/c = {ratios(a, c)}  (goal <= 2.0)")


def linear_growth() -> None:
    print("linear growth: tool arguments in 1-character fragments through session.stream()")
    times = {}
    for size in (100_000, 1_000_000):
        body, _, payload = chat_body(text_chunks=0, args_total=size, arg_fragment=1)
        client = memory_openai_client(body)
        session = fsm_agent.Session(max_bytes=1 << 30)

        def run(
            client: object = client, payload: str = payload, session: fsm_agent.Session = session
        ) -> None:
            result = session.stream(client, PARAMS)
            assert result.tool_calls[0].arguments == payload

        times[size] = median_time(run, runs=3)
        print(f"  {size:>9,} bytes: {times[size]:.2f} s")
    print(f"  ratio 1 MB / 100 KB = {times[1_000_000] / times[100_000]:.1f}  (goal <= 10)")
    # Peak extra memory of accumulation alone (the wire bytes are transient): 1 MB in 1-char pieces.
    payload = "é" + "x" * 999_999
    gc.collect()
    tracemalloc.start()
    acc = Accumulator()
    for ch in payload:
        acc.tool_delta(0, "id", "write_file", ch, None)
    assert acc.build().tool_calls[0].arguments == payload
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    size = len(payload.encode())
    print(
        f"  accumulating {size:,} bytes in 1-char fragments: "
        f"peak {peak:,} bytes = {peak / size:.2f}x (goal < 3x)"
    )
    # The whole request under tracemalloc (slow: ~1 min): the SSE body is built beforehand and not
    # counted; everything the request allocates while streaming is.
    body, _, payload = chat_body(text_chunks=0, args_total=1_000_000, arg_fragment=1)
    client = memory_openai_client(body)
    session = fsm_agent.Session(max_bytes=1 << 30)
    session.stream(client, PARAMS)  # warm up imports and pools
    gc.collect()
    tracemalloc.start()
    result = session.stream(client, PARAMS)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert result.tool_calls[0].arguments == payload
    print(
        f"  whole session.stream() of 1 MB in 1-char fragments: peak {peak:,} bytes "
        f"= {peak / len(payload):.2f}x the payload (goal < 3x)"
    )


_STALLING_EMULATOR = """
import sys
from fsm_agent.testing import Emulator, Scenario, Stall
stall = Scenario.build("hello", faults=[Stall(1, seconds=float(sys.argv[1]))])
with Emulator(default=stall) as emulator:
    print(emulator.openai_base_url, flush=True)
    sys.stdin.read()  # serve until the parent closes our stdin
"""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _stalled_request(client: object, stale_timeout: float) -> tuple[float, float]:
    """(seconds from the deadline to the request's end, process CPU seconds) of one stalled request."""
    session = fsm_agent.Session(retries=0, stale_timeout=stale_timeout)
    started, cpu_start = time.monotonic(), _cpu()
    with contextlib.suppress(fsm_agent.StreamStalledError):
        session.stream(client, PARAMS)
    return time.monotonic() - started - stale_timeout, _cpu() - cpu_start


def stall_detection() -> None:
    import openai

    print("stall detection: the emulator (in a child process) goes silent after the first frame")
    # The emulator runs in its own process so that only the client's CPU is counted.
    emulator = subprocess.Popen(
        [sys.executable, "-c", _STALLING_EMULATOR, "8"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert emulator.stdout is not None
        client = openai.OpenAI(base_url=emulator.stdout.readline().strip(), api_key="sk-bench", max_retries=0)
        _stalled_request(client, 0.5)  # warm-up: connection pool, lazy imports
        delays = sorted(_stalled_request(client, 0.5)[0] for _ in range(5))
        _, long_cpu = _stalled_request(client, 5.0)
        client.close()
    finally:
        assert emulator.stdin is not None
        emulator.stdin.close()
        emulator.wait(10)
    print(
        f"  stale_timeout=0.5: deadline -> request ended (incl. the first frame): median "
        f"{delays[2] * 1000:.0f} ms, max {delays[-1] * 1000:.0f} ms  (goal < 250 ms)"
    )
    print(f"  process CPU of the client during a 5 s stall: {long_cpu:.3f} s  (goal < 0.1 s)")


if __name__ == "__main__":
    which = sys.argv[1:] or ["chunks", "linear", "stall"]
    if "chunks" in which:
        per_chunk_cost()
    if "linear" in which:
        linear_growth()
    if "stall" in which:
        stall_detection()
