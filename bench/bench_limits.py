"""Byte caps on every path (issue 12, SEC-5): peak traced memory of the client, medians of 3 runs.

Run: python bench/bench_limits.py. With `max_bytes` of 1 MiB: a 50 MB JSON body answered to a
streaming request, a 50 MB Bedrock event stream (boto3 against the emulator in a child process),
and a 50 MB SSE body handed over in one single read; then the same single read under the default
cap, decoded in slices. Bodies are built before tracing starts, so only what the client allocates
while reading is counted. Goal: peak < 2x the cap (and < 2x the body for the uncapped read).
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fsm_agent

MB = 1_000_000
CAP = 1024 * 1024
PARAMS = {"model": "bench-model", "messages": [{"role": "user", "content": "hi"}]}

_BEDROCK_EMULATOR = """
import json, sys
from fsm_agent.testing import Emulator, Scenario
from fsm_agent.testing.eventstream import event_message
size = int(sys.argv[1])
delta = event_message("contentBlockDelta", json.dumps(
    {"contentBlockIndex": 0, "delta": {"text": "x" * 4000}}).encode())
frames = [event_message("messageStart", b'{"role": "assistant"}')] + [delta] * (size // len(delta))
body = b"".join(frames)
with Emulator() as emu:
    emu.script(Scenario(raw=(body,), raw_content_type="application/vnd.amazon.eventstream", frame_delay=0),
               cycle=True)
    print(emu.bedrock_endpoint_url, flush=True)
    sys.stdin.read()
"""


def _memory_client(body: bytes, content_type: str, piece: int | None) -> Any:
    import httpx2
    import openai

    class Body(httpx2.SyncByteStream):  # type: ignore[misc]
        def __iter__(self) -> Iterator[bytes]:
            if piece is None:
                yield body  # one single read
                return
            view = memoryview(body)
            for start in range(0, len(body), piece):
                yield bytes(view[start : start + piece])

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": content_type}, stream=Body())

    return openai.OpenAI(
        base_url="http://bench.invalid/v1",
        api_key="sk-bench",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


def _peak(run: Callable[[], Any]) -> tuple[int, str]:
    gc.collect()
    tracemalloc.start()
    try:
        try:
            run()
            outcome = "ok"
        except fsm_agent.FsmAgentError as exc:
            outcome = type(exc).__name__
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, outcome


def _report(label: str, run: Callable[[], Any], against: int, against_name: str) -> None:
    results = [_peak(run) for _ in range(3)]
    peaks = sorted(peak for peak, _ in results)
    median = statistics.median(peaks)
    print(
        f"  {label:<44} peak {median / MB:7.2f} MB (spread {peaks[0] / MB:.2f}-{peaks[-1] / MB:.2f})"
        f" = {median / against:5.2f}x {against_name}   -> {results[0][1]}"
    )


def json_body(size: int) -> None:
    body = json.dumps(
        {
            "id": "chatcmpl-big",
            "object": "chat.completion",
            "model": "bench-model",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "x" * size}, "finish_reason": "stop"}
            ],
        }
    ).encode()
    client = _memory_client(body, "application/json", 65536)
    session = fsm_agent.Session(retries=0, max_bytes=CAP)
    _report(
        f"{len(body) / MB:.0f} MB JSON body, 1 MiB cap", lambda: session.stream(client, PARAMS), CAP, "cap"
    )


def single_read(size: int) -> None:
    piece = b'data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"word "}}]}\n\n'
    body = piece * (size // len(piece)) + b"data: [DONE]\n\n"
    client = _memory_client(body, "text/event-stream", None)
    capped = fsm_agent.Session(retries=0, max_bytes=CAP)
    _report(
        f"{len(body) / MB:.0f} MB SSE in one read, 1 MiB cap",
        lambda: capped.stream(client, PARAMS),
        CAP,
        "cap",
    )
    small = body[: 5 * MB // len(piece) * len(piece)] + b"data: [DONE]\n\n"
    small_client = _memory_client(small, "text/event-stream", None)
    session = fsm_agent.Session(retries=0)
    _report(
        f"{len(small) / MB:.0f} MB SSE in one read, default cap",
        lambda: session.stream(small_client, PARAMS),
        len(small),
        "body",
    )


def bedrock_stream(size: int) -> None:
    import boto3
    import botocore.config

    emulator = subprocess.Popen(
        [sys.executable, "-c", _BEDROCK_EMULATOR, str(size)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert emulator.stdout is not None
        client = boto3.client(
            "bedrock-runtime",
            endpoint_url=emulator.stdout.readline().strip(),
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
            config=botocore.config.Config(retries={"max_attempts": 1}),
        )
        params = {"modelId": "bench", "messages": [{"role": "user", "content": [{"text": "hi"}]}]}
        session = fsm_agent.Session(retries=0, max_bytes=CAP)
        _report(
            f"{size / MB:.0f} MB Bedrock stream, 1 MiB cap",
            lambda: session.stream(client, params),
            CAP,
            "cap",
        )
        client.close()
    finally:
        assert emulator.stdin is not None
        emulator.stdin.close()
        emulator.wait(10)


if __name__ == "__main__":
    print("byte caps on every path (SEC-5): peak traced memory of the client, medians of 3 runs")
    json_body(50 * MB)
    single_read(50 * MB)
    bedrock_stream(50 * MB)
