"""Testing your own code with the emulator: the `emulator` fixture, with no conftest.

Installing fsm_agent registers its pytest plugin, so any test can ask for `emulator` (a running
provider emulator on 127.0.0.1, fresh for each test) and script what the "provider" does,
faults included. Run: `pytest examples/test_my_agent.py`.
"""

import openai

import fsm_agent
from fsm_agent.testing import DropAfter, Emulator, Scenario, Stall


def summarize(client: openai.OpenAI, text: str) -> str:
    """The code under test: your own function that streams through fsm_agent."""
    session = fsm_agent.Session(retries=2, stale_timeout=0.5)
    params = {"model": "any", "messages": [{"role": "user", "content": f"Summarize: {text}"}]}
    return session.stream(client, params).content or ""


def client_for(emulator: Emulator) -> openai.OpenAI:
    return openai.OpenAI(base_url=emulator.openai_base_url, api_key="test", max_retries=0)


def test_summary_survives_a_dropped_connection(emulator: Emulator) -> None:
    emulator.script(
        Scenario.build("A short summary.", faults=[DropAfter(frames=0)]),  # cut before any text
        Scenario.build("A short summary."),
    )
    assert summarize(client_for(emulator), "a long text") == "A short summary."
    assert len(emulator.requests) == 2  # the retry happened, silently


def test_summary_survives_a_silent_provider(emulator: Emulator) -> None:
    emulator.script(
        Scenario.build("Too slow.", faults=[Stall(frames=0, seconds=5.0)]),  # says nothing for 5 s
        Scenario.build("On time."),
    )
    assert summarize(client_for(emulator), "a long text") == "On time."
