"""WD-5: the open phase's deadline measures the provider, not the client.

The openai SDK imports an endpoint's module at the first access of `client.responses` (~70 ms on
a quiet machine, several times that on a loaded one). Read inside the connect window, that import
counted as the provider's silence: with a short deadline the first Responses request of a
process stalled before it was sent (tests/matrix's breaker test saw it on a loaded machine). The
adapter's `load` now runs before the window opens. Here the endpoint's first access is made far
slower than the connect deadline, on the real clients against the emulator: the request must stream
its answer, with one attempt.
"""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
import time
from typing import Any

import openai

import fsm_agent
from fsm_agent.testing import Emulator, Scenario

# Only the connect phase's deadline is short: the rest of the request keeps the defaults, so a
# loaded machine cannot stall it (the emulator's answer, once sent for, is not what is tested).
CONNECT = 0.4
LOAD = 3 * CONNECT  # the endpoint's first access: well past the connect deadline
PARAMS = {"model": "gpt-4.1", "input": "hi"}


def slow_first_access(client_class: type) -> type:
    """`client_class` whose `responses` endpoint takes LOAD seconds at its first access, named as
    the SDK names it (so fsm_agent tells it sync or async by its class, as it does the SDK's own,
    without touching a resource)."""

    class SlowToLoad(client_class):  # type: ignore[misc, valid-type]
        loads = 0

        @functools.cached_property
        def responses(self) -> Any:
            type(self).loads += 1
            time.sleep(LOAD)  # what a lazy import of a big module costs on a loaded machine
            return super().responses

    SlowToLoad.__module__, SlowToLoad.__name__ = client_class.__module__, client_class.__name__
    return SlowToLoad


def test_an_sdk_slow_to_load_its_endpoint_is_not_a_stall() -> None:
    with Emulator(default=Scenario.build("Loaded, then answered.")) as emu:
        client = slow_first_access(openai.OpenAI)(
            base_url=emu.openai_base_url, api_key="sk-test", max_retries=0
        )
        try:
            session = fsm_agent.Session(timeouts=fsm_agent.Timeouts(connect=CONNECT), retries=0)
            result = session.stream(client, PARAMS, api="responses")
        finally:
            client.close()
    assert result.content == "Loaded, then answered." and result.attempts == 1
    assert type(client).loads == 1 and session.stale_streak == 0


def test_an_async_sdk_slow_to_load_its_endpoint_is_not_a_stall() -> None:
    async def main(base_url: str) -> tuple[Any, Any, fsm_agent.Session]:
        client = slow_first_access(openai.AsyncOpenAI)(base_url=base_url, api_key="sk-test", max_retries=0)
        try:
            session = fsm_agent.Session(timeouts=fsm_agent.Timeouts(connect=CONNECT), retries=0)
            return await session.astream(client, PARAMS, api="responses"), client, session
        finally:
            await client.close()

    with Emulator(default=Scenario.build("Loaded, then answered.")) as emu:
        result, client, session = asyncio.run(main(emu.openai_base_url))
    assert result.content == "Loaded, then answered." and result.attempts == 1
    assert type(client).loads == 1 and session.stale_streak == 0


# google-genai builds its request types (pydantic models) at the first request of a process; a
# fresh interpreter, so that no other test has built them, with that build made LOAD seconds slow.
_GEMINI_SLOW_BUILD = f"""
import sys, time
from google import genai
from google.genai import types
import fsm_agent
from fsm_agent.testing import Emulator, Scenario
model = types._GenerateContentParameters
assert not model.__pydantic_complete__, "built at import: nothing to test"
rebuild = model.model_rebuild.__func__
builds = []
def slow_rebuild(cls, *args, **kwargs):
    builds.append(cls)
    time.sleep({LOAD})  # what the first build costs on a loaded machine, and more
    return rebuild(cls, *args, **kwargs)
model.model_rebuild = classmethod(slow_rebuild)
with Emulator(default=Scenario.build("Loaded, then answered.")) as emu:
    client = genai.Client(api_key="k", http_options={{"base_url": emu.gemini_base_url}})
    session = fsm_agent.Session(timeouts=fsm_agent.Timeouts(connect={CONNECT}), retries=0)
    result = session.stream(client, {{"model": "gemini-2.5-flash", "contents": "hi"}})
print(result.content, result.attempts, len(builds), session.stale_streak, sep="|")
"""


def test_gemini_building_its_request_types_at_the_first_request_is_not_a_stall() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _GEMINI_SLOW_BUILD], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().split("|") == ["Loaded, then answered.", "1", "1", "0"]
