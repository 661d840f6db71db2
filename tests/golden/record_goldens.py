"""Record the golden traces of tests/golden/ from emulator runs (wire recording on).

    .venv/bin/python tests/golden/record_goldens.py            # rewrite every golden trace
    .venv/bin/python tests/golden/record_goldens.py happy 401  # only these

Each golden is one scripted fault scenario played against the built-in emulator with the real
`openai` client over loopback HTTP. tests/trace/test_replay_golden.py replays every golden step for step,
and records each scenario afresh to check that today's code still takes the recorded path.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai

import fsm_agent
from fsm_agent.testing import (
    DropAfter,
    DropMidFrame,
    Emulator,
    HttpError,
    KeepaliveOnly,
    MalformedFrame,
    RejectStreamOptions,
    Scenario,
    Stall,
    StreamingUnsupported,
    ToolCall,
    Usage,
)

HERE = Path(__file__).resolve().parent
# The scenarios are spelled out here (not taken from the emulator's registry) so that the goldens
# change only when this file does.
_INTRO = "I'll read the configuration first. "
_ANSWER = "The service listens on port 8080 and keeps request logs for 14 days."
_READ = ToolCall("read_file", '{"path": "config/settings.yaml", "max_bytes": 65536}')
_ALERTS = ToolCall("read_file", '{"path": "config/alerts.yaml"}')


def _cut_tool_call() -> Scenario:
    return Scenario.build(_INTRO, tool_calls=[_READ], faults=[DropMidFrame(1, kind="tool_args")])


INSTANT = fsm_agent.Backoff(base=0)  # the goldens retry at once


@dataclass(frozen=True)
class Golden:
    """A scenario script, the session settings, and the requests to make (more than one for
    session memory), optionally interrupted `interrupt_after` seconds into the first request."""

    script: tuple[Scenario, ...]
    session: dict[str, Any] = field(default_factory=dict)
    requests: int = 1
    interrupt_after: float | None = None


GOLDENS: dict[str, Golden] = {
    "happy": Golden((Scenario.build(_ANSWER),)),
    "reasoning": Golden(
        (Scenario.build(_ANSWER, reasoning="List the port and the retention.", usage=Usage(12, 30, 0, 8)),)
    ),
    "refusal": Golden((Scenario.build(refusal="I can't help with that request."),)),
    "parallel-tools": Golden((Scenario.build("Reading both files. ", tool_calls=[_READ, _ALERTS]),)),
    "tool-call-recovered": Golden((_cut_tool_call(), Scenario.build(_INTRO, tool_calls=[_READ]))),
    "tool-call-stub": Golden((_cut_tool_call(), _cut_tool_call(), _cut_tool_call())),
    "text-drop-stub": Golden((Scenario.build(_ANSWER, faults=[DropAfter(3, kind="text")]),)),
    "stall-retry": Golden(
        (Scenario.build(_ANSWER, faults=[Stall(1, seconds=30.0, then="drop")]), Scenario.build(_ANSWER)),
        session={"stale_timeout": 0.3},
    ),
    "keepalive-fallback": Golden(
        (Scenario.build(_ANSWER, faults=[KeepaliveOnly(3)]), Scenario.build(_ANSWER))
    ),
    "stream-options-rejected": Golden((Scenario.build(_ANSWER, faults=[RejectStreamOptions(400)]),)),
    "streaming-unsupported": Golden((Scenario.build(_ANSWER, faults=[StreamingUnsupported()]),)),
    "malformed-frame": Golden((Scenario.build(_ANSWER, faults=[MalformedFrame(2)]),)),
    "401": Golden((Scenario.build(_ANSWER, faults=[HttpError(401)]),)),
    "server-error-exhausted": Golden((Scenario.build(_ANSWER, faults=[HttpError(500)]),)),
    "stall-breaker": Golden(
        (Scenario.build(_ANSWER, faults=[Stall(1, seconds=30.0, then="drop")]),),
        session={"stale_timeout": 0.3, "retries": 0, "stale_giveup": 1},
        requests=2,
    ),
    "interrupt": Golden(
        (Scenario.build(_ANSWER, faults=[Stall(2, seconds=30.0, then="drop")]),),
        session={"stale_timeout": 10.0},
        interrupt_after=0.3,
    ),
}


def record(name: str, path: Path, interrupt_after: float | None = None, **session: Any) -> list[str]:
    """Play golden `name`, writing its trace to `path`; the outcome of each request, as text.

    `interrupt_after` and `session` override the golden's (a test may give a busy machine slack)."""
    golden = GOLDENS[name]
    interrupt_after = golden.interrupt_after if interrupt_after is None else interrupt_after
    if path.exists():
        path.unlink()
    outcomes = []
    with Emulator() as emulator:
        emulator.script(*golden.script)
        client = openai.OpenAI(base_url=emulator.openai_base_url, api_key="sk-emulator", max_retries=0)
        session = fsm_agent.Session(
            backoff=INSTANT, trace=str(path), record_wire=True, **{**golden.session, **session}
        )
        try:
            for number in range(golden.requests):
                timer = None
                if golden.interrupt_after is not None and interrupt_after is not None and number == 0:
                    timer = threading.Timer(interrupt_after, session.interrupt)
                    timer.start()
                try:
                    result = session.stream(
                        client, {"model": "emulator-1", "messages": [{"role": "user", "content": "Go."}]}
                    )
                    outcomes.append(f"returned stub={result.stub} attempts={result.attempts}")
                except Exception as exc:
                    outcomes.append(f"raised {type(exc).__name__}")
                finally:
                    if timer is not None:
                        timer.cancel()
        finally:
            client.close()
            assert session.trace is not None
            session.trace.close()
    return outcomes


def main(argv: list[str]) -> int:
    names = argv or list(GOLDENS)
    for name in names:
        outcomes = record(name, HERE / f"{name}.jsonl")
        print(f"{name}: {'; '.join(outcomes)}")
    return 0


if __name__ == "__main__":
    os.chdir(HERE)
    raise SystemExit(main(sys.argv[1:]))
