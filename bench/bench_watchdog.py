"""WD-4 under load: how late the watchdog aborts 200 concurrent stalls, sync and async.

200 requests stream from an emulator (in a child process) whose every stream stalls after its
first frame; each request's stall is aborted by its watchdog. The lateness of an abort is the
time it fired less its own deadline (last provider activity + stale timeout), read by the
watchdog itself at the moment it fires. Rounds alternate sync and async; the medians and the
spread are printed. The rule itself (the timer wakes at each deadline and at nothing else) is a
virtual-clock test in tests/test_overhead.py; this prints what a real machine adds to it.

    .venv/bin/python bench/bench_watchdog.py [--rounds N] [--count N]
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
from fsm_agent._internal.drivers import aio_watchdog
from fsm_agent._internal.drivers.watchdog import Watchdog

STALE = 0.6
EMULATOR = """
import sys
from fsm_agent.testing import Emulator, Scenario, Stall
with Emulator(default=Scenario.build("Hello.", faults=[Stall(1, seconds=5)])) as emu:
    print(emu.openai_base_url, flush=True)
    sys.stdin.read()
"""
PARAMS = {"model": "emulator-1", "messages": [{"role": "user", "content": "hi"}]}

lateness: list[float] = []
_lock = threading.Lock()


class TimedWatchdog(Watchdog):
    def _fire(self, reason: str) -> None:
        if reason == "stale" and self.fired is None:
            late = self._clock() - (self._last_activity + self.stale_timeout)
            with _lock:
                lateness.append(late)
        super()._fire(reason)


class TimedLoopWatchdog(aio_watchdog.LoopWatchdog):
    def _fire(self, reason: str) -> None:
        if reason == "stale" and self.fired is None:
            lateness.append(self._clock() - (self._last_activity + self.stale_timeout))
        super()._fire(reason)


def sync_round(url: str, count: int) -> list[float]:
    lateness.clear()
    session = fsm_agent.Session(stale_timeout=STALE, retries=0, stale_giveup=0)
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


def async_round(url: str, count: int) -> list[float]:
    lateness.clear()

    async def main() -> None:
        session = fsm_agent.Session(stale_timeout=STALE, retries=0, stale_giveup=0)
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
    args = parser.parse_args()
    session_module.Watchdog = TimedWatchdog  # type: ignore[misc]
    aio_watchdog.LoopWatchdog = TimedLoopWatchdog  # type: ignore[misc]
    child = subprocess.Popen(
        [sys.executable, "-c", EMULATOR], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdin is not None
    url = child.stdout.readline().strip()
    results: dict[str, list[float]] = {"sync": [], "async": []}
    p99s: dict[str, list[float]] = {"sync": [], "async": []}
    rounds: Any = [("sync", sync_round), ("async", async_round)]
    try:
        for number in range(args.rounds):
            for name, one_round in rounds:  # interleaved: sync, async, sync, async, ...
                values = one_round(url, args.count)
                results[name].extend(values)
                if values:
                    p99s[name].append(sorted(values)[int(0.99 * (len(values) - 1))])
                print(f"round {number + 1} {name:5s}  {summary(values)}", flush=True)
    finally:
        child.stdin.close()
        child.wait(10)
    print(f"\nWD-4 lateness of {args.count} concurrent stalls (stale_timeout {STALE} s), all rounds:")
    for name, values in results.items():
        spread = (
            f"  p99 per round {min(p99s[name]) * 1000:.1f}..{max(p99s[name]) * 1000:.1f} ms"
            if p99s[name]
            else ""
        )
        print(f"  {name:5s}  {summary(values)}{spread}   (goal: max < 250 ms)")


if __name__ == "__main__":
    run()
