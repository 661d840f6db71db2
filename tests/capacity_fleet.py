"""The capacity fleet (issue 29, CAP-3): PROCESSES processes x REQUESTS requests against one
emulator route that enforces a requests- and tokens-per-window limit and sends the headers, with
the fleet's one bucket in Redis (`shared`) or each process on its own (`local`). Used by
tests/hardening/test_capacity_fleet.py and bench/bench_capacity.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fsm_agent.testing import Emulator, RateLimit

WORKER = Path(__file__).resolve().parent / "capacity_worker.py"


@dataclass(frozen=True)
class FleetRun:
    mode: str
    requests: int
    ok: int
    failed: int
    refused: int  # the 429s the emulator sent
    met: list[int]  # per process: the 429s its requests met
    throughput: float  # admitted requests per second after the full bucket's burst
    limit_rate: float  # the limit's requests per second
    seconds: float

    def line(self) -> str:
        return (
            f"{self.mode:<7} {self.requests:>4} requests  ok {self.ok:>4}  failed {self.failed:>3}  "
            f"429s {self.refused:>4}  throughput {self.throughput:6.1f}/s of {self.limit_rate:.1f}/s "
            f"({self.throughput / self.limit_rate:6.1%})  {self.seconds:5.2f} s"
        )


def run_fleet(
    mode: str,
    *,
    processes: int = 4,
    requests: int = 50,
    limit_requests: int = 20,
    limit_tokens: int = 1200,
    window: float = 0.5,
    redis_url: str = "",
    prefix: str = "fleet",
) -> FleetRun:
    limit = RateLimit(requests=limit_requests, tokens=limit_tokens, window=window)
    with Emulator(rate_limit=limit) as emu:
        args = ["local"] if mode == "local" else [redis_url, prefix]
        workers = [
            subprocess.Popen(
                [sys.executable, str(WORKER), emu.openai_base_url, str(requests), *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(processes)
        ]
        try:
            for worker in workers:
                assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
            started = time.monotonic()
            for worker in workers:
                assert worker.stdin is not None
                worker.stdin.write("go\n")
                worker.stdin.flush()
            outputs = [worker.communicate(timeout=120)[0] for worker in workers]
            seconds = time.monotonic() - started
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait(5)
    lines = [[json.loads(line) for line in output.splitlines() if line.strip()] for output in outputs]
    done = [item for per in lines for item in per]
    return FleetRun(
        mode=mode,
        requests=len(done),
        ok=sum(1 for item in done if item["outcome"] == "ok"),
        failed=sum(1 for item in done if item["outcome"] != "ok"),
        refused=limit.refused,
        met=[sum(item["429s"] for item in per) for per in lines],
        throughput=limit.throughput(skip=limit_requests),
        limit_rate=limit_requests / window,
        seconds=seconds,
    )
