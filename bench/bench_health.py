"""Shared health (HL-2): what `RedisHealth` costs a request, and what it saves a fleet.

1. A short request (the emulator's happy answer, a real `openai` client over loopback) with
   `MemoryHealth` and with `RedisHealth` on a local redis-server, interleaved round by round:
   the added time per request (median of the rounds, with their spread) and the Redis commands
   per request, counted by the server (`INFO commandstats`): one read, writes only on changes.
2. A fleet: 8 processes x 50 requests to an endpoint that stalls forever (stale_timeout 0.2 s,
   stale_giveup 3, no retries): the stalls paid in total, each process with its own memory and
   all of them sharing one Redis (goal: with Redis <= giveup + processes; without: giveup x processes).

Needs `redis-server` on the PATH (it starts its own on a free loopback port). Prints; asserts nothing.

    python bench/bench_health.py [--rounds N] [--requests N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import openai

import fsm_agent
from fsm_agent.testing import Emulator, Scenario, Stall

HERE = Path(__file__).resolve()
PARAMS = {"model": "bench-model", "messages": [{"role": "user", "content": "hi"}]}


# -- a redis-server of our own ----------------------------------------------------------------------
class RedisServer:
    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("bench_health: redis-server is not installed (apt-get install redis-server)")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.01)
        raise SystemExit("bench_health: redis-server did not start")

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def commands_processed(client: Any) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


# -- 1. the cost of one short request ---------------------------------------------------------------
def one_round(session: fsm_agent.Session, client: Any, requests: int) -> float:
    started = time.perf_counter()
    for _ in range(requests):
        session.stream(client, PARAMS)
    return (time.perf_counter() - started) / requests


def request_cost(redis_url: str, rounds: int, requests: int) -> None:
    with Emulator(default=Scenario.build("Port 8080.")) as emulator:
        client = openai.OpenAI(base_url=emulator.openai_base_url, api_key="sk-bench", max_retries=0)
        memory = fsm_agent.Session(health=fsm_agent.MemoryHealth())
        with fsm_agent.RedisHealth(redis_url, prefix="bench") as health:
            shared = fsm_agent.Session(health=health)
            one_round(memory, client, 20)  # warm both (imports, pools, the script cache)
            one_round(shared, client, 20)
            times: dict[str, list[float]] = {"memory": [], "redis": []}
            for _ in range(rounds):  # interleaved, so drift of the machine hits both alike
                times["memory"].append(one_round(memory, client, requests))
                times["redis"].append(one_round(shared, client, requests))
            import redis

            with redis.Redis.from_url(redis_url) as counter:  # connected before counting starts
                before = commands_processed(counter)
                one_round(shared, client, requests)
                after = commands_processed(counter)
            reads = store_reads(health, rounds)
        client.close()
    added = [r - m for r, m in zip(times["redis"], times["memory"], strict=True)]
    print(f"short request ({requests} per round, {rounds} rounds, medians; spread = min..max of rounds)")
    for name in ("memory", "redis"):
        values = times[name]
        print(
            f"  {name:<7} {statistics.median(values) * 1e3:7.3f} ms/request  "
            f"({min(values) * 1e3:.3f}..{max(values) * 1e3:.3f})"
        )
    ratio = statistics.median(times["redis"]) / statistics.median(times["memory"])
    print(
        f"  RedisHealth adds {statistics.median(added) * 1e3:.3f} ms/request "
        f"({min(added) * 1e3:.3f}..{max(added) * 1e3:.3f}); ratio {ratio:.3f}  (goal < 0.3 ms)"
    )
    memory_read, redis_read = (statistics.median(values) * 1e6 for values in reads)
    print(
        f"  the store's read alone: MemoryHealth.get {memory_read:.1f} us, "
        f"RedisHealth.get {redis_read:.1f} us (median of {rounds} rounds of 1000)"
    )
    calls = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    calls.pop("info", None)
    per_request = {name: count / requests for name, count in sorted(calls.items()) if count}
    shown = ", ".join(f"{name} {value:g}" for name, value in per_request.items()) or "none"
    print(f"  Redis commands per request: {sum(per_request.values()):g} ({shown})  (goal: 1 read, no writes)")


def store_reads(health: fsm_agent.RedisHealth, rounds: int) -> tuple[list[float], list[float]]:
    """One `get` of each store, timed alone (what a request adds), interleaved round by round."""
    from fsm_agent._internal.health import EndpointKey

    key = EndpointKey("chat_completions", "http://127.0.0.1:1/v1", "bench-model")
    memory = fsm_agent.MemoryHealth()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for store, into in ((memory, times[0]), (health, times[1])):
            started = time.perf_counter()
            for _ in range(1000):
                store.get(key)
            into.append((time.perf_counter() - started) / 1000)
    return times


# -- 2. the fleet -------------------------------------------------------------------------------------
def worker(base_url: str, redis_url: str | None, requests: int) -> None:
    """One process of the fleet: prints the stalls it paid."""
    counter = {"stalls": 0}

    class Count:
        record_wire = False

        def write_record(self, record: Any) -> None:
            if record.dest == "stalled":
                counter["stalls"] += 1

        def write_event(self, *args: Any) -> None:
            pass

        def close(self) -> None:
            pass

    health: Any = fsm_agent.RedisHealth(redis_url, prefix="fleet") if redis_url else fsm_agent.MemoryHealth()
    session = fsm_agent.Session(
        retries=0, stale_timeout=0.2, stale_giveup=3, breaker_cooldown=600, health=health, trace=Count()
    )
    client = openai.OpenAI(base_url=base_url, api_key="sk-bench", max_retries=0)
    outcomes: dict[str, int] = {}
    for _ in range(requests):
        try:
            session.stream(client, PARAMS)
            name = "ok"
        except Exception as exc:
            name = type(exc).__name__
        outcomes[name] = outcomes.get(name, 0) + 1
    client.close()
    print(json.dumps({"stalls": counter["stalls"], "outcomes": outcomes}))


def fleet(redis_url: str, processes: int, requests: int, shared: bool) -> tuple[int, float, dict[str, int]]:
    with Emulator(default=Scenario.build("never sent", faults=[Stall(0, seconds=30.0, then="drop")])) as emu:
        where = redis_url if shared else ""
        argv = [sys.executable, str(HERE), "--worker", emu.openai_base_url, where, str(requests)]
        started = time.perf_counter()
        children = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(processes)]
        reports = [json.loads(child.communicate()[0].strip().splitlines()[-1]) for child in children]
        elapsed = time.perf_counter() - started
    outcomes: dict[str, int] = {}
    for report in reports:
        for name, count in report["outcomes"].items():
            outcomes[name] = outcomes.get(name, 0) + count
    return sum(report["stalls"] for report in reports), elapsed, outcomes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--fleet-requests", type=int, default=50)
    parser.add_argument("--worker", nargs=3, metavar=("BASE_URL", "REDIS_URL", "REQUESTS"))
    args = parser.parse_args()
    if args.worker:
        base_url, redis_url, requests = args.worker
        worker(base_url, redis_url or None, int(requests))
        return
    server = RedisServer()
    try:
        request_cost(server.url, args.rounds, args.requests)
        print(
            f"fleet: {args.processes} processes x {args.fleet_requests} requests, an endpoint that stalls "
            "forever (stale_timeout 0.2 s, stale_giveup 3, retries 0)"
        )
        for shared in (False, True):
            stalls, elapsed, outcomes = fleet(server.url, args.processes, args.fleet_requests, shared)
            label = "RedisHealth (shared)" if shared else "MemoryHealth (each its own)"
            print(f"  {label:<28} stalls paid {stalls:3d}  in {elapsed:5.2f} s  outcomes {outcomes}")
        n = args.processes
        print(f"  goal: shared <= giveup + processes = {3 + n}; each its own = giveup x processes = {3 * n}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
