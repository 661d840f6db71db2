"""Anthropic Messages benchmarks (issue 3): per-event cost and linear tool-input growth.

Run: .venv/bin/python bench/bench_anthropic.py   Prints ratios measured side by side in one process
(medians of interleaved runs after one warm-up run). The body is served from memory to a real
`anthropic.Anthropic` client through an httpx2 MockTransport, so no socket time is measured.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import interleaved_times, ratios, split_bytes, spread

import fsm_agent

PARAMS: dict[str, Any] = {
    "model": "claude-bench",
    "max_tokens": 1024,
    "messages": [{"role": "user", "content": "hi"}],
    "tools": [{"name": "write_file", "input_schema": {"type": "object"}}],
}


def event(name: str, payload: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()


def anthropic_body(text_events: int, args_total: int, fragments: int) -> tuple[bytes, str, str]:
    """message_start, `text_events` text deltas, then one tool_use whose input (`args_total` bytes)
    arrives in `fragments` input_json_delta events; message_delta, message_stop."""
    message = {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": "claude-bench",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    parts = [event("message_start", {"type": "message_start", "message": message})]
    parts.append(event("ping", {"type": "ping"}))
    parts.append(
        event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        )
    )
    pieces = [f"word{i % 97} " for i in range(text_events)]
    for piece in pieces:
        delta = {"type": "text_delta", "text": piece}
        parts.append(
            event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        )
    parts.append(event("content_block_stop", {"type": "content_block_stop", "index": 0}))
    payload = ('{"text": "' + "abcdefghij" * (args_total // 10 + 1))[: args_total - 2] + '"}'
    size = -(-len(payload) // fragments)
    tool = {"type": "tool_use", "id": "toolu_bench", "name": "write_file", "input": {}}
    parts.append(
        event("content_block_start", {"type": "content_block_start", "index": 1, "content_block": tool})
    )
    for i in range(0, len(payload), size):
        delta = {"type": "input_json_delta", "partial_json": payload[i : i + size]}
        parts.append(
            event("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": delta})
        )
    parts.append(event("content_block_stop", {"type": "content_block_stop", "index": 1}))
    parts.append(
        event(
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 5000}},
        )
    )
    parts.append(event("message_stop", {"type": "message_stop"}))
    return b"".join(parts), "".join(pieces), payload


def memory_anthropic_client(body: bytes) -> Any:
    """A real anthropic.Anthropic client whose transport serves `body` from memory as an event stream."""
    import anthropic
    import httpx2

    class Body(httpx2.SyncByteStream):  # type: ignore[misc]
        def __iter__(self) -> Iterator[bytes]:
            return split_bytes(body)

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=Body())

    return anthropic.Anthropic(
        base_url="http://bench.invalid",
        api_key="sk-ant-bench",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


def run_session(client: Any, text: str, payload: str, session: fsm_agent.Session) -> None:
    result = session.stream(client, PARAMS)
    assert (result.content or "") == text and result.tool_calls[0].arguments == payload
    assert result.raw.content[1].input["text"] == json.loads(payload)["text"]


def run_sdk(client: Any, text: str, payload: str) -> None:
    texts: list[str] = []
    args: list[str] = []
    with client.messages.stream(**PARAMS) as stream:
        for item in stream:
            if item.type == "text":
                texts.append(item.text)
            elif item.type == "input_json":
                args.append(item.partial_json)
        message = stream.get_final_message()
    assert "".join(texts) == text and "".join(args) == payload
    assert message.content[1].input["text"] == json.loads(payload)["text"]  # type: ignore[union-attr]


def per_event_cost() -> None:
    body, text, payload = anthropic_body(text_events=20_000, args_total=200_000, fragments=1_000)
    events = body.count(b"\n\n")
    client = memory_anthropic_client(body)
    session = fsm_agent.Session()

    def run_floor() -> None:
        for block in body.split(b"\n\n"):
            if block:
                json.loads(block[block.index(b"data: ") + 6 :])

    a, b, c = interleaved_times(
        lambda: run_session(client, text, payload, session),
        lambda: run_sdk(client, text, payload),
        run_floor,
    )
    print(f"per-event cost, {events} SSE events: 20,000 text deltas, then 200 KB of tool input")
    print("  in 1,000 input_json_delta fragments; medians of 5 interleaved runs [min..max]")
    print(f"  (a) session.stream()                 {spread(a, events)} us/event")
    print(f"  (b) anthropic SDK messages.stream()  {spread(b, events)} us/event")
    print(f"  (c) SSE split + json.loads           {spread(c, events)} us/event")
    print(f"  a/b = {ratios(a, b)}  (goal <= 0.25)    a/c = {ratios(a, c)}  (goal <= 2.0)")


def linear_growth() -> None:
    print("linear growth: tool input in 200-byte input_json_delta fragments, no text; medians of 9 runs")
    ours: dict[int, float] = {}
    sdk: dict[int, float] = {}
    for size in (100_000, 1_000_000):
        body, _, payload = anthropic_body(text_events=0, args_total=size, fragments=size // 200)
        client = memory_anthropic_client(body)
        session = fsm_agent.Session()
        ours[size], sdk[size] = map(
            statistics.median,
            interleaved_times(
                lambda c=client, p=payload, s=session: run_session(c, "", p, s),
                lambda c=client, p=payload: run_sdk(c, "", p),
                rounds=9,  # the 100 KB run takes a few ms: more rounds steady its median
            ),
        )
        print(
            f"  {size:>9,} bytes: session.stream() {ours[size] * 1e3:8.1f} ms    "
            f"SDK messages.stream() {sdk[size] * 1e3:8.1f} ms"
        )
    print(
        f"  ratio 1 MB / 100 KB: session.stream() {ours[1_000_000] / ours[100_000]:.1f} (goal <= 10)    "
        f"SDK {sdk[1_000_000] / sdk[100_000]:.1f} (it re-parses the input so far on every delta)"
    )


if __name__ == "__main__":
    which = sys.argv[1:] or ["events", "linear"]
    if "events" in which:
        per_event_cost()
    if "linear" in which:
        linear_growth()
