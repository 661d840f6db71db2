"""Named scenario scripts for demos and the command line (``fsm-agent emulate``), and
:func:`serve_forever`, which runs an emulator playing one of them until interrupted."""

from __future__ import annotations

import threading
from collections.abc import Callable

from fsm_agent.testing import faults as F
from fsm_agent.testing.scenario import Scenario, ToolCall, Usage
from fsm_agent.testing.server import Emulator

_INTRO = "I'll read the configuration first, then summarize what it sets up. "
_READ = ToolCall("read_file", '{"path": "config/settings.yaml", "max_bytes": 65536}')
_ANSWER = (
    "The service listens on port 8080, keeps request logs for 14 days and sends alerts "
    "to the on-call channel when the error rate passes 2%."
)


def _attempt(name: str, *faults: F.Fault) -> Scenario:
    return Scenario.build(_INTRO, tool_calls=[_READ], faults=faults, name=name)


SCENARIOS: dict[str, tuple[Scenario, ...]] = {
    "happy": (Scenario.build(_ANSWER, name="happy"),),
    "reasoning": (
        Scenario.build(
            _ANSWER,
            reasoning="The user wants a summary of the settings; list port, retention and alerting.",
            usage=Usage(input_tokens=120, output_tokens=64, reasoning_tokens=16),
            name="reasoning",
        ),
    ),
    "tool-call": (_attempt("tool-call"),),
    "parallel-tools": (
        Scenario.build(
            "Reading both files. ",
            tool_calls=[_READ, ToolCall("read_file", '{"path": "config/alerts.yaml"}')],
            name="parallel-tools",
        ),
    ),
    "tool-call-recovered": (
        _attempt("tool-call-recovered/cut", F.DropMidFrame(1, kind="tool_args")),
        _attempt("tool-call-recovered/full"),
    ),
    "dropped-after-text": (
        Scenario.build(_ANSWER, faults=(F.DropAfter(3, kind="text"),), name="dropped-after-text"),
    ),
    "stall-recovered": (
        Scenario.build(
            _ANSWER, faults=(F.Stall(1, seconds=30.0, then="drop"),), name="stall-recovered/stall"
        ),
        Scenario.build(_ANSWER, name="stall-recovered/ok"),
    ),
    "keepalive-only": (
        Scenario.build(_ANSWER, faults=(F.KeepaliveOnly(3),), name="keepalive-only/pings"),
        Scenario.build(_ANSWER, name="keepalive-only/fallback"),
    ),
    "stream-options-rejected": (
        Scenario.build(_ANSWER, faults=(F.RejectStreamOptions(400),), name="stream-options-rejected"),
    ),
    "streaming-unsupported": (
        Scenario.build(_ANSWER, faults=(F.StreamingUnsupported(),), name="streaming-unsupported"),
    ),
    "rate-limited": (
        Scenario.build(_ANSWER, faults=(F.HttpError(429),), name="rate-limited/429"),
        Scenario.build(_ANSWER, name="rate-limited/ok"),
    ),
    "refusal": (Scenario.build(refusal="I can't help with that request.", name="refusal"),),
    "malformed": (Scenario.build(_ANSWER, faults=(F.MalformedFrame(2),), name="malformed"),),
    "server-error": (Scenario.build(_ANSWER, faults=(F.HttpError(500),), name="server-error"),),
}


def scenario_names() -> list[str]:
    return sorted(SCENARIOS)


def get_scenarios(name: str) -> tuple[Scenario, ...]:
    """The scenario script registered under ``name`` (KeyError naming the known ones)."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(scenario_names())}") from None


def serve_forever(
    port: int = 0,
    scenario_name: str = "happy",
    *,
    frame_delay: float = 0.0,
    ready: Callable[[Emulator], None] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Serve the named script on 127.0.0.1:``port`` until ``stop`` is set or Ctrl-C.

    The script restarts from its first scenario whenever it has been played in full, so a client
    can run the demo again. ``ready`` is called with the running emulator (to print its URLs).
    """
    script = get_scenarios(scenario_name)
    stop = stop if stop is not None else threading.Event()
    with Emulator(port=port, frame_delay=frame_delay) as emu:
        emu.script(*script, cycle=True)
        if ready is not None:
            ready(emu)
        try:
            while not stop.wait(0.1):
                pass
        except KeyboardInterrupt:
            pass
