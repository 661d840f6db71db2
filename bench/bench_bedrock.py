"""Bedrock ConverseStream per event: fsm_agent against boto3's own loop over the same bytes.

Run: .venv/bin/python bench/bench_bedrock.py [--rounds 7] [--events 5000] [--profile]

The body is rendered by the emulator's Bedrock wire (event-stream messages, one text delta each)
and served from memory to a real boto3 `bedrock-runtime` client: a handler on botocore's
documented `before-send` event answers the signed request with a urllib3 response over the bytes,
so no socket time is measured and botocore still builds, signs and "sends" the request. The
contenders run in turn round after round (interleaved), medians of >= 5 rounds with their spread
(min..max of the per-round ratios). The floor is the least any reader must do: walk the framing
by its prelude lengths, check the message CRC32 and `json.loads` each payload. `--profile` prints
a cProfile of fsm_agent's run. Nothing here asserts on time: a wrong result exits non-zero.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import struct
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3
import botocore.awsrequest
import botocore.config
import urllib3

import fsm_agent
from fsm_agent.testing import Scenario, Text
from fsm_agent.testing.bedrock_wire import BedrockWire
from fsm_agent.testing.frames import RequestContext

BEDROCK = {"modelId": "bench-model", "messages": [{"role": "user", "content": [{"text": "hi"}]}]}


def render(events: int) -> tuple[bytes, str, int]:
    scenario = Scenario(steps=(Text("w " * events, chunk_size=2),))
    ctx = RequestContext(
        api="bedrock_converse",
        path="/model/bench-model/converse-stream",
        body=BEDROCK,
        seq=1,
        created=1,
        stream=True,
    )
    frames = BedrockWire().stream_frames(scenario, ctx)
    return b"".join(frame.data for frame in frames), scenario.text, len(frames)


def memory_client(body: bytes) -> Any:
    """A real boto3 client whose ConverseStream is answered from memory (botocore's `before-send`)."""
    client = boto3.client(
        "bedrock-runtime",
        endpoint_url="http://bench.invalid",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=botocore.config.Config(retries={"max_attempts": 1}),
    )

    def answer(request: Any, **_: Any) -> Any:
        raw = urllib3.HTTPResponse(
            body=io.BytesIO(body),
            headers={"content-type": "application/vnd.amazon.eventstream", "x-amzn-requestid": "bench"},
            status=200,
            preload_content=False,
        )
        return botocore.awsrequest.AWSResponse(request.url, 200, raw.headers, raw)

    client.meta.events.register("before-send.bedrock-runtime.ConverseStream", answer)
    return client


def floor_of(body: bytes) -> Callable[[], None]:
    prelude = struct.Struct(">II")

    def floor() -> None:
        pos, end = 0, len(body)
        view = memoryview(body)
        while pos < end:
            total, head = prelude.unpack_from(body, pos)
            (crc,) = struct.unpack_from(">I", body, pos + total - 4)
            if zlib.crc32(view[pos : pos + total - 4]) != crc:
                raise SystemExit("floor: bad CRC")
            json.loads(body[pos + 12 + head : pos + total - 4])
            pos += total

    return floor


class Stat:
    def __init__(self, values: list[float]) -> None:
        self.values = values
        self.median = statistics.median(values)


def interleaved(contenders: dict[str, Callable[[], object]], rounds: int) -> dict[str, Stat]:
    for fn in contenders.values():
        fn()  # warm-up: first-use costs are not per-event costs
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: Stat(values) for name, values in times.items()}


def ratio(a: Stat, b: Stat) -> str:
    per_round = [x / y for x, y in zip(a.values, b.values, strict=True)]
    return f"{a.median / b.median:5.2f} [{min(per_round):.2f}..{max(per_round):.2f}]"


def check(ok: bool, what: str) -> None:
    if not ok:
        print(f"WRONG RESULT: {what}", file=sys.stderr)
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--profile", action="store_true")
    opts = parser.parse_args()
    body, text, frames = render(opts.events)
    client = memory_client(body)
    session = fsm_agent.Session()

    def ours() -> None:
        check(session.stream(client, BEDROCK).content == text, "fsm_agent text")

    def boto3_loop() -> None:
        got: list[str] = []
        for item in client.converse_stream(**BEDROCK)["stream"]:
            delta = item.get("contentBlockDelta")
            if delta is not None and "text" in delta["delta"]:
                got.append(delta["delta"]["text"])
        check("".join(got) == text, "boto3 event loop")

    if opts.profile:
        ours()
        profile = cProfile.Profile()
        profile.runcall(ours)
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        return
    load = os.getloadavg()[0]
    s = interleaved({"ours": ours, "boto3": boto3_loop, "floor": floor_of(body)}, opts.rounds)
    per = {name: stat.median * 1e6 / frames for name, stat in s.items()}
    print(f"Bedrock ConverseStream, {frames} events from memory, {opts.rounds} rounds, load {load:.2f}")
    print(f"  per event / boto3 event loop   {ratio(s['ours'], s['boto3'])}   goal <= 0.8")
    print(f"  per event / floor              {ratio(s['ours'], s['floor'])}")
    print(f"  boto3 event loop / floor       {ratio(s['boto3'], s['floor'])}")
    print(
        f"  (ours {per['ours']:.2f} us/event, boto3 {per['boto3']:.2f} us/event, "
        f"floor {per['floor']:.2f} us/event; load at the end {os.getloadavg()[0]:.2f})"
    )


if __name__ == "__main__":
    main()
