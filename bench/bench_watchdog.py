"""WD-4 and WD-12 under load: how late the watchdog aborts 200 concurrent stalls, per clock, sync and async.

200 requests stream from an emulator (in a child process) whose every stream stalls; each
request's stall is aborted by its watchdog. Three kinds of stall, one per deadline (WD-12: every
clock meets WD-4): `progress` (the stream stops after its first frame: the phase's progress
deadline), `liveness` (keepalives for 0.2 s, then nothing at all: the liveness deadline), `connect`
(the response headers never come: the connect deadline). The lateness of an abort is the time its
abort was done (the reader's socket shut down, or its task cancelled) less its own deadline (the
clock's last reset + its deadline), read by the watchdog itself once its abort returns (WD-4 says
"aborted within 0.25 s"). Rounds alternate sync and async and the three clocks; the medians and the
spread are printed. The rule itself (the timer wakes at each deadline and at nothing else) is a
virtual-clock test in tests/test_overhead.py; this prints what a real machine adds to it.

    .venv/bin/python bench/bench_watchdog.py [--rounds N] [--count N] [--clocks progress,liveness,connect]
        [--socket-module]   (abort through socket.shutdown, the fallback path: to compare)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import threading
from typing import Any

import httpx2
import openai

import fsm_agent
from fsm_agent._internal import session as session_module
from fsm_agent._internal import sockets
from fsm_agent._internal.drivers import aio_watchdog
from fsm_agent._internal.drivers.watchdog import Watchdog

STALE = 0.6
# One emulator per clock, each stalling every stream its way.
EMULATOR = """
import sys
from fsm_agent.testing import Emulator, NoHeaders, Scenario, Stall
faults = {{
    "progress": [Stall(1, seconds=5)],
    "liveness": [Stall(1, seconds=0.2, keepalive_every=0.05), Stall(1, seconds=5)],
    "connect": [NoHeaders(seconds=5)],
}}["{clock}"]
with Emulator(default=Scenario.build("Hello.", faults=faults)) as emu:
    print(emu.openai_base_url, flush=True)
    sys.stdin.read()
"""
# The deadline each kind of stall meets: STALE on its clock, the others far away.
TIMEOUTS = {
    "progress": fsm_agent.Timeouts(first_event=STALE, thinking=STALE, text=STALE, liveness=30.0),
    "liveness": fsm_agent.Timeouts(liveness=STALE),
    "connect": fsm_agent.Timeouts(connect=STALE),
}
PARAMS = {"model": "emulator-1", "messages": [{"role": "user", "content": "hi"}]}

lateness: list[float] = []
_lock = threading.Lock()


fired_clocks: list[str] = []


def _timed_fire(watchdog: Any, fire: Any, reason: str) -> None:
    if reason != "stale" or watchdog.fired is not None:
        fire(reason)
        return
    deadline, clock = watchdog.due()
    phase = watchdog.phase
    fire(reason)  # marks it fired and runs its abort
    with _lock:
        lateness.append(watchdog._clock() - deadline)
        fired_clocks.append("connect" if phase == "connect" else clock)


class TimedWatchdog(Watchdog):
    def _fire(self, reason: str) -> None:
        _timed_fire(self, super()._fire, reason)


class TimedLoopWatchdog(aio_watchdog.LoopWatchdog):
    def _fire(self, reason: str) -> None:
        _timed_fire(self, super()._fire, reason)


def sync_round(url: str, count: int, timeouts: fsm_agent.Timeouts) -> list[float]:
    lateness.clear()
    session = fsm_agent.Session(stale_timeout=30.0, retries=0, stale_giveup=0, timeouts=timeouts)
    limits = httpx2.Limits(max_connections=count, max_keepalive_connections=count)
    client = openai.OpenAI(
        base_url=url, api_key="sk", max_retries=0, http_client=httpx2.Client(limits=limits)
    )
    start = threading.Barrier(count)

    def one() -> None:
        start.wait()
        with contextlib.suppress(fsm_agent.StreamStalledError):
            session.stream(client, PARAMS)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    client.close()
    return list(lateness)


def async_round(url: str, count: int, timeouts: fsm_agent.Timeouts) -> list[float]:
    lateness.clear()

    async def main() -> None:
        session = fsm_agent.Session(stale_timeout=30.0, retries=0, stale_giveup=0, timeouts=timeouts)
        limits = httpx2.Limits(max_connections=count, max_keepalive_connections=count)
        http = httpx2.AsyncClient(limits=limits)
        client = openai.AsyncOpenAI(base_url=url, api_key="sk", max_retries=0, http_client=http)

        async def one() -> None:
            with contextlib.suppress(fsm_agent.StreamStalledError):
                await session.astream(client, PARAMS)

        await asyncio.gather(*(one() for _ in range(count)))
        await client.close()

    asyncio.run(main())
    return list(lateness)


def summary(values: list[float]) -> str:
    if not values:
        return "no aborts by the watchdog (the SDK's read timeout noticed every stall first)"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return (
        f"n={len(values):4d}  p50 {statistics.median(values) * 1000:7.1f} ms  p99 {p99 * 1000:7.1f} ms  "
        f"max {ordered[-1] * 1000:7.1f} ms  min {ordered[0] * 1000:+6.1f} ms"
    )


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--clocks", default="progress,liveness,connect")
    parser.add_argument(
        "--socket-module",
        action="store_true",
        help="abort with socket.shutdown (the fallback path) instead of the C library's shutdown",
    )
    args = parser.parse_args()
    if args.socket_module:
        sockets._c_shutdown, sockets._loaded = None, True
    clocks = [name for name in args.clocks.split(",") if name]
    session_module.Watchdog = TimedWatchdog  # type: ignore[misc]
    aio_watchdog.LoopWatchdog = TimedLoopWatchdog  # type: ignore[misc]
    children = {}
    for clock in clocks:
        child = subprocess.Popen(
            [sys.executable, "-c", EMULATOR.format(clock=clock)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        children[clock] = (child, child.stdout.readline().strip())
    results: dict[tuple[str, str], list[float]] = {}
    p99s: dict[tuple[str, str], list[float]] = {}
    rounds: Any = [("sync", sync_round), ("async", async_round)]
    try:
        for number in range(args.rounds):
            for clock in clocks:
                for name, one_round in rounds:  # interleaved: sync, async, per clock, per round
                    fired_clocks.clear()
                    values = one_round(children[clock][1], args.count, TIMEOUTS[clock])
                    wrong = sum(1 for fired in fired_clocks if fired != clock)
                    key = (clock, name)
                    results.setdefault(key, []).extend(values)
                    if values:
                        p99s.setdefault(key, []).append(sorted(values)[int(0.99 * (len(values) - 1))])
                    note = f"  ({wrong} fired on another clock)" if wrong else ""
                    print(f"round {number + 1} {clock:8s} {name:5s}  {summary(values)}{note}", flush=True)
    finally:
        for child, _ in children.values():
            assert child.stdin is not None
            child.stdin.close()
            child.wait(10)
    print(f"\nWD-4 / WD-12 lateness of {args.count} concurrent stalls (deadline {STALE} s), all rounds:")
    for (clock, name), values in results.items():
        found = p99s.get((clock, name), [])
        spread = f"  p99 per round {min(found) * 1000:.1f}..{max(found) * 1000:.1f} ms" if found else ""
        print(f"  {clock:8s} {name:5s}  {summary(values)}{spread}   (goal: max < 250 ms)")


if __name__ == "__main__":
    run()
