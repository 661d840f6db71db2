"""Another process of the fleet, for the cross-process tests of shared health (HL-2).

    python tests/health_worker.py REDIS_URL PREFIX BASE_URL MODEL REQUESTS [session settings as JSON]

Runs REQUESTS requests, one after the other, with a real `openai` client against BASE_URL through a
session whose health is `RedisHealth(REDIS_URL, prefix=PREFIX)`, and prints one JSON line per
request: how it ended (`ok`, or the error's class name) and how many stalls it paid.
"""

from __future__ import annotations

import json
import sys

import openai

import fsm_agent


class StallCounter:
    """A trace sink that counts the stalls the process paid (also of requests that raised)."""

    record_wire = False

    def __init__(self) -> None:
        self.stalls = 0

    def write_record(self, record: object) -> None:
        if getattr(record, "dest", None) == "stalled":
            self.stalls += 1

    def write_event(self, *args: object) -> None:  # never called: record_wire is off
        pass

    def close(self) -> None:
        pass


def main(argv: list[str]) -> int:
    redis_url, prefix, base_url, model, requests = argv[:5]
    settings = json.loads(argv[5]) if len(argv) > 5 else {}
    backoff = settings.pop("backoff", None)
    if backoff is not None:
        settings["backoff"] = fsm_agent.Backoff(**backoff)
    params = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    with fsm_agent.RedisHealth(redis_url, prefix=prefix) as health:
        counter = StallCounter()
        session = fsm_agent.Session(health=health, trace=counter, **settings)
        client = openai.OpenAI(base_url=base_url, api_key="sk-worker", max_retries=0)
        try:
            for _ in range(int(requests)):
                before = counter.stalls
                try:
                    session.stream(client, params)
                    outcome = "ok"
                except Exception as exc:  # reported, not raised: the parent decides what it means
                    outcome = type(exc).__name__
                print(json.dumps({"outcome": outcome, "stalls": counter.stalls - before}), flush=True)
        finally:
            client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
