"""Per-request overhead (issue 13): a short request through fsm_agent against the bare SDKs.

Run: .venv/bin/python bench/bench_short.py [--rounds 7] [--quick]   (also in `make bench`).
     .venv/bin/python bench/bench_short.py --instructions [GROUP ...]   (counted, ~2 minutes)

Prints the issue's whole table: every row measured side by side in one run, the contenders taken
in turn round after round (interleaved, so a change in the machine's load weighs on each alike),
medians of >= 5 rounds with their spread (min..max over the rounds), and the machine's load
average at the start and at the end. Bodies are rendered by the emulator's own wire renderers
and served from memory through httpx2 MockTransports to the real `openai` and `anthropic`
clients, so no socket time is measured; Bedrock runs against the emulator in a child process
over loopback HTTP (boto3 has no in-memory transport), its CPU not counted as ours. The SDK
contenders are built with `max_retries=0` and with their defaults (boto3: one attempt, and its
default retry mode); fsm_agent is given the same client in each case. Nothing here asserts on
time: a contender that returns a wrong result exits non-zero.

`--instructions` counts instead of timing: the short rows and the per-event rows, each group's
contenders in one fresh interpreter under valgrind's callgrind, instrumented from the end of the
warm-up and dumped after each contender's calls (`callgrind_control`). A count does not move with
the host's load, so a row a few per cent from its line is decided by it; it weighs every
instruction alike (a syscall, a C call and a bytecode), so it is a companion to the wall rows,
not a replacement. The Bedrock emulator's child is not counted.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai

import fsm_agent
from fsm_agent._internal.drivers.watchdog import shared_timer
from fsm_agent.testing import Scenario, Text, ToolCall
from fsm_agent.testing.anthropic_wire import AnthropicWire
from fsm_agent.testing.chat import ChatWire
from fsm_agent.testing.frames import RequestContext, Wire
from fsm_agent.testing.responses_wire import ResponsesWire

ROOT = Path(__file__).resolve().parent.parent

CHAT = {"model": "bench-model", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "bench-model", "input": "hi"}
ANTHROPIC = {"model": "claude-bench", "max_tokens": 1024, "messages": [{"role": "user", "content": "hi"}]}
BEDROCK = {"modelId": "bench-model", "messages": [{"role": "user", "content": [{"text": "hi"}]}]}
ARGS = '{"path": "notes/a.txt", "text": "' + "abcdefghij" * 6 + '"}'  # 8 fragments of 12 bytes
TOOL10 = Scenario(steps=(ToolCall("write_file", ARGS, id="call_1", arg_fragment=12),))
TEXT30 = Scenario(steps=(Text("".join(f"w{i:02d} " for i in range(30)), chunk_size=4),))
TINY = Scenario(steps=(Text("hi"),))


# -- bodies and clients ------------------------------------------------------------------------------
def render(wire: Wire, api: str, path: str, params: dict[str, Any], scenario: Scenario) -> tuple[bytes, int]:
    """The streamed body the emulator would send for `scenario`, and its number of frames."""
    ctx = RequestContext(api=api, path=path, body={**params, "stream": True}, seq=1, created=1, stream=True)
    frames = wire.stream_frames(scenario, ctx)
    return b"".join(frame.data for frame in frames), len(frames)


def pieces(body: bytes, per_read: str) -> list[bytes]:
    if per_read == "event":  # one SSE event per read
        return [part + b"\n\n" for part in body.split(b"\n\n") if part]
    if per_read == "whole":
        return [body]
    return [body[i : i + 16384] for i in range(0, len(body), 16384)]


class _Body(httpx2.SyncByteStream):  # type: ignore[misc]
    def __init__(self, parts: list[bytes]) -> None:
        self._parts = parts

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._parts)


class _AsyncBody(httpx2.AsyncByteStream):  # type: ignore[misc]
    def __init__(self, parts: list[bytes]) -> None:
        self._parts = parts

    async def __aiter__(self) -> Any:
        for part in self._parts:
            yield part


def _transport(body: bytes, per_read: str = "net", *, is_async: bool = False) -> httpx2.MockTransport:
    parts = pieces(body, per_read)

    def handler(request: httpx2.Request) -> httpx2.Response:
        stream = _AsyncBody(parts) if is_async else _Body(parts)
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)

    return httpx2.MockTransport(handler)


def openai_client(body: bytes, *, retries: int | None, per_read: str = "net") -> openai.OpenAI:
    extra = {} if retries is None else {"max_retries": retries}
    http = httpx2.Client(transport=_transport(body, per_read))
    return openai.OpenAI(base_url="http://bench.invalid/v1", api_key="sk-bench", http_client=http, **extra)


def anthropic_client(body: bytes, *, retries: int | None) -> anthropic.Anthropic:
    extra = {} if retries is None else {"max_retries": retries}
    http = httpx2.Client(transport=_transport(body))
    return anthropic.Anthropic(
        base_url="http://bench.invalid", api_key="sk-ant-bench", http_client=http, **extra
    )


# -- measuring -----------------------------------------------------------------------------------------
class Stat:
    def __init__(self, values: list[float]) -> None:
        self.values = values
        self.median = statistics.median(values)

    def us(self) -> str:
        return f"{self.median * 1e6:8.1f} us [{min(self.values) * 1e6:.1f}..{max(self.values) * 1e6:.1f}]"


def ratio(a: Stat, b: Stat) -> str:
    per_round = [x / y for x, y in zip(a.values, b.values, strict=True)]
    return f"{a.median / b.median:5.2f} [{min(per_round):.2f}..{max(per_round):.2f}]"


def interleaved(contenders: dict[str, Callable[[], object]], rounds: int, batch: int) -> dict[str, Stat]:
    """Seconds per call of each contender: `rounds` rounds, each timing `batch` calls of every
    contender in turn; after one warm-up batch (first-use costs are not per-request costs)."""
    for fn in contenders.values():
        for _ in range(max(1, batch // 4)):
            fn()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            start = time.perf_counter()
            for _ in range(batch):
                fn()
            times[name].append((time.perf_counter() - start) / batch)
    return {name: Stat(values) for name, values in times.items()}


def check(ok: bool, what: str) -> None:
    if not ok:
        print(f"WRONG RESULT: {what}", file=sys.stderr)
        raise SystemExit(1)


# -- contenders ----------------------------------------------------------------------------------------
def ours(
    session: fsm_agent.Session, client: Any, params: dict[str, Any], scenario: Scenario
) -> Callable[[], None]:
    text, calls = scenario.text, scenario.tool_calls

    def run() -> None:
        result = session.stream(client, params)
        check((result.content or "") == text, "fsm_agent text")
        check([c.arguments for c in result.tool_calls] == [c.arguments for c in calls], "fsm_agent tool args")

    return run


def sdk_chat(client: openai.OpenAI, scenario: Scenario) -> Callable[[], None]:
    text, args = scenario.text, "".join(c.arguments for c in scenario.tool_calls)

    def run() -> None:
        texts: list[str] = []
        got: list[str] = []
        for chunk in client.chat.completions.create(**CHAT, stream=True):
            if chunk.choices:
                delta = chunk.choices[0].delta
                if delta.content:
                    texts.append(delta.content)
                for call in delta.tool_calls or ():
                    if call.function and call.function.arguments:
                        got.append(call.function.arguments)
        check("".join(texts) == text and "".join(got) == args, "openai SDK")

    return run


def raw_chat(client: openai.OpenAI) -> Callable[[], None]:
    def run() -> None:
        with client.chat.completions.with_streaming_response.create(**CHAT, stream=True) as response:
            for _ in response.iter_bytes():
                pass

    return run


def sdk_responses(client: openai.OpenAI, scenario: Scenario) -> Callable[[], None]:
    args = "".join(c.arguments for c in scenario.tool_calls)

    def run() -> None:
        got: list[str] = []
        for event in client.responses.create(**RESPONSES, stream=True):
            if event.type == "response.function_call_arguments.delta":
                got.append(event.delta)
        check("".join(got) == args, "openai Responses SDK")

    return run


def raw_anthropic(client: anthropic.Anthropic) -> Callable[[], None]:
    def run() -> None:
        with client.messages.with_streaming_response.create(**ANTHROPIC, stream=True) as response:
            for _ in response.iter_bytes():
                pass

    return run


def helper_anthropic(client: anthropic.Anthropic, scenario: Scenario) -> Callable[[], None]:
    args = "".join(c.arguments for c in scenario.tool_calls)

    def run() -> None:
        got: list[str] = []
        with client.messages.stream(**ANTHROPIC) as stream:
            for item in stream:
                if item.type == "input_json":
                    got.append(item.partial_json)
            stream.get_final_message()
        check("".join(got) == args, "anthropic messages.stream()")

    return run


# -- the rows --------------------------------------------------------------------------------------------
ROWS: list[tuple[str, str, str]] = []  # (measure, figure, goal)


def row(measure: str, figure: str, goal: str) -> None:
    ROWS.append((measure, figure, goal))
    print(f"  {measure:<62} {figure:<34} goal {goal}", flush=True)


def chat_bodies() -> tuple[tuple[bytes, int], tuple[bytes, int], tuple[bytes, int]]:
    """The three Chat bodies of the short rows (tiny, tool call, text), with their frames."""
    wire, path = ChatWire(), "/v1/chat/completions"
    return (
        render(wire, "chat", path, CHAT, TINY),
        render(wire, "chat", path, CHAT, TOOL10),
        render(wire, "chat", path, CHAT, TEXT30),
    )


def chat_contenders(
    session: fsm_agent.Session, tiny: bytes, tool: bytes, text: bytes, retries: int | None, tag: str
) -> dict[str, Callable[[], object]]:
    c_tiny = openai_client(tiny, retries=retries)
    c_tool = openai_client(tool, retries=retries)
    c_text = openai_client(text, retries=retries)
    return {
        f"ours tiny {tag}": ours(session, c_tiny, CHAT, TINY),
        f"raw tiny {tag}": raw_chat(c_tiny),
        f"ours tool {tag}": ours(session, c_tool, CHAT, TOOL10),
        f"sdk tool {tag}": sdk_chat(c_tool, TOOL10),
        f"ours text {tag}": ours(session, c_text, CHAT, TEXT30),
        f"sdk text {tag}": sdk_chat(c_text, TEXT30),
    }


def chat_rows(rounds: int, batch: int) -> None:
    (tiny, _), (tool, tool_frames), (text, text_frames) = chat_bodies()
    session = fsm_agent.Session()
    contenders: dict[str, Callable[[], object]] = {}
    for retries, tag in ((0, "max_retries=0"), (None, "defaults")):
        contenders.update(chat_contenders(session, tiny, tool, text, retries, tag))
    s = interleaved(contenders, rounds, batch)
    for tag in ("max_retries=0", "defaults"):
        a, b = s[f"ours tiny {tag}"], s[f"raw tiny {tag}"]
        diff = Stat([x - y for x, y in zip(a.values, b.values, strict=True)])
        row(f"fixed cost above the raw-bytes path ({tag})", diff.us(), "none (retired)")
        print(f"      (ours {a.us()}, openai with_streaming_response + iter_bytes {b.us()}; 1 text chunk)")
    for tag in ("max_retries=0", "defaults"):
        row(
            f"Chat, {tool_frames}-frame tool call, / bare openai SDK ({tag})",
            ratio(s[f"ours tool {tag}"], s[f"sdk tool {tag}"]),
            "<= 0.85",
        )
    for tag in ("max_retries=0", "defaults"):
        row(
            f"Chat, {text_frames}-frame text (30 chunks), / bare SDK ({tag})",
            ratio(s[f"ours text {tag}"], s[f"sdk text {tag}"]),
            "<= 0.45",
        )
    print(
        f"      (tool call: ours {s['ours tool max_retries=0'].us()}, SDK {s['sdk tool max_retries=0'].us()})"
    )


def anthropic_contenders(
    session: fsm_agent.Session, body: bytes, retries: int | None, tag: str
) -> dict[str, Callable[[], object]]:
    client = anthropic_client(body, retries=retries)
    return {
        f"ours {tag}": ours(session, client, ANTHROPIC, TOOL10),
        f"raw {tag}": raw_anthropic(client),
        f"helper {tag}": helper_anthropic(client, TOOL10),
    }


def anthropic_rows(rounds: int, batch: int) -> None:
    body, frames = render(AnthropicWire(), "anthropic", "/v1/messages", ANTHROPIC, TOOL10)
    session = fsm_agent.Session()
    contenders: dict[str, Callable[[], object]] = {}
    for retries, tag in ((0, "max_retries=0"), (None, "defaults")):
        contenders.update(anthropic_contenders(session, body, retries, tag))
    s = interleaved(contenders, rounds, batch)
    for tag in ("max_retries=0", "defaults"):
        row(
            f"Anthropic, {frames}-frame tool call, / raw SDK ({tag})",
            ratio(s[f"ours {tag}"], s[f"raw {tag}"]),
            "none (retired)",
        )
    for tag in ("max_retries=0", "defaults"):
        row(
            f"Anthropic, {frames}-frame tool call, / messages.stream() ({tag})",
            ratio(s[f"ours {tag}"], s[f"helper {tag}"]),
            "<= 0.7",
        )
    print(
        f"      (ours {s['ours max_retries=0'].us()}, raw {s['raw max_retries=0'].us()}, "
        f"helper {s['helper max_retries=0'].us()})"
    )


def responses_contenders(
    session: fsm_agent.Session, body: bytes, retries: int | None, tag: str
) -> dict[str, Callable[[], object]]:
    client = openai_client(body, retries=retries)
    return {
        f"ours {tag}": ours(session, client, RESPONSES, TOOL10),
        f"sdk {tag}": sdk_responses(client, TOOL10),
    }


def responses_rows(rounds: int, batch: int) -> None:
    body, frames = render(ResponsesWire(), "responses", "/v1/responses", RESPONSES, TOOL10)
    session = fsm_agent.Session()
    contenders: dict[str, Callable[[], object]] = {}
    for retries, tag in ((0, "max_retries=0"), (None, "defaults")):
        contenders.update(responses_contenders(session, body, retries, tag))
    s = interleaved(contenders, rounds, batch)
    for tag in ("max_retries=0", "defaults"):
        row(
            f"Responses, {frames}-frame tool call, / bare SDK ({tag})",
            ratio(s[f"ours {tag}"], s[f"sdk {tag}"]),
            "<= 0.85",
        )


_BEDROCK_EMULATOR = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from fsm_agent.testing import Emulator, Scenario, ToolCall
scenario = Scenario(steps=(ToolCall("write_file", {ARGS!r}, id="call_1", arg_fragment=12),))
with Emulator(default=scenario) as emu:
    print(emu.bedrock_endpoint_url, flush=True)
    sys.stdin.read()
"""


