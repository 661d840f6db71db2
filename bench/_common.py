"""Helpers shared by the benchmarks: SSE bodies built in memory and an httpx2 transport serving them.

Benchmarks print ratios measured side by side in one process; nothing here asserts on time.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any


def chat_chunk(
    delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None
) -> bytes:
    chunk: dict[str, Any] = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "bench-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if usage is None else [],
    }
    if usage is not None:
        chunk["usage"] = usage
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def chat_body(text_chunks: int, args_total: int, arg_fragment: int) -> tuple[bytes, str, str]:
    """A Chat Completions SSE body: text chunks, then one tool call with `args_total` bytes of args."""
    parts = [chat_chunk({"role": "assistant", "content": ""})]
    text_pieces = [f"word{i % 97} " for i in range(text_chunks)]
    parts.extend(chat_chunk({"content": piece}) for piece in text_pieces)
    payload = ('{"text": "' + ("abcdefghij" * (args_total // 10 + 1)))[: args_total - 2] + '"}'
    fragments = [payload[i : i + arg_fragment] for i in range(0, len(payload), arg_fragment)]
    function = {"name": "write_file", "arguments": ""}
    first = {"index": 0, "id": "call_1", "type": "function", "function": function}
    parts.append(chat_chunk({"tool_calls": [first]}))
    parts.extend(
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}) for piece in fragments
    )
    parts.append(chat_chunk({}, finish="tool_calls"))
    parts.append(chat_chunk({}, usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}))
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts), "".join(text_pieces), payload


def split_bytes(body: bytes, size: int = 16384) -> Iterator[bytes]:
    for i in range(0, len(body), size):
        yield body[i : i + size]


def memory_openai_client(body: bytes) -> Any:
    """A real openai.OpenAI client whose transport serves `body` from memory as text/event-stream."""
    import httpx2
    import openai

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(
            200,
            headers={"content-type": "text/event-stream"},
            stream=_Chunked(body),
        )

    return openai.OpenAI(
        base_url="http://bench.invalid/v1",
        api_key="sk-bench",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


class _Chunked(__import__("httpx2").SyncByteStream):  # type: ignore[misc]
    """A sync byte stream yielding the body in network-sized pieces."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def __iter__(self) -> Iterator[bytes]:
        return split_bytes(self._body)

    def close(self) -> None:
        pass


def median_time(fn: Callable[[], object], runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved_times(*runs: Callable[[], object], rounds: int = 5) -> list[list[float]]:
    """Seconds of each run over `rounds` rounds, the runs taken in turn in each round (so a change
    in the machine's load weighs on each alike), after one warm-up call of each."""
    for fn in runs:
        fn()
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(rounds):
        for fn, taken in zip(runs, times, strict=True):
            start = time.perf_counter()
            fn()
            taken.append(time.perf_counter() - start)
    return times


def spread(times: list[float], per: int) -> str:
    """The median of `times` divided by `per`, in µs, with the min..max over the rounds."""
    return (
        f"{statistics.median(times) * 1e6 / per:7.2f} [{min(times) * 1e6 / per:.2f}.."
        f"{max(times) * 1e6 / per:.2f}]"
    )


def ratios(a: list[float], b: list[float]) -> str:
    """The ratio of the medians of `a` and `b`, with the min..max of the per-round ratios."""
    per_round = [x / y for x, y in zip(a, b, strict=True)]
    return f"{statistics.median(a) / statistics.median(b):.3f} [{min(per_round):.2f}..{max(per_round):.2f}]"
