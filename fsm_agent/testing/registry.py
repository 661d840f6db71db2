"""Named scenario scripts for demos and the command line (``fsm-agent demo``, ``fsm-agent emulate``),
and `serve_forever`, which runs an emulator playing one of them until interrupted.

A `Demo` is a script (one `Scenario` per attempt) plus what ``fsm-agent demo`` needs to
show it: a one-line description, the session settings that make the fault visible (a short stale
timeout for a stall) and, for the interrupt demo, when to interrupt. `SCENARIOS` maps every name
to its script alone, for users' own clients. Pure data; nothing here opens a socket except
`serve_forever`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from fsm_agent.testing import faults as F
from fsm_agent.testing.handler import Request
from fsm_agent.testing.scenario import Scenario, ToolCall, Usage
from fsm_agent.testing.server import Emulator

__all__ = [
    "DEFAULT_DEMO",
    "DEMOS",
    "DEMO_PROMPT",
    "DEMO_TOOLS",
    "SCENARIOS",
    "Demo",
    "get_demo",
    "get_scenarios",
    "scenario_names",
    "serve_forever",
]

DEMO_PROMPT = "What does config/settings.yaml set up?"

# The tool the demo request offers, in the neutral shape the CLI converts for each API.
DEMO_TOOLS: tuple[dict[str, object], ...] = (
    {
        "name": "read_file",
        "description": "Read a text file of the project.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "sections": {"type": "array", "items": {"type": "string"}},
                "max_bytes": {"type": "integer"},
            },
            "required": ["path"],
        },
    },
)

_INTRO = "I'll read the configuration first, then summarize what it sets up. "
_READ = ToolCall("read_file", '{"path": "config/settings.yaml", "max_bytes": 65536}')
_ANSWER = (
    "The service listens on port 8080, keeps request logs for 14 days and sends alerts "
    "to the on-call channel when the error rate passes 2%."
)
_THINKING = (
    "The user asks what the service configuration sets up. Read config/settings.yaml, "
    "then list the port, log retention and alerting."
)
_SUMMARY = (
    "The configuration sets up three things:\n"
    "- the service listens on port 8080;\n"
    "- request logs are kept for 14 days;\n"
    "- alerts go to the on-call channel when the error rate passes 2%.\n"
)
_READ_SECTIONS = ToolCall(
    "read_file",
    '{"path": "config/settings.yaml", "sections": ["server", "logging", "alerts"], "max_bytes": 65536}',
    id="call_read_settings",
)


def _usage(*texts: str) -> Usage:
    """Usage roughly as a tokenizer would count these texts (four characters a token)."""
    return Usage(input_tokens=64, output_tokens=max(1, sum(len(t) for t in texts) // 4))


def _lookup(name: str, *faults: F.Fault) -> Scenario:
    """Reasoning, a sentence, then a read_file call whose arguments stream in small fragments."""
    return Scenario.build(
        _INTRO,
        reasoning=_THINKING,
        tool_calls=[_READ_SECTIONS],
        faults=faults,
        arg_fragment=8,
        usage=_usage(_THINKING, _INTRO, _READ_SECTIONS.arguments),
        name=name,
    )


def _summary(name: str, *faults: F.Fault, reasoning: str | None = None) -> Scenario:
    texts = (_SUMMARY, reasoning or "")
    return Scenario.build(_SUMMARY, reasoning=reasoning, faults=faults, usage=_usage(*texts), name=name)


def _attempt(name: str, *faults: F.Fault) -> Scenario:
    return Scenario.build(_INTRO, tool_calls=[_READ], faults=faults, name=name)


@dataclass(frozen=True)
class Demo:
    """A named script and how ``fsm-agent demo`` plays it.

    ``script`` is served one scenario per request (attempt). ``stale_timeout`` is the session's
    stale timeout for this demo (None: the library's default). ``interrupt_after`` makes the demo
    interrupt itself that many seconds after the request starts. ``featured`` demos are listed first.
    ``fallback`` is the script of a second emulator serving a fallback route (RT-1), when the demo
    has one.
    """

    name: str
    description: str
    script: tuple[Scenario, ...]
    stale_timeout: float | None = None
    interrupt_after: float | None = None
    featured: bool = False
    fallback: tuple[Scenario, ...] = ()


DEFAULT_DEMO = "tool-call-recovered"

_DEMO_LIST: tuple[Demo, ...] = (
    Demo(
        "tool-call-recovered",
        "text, then a tool call cut mid-arguments; reconnect with a marker; the call is recovered",
        (
            _lookup("tool-call-recovered/cut", F.DropMidFrame(5, kind="tool_args")),
            _lookup("tool-call-recovered/full"),
        ),
        featured=True,
    ),
    Demo(
        "happy",
        "reasoning, then a multi-line answer; nothing goes wrong",
        (_summary("happy", reasoning=_THINKING),),
        featured=True,
    ),
    Demo(
        "text-drop-stub",
        "the connection drops after some answer text: a stub of exactly what was shown, no retry",
        (_summary("text-drop-stub", F.DropAfter(6, kind="text")),),
        featured=True,
    ),
    Demo(
        "stall-retry",
        "the provider goes silent before any text; the watchdog (1 s) aborts and retries",
        (
            _summary("stall-retry/stall", F.Stall(0, kind="text", seconds=60.0, then="drop")),
            _summary("stall-retry/ok"),
        ),
        stale_timeout=1.0,
        featured=True,
    ),
    Demo(
        "keepalive-fallback",
        "the stream sends only keepalive pings; falls back to a non-streaming request",
        (
            _summary("keepalive-fallback/pings", F.KeepaliveOnly(4, interval=0.25)),
            _summary("keepalive-fallback/plain"),
        ),
        featured=True,
    ),
    Demo(
        "stream-options-rejected",
        "the endpoint rejects stream_options; learned, and retried at once without it",
        (_summary("stream-options-rejected", F.RejectStreamOptions(400)),),
        featured=True,
    ),
    Demo(
        "provider-down",
        "the primary provider answers 503 every time; the request switches to the fallback route",
        (_summary("provider-down/503", F.HttpError(503, "the service is temporarily unavailable")),),
        featured=True,
        fallback=(_summary("provider-down/fallback", reasoning=_THINKING),),
    ),
    Demo(
        "interrupt",
        "the answer starts, the provider stalls, and the demo interrupts itself after a second",
        (_summary("interrupt", F.Stall(5, kind="text", seconds=60.0, then="drop")),),
        interrupt_after=1.0,
        featured=True,
    ),
    # Further scripts, for `fsm-agent emulate` and users' own clients.
    Demo(
        "reasoning",
        "reasoning, then a one-line answer",
        (
            Scenario.build(
                _ANSWER,
                reasoning="The user wants a summary of the settings; list port, retention and alerting.",
                usage=Usage(input_tokens=120, output_tokens=64, reasoning_tokens=16),
                name="reasoning",
            ),
        ),
    ),
    Demo("tool-call", "a sentence and one tool call", (_attempt("tool-call"),)),
    Demo(
        "parallel-tools",
        "a sentence and two parallel tool calls",
        (
            Scenario.build(
                "Reading both files. ",
                tool_calls=[_READ, ToolCall("read_file", '{"path": "config/alerts.yaml"}')],
                name="parallel-tools",
            ),
        ),
    ),
    Demo(
        "dropped-after-text",
        "a one-line answer cut after three text frames (a stub)",
        (Scenario.build(_ANSWER, faults=(F.DropAfter(3, kind="text"),), name="dropped-after-text"),),
    ),
    Demo(
        "stall-recovered",
        "a stall before the first text (needs a short stale timeout), then an answer",
        (
            Scenario.build(
                _ANSWER,
                faults=(F.Stall(0, kind="text", seconds=30.0, then="drop"),),
                name="stall-recovered/stall",
            ),
            Scenario.build(_ANSWER, name="stall-recovered/ok"),
        ),
        stale_timeout=1.0,
    ),
    Demo(
        "keepalive-only",
        "three comment pings at once, then the plain answer",
        (
            Scenario.build(_ANSWER, faults=(F.KeepaliveOnly(3),), name="keepalive-only/pings"),
            Scenario.build(_ANSWER, name="keepalive-only/fallback"),
        ),
    ),
    Demo(
        "streaming-unsupported",
        "streaming requests get HTTP 400 'streaming is not supported'",
        (Scenario.build(_ANSWER, faults=(F.StreamingUnsupported(),), name="streaming-unsupported"),),
    ),
    Demo(
        "rate-limited",
        "HTTP 429 with retry-after: 1 first, then the answer (waits out the hint)",
        (
            Scenario.build(_ANSWER, faults=(F.HttpError(429, retry_after=1.0),), name="rate-limited/429"),
            Scenario.build(_ANSWER, name="rate-limited/ok"),
        ),
    ),
    Demo(
        "overloaded",
        "HTTP 529 (overloaded) twice with no hint, then the answer (backs off with jitter)",
        (
            Scenario.build(_ANSWER, faults=(F.HttpError(529),), name="overloaded/529-1"),
            Scenario.build(_ANSWER, faults=(F.HttpError(529),), name="overloaded/529-2"),
            Scenario.build(_ANSWER, name="overloaded/ok"),
        ),
    ),
    Demo(
        "refusal",
        "a refusal-only answer",
        (Scenario.build(refusal="I can't help with that request.", name="refusal"),),
    ),
    Demo(
        "malformed",
        "a frame whose payload is not JSON (a provider stream error)",
        (Scenario.build(_ANSWER, faults=(F.MalformedFrame(2),), name="malformed"),),
    ),
    Demo(
        "server-error",
        "HTTP 500 on every request",
        (Scenario.build(_ANSWER, faults=(F.HttpError(500),), name="server-error"),),
    ),
)

DEMOS: dict[str, Demo] = {demo.name: demo for demo in _DEMO_LIST}

SCENARIOS: dict[str, tuple[Scenario, ...]] = {demo.name: demo.script for demo in _DEMO_LIST}


def scenario_names() -> list[str]:
    """The names of the emulator's scenario scripts, sorted (`fsm-agent emulate --list`)."""
    return sorted(SCENARIOS)


def _unknown(name: str) -> KeyError:
    return KeyError(f"unknown scenario {name!r}; known: {', '.join(scenario_names())}")


def get_scenarios(name: str) -> tuple[Scenario, ...]:
    """The scenario script registered under ``name`` (KeyError naming the known ones)."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise _unknown(name) from None


def get_demo(name: str) -> Demo:
    """The demo registered under ``name`` (KeyError naming the known ones)."""
    try:
        return DEMOS[name]
    except KeyError:
        raise _unknown(name) from None


def serve_forever(
    port: int = 0,
    scenario_name: str = "happy",
    *,
    frame_delay: float = 0.0,
    ready: Callable[[Emulator], None] | None = None,
    stop: threading.Event | None = None,
    served: Callable[[int, Request], None] | None = None,
) -> None:
    """Serve the named script on 127.0.0.1:``port`` until ``stop`` is set or Ctrl-C.

    The script restarts from its first scenario whenever it has been played in full, so a client
    can run the demo again. ``ready`` is called with the running emulator (to print its URLs);
    ``served`` with each request's number (from 1) and the request, soon after it arrives.
    """
    script = get_scenarios(scenario_name)
    stop = stop if stop is not None else threading.Event()
    with Emulator(port=port, frame_delay=frame_delay) as emu:
        emu.script(*script, cycle=True)
        if ready is not None:
            ready(emu)
        told = 0

        def tell() -> None:
            nonlocal told
            if served is not None:
                for request in emu.requests[told:]:
                    told += 1
                    served(told, request)

        try:
            while not stop.wait(0.1):
                tell()
        except KeyboardInterrupt:
            pass
        tell()  # the ones that came since the last look, before the emulator stops