@contextlib.contextmanager
def bedrock_emulator() -> Iterator[str]:
    """The emulator's Bedrock endpoint, served by a child process (its CPU is not ours)."""
    child = subprocess.Popen(
        [sys.executable, "-c", _BEDROCK_EMULATOR], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        yield child.stdout.readline().strip()
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(10)


def bedrock_contenders(
    session: fsm_agent.Session, url: str, config: dict[str, Any], tag: str
) -> dict[str, Callable[[], object]]:
    import boto3
    import botocore.config

    client = boto3.client(
        "bedrock-runtime",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=botocore.config.Config(**config),
    )

    def loop() -> None:
        got: list[str] = []
        for item in client.converse_stream(**BEDROCK)["stream"]:
            delta = item.get("contentBlockDelta")
            if delta is not None and "toolUse" in delta["delta"]:
                got.append(delta["delta"]["toolUse"]["input"])
        check("".join(got) == ARGS, "boto3 event loop")

    return {f"ours {tag}": ours(session, client, BEDROCK, TOOL10), f"boto3 {tag}": loop}


BEDROCK_CONFIGS = (({"retries": {"max_attempts": 1}}, "one attempt"), ({}, "defaults"))


def bedrock_rows(rounds: int, batch: int) -> None:
    with bedrock_emulator() as url:
        session = fsm_agent.Session()
        contenders: dict[str, Callable[[], object]] = {}
        for config, tag in BEDROCK_CONFIGS:
            contenders.update(bedrock_contenders(session, url, config, tag))
        s = interleaved(contenders, rounds, max(2, batch // 4))
    for tag in ("one attempt", "defaults"):
        row(
            f"Bedrock, tool call (emulator, loopback), / boto3 event loop ({tag})",
            ratio(s[f"ours {tag}"], s[f"boto3 {tag}"]),
            "<= 1.0",
        )
    print(f"      (ours {s['ours one attempt'].us()}, boto3 {s['boto3 one attempt'].us()})")


def cyclic_per_call(run: Callable[[], object], count: int = 200) -> float:
    """Objects the collector finds in reference cycles per call of `run`, after a warm-up."""
    for _ in range(5):
        run()
    gc.collect()
    gc.disable()
    try:
        for _ in range(count):
            run()
        return gc.collect() / count
    finally:
        gc.enable()


def cyclic_row() -> None:
    figures = []
    for name, body, params, scenario, make in (
        (
            "chat",
            render(ChatWire(), "chat", "/v1/chat/completions", CHAT, TOOL10)[0],
            CHAT,
            TOOL10,
            openai_client,
        ),
        (
            "anthropic",
            render(AnthropicWire(), "anthropic", "/v1/messages", ANTHROPIC, TOOL10)[0],
            ANTHROPIC,
            TOOL10,
            anthropic_client,
        ),
    ):
        run = ours(fsm_agent.Session(), make(body, retries=None), params, scenario)
        figures.append(f"{name} {cyclic_per_call(run):.1f}")
    # A request that fails: the SDK's status error is raised through the driver's frames.
    failing = openai.OpenAI(
        base_url="http://bench.invalid/v1",
        api_key="sk-bench",
        max_retries=0,
        http_client=httpx2.Client(
            transport=httpx2.MockTransport(lambda request: httpx2.Response(500, json={"error": {}}))
        ),
    )
    # stale_giveup=0: the breaker stays shut, so every call reaches the failing transport (RC-9
    # would otherwise refuse the sixth call before any request is sent).
    session = fsm_agent.Session(retries=1, backoff=fsm_agent.Backoff(base=0), stale_giveup=0)

    def failed() -> None:
        try:
            session.stream(failing, CHAT)
        except openai.InternalServerError:
            return
        check(False, "the failing request did not raise the SDK's status error")

    figures.append(f"failed (HTTP 500) {cyclic_per_call(failed):.1f}")
    row("cyclic objects left for the collector, per request", ", ".join(figures), "<= 20")


def _voluntary_switches(thread: Any) -> int | None:
    """How often `thread` has gone to sleep (Linux's per-thread count; None elsewhere)."""
    try:
        with open(f"/proc/self/task/{thread.native_id}/status") as status:
            text = status.read()
    except OSError:
        return None
    return int(text.split("\nvoluntary_ctxt_switches:")[1].split()[0])


def timer_row() -> None:
    """Sync requests one after another leave the watchdog's timer thread asleep: a wake-up for
    nothing costs the request a GIL hand-off with it (counted by the kernel, not by the clock)."""
    body, _ = render(AnthropicWire(), "anthropic", "/v1/messages", ANTHROPIC, TOOL10)
    run = ours(fsm_agent.Session(), anthropic_client(body, retries=0), ANTHROPIC, TOOL10)
    run()  # the thread starts with the first request
    thread = shared_timer().thread
    check(thread is not None, "no watchdog timer thread")
    before = _voluntary_switches(thread)
    count = 500
    for _ in range(count):
        run()
    after = _voluntary_switches(thread)
    figure = (
        "n/a (no per-thread counts here)"
        if before is None or after is None
        else f"{(after - before) / count:.2f}"
    )
    row(f"watchdog timer thread's switches per request ({count} sync requests)", figure, "<= 0.01")


PER_EVENT = Scenario(steps=(Text("w " * 5000, chunk_size=2),))
PER_EVENT_APIS = {
    "Chat": (ChatWire, "chat", "/v1/chat/completions", CHAT),
    "Responses": (ResponsesWire, "responses", "/v1/responses", RESPONSES),
}


def per_event_contenders(
    name: str, scenario: Scenario = PER_EVENT
) -> tuple[dict[str, Callable[[], object]], int]:
    """fsm_agent's whole request, one SSE event per read, and the floor over the same reads:
    splitting each read into its blocks, as it comes, and `json.loads` of each block's data (the
    least a reader of these reads must do; the split is timed too, as the row's label says)."""
    wire, api, path, params = PER_EVENT_APIS[name]
    body, frames = render(wire(), api, path, params, scenario)
    client = openai_client(body, retries=0, per_read="event")
    reads = pieces(body, "event")
    check(len(reads) > len(scenario.text) // 5, "body")

    def floor() -> None:
        for read in reads:
            for block in read.split(b"\n\n"):
                if block and block != b"data: [DONE]":
                    json.loads(block[block.index(b"data: ") + 6 :])

    return {"ours": ours(fsm_agent.Session(), client, params, scenario), "floor": floor}, frames


def per_event_row(rounds: int) -> None:
    """Chat and Responses, one SSE event per read (as a socket usually gives a streamed answer):
    the whole request through fsm_agent, per event, against the floor."""
    for name in PER_EVENT_APIS:
        contenders, frames = per_event_contenders(name)
        s = interleaved(contenders, rounds, 1)
        row(
            f"per event, {name}, one event per read ({frames} frames), / floor",
            ratio(s["ours"], s["floor"]),
            "<= 2.0",
        )
        print(
            f"      (ours {s['ours'].median * 1e6 / frames:.2f} us/event, "
            f"SSE split + json.loads {s['floor'].median * 1e6 / frames:.2f} us/event)"
        )


def peak_heap_row(rounds: int) -> None:
    scenario = Scenario(
        steps=(Text("w " * 20989, chunk_size=2), ToolCall("write_file", ARGS, id="c", arg_fragment=12))
    )
    body, frames = render(ChatWire(), "chat", "/v1/chat/completions", CHAT, scenario)
    client = openai_client(body, retries=0, per_read="whole")
    session = fsm_agent.Session(max_bytes=1 << 30)
    runs = {"ours": ours(session, client, CHAT, scenario), "sdk": sdk_chat(client, scenario)}
    peaks: dict[str, list[float]] = {"ours": [], "sdk": []}
    for fn in runs.values():
        fn()
    for _ in range(rounds):
        for name, fn in runs.items():
            gc.collect()
            tracemalloc.start()
            fn()
            peaks[name].append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
    a, b = Stat(peaks["ours"]), Stat(peaks["sdk"])
    row(f"peak heap, {frames}-frame body in one read, / SDK", ratio(a, b), "<= 1.5")
    print(
        f"      (ours {a.median / 2**20:.2f} MiB, SDK {b.median / 2**20:.2f} MiB; "
        f"body {len(body) / 2**20:.2f} MiB)"
    )


_RSS_CHILD = """
import asyncio, gc, sys
sys.path.insert(0, {bench!r})
import bench_short as b
import openai, httpx2, fsm_agent
which, n = sys.argv[1], int(sys.argv[2])
body, _ = b.render(b.ChatWire(), "chat", "/v1/chat/completions", b.CHAT, b.TEXT30)
limits = httpx2.Limits(max_connections=n, max_keepalive_connections=n)
client = openai.AsyncOpenAI(base_url="http://bench.invalid/v1", api_key="sk", max_retries=0,
    http_client=httpx2.AsyncClient(transport=b._transport(body, is_async=True), limits=limits))
session = fsm_agent.Session()
text = b.TEXT30.text
async def ours():
    r = await session.astream(client, b.CHAT)
    return r.content == text
async def sdk():
    got = []
    async for chunk in await client.chat.completions.create(**b.CHAT, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            got.append(chunk.choices[0].delta.content)
    return "".join(got) == text
def hwm():  # this process's peak RSS in KiB (VmHWM is per address space: not the forking parent's)
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
async def main():
    await (ours if which == "ours" else sdk)()  # warm up: imports and first-use costs
    gc.collect()
    base = hwm()
    oks = await asyncio.gather(*((ours if which == "ours" else sdk)() for _ in range(n)))
    peak = hwm()
    assert all(oks), "wrong result"
    print(base, peak)
asyncio.run(main())
"""


def rss_row(rounds: int, n: int = 500) -> None:
    code = _RSS_CHILD.format(bench=str(Path(__file__).resolve().parent))
    totals: dict[str, list[float]] = {"ours": [], "sdk": []}
    growth: dict[str, list[float]] = {"ours": [], "sdk": []}
    for _ in range(rounds):
        for which in ("ours", "sdk"):
            out = subprocess.run([sys.executable, "-c", code, which, str(n)], capture_output=True, text=True)
            check(out.returncode == 0, f"{which} async child: {out.stderr[-400:]}")
            base, peak = map(int, out.stdout.split())
            totals[which].append(peak)
            growth[which].append(max(peak - base, 1))
    row(
        f"{n} concurrent async 30-frame streams, peak RSS / AsyncOpenAI",
        ratio(Stat(totals["ours"]), Stat(totals["sdk"])),
        "<= 1.0",
    )
    print(
        f"      (peak RSS ours {statistics.median(totals['ours']) / 1024:.1f} MiB, "
        f"AsyncOpenAI {statistics.median(totals['sdk']) / 1024:.1f} MiB; growth over the warmed-up "
        f"process: {ratio(Stat(growth['ours']), Stat(growth['sdk']))})"
    )


def import_row(rounds: int) -> None:
    """`import fsm_agent` in fresh interpreters, with bytecode caches as an installed package has
    them (in a temporary cache directory: PYTHONDONTWRITEBYTECODE, if set, would make every run
    compile the package from source), after one run that writes them."""
    with tempfile.TemporaryDirectory() as cache:
        env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPATH=str(ROOT), PYTHONPYCACHEPREFIX=cache)
        command = [sys.executable, "-X", "importtime", "-c", "import fsm_agent"]
        subprocess.run(command, capture_output=True, env=env, check=True)
        figures = []
        for _ in range(rounds):
            out = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
            line = [ln for ln in out.stderr.splitlines() if ln.rstrip().endswith("| fsm_agent")][-1]
            figures.append(int(re.split(r"\|", line)[1]) / 1e6)
        # The package resolves its public names lazily, so `import fsm_agent` alone costs almost
        # nothing; what a first request really imports is `Session` and the modules it pulls in.
        session_command = [sys.executable, "-c", _IMPORT_SESSION]
        session_figures = []
        for _ in range(rounds):
            out = subprocess.run(session_command, capture_output=True, text=True, env=env, check=True)
            session_figures.append(float(out.stdout))
    s = Stat(figures)
    row(
        "import fsm_agent (-X importtime, cumulative)",
        f"{s.median * 1e3:5.1f} ms [{min(figures) * 1e3:.1f}..{max(figures) * 1e3:.1f}]",
        "<= 50 ms",
    )
    t = Stat(session_figures)
    row(
        "from fsm_agent import Session (wall, in a fresh interpreter)",
        f"{t.median * 1e3:5.1f} ms [{min(session_figures) * 1e3:.1f}..{max(session_figures) * 1e3:.1f}]",
        "(the same 50 ms)",
    )


_IMPORT_SESSION = """
import time
t = time.perf_counter()
from fsm_agent import Session
print(time.perf_counter() - t)
"""


# -- counted (--instructions) -------------------------------------------------------------------------
# A group: (its contenders as a context manager yields them, the calls counted per run, the rows
# as (label, fsm_agent's contender, the other, goal, events per call or 0 for a ratio per call)).
Rows = list[tuple[str, str, str, str, int]]


@contextlib.contextmanager
def counted_group(group: str) -> Iterator[tuple[dict[str, Callable[[], object]], int, Rows]]:
    session = fsm_agent.Session()
    if group == "chat":
        (tiny, _), (tool, tool_frames), (text, text_frames) = chat_bodies()
        tag = "max_retries=0"
        contenders = chat_contenders(session, tiny, tool, text, 0, tag)
        yield (
            {k: v for k, v in contenders.items() if "tiny" not in k},
            40,
            [
                (
                    f"Chat, {tool_frames}-frame tool call, / bare openai SDK",
                    f"ours tool {tag}",
                    f"sdk tool {tag}",
                    "<= 0.85",
                    0,
                ),
                (
                    f"Chat, {text_frames}-frame text (30 chunks), / bare SDK",
                    f"ours text {tag}",
                    f"sdk text {tag}",
                    "<= 0.45",
                    0,
                ),
            ],
        )
    elif group == "anthropic":
        body, frames = render(AnthropicWire(), "anthropic", "/v1/messages", ANTHROPIC, TOOL10)
        contenders = anthropic_contenders(session, body, 0, "max_retries=0")
        del contenders["raw max_retries=0"]  # its row is retired
        yield (
            contenders,
            40,
            [
                (
                    f"Anthropic, {frames}-frame tool call, / messages.stream()",
                    "ours max_retries=0",
                    "helper max_retries=0",
                    "<= 0.7",
                    0,
                )
            ],
        )
    elif group == "responses":
        body, frames = render(ResponsesWire(), "responses", "/v1/responses", RESPONSES, TOOL10)
        yield (
            responses_contenders(session, body, 0, "max_retries=0"),
            40,
            [
                (
                    f"Responses, {frames}-frame tool call, / bare SDK",
                    "ours max_retries=0",
                    "sdk max_retries=0",
                    "<= 0.85",
                    0,
                )
            ],
        )
    elif group == "bedrock":
        with bedrock_emulator() as url:
            config, tag = BEDROCK_CONFIGS[0]
            yield (
                bedrock_contenders(session, url, config, tag),
                20,
                [
                    (
                        "Bedrock, tool call (emulator, loopback), / boto3 event loop",
                        f"ours {tag}",
                        f"boto3 {tag}",
                        "<= 1.0",
                        0,
                    )
                ],
            )
    else:  # "per event Chat", "per event Responses"
        name = group.removeprefix("per event ")
        contenders, frames = per_event_contenders(name)
        yield (
            contenders,
            1,
            [
                (
                    f"per event, {name}, one event per read ({frames} frames), / floor",
                    "ours",
                    "floor",
                    "<= 2.0",
                    frames,
                )
            ],
        )


COUNTED_GROUPS = ("chat", "anthropic", "responses", "bedrock", "per event Chat", "per event Responses")


def counted_child(group: str) -> None:
    """The child of a counted group (under callgrind, instrumenting nothing at first): every
    contender warmed up alike, then, each time the parent says go, one segment: nothing (the
    handshake's own cost, taken from the others), then each contender called the group's count
    of times. The parent dumps callgrind's counts at the end of each segment."""
    with counted_group(group) as (contenders, calls, _):
        for fn in contenders.values():
            for _ in range(3):
                fn()
        print("ready", flush=True)
        sys.stdin.readline()
        for name, fn in [("", lambda: None), *contenders.items()]:
            for _ in range(calls if name else 0):
                fn()
            print(f"done {name}", flush=True)
            sys.stdin.readline()


def _count_group(group: str) -> tuple[dict[str, float], Rows]:
    """Instructions a call of each contender of `group`: one fresh interpreter under callgrind
    (the hash seed fixed), instrumented only from the end of the warm-up, its counts dumped at the
    end of each segment (`callgrind_control`); a segment's count less the empty segment's, over
    the calls."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    code = (
        f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'bench')!r}]; import bench_short; "
        f"bench_short.counted_child({group!r})"
    )
    with counted_group(group) as (contenders, calls, rows):
        names = ["", *contenders]
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
        child = subprocess.Popen(
            [*command, sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert child.stdin is not None and child.stdout is not None

        def control(*args: str) -> None:
            subprocess.run(["callgrind_control", *args, str(child.pid)], check=True, capture_output=True)

        try:
            check(child.stdout.readline().strip() == "ready", f"{group}: the counted child did not start")
            control("--instr=on")
            control("--zero")
            for name in names:
                child.stdin.write("\n")
                child.stdin.flush()
                check(child.stdout.readline().strip() == f"done {name}".strip(), f"{group}: segment {name!r}")
                control("--dump")
            _, errors = child.communicate("\n", timeout=600)
        except BaseException:
            child.kill()
            child.communicate()
            raise
        check(child.returncode == 0, f"{group}: the counted child failed: {errors[-600:]}")
        totals = []
        for index in range(1, len(names) + 1):
            lines = Path(f"{out}.{index}").read_text().splitlines()
            totals.append(int(next(line for line in lines if line.startswith("totals:")).split()[1]))
    empty = totals[0]
    return {name: (total - empty) / calls for name, total in zip(names[1:], totals[1:], strict=True)}, rows


def counted_rows(groups: list[str]) -> None:
    """`--instructions`: each row's contenders counted in instructions (callgrind), which a
    loaded host does not change. For the rows a few per cent from their lines, decided by a
    count instead of a clock."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, min(2, os.cpu_count() or 1))) as pool:
        counts = dict(zip(groups, pool.map(_count_group, groups), strict=True))
    print("instructions a call (callgrind, from the end of the warm-up; ratios: fsm_agent / contender)")
    for group in groups:
        per_call, rows = counts[group]
        for label, mine, theirs, goal, events in rows:
            a, b = per_call[mine], per_call[theirs]
            unit = (
                f"{a / events:,.0f} / {b / events:,.0f} an event"
                if events
                else f"{a / 1e6:.2f} M / {b / 1e6:.2f} M"
            )
            row(f"{label} (instructions)", f"{a / b:5.3f} ({unit})", goal)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=40, help="requests per contender per round")
    parser.add_argument("--quick", action="store_true", help="skip the 500-stream RSS row")
    parser.add_argument(
        "--instructions",
        nargs="*",
        metavar="GROUP",
        choices=COUNTED_GROUPS,
        help="count instructions under valgrind instead of timing (the groups named, or all): "
        + ", ".join(COUNTED_GROUPS),
    )
    opts = parser.parse_args()
    if opts.instructions is not None:
        if shutil.which("valgrind") is None:
            raise SystemExit("--instructions counts with valgrind's callgrind, which is not installed")
        counted_rows(opts.instructions or list(COUNTED_GROUPS))
        return
    rounds = max(5, opts.rounds)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"medians of {rounds} interleaved rounds [min..max over the rounds]; ratios: fsm_agent / contender")
    chat_rows(rounds, opts.batch)
    anthropic_rows(rounds, opts.batch)
    responses_rows(rounds, opts.batch)
    bedrock_rows(rounds, opts.batch)
    cyclic_row()
    timer_row()
    per_event_row(rounds)
    peak_heap_row(5)  # deterministic to a few bytes; each traced run of the SDK takes seconds
    if not opts.quick:
        rss_row(5)
    import_row(rounds)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
