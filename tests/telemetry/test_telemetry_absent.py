"""OT-1 / OT-3: without `opentelemetry-api` importable, or with `telemetry=False`, requests work and
nothing of OpenTelemetry, nor our telemetry module, is imported. Run in a fresh interpreter (this
one has OpenTelemetry loaded by other tests), with the package blocked by an import hook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import importlib.abc, json, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

if sys.argv[1] == "blocked":
    sys.meta_path.insert(0, Block())

import openai
import fsm_agent
from fsm_agent.testing import DropAfter, Emulator, Scenario

with Emulator() as emu:
    emu.script(Scenario.build("Hi.", faults=[DropAfter(0)]), Scenario.build("Hello there."))
    client = openai.OpenAI(base_url=emu.openai_base_url, api_key="sk-test", max_retries=0)
    session = fsm_agent.Session(telemetry=sys.argv[1] == "blocked")
    result = session.stream(client, {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]})
    client.close()
ours = ("opentelemetry", "fsm_agent._internal.telemetry", "fsm_agent._internal.telemetry_attributes")
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ours or m in ours)
print(json.dumps({"content": result.content, "attempts": result.attempts, "loaded": loaded}))
"""


@pytest.mark.parametrize("case", ["blocked", "off"])
def test_nothing_of_opentelemetry_is_imported(case: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, case], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"content": "Hello there.", "attempts": 2, "loaded": []}


UNSET_SCRIPT = r"""
import json
import openai
import fsm_agent
from fsm_agent._internal import telemetry
from fsm_agent.testing import Emulator, Scenario

made = []
class Counting(telemetry.RequestTelemetry):
    def __init__(self, *args, **kwargs):
        made.append(1)
        super().__init__(*args, **kwargs)
telemetry.RequestTelemetry = Counting  # counts the observers the session makes

params = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}
with Emulator(default=Scenario.build("Hello there.")) as emu:
    client = openai.OpenAI(base_url=emu.openai_base_url, api_key="sk-test", max_retries=0)
    session = fsm_agent.Session()
    before = session.stream(client, params).content
    unset = (telemetry.sdk_configured(), len(made))

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    after = session.stream(client, params).content  # the same session: the provider is seen now
    client.close()
spans = sorted(span.name for span in exporter.get_finished_spans())
print(json.dumps({"unset": unset, "set": (telemetry.sdk_configured(), len(made)),
                  "content": [before, after], "spans": spans}))
"""


def test_no_provider_set_means_no_telemetry_work_until_one_is() -> None:
    """OT-3: until the application sets a tracer or meter provider every span and instrument is a
    no-op, so a request makes no observer at all; the request after one is set is traced."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", UNSET_SCRIPT], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {
        "unset": [False, 0],
        "set": [True, 1],
        "content": ["Hello there.", "Hello there."],
        "spans": ["chat gpt-4.1", "fsm_agent.attempt"],
    }
