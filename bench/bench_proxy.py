"""`fsm-agent serve` benchmark (issue 28): what a proxy adds to a stream, side by side in one run.

Three ways to the same upstream over loopback: straight to it, through `fsm-agent serve` (one
worker), and through LiteLLM's proxy (one worker) configured for the same route. Printed: the
time to the first byte of the answer and each chunk's latency (p50, p99; and what the proxy adds
over the direct way), then how many concurrent streams one worker carries at a fixed chunk rate
(20 chunks/s each, the streams' starts spread over one interval as independent streams' are)
before its p99 chunk latency doubles from one stream's (the median of three runs per level).

The upstream is a minimal Chat Completions SSE server run by this script (`--upstream`), not the
emulator: each chunk's text is the time it was sent on the machine's monotonic clock, which every
process shares, so a chunk's latency is read exactly where it arrives. The client is a plain
asyncio HTTP/1.1 reader, light enough not to be what is measured. Requests are interleaved across
the targets; nothing asserts on time.

Run: `make bench-proxy` (makes `.venv-litellm` with LiteLLM from the package index, then runs
this), or `.venv/bin/python bench/bench_proxy.py [--litellm PATH_TO_litellm]`; without LiteLLM the
other two columns are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
KEY = "sk-bench-proxy-key"
_now = time.monotonic_ns  # CLOCK_MONOTONIC on Linux: one clock for every process


# -- the stamping upstream -----------------------------------------------------------------------------
def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "bench-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    data = b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _upstream_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            body = json.loads(await reader.readexactly(length))
            chunks, interval = body["messages"][-1]["content"].split()
            count, pause = int(chunks), float(interval)
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                + _chunk({"role": "assistant", "content": ""})
            )
            for index in range(count):
                if index and pause:
                    await asyncio.sleep(pause)
                writer.write(_chunk({"content": f"{_now()} "}))
                await writer.drain()
            writer.write(_chunk({}, "stop"))
            done = b"data: [DONE]\n\n"
            writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def run_upstream(port: int) -> None:
    async def main() -> None:
        server = await asyncio.start_server(_upstream_conn, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


# -- the client -----------------------------------------------------------------------------------------
class Reading:
    __slots__ = ("first_byte", "latencies", "ok")

    def __init__(self) -> None:
        self.first_byte: float | None = None
        self.latencies: list[float] = []
        self.ok = False


async def stream_once(port: int, path: str, chunks: int, interval: float) -> Reading:
    body = json.dumps(
        {
            "model": "bench",
            "stream": True,
            "messages": [{"role": "user", "content": f"{chunks} {interval}"}],
        }
    ).encode()
    started = _now()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    reading = Reading()
    try:
        writer.write(
            b"POST %s HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer %s\r\n"
            b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
            % (path.encode(), KEY.encode(), len(body), body)
        )
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            return reading
        chunked = b"transfer-encoding: chunked" in head.lower()
        buffer = b""
        while True:
            if chunked:
                size = int((await reader.readline()).strip() or b"0", 16)
                if size == 0:
                    break
                piece = await reader.readexactly(size + 2)
                buffer += piece[:-2]
            else:
                piece = await reader.read(65536)
                if not piece:
                    break
                buffer += piece
            *events, buffer = buffer.split(b"\n\n")
            arrived = _now()
            for event in events:
                for line in event.split(b"\n"):
                    if not line.startswith(b"data: {"):
                        if line.startswith(b"data: [DONE]"):
                            reading.ok = True
                        continue
                    choices = json.loads(line[6:]).get("choices") or ()
                    text = (choices[0].get("delta") or {}).get("content") if choices else None
                    for stamp in (text or "").split():
                        if reading.first_byte is None:
                            reading.first_byte = (arrived - started) / 1e6
                        reading.latencies.append((arrived - int(stamp)) / 1e6)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return reading


# -- the servers --------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_port(port: int, process: subprocess.Popen[bytes], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not start")


@contextlib.contextmanager
def started(command: list[str], port: int, what: str, env: dict[str, str] | None = None) -> Iterator[None]:
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    try:
        wait_port(port, process, what)
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


def fsm_config(upstream: int) -> str:
    return f"""
[proxy]
keys = ["{KEY}"]

[models.bench]
[[models.bench.routes]]
provider = "openai"
base_url = "http://127.0.0.1:{upstream}/v1"
key_env = "BENCH_UPSTREAM_KEY"
model = "bench-model"
"""


def litellm_config(upstream: int) -> str:
    return f"""
model_list:
  - model_name: bench
    litellm_params:
      model: openai/bench-model
      api_base: http://127.0.0.1:{upstream}/v1
      api_key: sk-upstream
general_settings:
  master_key: {KEY}
litellm_settings:
  telemetry: false
