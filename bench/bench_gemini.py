"""Native Gemini API benchmarks (issue 16): per-chunk cost and a short request, against google-genai.

Run: .venv/bin/python bench/bench_gemini.py   Prints ratios measured side by side in one process
(medians of interleaved runs after one warm-up run, with their spread: min..max). The body is served
from memory to a real `google.genai.Client` through an httpx2 MockTransport, so no socket time is
measured; what differs is only how each contender reads the same bytes.

- per chunk: `session.stream()` reading the `streamGenerateContent?alt=sse` bytes itself, the same
  request read through the SDK's objects (WIRE-5, a client without the SDK's internals), iterating
  the SDK's own `generate_content_stream()`, and the floor (SSE split + `json.loads`).
- short request: one chunk of text and the finish reason, request after request: the whole cost of
  `session.stream()` (machine, watchdog, result) against the bare SDK call, and the adapter's own
  share (open the attempt through the SDK, decode and translate the bytes, close) against it.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import interleaved_times, split_bytes

import fsm_agent
from fsm_agent._internal.actions import OpenAttempt
from fsm_agent._internal.providers.gemini import GeminiAdapter
from fsm_agent._internal.wire.pipeline import WirePipeline

PARAMS: dict[str, Any] = {"model": "gemini-bench", "contents": "hi"}


def chunk(parts: list[dict[str, Any]], finish: str | None = None) -> bytes:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    body: dict[str, Any] = {"candidates": [candidate], "modelVersion": "gemini-bench", "responseId": "r1"}
    if finish is not None:
        candidate["finishReason"] = finish
        body["usageMetadata"] = {"promptTokenCount": 3, "candidatesTokenCount": 5, "totalTokenCount": 8}
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\r\n\r\n"


def gemini_body(text_chunks: int, calls: int) -> tuple[bytes, str, int]:
    pieces = [f"word{i % 97} " for i in range(text_chunks)]
    parts = [chunk([{"text": piece}]) for piece in pieces]
    for i in range(calls):
        call = {"functionCall": {"name": "write_file", "args": {"path": f"f{i}.txt", "text": "x" * 64}}}
        parts.append(chunk([call]))
    parts.append(chunk([{"text": ""}], finish="STOP"))
    return b"".join(parts), "".join(pieces), calls


def memory_gemini_client(body: bytes) -> Any:
    """A real google.genai.Client whose transport serves `body` from memory as an event stream."""
    import httpx2
    from google import genai

    class Body(httpx2.SyncByteStream):  # type: ignore[misc]
        def __iter__(self) -> Iterator[bytes]:
            return split_bytes(body)

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=Body())

    return genai.Client(
        api_key="AIza-bench",
        http_options={
            "base_url": "http://bench.invalid",
            "httpx_client": httpx2.Client(transport=httpx2.MockTransport(handler)),
        },
    )


class ObjectsOnly:
    """The same client seen without the SDK's internals: fsm_agent reads its objects (WIRE-5)."""

    def __init__(self, client: Any) -> None:
        self.models = _Models(client.models)


class _Models:
    def __init__(self, models: Any) -> None:
        self.generate_content_stream = models.generate_content_stream
        self.generate_content = models.generate_content


def run_session(client: Any, text: str, calls: int, session: fsm_agent.Session) -> None:
    result = session.stream(client, PARAMS)
    assert (result.content or "") == text and len(result.tool_calls) == calls


def run_sdk(client: Any, text: str, calls: int) -> None:
    texts: list[str] = []
    found = 0
    for item in client.models.generate_content_stream(**PARAMS):
        for part in item.candidates[0].content.parts or []:
            if part.text:
                texts.append(part.text)
            elif part.function_call is not None:
                json.dumps(part.function_call.args)  # arguments as the caller would send them on
                found += 1
    assert "".join(texts) == text and found == calls


def _row(label: str, taken: list[float], per: int, unit: str) -> str:
    med = statistics.median(taken)
    return (
        f"  {label:<40} {med * 1e6 / per:8.2f} us/{unit}  "
        f"(spread {min(taken) * 1e6 / per:.2f}..{max(taken) * 1e6 / per:.2f})"
    )


def per_chunk_cost() -> None:
    body, text, calls = gemini_body(text_chunks=20_000, calls=200)
    chunks = body.count(b"\r\n\r\n")
    client = memory_gemini_client(body)
    session = fsm_agent.Session()
    objects = ObjectsOnly(client)

    def run_floor() -> None:
        for block in body.split(b"\r\n\r\n"):
            if block:
                json.loads(block[6:])

    a, o, b, c = interleaved_times(
        lambda: run_session(client, text, calls, session),
        lambda: run_session(objects, text, calls, session),
        lambda: run_sdk(client, text, calls),
        run_floor,
    )
    print(f"per-chunk cost, {chunks} chunks: 20,000 text, 200 function calls; medians of 5 interleaved runs")
    print(_row("(a) session.stream(), reading the bytes", a, chunks, "chunk"))
    print(_row("(o) session.stream(), reading objects", o, chunks, "chunk"))
    print(_row("(b) SDK generate_content_stream()", b, chunks, "chunk"))
    print(_row("(c) SSE split + json.loads", c, chunks, "chunk"))
    ma, mo, mb, mc = (statistics.median(t) for t in (a, o, b, c))
    print(f"  a/b = {ma / mb:.3f}  (goal <= 0.25)   o/b = {mo / mb:.2f}   a/c = {ma / mc:.2f} (goal <= 2.0)")


def short_request() -> None:
    body, text, calls = gemini_body(text_chunks=1, calls=0)
    client = memory_gemini_client(body)
    session = fsm_agent.Session()
    requests = 200

    def many(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(requests):
                fn()

        return run

    adapter = GeminiAdapter()
    plan = OpenAttempt(attempt=1, stream_options=False, buffer_tool_input=False)

    def run_adapter() -> None:
        attempt = adapter.open(client, PARAMS, plan, 180.0)
        pipeline = WirePipeline(adapter.translator())
        try:
            events = [event for piece in attempt.iter_chunks() for event in pipeline.feed(piece)]
        finally:
            attempt.close()
        assert events

    a, d, b = interleaved_times(
        many(lambda: run_session(client, text, calls, session)),
        many(run_adapter),
        many(lambda: run_sdk(client, text, calls)),
        rounds=7,
    )
    print(f"short request (one text chunk + finish), {requests} requests a run; medians of 7 interleaved")
    print(_row("(a) session.stream()", a, requests, "request"))
    print(_row("(d) the Gemini adapter alone", d, requests, "request"))
    print(_row("(b) SDK generate_content_stream()", b, requests, "request"))
    mb = statistics.median(b)
    print(f"  a/b = {statistics.median(a) / mb:.3f}  (goal <= 1.0)    d/b = {statistics.median(d) / mb:.3f}")


if __name__ == "__main__":
    which = sys.argv[1:] or ["chunks", "short"]
    if "chunks" in which:
        per_chunk_cost()
    if "short" in which:
        short_request()
