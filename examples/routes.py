"""Routes: a second model (here, a second provider) for the moments the first cannot serve.

The primary answers HTTP 503 on every attempt. Nothing has been shown yet, so once its retries are
spent the request moves to the next route silently (RT-2, RT-3), and the result says which route
answered; every transition record names its route. A 400 (a malformed request) is raised instead:
the next route would reject it too.

Runs against two built-in emulators; with OPENAI_API_KEY and ANTHROPIC_API_KEY set, the same
routes go to OpenAI first and to Anthropic when OpenAI cannot serve.
"""

import os

import anthropic
import openai

import fsm_agent
from fsm_agent import Route
from fsm_agent.testing import Emulator, HttpError, Scenario

QUESTION = "Name three primary colours."


def ask(primary: openai.OpenAI, fallback: anthropic.Anthropic) -> fsm_agent.StreamResult:
    session = fsm_agent.Session(retries=1, backoff=fsm_agent.Backoff(base=0.2))
    messages = [{"role": "user", "content": QUESTION}]
    routes = [
        Route(primary, {"model": "gpt-4.1", "messages": messages}),
        Route(
            fallback, {"model": "claude-sonnet-4-5", "max_tokens": 256, "messages": messages}, name="claude"
        ),
    ]
    result = session.stream(
        routes,
        on_text=lambda text: print(text, end="", flush=True),
        on_status=lambda status: print(f"[status] {status}"),
    )
    print(f"\n-> answered by route {result.route!r} after {result.attempts} attempt(s)")
    print(f"-> routes in the records: {list(dict.fromkeys(record.route for record in result.records))}")
    return result


if __name__ == "__main__":
    if os.environ.get("OPENAI_API_KEY") and os.environ.get("ANTHROPIC_API_KEY"):
        ask(openai.OpenAI(), anthropic.Anthropic())
    else:
        with Emulator() as down, Emulator() as up:
            down.script(Scenario.build(faults=[HttpError(503)]), cycle=True)
            up.script(Scenario.build("Red, yellow and blue."))
            primary = openai.OpenAI(base_url=down.openai_base_url, api_key="emulator", max_retries=0)
            fallback = anthropic.Anthropic(base_url=up.anthropic_base_url, api_key="emulator", max_retries=0)
            ask(primary, fallback)
            print(f"-> the primary was asked {len(down.requests)} time(s)")
