"""Capacity across a fleet (issue 29, CAP-3): 4 processes x 50 requests against an emulator route
that enforces 20 requests and 1200 tokens per 0.5 s and sends the x-ratelimit headers, run with the
fleet's one bucket in Redis and without it (each process learning alone), side by side, interleaved
RUNS times: the 429s the route sent, the requests that failed, and the throughput after the full
bucket's burst against the limit (medians, with the spread).

    .venv/bin/python bench/bench_capacity.py [RUNS]

Needs `redis-server` on the PATH (started on a free loopback port, stopped at the end).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from capacity_fleet import FleetRun, run_fleet
from redis_server import RedisServer, _binary


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.1f} [{min(values):.1f}..{max(values):.1f}]"


def main(runs: int) -> None:
    server = RedisServer(_binary()).start()
    results: dict[str, list[FleetRun]] = {"shared": [], "local": []}
    try:
        for run in range(runs):
            for mode in ("shared", "local"):  # interleaved: the machine's drift hits both alike
                made = run_fleet(mode, redis_url=server.url, prefix=f"bench{run}")
                results[mode].append(made)
                print(made.line(), flush=True)
    finally:
        server.kill()
    print(f"\n{'':<7} {'429s':>22} {'failed':>22} {'throughput/s (limit 40)':>30}")
    for mode, made in results.items():
        print(
            f"{mode:<7} {_spread([float(r.refused) for r in made]):>22} "
            f"{_spread([float(r.failed) for r in made]):>22} {_spread([r.throughput for r in made]):>30}"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
