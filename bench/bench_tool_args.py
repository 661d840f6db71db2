"""Partial tool arguments as they stream (issue 17, ACC-11): linear growth and per-fragment cost.

Run: .venv/bin/python bench/bench_tool_args.py   Prints ratios measured side by side in one process:
medians of interleaved runs (after one warm-up run) with their spread (min-max). Bodies are served
from memory to the real SDK clients through an httpx2 MockTransport (network-sized reads, or one SSE
frame per read: each argument fragment its own read, the worst case for per-read delivery), so no
socket time is measured.

The arguments are a `write_file` call whose content is source code (newlines and quotes, so the
JSON has escapes), in 200-byte fragments.

1. Linear growth: session.stream() with on_tool_args at 100 KB and at 1 MB of arguments (goal: the
   ratio <= 11 for 10x the bytes), and without on_tool_args for reference; with network-sized
   reads and with one read per fragment (where the pacing of calls past 64 KiB matters: each
   value copies the open string, since the callback keeps the last value here).
2. Per fragment, on the same bytes: our reader alone (feed + value per fragment, unpaced: the
   copy of the open string each time shows as a quadratic memcpy term), jiter's partial
   mode re-parsing the buffer so far (what the SDKs do), session.stream() with on_tool_args on an
   Anthropic body, and the Anthropic SDK's messages.stream() (its helper re-parses the input so far
   with jiter on every input_json_delta).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import chat_chunk, interleaved_times

import fsm_agent
from fsm_agent._internal.partial_json import PartialJson

FRAGMENT = 200
CHAT_PARAMS: dict[str, Any] = {"model": "bench-model", "messages": [{"role": "user", "content": "hi"}]}
ANTHROPIC_PARAMS: dict[str, Any] = {
    "model": "claude-bench",
    "max_tokens": 1024,
    "messages": [{"role": "user", "content": "hi"}],
    "tools": [{"name": "write_file", "input_schema": {"type": "object"}}],
}
SOURCE_LINES = (
    "def handler(request):\n",
    '    """Answer one request."""\n',
    '    name = request.get("name", "world")\n',
    '    return {"greeting": f"hello {name}", "status": 200}\n',
    "\n",
)


def arguments(size: int) -> str:
    """A write_file call's arguments, `size` characters of JSON."""
    head = '{"path": "src/generated/handlers.py", "content": "'
    body = json.dumps("".join(SOURCE_LINES) * (size // 100 + 1))[1:-1]
    body = body[: size - len(head) - 2]
    while body.endswith("\\"):  # never cut an escape in two
        body = body[:-1]
    return head + body + '"}'


def fragments(payload: str) -> list[str]:
    return [payload[i : i + FRAGMENT] for i in range(0, len(payload), FRAGMENT)]


# -- bodies, one SSE frame per read ----------------------------------------------------------------------
def chat_frames(payload: str) -> list[bytes]:
    function = {"name": "write_file", "arguments": ""}
    frames = [chat_chunk({"role": "assistant", "content": None})]
    frames.append(
        chat_chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": function}]})
    )
    frames += [
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        for piece in fragments(payload)
    ]
    frames.append(chat_chunk({}, finish="tool_calls"))
    frames.append(b"data: [DONE]\n\n")
    return frames


def _event(name: str, payload: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()


def anthropic_frames(payload: str) -> list[bytes]:
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
    tool = {"type": "tool_use", "id": "toolu_bench", "name": "write_file", "input": {}}
    frames = [
        _event("message_start", {"type": "message_start", "message": message}),
        _event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": tool}),
    ]
    for piece in fragments(payload):
        delta = {"type": "input_json_delta", "partial_json": piece}
        frames.append(
            _event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        )
    frames.append(_event("content_block_stop", {"type": "content_block_stop", "index": 0}))
    frames.append(
        _event(
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
        )
    )
    frames.append(_event("message_stop", {"type": "message_stop"}))
    return frames


def _transport(frames: list[bytes], read_size: int | None) -> Any:
    """Serve `frames` one per read (`read_size` None) or in network-sized reads of `read_size` bytes."""
    import httpx2

    body = b"".join(frames)

    class Body(httpx2.SyncByteStream):  # type: ignore[misc]
        def __iter__(self) -> Iterator[bytes]:
            if read_size is None:
                return iter(frames)
            return (body[i : i + read_size] for i in range(0, len(body), read_size))

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=Body())

    return httpx2.Client(transport=httpx2.MockTransport(handler))


def openai_client(frames: list[bytes], read_size: int | None = None) -> Any:
    import openai

    return openai.OpenAI(
        base_url="http://bench.invalid/v1",
        api_key="sk-bench",
        max_retries=0,
        http_client=_transport(frames, read_size),
    )


def anthropic_client(frames: list[bytes], read_size: int | None = None) -> Any:
    import anthropic

    return anthropic.Anthropic(
        base_url="http://bench.invalid",
        api_key="sk-ant-bench",
        max_retries=0,
        http_client=_transport(frames, read_size),
    )


# -- the contenders ---------------------------------------------------------------------------------------
class LastValue:
    """An on_tool_args that keeps only the latest value (as a display does) and counts the calls."""

    def __init__(self) -> None:
        self.value: Any = None
        self.calls = 0

    def __call__(self, index: int, name: str, partial: Any) -> None:
        self.value = partial
        self.calls += 1


def run_session(client: Any, params: dict[str, Any], payload: str, watch: bool) -> None:
    seen = LastValue()
    result = fsm_agent.Session().stream(client, params, on_tool_args=seen if watch else None)
    assert result.tool_calls[0].arguments == payload
    if watch:
        assert seen.value == json.loads(payload) and seen.calls > 0


def run_reader(pieces: list[str], expected: Any) -> None:
    reader = PartialJson()
    value = None
    for piece in pieces:
        if reader.feed(piece):
            value = reader.value()
    assert value == expected


def run_jiter(pieces: list[str], expected: Any) -> None:
    import jiter

    buffer = b""
    value = None
    for piece in pieces:
        buffer += piece.encode()
        value = jiter.from_json(buffer, partial_mode="trailing-strings")
    assert value == expected


def run_anthropic_sdk(client: Any, payload: str) -> None:
    with client.messages.stream(**ANTHROPIC_PARAMS) as stream:
        for item in stream:
            if item.type == "input_json":
                _ = item.snapshot  # the helper re-parsed the input so far for this
        message = stream.get_final_message()
    assert message.content[0].input == json.loads(payload)  # type: ignore[union-attr]


# -- measuring -----------------------------------------------------------------------------------------------
def shown(times: list[float], per: int = 1, unit: float = 1e3, width: int = 8) -> str:
    median = statistics.median(times) * unit / per
    low, high = min(times) * unit / per, max(times) * unit / per
    return f"{median:{width}.2f} ({low:.2f}-{high:.2f})"


def linear_growth() -> None:
    print(f"1. linear growth: session.stream() on Chat Completions, {FRAGMENT}-byte argument fragments;")
    print("   ms, median (min-max) of 9 interleaved runs")
    for label, read_size in (("16 KB network-sized reads", 16384), ("one read per frame (worst case)", None)):
        print(f"   {label}:")
        medians: dict[int, float] = {}
        for size in (100_000, 1_000_000):
            payload = arguments(size)
            client = openai_client(chat_frames(payload), read_size)
            watched, plain = interleaved_times(
                lambda c=client, p=payload: run_session(c, CHAT_PARAMS, p, True),
                lambda c=client, p=payload: run_session(c, CHAT_PARAMS, p, False),
                rounds=9,
            )
            medians[size] = statistics.median(watched)
            print(
                f"   {size:>9,} bytes: with on_tool_args {shown(watched)}    without {shown(plain)}"
                f"    with / without {statistics.median(watched) / statistics.median(plain):.2f}"
            )
        ratio = medians[1_000_000] / medians[100_000]
        print(f"     ratio 1 MB / 100 KB with on_tool_args: {ratio:.1f}  (goal <= 11: linear)")


def per_fragment() -> None:
    print(f"2. per-fragment cost on the same bytes ({FRAGMENT}-byte fragments); us per fragment,")
    print("   median (min-max) of interleaved runs (9 at 100 KB, 3 at 1 MB)")
    per_size: dict[int, list[float]] = {}
    names = (
        "(a) PartialJson feed + value(), every fragment",
        "(b) jiter partial re-parse",
        "(c) session.stream() + on_tool_args (Anthropic)",
        "(d) anthropic SDK messages.stream()",
    )
    for size, rounds in ((100_000, 9), (1_000_000, 3)):
        payload = arguments(size)
        pieces = fragments(payload)
        expected = json.loads(payload)
        frames = anthropic_frames(payload)
        ours, sdk = anthropic_client(frames), anthropic_client(frames)
        times = interleaved_times(
            lambda p=pieces, e=expected: run_reader(p, e),
            lambda p=pieces, e=expected: run_jiter(p, e),
            lambda c=ours, p=payload: run_session(c, ANTHROPIC_PARAMS, p, True),
            lambda c=sdk, p=payload: run_anthropic_sdk(c, p),
            rounds=rounds,
        )
        print(f"   {size:>9,} bytes, {len(pieces)} fragments:")
        for name, taken in zip(names, times, strict=True):
            print(f"     {name:<50} {shown(taken, per=len(pieces), unit=1e6, width=9)}")
        per_size[size] = [statistics.median(taken) for taken in times]
    print("   growth 1 MB / 100 KB of the total time (10x the bytes; linear is ~10, quadratic ~100):")
    for index, name in enumerate(names):
        print(f"     {name:<50} {per_size[1_000_000][index] / per_size[100_000][index]:8.1f}")
    small, big = per_size[100_000], per_size[1_000_000]
    print(
        f"   at 1 MB, jiter re-parse / our reader: {big[1] / big[0]:.0f}x    "
        f"Anthropic SDK / session.stream(): {big[3] / big[2]:.1f}x"
    )
    print(f"   at 100 KB: {small[1] / small[0]:.1f}x and {small[3] / small[2]:.1f}x")


if __name__ == "__main__":
    which = sys.argv[1:] or ["linear", "fragments"]
    if "linear" in which:
        linear_growth()
    if "fragments" in which:
        per_fragment()
