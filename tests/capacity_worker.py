"""One process of the capacity fleet (issue 29, CAP-3): `tests/capacity_fleet.py` starts several.

    python tests/capacity_worker.py BASE_URL REQUESTS (REDIS_URL PREFIX | local)

Prints "ready", waits for a line on stdin (so the fleet starts together), then runs REQUESTS
requests one after the other with a real `openai` client against BASE_URL, its session's health
a `RedisHealth(REDIS_URL, prefix=PREFIX)` (the fleet's one bucket) or, with `local`, its own
`MemoryHealth` (each process learns alone). One JSON line per request: its outcome and how many
429s it met.
"""

from __future__ import annotations

import json
import sys

import openai

import fsm_agent

PROMPT = [{"role": "user", "content": "Summarise the capacity of this endpoint in one short line, please."}]


def main(argv: list[str]) -> int:
    base_url, requests = argv[0], int(argv[1])
    if argv[2] == "local":
        health: fsm_agent.HealthStore = fsm_agent.MemoryHealth()
    else:
        health = fsm_agent.RedisHealth(argv[2], prefix=argv[3])
    session = fsm_agent.Session(health=health, backoff=fsm_agent.Backoff(base=0.05, cap=1.0, max_wait=30.0))
    client = openai.OpenAI(base_url=base_url, api_key="sk-fleet", max_retries=0)
    params = {"model": "emulator-fleet", "messages": PROMPT, "max_tokens": 16}
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        for _ in range(requests):
            try:
                result = session.stream(client, params)
                outcome = "ok"
                records = result.records
            except Exception as exc:  # reported, not raised: the parent decides what it means
                outcome, records = type(exc).__name__, []
            met = sum(
                1
                for record in records
                if record.inputs.get("error_status") == 429 and record.trigger == "error"
            )
            print(json.dumps({"outcome": outcome, "429s": met}), flush=True)
    finally:
        client.close()
        close = getattr(health, "close", None)
        if close is not None:
            close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