"""


# -- measuring ----------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


async def latency_rounds(
    targets: dict[str, int], rounds: int, chunks: int, interval: float
) -> dict[str, Any]:
    firsts: dict[str, list[float]] = {name: [] for name in targets}
    chunk_lat: dict[str, list[float]] = {name: [] for name in targets}
    failed: dict[str, int] = dict.fromkeys(targets, 0)
    for _ in range(rounds):
        for name, port in targets.items():  # interleaved
            reading = await stream_once(port, "/v1/chat/completions", chunks, interval)
            if not reading.ok or reading.first_byte is None:
                failed[name] += 1
                continue
            firsts[name].append(reading.first_byte)
            chunk_lat[name].extend(reading.latencies[1:])
    return {"first": firsts, "chunk": chunk_lat, "failed": failed}


async def concurrent_p99(port: int, streams: int, chunks: int, interval: float) -> tuple[float, int]:
    async def staggered(index: int) -> Reading:
        # Independent streams do not tick together: stream i starts i/N of an interval after the
        # first, so the N streams' chunks arrive spread over each interval (all started at once,
        # every chunk of a tick would arrive in one burst, and the p99 would time the burst).
        await asyncio.sleep(index * interval / streams)
        return await stream_once(port, "/v1/chat/completions", chunks, interval)

    readings = await asyncio.gather(*(staggered(index) for index in range(streams)), return_exceptions=True)
    latencies: list[float] = []
    failed = 0
    for reading in readings:
        if isinstance(reading, BaseException) or not reading.ok:
            failed += 1
            continue
        latencies.extend(reading.latencies[1:])
    return pct(latencies, 99), failed


async def capacity(
    port: int, levels: list[int], chunks: int, interval: float, repeats: int = 3
) -> list[tuple[int, float, int]]:
    """(streams, median p99 over `repeats` runs, failed streams) per level, until two levels in a
    row are past the doubling (one spike of a loaded machine does not end the curve)."""
    found: list[tuple[int, float, int]] = []
    for streams in levels:
        runs = [await concurrent_p99(port, streams, chunks, interval) for _ in range(repeats)]
        p99 = statistics.median(run[0] for run in runs)
        failed = sum(run[1] for run in runs)
        found.append((streams, p99, failed))
        base = found[0][1]
        past = [level for level in found[-2:] if level[1] > 2 * base]
        if failed or (len(found) > 2 and len(past) == 2):
            break
    return found


def carried(curve: list[tuple[int, float, int]]) -> int:
    base = curve[0][1]
    best = curve[0][0]
    for streams, p99, failed in curve:
        if failed or p99 > 2 * base:
            break
        best = streams
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--litellm", default=str(ROOT / ".venv-litellm" / "bin" / "litellm"))
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--levels", default="1,2,4,8,16,32,64,128,256")
    args = parser.parse_args()
    if args.upstream is not None:
        run_upstream(args.upstream)
        return
    levels = [int(x) for x in args.levels.split(",")]
    upstream, fsm_port, lite_port = free_port(), free_port(), free_port()
    workdir = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    (workdir / "fsm.toml").write_text(fsm_config(upstream))
    (workdir / "litellm.yaml").write_text(litellm_config(upstream))
    litellm = args.litellm if Path(args.litellm).exists() else shutil.which("litellm")
    with contextlib.ExitStack() as stack:
        stack.enter_context(
            started([sys.executable, __file__, "--upstream", str(upstream)], upstream, "upstream")
        )
        serve = [sys.executable, "-m", "fsm_agent", "serve", "--config", str(workdir / "fsm.toml")]
        serve += ["--port", str(fsm_port), "--log-level", "warning"]
        stack.enter_context(
            started(serve, fsm_port, "fsm-agent serve", {"BENCH_UPSTREAM_KEY": "sk-upstream"})
        )
        targets = {"direct": upstream, "fsm-agent": fsm_port}
        if litellm:
            lite = [litellm, "--config", str(workdir / "litellm.yaml"), "--port", str(lite_port)]
            lite += ["--num_workers", "1"]
            env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "DISABLE_ADMIN_UI": "True"}
            stack.enter_context(started(lite, lite_port, "litellm", env))
            targets["litellm"] = lite_port
        else:
            print("LiteLLM not found (make bench-proxy installs it in .venv-litellm): its column is left out")
        asyncio.run(latency_rounds(targets, 3, 5, 0.0))  # warm-up: imports, pools, caches
        print(f"bench_proxy: loopback, {os.cpu_count()} cores; {args.rounds} interleaved requests per target")
        first = asyncio.run(latency_rounds(targets, args.rounds, 5, 0.0))
        chunked = asyncio.run(latency_rounds(targets, max(5, args.rounds // 4), 50, 0.01))
        print("\nfirst byte (ms) and chunk latency at 100 chunks/s (ms); +added over direct")
        print(f"{'':<11}{'first p50':>10}{'first p99':>10}{'chunk p50':>10}{'chunk p99':>10}   failed")
        base_first = first["first"]["direct"]
        base_chunk = chunked["chunk"]["direct"]
        for name in targets:
            f50, f99 = pct(first["first"][name], 50), pct(first["first"][name], 99)
            c50, c99 = pct(chunked["chunk"][name], 50), pct(chunked["chunk"][name], 99)
            failed = first["failed"][name] + chunked["failed"][name]
            print(f"{name:<11}{f50:>10.2f}{f99:>10.2f}{c50:>10.2f}{c99:>10.2f}   {failed}")
            if name != "direct":
                print(
                    f"{'  added':<11}{f50 - pct(base_first, 50):>+10.2f}{f99 - pct(base_first, 99):>+10.2f}"
                    f"{c50 - pct(base_chunk, 50):>+10.2f}{c99 - pct(base_chunk, 99):>+10.2f}"
                )
        print("\nconcurrent streams at 20 chunks/s each: p99 chunk latency (ms) by streams")
        for name, port in targets.items():
            if name == "direct":
                continue
            curve = asyncio.run(capacity(port, levels, 40, 0.05))
            shown = "  ".join(f"{streams}:{p99:.1f}{'!' if failed else ''}" for streams, p99, failed in curve)
            print(f"{name:<11}carries {carried(curve):>4} streams before p99 doubles   [{shown}]")
        print("(! = streams that failed at that level)")
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
