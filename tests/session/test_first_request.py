"""The first request of a process loads only what that request needs (OT-1, OT-3; the lazy rules in
docs/spec-notes.md, "The first request of a process"). Each case runs in a fresh interpreter (this
one has everything loaded by other tests) and checks `sys.modules` after a real request over
loopback HTTP: none of them measures time, so each fails only when a lazy import turns eager again.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys
import openai
from fsm_agent import Session
from fsm_agent.testing import Emulator, Scenario

api = sys.argv[1]
with Emulator(default=Scenario.build("Hello there.")) as emu:
    client = openai.OpenAI(base_url=emu.openai_base_url, api_key="sk-test", max_retries=0)
    if api == "chat":
        params = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}
    else:
        params = {"model": "gpt-4.1", "input": "hi"}
    result = Session().stream(client, params)
    client.close()
watched = (
    "opentelemetry", "fsm_agent._internal.telemetry", "openai.resources.chat", "openai.resources.responses"
)
loaded = sorted({w for w in watched for m in sys.modules if m == w or m.startswith(w + ".")})
print(json.dumps({"content": result.content, "loaded": loaded}))
"""


def run(script: str, *args: str, env_extra: dict[str, str] | None = None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env.update(env_extra or {})
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_opentelemetry_is_importable_here() -> None:
    """The cases below would pass vacuously without it: OpenTelemetry must be there to be left alone."""
    assert importlib.util.find_spec("opentelemetry") is not None
    assert importlib.util.find_spec("opentelemetry.sdk") is not None


@pytest.mark.parametrize(
    ("api", "needed", "unneeded"),
    [
        ("chat", "openai.resources.chat", "openai.resources.responses"),
        ("responses", "openai.resources.responses", "openai.resources.chat"),
    ],
)
def test_a_request_loads_only_its_own_sdk_resource_and_no_telemetry(
    api: str, needed: str, unneeded: str
) -> None:
    """The client probes look at the client's class, so the other API's SDK resource (a lazy
    import of pydantic models costing tens of milliseconds) is never built; with no tracer or
    meter provider possible, neither OpenTelemetry nor our telemetry module is imported."""
    report = run(SCRIPT, api)
    assert unneeded not in report["loaded"]  # type: ignore[operator]
    assert report == {"content": "Hello there.", "loaded": [needed]}


SIDE_BY_SIDE_SCRIPT = r"""
import json, sys
api, who = sys.argv[1], sys.argv[2]
sdk = __import__("openai" if api == "chat" else "anthropic")
from fsm_agent import Session
from fsm_agent.testing import Emulator, Scenario

messages = [{"role": "user", "content": "hi"}]
with Emulator(default=Scenario.build("Hello there.")) as emu:
    if api == "chat":
        client = sdk.OpenAI(base_url=emu.openai_base_url, api_key="sk-test-key-12345", max_retries=0)
        params = {"model": "gpt-4.1", "messages": messages}
    else:
        client = sdk.Anthropic(base_url=emu.anthropic_base_url, api_key="sk-ant-test-12345", max_retries=0)
        params = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": messages}
    before = set(sys.modules)
    if who == "fsm_agent":
        content = Session().stream(client, params).content
    elif api == "chat":
        stream = client.chat.completions.create(stream=True, **params)
        content = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    else:
        stream = client.messages.create(stream=True, **params)
        deltas = (e.delta for e in stream if e.type == "content_block_delta")
        content = "".join(d.text for d in deltas if d.type == "text_delta")
    client.close()
print(json.dumps({"content": content, "loaded": sorted(set(sys.modules) - before)}))
"""


@pytest.mark.parametrize("api", ["chat", "anthropic"])
def test_the_first_request_loads_no_module_the_bare_sdks_does_not_but_its_adapter(api: str) -> None:
    """Side by side in fresh interpreters, the same first request made with the bare SDK and
    through a Session: what the Session's request imports beyond the SDK's is its provider's own
    adapter modules and the engine's library (`transitions`, and `six`, which it imports),
    nothing else (no SDK resource the request does not use, no OpenTelemetry API an SDK did not
    import itself, no telemetry of ours with no provider set)."""
    bare = run(SIDE_BY_SIDE_SCRIPT, api, "sdk")
    ours = run(SIDE_BY_SIDE_SCRIPT, api, "fsm_agent")
    assert bare["content"] == ours["content"] == "Hello there."
    extra = sorted(set(ours["loaded"]) - set(bare["loaded"]))  # type: ignore[call-overload]
    adapters = [name for name in extra if name.startswith("fsm_agent._internal.providers.")]
    engine = [name for name in extra if name.split(".")[0] in ("transitions", "six")]
    assert "transitions.core" in engine and adapters, extra
    assert extra == sorted(adapters + engine), extra


IMPORT_SCRIPT = r"""
import json, sys
before = set(sys.modules)
from fsm_agent import Session
from fsm_agent._internal import accumulator, partial_json, redact
loaded = sorted(set(sys.modules) - before)
import dataclasses
ours = [sys.modules[name] for name in loaded if name.startswith("fsm_agent")]
dataclasses_made = sorted(
    f"{value.__module__}.{value.__qualname__}"
    for module in ours
    for value in vars(module).values()
    if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == module.__name__
)
print(json.dumps({
    "loaded": loaded,
    "patterns": [
        redact._shape_patterns is not None, redact._secret_pattern is not None, partial_json._compiled,
        accumulator._surrogate.cache_info().currsize > 0,
    ],
    "dataclasses": dataclasses_made,
}))
"""

# What `from fsm_agent import Session` must leave for later: the SDKs and OpenTelemetry, every
# provider's adapter (imported by the first request of its API), `transitions` (the engine is
# built by the first request), what only a trace, the CLI,
# the testing kit, wrap() or the iterators use, and the standard library's modules that only a
# response, a key's fingerprint, an abort, an Anthropic reset, a retry's jitter or a `dataclasses`
# function called on a public value class use (the SDKs load them anyway).
_NOT_AT_IMPORT = (
    "dataclasses",
    "inspect",
    "socket",
    "hashlib",
    "datetime",
    "random",
    "transitions",
    "openai",
    "anthropic",
    "botocore",
    "google",
    "opentelemetry",
    "structlog",
    "fsm_agent._internal.telemetry",
    "fsm_agent._internal.providers.openai_chat",
    "fsm_agent._internal.providers.openai_responses",
    "fsm_agent._internal.providers.anthropic",
    "fsm_agent._internal.providers.anthropic_events",
    "fsm_agent._internal.providers.bedrock",
    "fsm_agent._internal.providers.gemini",
    "fsm_agent._internal.trace.codec",
    "fsm_agent._internal.trace.reader",
    "fsm_agent._internal.trace.replay",
    "fsm_agent._internal.cli",
    "fsm_agent._internal.wrap",
    "fsm_agent._internal.iterate",
    "fsm_agent.testing",
)
# The public value classes, dataclasses by contract (`dataclasses.replace`, `fields`; registered
# by `frozen.as_dataclass`, which generates no `__init__`, `__repr__` or `__eq__`); every other
# class on the import path is a plain or `Frozen` class (a generated dataclass costs ~0.4-0.9 ms to
# define; the guards' 51-field `RequestContext` ~2 ms), the health records included.
_DATACLASSES_AT_IMPORT = {
    "fsm_agent._internal.backoff.Backoff",
    "fsm_agent._internal.deadlines.Timeouts",
    "fsm_agent._internal.recovery.Recovery",
    "fsm_agent._internal.result.Choice",
    "fsm_agent._internal.result.StreamResult",
    "fsm_agent._internal.result.ToolCall",
    "fsm_agent._internal.routes.Route",
    "fsm_agent._internal.trace.records.TransitionRecord",
}


def test_importing_session_loads_only_the_request_path_and_compiles_no_pattern() -> None:
    """`from fsm_agent import Session` in a fresh interpreter: nothing of the list above is loaded,
    the redaction and partial-JSON patterns wait for their first use, and no internal class is a
    dataclass. None of it measures time (bench/bench_cold.py does)."""
    report = run(IMPORT_SCRIPT)
    loaded = report["loaded"]
    early = [
        name for name in loaded for lazy in _NOT_AT_IMPORT if name == lazy or name.startswith(lazy + ".")
    ]  # type: ignore[attr-defined]
    assert early == []
    assert report["patterns"] == [False, False, False, False]
    assert set(report["dataclasses"]) <= _DATACLASSES_AT_IMPORT, report["dataclasses"]  # type: ignore[arg-type]


PROVIDER_SCRIPT = r"""
import json, sys
import openai
from fsm_agent import Session
from fsm_agent.testing import Emulator, Scenario

with Emulator(default=Scenario.build("Hello there.")) as emu:
    client = openai.OpenAI(base_url=emu.openai_base_url, api_key="sk-test", max_retries=0)
    session = Session()
    params = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}
    session.stream(client, params)
    first = "fsm_agent._internal.telemetry" in sys.modules
    if sys.argv[1] == "late":  # the application sets its provider after a first request
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        session.stream(client, params)
        spans = sorted(span.name for span in exporter.get_finished_spans())
    else:
        spans = []
    client.close()
from fsm_agent._internal import telemetry
print(json.dumps({"first": first, "configured": telemetry.sdk_configured(), "spans": spans}))
"""


def test_a_provider_set_after_the_first_request_is_used_by_the_next() -> None:
    """OT-1: the session's telemetry is made at the first request that could be traced."""
    report = run(PROVIDER_SCRIPT, "late")
    assert report == {"first": False, "configured": True, "spans": ["chat gpt-4.1", "fsm_agent.attempt"]}


def test_a_provider_named_by_the_environment_is_seen_at_the_first_request() -> None:
    """OpenTelemetry's API loads the provider an environment variable names when first asked: the
    first request asks, so it is traced without the application importing anything."""
    report = run(PROVIDER_SCRIPT, "env", env_extra={"OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider"})
    assert report == {"first": True, "configured": True, "spans": []}


SHAPES_SCRIPT = r"""
import importlib, json
from fsm_agent._internal.providers import APIS, adapter_for
from fsm_agent._internal.wire.shapes import Shape

modules = ("openai_chat", "openai_responses", "anthropic_events", "bedrock", "gemini_events")
for api in APIS:
    adapter_for(api)
shapes = [value for name in modules
          for value in vars(importlib.import_module(f"fsm_agent._internal.providers.{name}")).values()
          if isinstance(value, Shape)]
compiled = [shape.name for shape in shapes if getattr(shape.check, "__self__", None) is not shape]
print(json.dumps({"shapes": len(shapes), "compiled": compiled}))
"""


def test_importing_the_providers_compiles_no_shape() -> None:
    """SEC-4's shapes are compiled at their first check, not when a provider's module is imported."""
    report = run(SHAPES_SCRIPT)
    assert report["shapes"] >= 10  # type: ignore[operator]
    assert report["compiled"] == []


def _all_shapes() -> list[object]:
    import importlib

    from fsm_agent._internal.providers import APIS, adapter_for
    from fsm_agent._internal.wire.shapes import Shape

    for api in APIS:
        adapter_for(api)
    found: list[Shape] = []
    todo = [
        value
        for name in ("openai_chat", "openai_responses", "anthropic_events", "bedrock", "gemini_events")
        for value in vars(importlib.import_module(f"fsm_agent._internal.providers.{name}")).values()
        if isinstance(value, Shape)
    ]
    while todo:
        shape = todo.pop()
        if any(shape is seen for seen in found):
            continue
        found.append(shape)
        todo += shape.cases.values()
        todo += [
            spec if isinstance(spec, Shape) else spec[0]
            for spec in shape.fields.values()
            if isinstance(spec, (Shape, list))
        ]
    return list(found)


def test_every_declared_shape_compiles_and_a_check_stays_compiled() -> None:
    """A mistake in a declaration is not left to the first payload that meets it: this compiles all."""
    from fsm_agent._internal.wire.shapes import Shape

    shapes = _all_shapes()
    assert len(shapes) >= 20
    for shape in shapes:
        assert isinstance(shape, Shape)
        check, plain = shape.compiled(), shape.plain_check()
        assert shape.compiled() is check and shape.check is check
        assert shape.plain_check() is plain
