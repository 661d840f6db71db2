"""Wire-recorded traces with known gap distributions, made deterministically (WD-9's golden test).

Each request is a scenario the emulator renders into its wire frames (its own frame builders, the
bytes it would send over loopback), decoded by the library's own pipeline and adapter into events,
and fed to a request machine whose trace sink records them — on a virtual clock: before each event
that moves the answer, the clock moves by the next gap of that phase's known distribution. No
socket, no sleep, no thread: the same trace every run.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fsm_agent._internal.context import RequestContext
from fsm_agent._internal.events import (
    FinishReason,
    ReasoningDelta,
    RefusalDelta,
    Start,
    TextDelta,
    ToolCallDelta,
)
from fsm_agent._internal.providers import adapter_for
from fsm_agent._internal.request import RequestMachine
from fsm_agent._internal.trace.sinks import EventRecorder, MemorySink, write_request_header
from fsm_agent._internal.trace.tune import _PROGRESS
from fsm_agent._internal.wire.pipeline import WirePipeline
from fsm_agent.testing import Scenario, ScriptedToolCall
from fsm_agent.testing.frames import RequestContext as RenderContext
from fsm_agent.testing.handler import make_wires

__all__ = ["ENDPOINTS", "KNOWN_P99", "write_traces"]

HOST = "emulator.test"


def uniform(low: float, high: float) -> Callable[[float], float]:
    return lambda u: low + (high - low) * u


def exponential(mean: float) -> Callable[[float], float]:
    return lambda u: -mean * math.log(1.0 - u)


# (api, model) -> phase -> the inverse CDF of its gaps.
ENDPOINTS: dict[tuple[str, str], dict[str, Callable[[float], float]]] = {
    ("gemini_generate_content", "gemini-2.5-pro"): {
        "first_event": uniform(0.5, 4.0),
        "thinking": uniform(0.0, 2.0),
        "text": exponential(0.05),
        "tool_args": uniform(0.0, 0.6),
    },
    ("chat_completions", "gpt-4.1"): {
        "first_event": uniform(0.2, 1.0),
        "text": exponential(0.02),
        "tool_args": uniform(0.0, 0.3),
    },
}
KNOWN_P99 = {
    key: {phase: inverse(0.99) for phase, inverse in phases.items()} for key, phases in ENDPOINTS.items()
}

REQUESTS = 80
_PATHS = {
    "gemini_generate_content": "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
    "chat_completions": "/v1/chat/completions",
}


def _gaps(inverse: Callable[[float], float], rng: random.Random, n: int = 400) -> Iterator[float]:
    """`n` gaps at the distribution's evenly spaced quantiles, in a seeded order, over and over."""
    gaps = [round(inverse((k + 0.5) / n), 6) for k in range(n)]
    while True:
        rng.shuffle(gaps)
        yield from gaps


def _scenario(api: str, index: int) -> Scenario:
    thinking = "I weigh each option with care before I answer. " * 3 if api.startswith("gemini") else None
    tools = [ScriptedToolCall("lookup", '{"query": "what the user asked about", "limit": 5}', arg_fragment=4)]
    return Scenario.build(
        "Here is the answer, in a few short chunks of text for the reader.",
        reasoning=thinking,
        tool_calls=tools if index % 2 else [],
    )


def _phase_after(phase: str, event: object) -> str:
    """The watchdog's phase after `event` (a live attempt's: the machine's state and what arrived)."""
    if isinstance(event, FinishReason):
        return "text"  # finishing
    if phase == "tool_args" or isinstance(event, ToolCallDelta):
        return "tool_args"  # streaming_tool, until the finish reason
    if phase == "text" or isinstance(event, TextDelta | RefusalDelta):
        return "text"
    return "thinking" if isinstance(event, ReasoningDelta) else "text"


def write_traces(directory: Path) -> list[Path]:
    """One trace file per endpoint, `REQUESTS` requests each; their paths."""
    wires = make_wires()
    paths = []
    for (api, model), phases in ENDPOINTS.items():
        rng = random.Random(f"{api}:{model}")
        draws = {phase: _gaps(inverse, rng) for phase, inverse in phases.items()}
        path = directory / f"{api}.jsonl"
        sink = MemorySink(record_wire=True)
        for index in range(REQUESTS):
            _one_request(sink, wires[api], api, model, index, draws)
        path.write_text(sink.text(), encoding="utf-8")
        paths.append(path)
    return paths


def _one_request(
    sink: Any, wire: Any, api: str, model: str, index: int, draws: dict[str, Iterator[float]]
) -> None:
    name = f"{api}:{model}"
    ctx = RequestContext(route_names=(name,), retries=0)
    request_id = f"{api[:4]}{index:04d}"
    recorder = EventRecorder(sink, request_id)
    machine = RequestMachine(ctx, request_id=request_id, on_record=sink.write_record, on_event=recorder)
    recorder.attach(machine)
    route = {"name": name, "api": api, "model": model, "host": HOST, "stale_timeout": 180.0}
    write_request_header(sink, machine, api=api, model=model, stale_timeout=180.0, routes=[route])
    t = 1000.0 * index
    machine.feed(Start(), t)
    render = RenderContext(api, _PATHS[api], {"model": model, "stream": True}, index, 0, True, model)
    pipeline = WirePipeline(adapter_for(api).translator())
    phase = "first_event"
    events = [
        event
        for frame in wire.stream_frames(_scenario(api, index), render)
        for event in pipeline.feed(frame.data)
    ]
    for event in [*events, *pipeline.end()]:
        if isinstance(event, _PROGRESS):
            t += next(draws[phase]) if phase in draws else 0.0
            phase = _phase_after(phase, event)
        machine.feed(event, round(t, 6))
    assert machine.finished, (request_id, machine.state)
