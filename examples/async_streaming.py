"""Async: several requests at once with `astream()`, and one of them interrupted.

`astream()` takes the same arguments as `stream()`; callbacks may be coroutines. Cancelling the
task (here through `asyncio.wait_for`) interrupts the request cleanly: its stream is closed and
`InterruptedError` or the cancellation reaches the caller (RES-11).

Runs against the built-in emulator; set OPENAI_API_KEY to ask OpenAI itself.
"""

import asyncio
import os

import openai

import fsm_agent
from fsm_agent.testing import Emulator, Scenario, Stall


async def ask(session: fsm_agent.Session, client: openai.AsyncOpenAI, model: str, question: str) -> str:
    pieces: list[str] = []

    async def on_text(text: str) -> None:  # a coroutine callback, awaited in order
        pieces.append(text)

    params = {"model": model, "messages": [{"role": "user", "content": question}]}
    result = await session.astream(client, params, on_text=on_text)
    return f"{question!r} -> {''.join(pieces)!r} ({result.finish_reason}, {result.attempts} attempt(s))"


async def main(client: openai.AsyncOpenAI, model: str, slow_model: str) -> None:
    session = fsm_agent.Session(retries=1)
    answers = await asyncio.gather(
        ask(session, client, model, "Say hello."),
        ask(session, client, model, "Say hello again."),
    )
    print("\n".join(answers))
    try:
        await asyncio.wait_for(ask(session, client, slow_model, "Take your time."), timeout=0.5)
    except (TimeoutError, InterruptedError):
        print("the slow request was cancelled after 0.5 s; its stream is closed")
    await client.close()


if __name__ == "__main__":
    if os.environ.get("OPENAI_API_KEY"):
        asyncio.run(main(openai.AsyncOpenAI(), "gpt-4.1-mini", "o3"))
    else:
        with Emulator() as emulator:
            emulator.script(
                Scenario.build("Hello!"),
                Scenario.build("Hello!"),
                Scenario.build("Thinking slowly.", faults=[Stall(frames=1, seconds=5.0)]),
            )
            client = openai.AsyncOpenAI(base_url=emulator.openai_base_url, api_key="emulator")
            asyncio.run(main(client, "emulator-1", "emulator-1"))
