"""Recovery benchmark (issue 25b, RC-2..RC-4): a 2,000-token answer cut at 50%, rescued four ways.

The real `openai` and `anthropic` clients over loopback HTTP against the emulator (one word of the
answer stands for one token; the emulator sends three words a frame, `--frame-delay` seconds apart,
as a model streams). The first attempt is cut after half the text frames; the ways, measured side
by side (interleaved rounds, medians with min..max):

- resume: `Recovery(resume=True)` on Responses in background mode: the stored response is read on
  from after the last event (`responses.retrieve(stream=True, starting_after=N)`).
- continue: `Recovery(continue_=True)` on Anthropic: the shown half is sent back as a prefill, the
  rest streamed.
- restart: `Recovery(restart=True)` on Anthropic: a reset notice, then the whole answer again.
- bare SDK: `client.messages.stream(...)` with a hand-written retry of the whole request on error.

Printed, not asserted: tokens generated again (every token delivered beyond the answer's own 2,000:
shown once before the cut and once more after it) and wall time from the first request to the
whole answer.

Run: .venv/bin/python bench/bench_recovery.py [--rounds 5] [--frame-delay 0.002]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import anthropic
import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import interleaved_times

import fsm_agent
from fsm_agent.testing import DropAfter, Emulator, Scenario

TOKENS = 2000
WHOLE = " ".join(f"w{i % 1000}" for i in range(TOKENS)) + "."
TEXT_FRAMES = (TOKENS + 2) // 3
MESSAGES = {"model": "claude-sonnet-4-6", "max_tokens": 4096, "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "gpt-5-mini", "input": "hi", "background": True}


def _tokens(text: str) -> int:
    return len(text.split())


class Ways:
    def __init__(self, emu: Emulator) -> None:
        self.emu = emu
        self.anthropic = anthropic.Anthropic(
            base_url=emu.anthropic_base_url, api_key="sk-ant-x", max_retries=0
        )
        self.openai = openai.OpenAI(base_url=emu.openai_base_url, api_key="sk-x", max_retries=0)
        self.regenerated: dict[str, list[int]] = {}

    def _script(self) -> None:
        cut = Scenario.build(WHOLE, faults=[DropAfter(TEXT_FRAMES // 2, kind="text")])
        self.emu.reset()
        self.emu.script(cut, then=Scenario.build(WHOLE, continues=True))

    def _note(self, name: str, delivered: str) -> None:
        # every token delivered beyond the answer's own was generated (and shown) twice
        self.regenerated.setdefault(name, []).append(_tokens(delivered) - TOKENS)

    def _library(self, name: str, recovery: fsm_agent.Recovery, client: Any, params: dict[str, Any]) -> None:
        self._script()
        session = fsm_agent.Session(backoff=fsm_agent.Backoff(base=0), recovery=recovery)
        got: list[str] = []
        on_reset = lambda shown: None  # noqa: E731 - a UI would clear the shown text here
        result = session.stream(client, params, on_text=got.append, on_reset=on_reset)
        assert result.content is not None and _tokens(result.content) == TOKENS, result
        self._note(name, "".join(got))

    def resume(self) -> None:
        self._library("resume", fsm_agent.Recovery(resume=True), self.openai, RESPONSES)

    def continue_(self) -> None:
        self._library("continue", fsm_agent.Recovery(continue_=True), self.anthropic, MESSAGES)

    def restart(self) -> None:
        self._library("restart", fsm_agent.Recovery(restart=True), self.anthropic, MESSAGES)

    def bare_sdk(self) -> None:
        self._script()
        delivered: list[str] = []
        for _attempt in range(3):
            parts: list[str] = []
            try:
                with self.anthropic.messages.stream(**MESSAGES) as stream:
                    for text in stream.text_stream:
                        parts.append(text)
                        delivered.append(text)
                    stream.get_final_message()
            except Exception:  # a hand-written retry: whatever broke the stream, ask again
                continue
            assert _tokens("".join(parts)) == TOKENS
            self._note("bare SDK + retry", "".join(delivered))
            return
        raise AssertionError("the bare SDK never answered")

    def close(self) -> None:
        self.anthropic.close()
        self.openai.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--frame-delay", type=float, default=0.002)
    args = parser.parse_args()
    with Emulator(frame_delay=args.frame_delay) as emu:
        ways = Ways(emu)
        names = ["resume", "continue", "restart", "bare SDK + retry"]
        runs = (ways.resume, ways.continue_, ways.restart, ways.bare_sdk)
        times = interleaved_times(*runs, rounds=args.rounds)
        ways.close()
    print(
        f"{TOKENS}-token answer cut after {TEXT_FRAMES // 2} of {TEXT_FRAMES} text frames "
        f"({args.frame_delay * 1000:g} ms a frame), {args.rounds} interleaved rounds"
    )
    print(f"{'way':<18} {'tokens regenerated':>19} {'wall s (median [min..max])':>30}")
    for name, taken in zip(names, times, strict=True):
        regen = statistics.median(ways.regenerated[name])
        wall = f"{statistics.median(taken):.3f} [{min(taken):.3f}..{max(taken):.3f}]"
        print(f"{name:<18} {regen:>19.0f} {wall:>30}")
    base = statistics.median(times[3])
    for name, taken in zip(names[:3], times[:3], strict=True):
        print(f"{name} / bare SDK wall time: {statistics.median(taken) / base:.2f}")


if __name__ == "__main__":
    main()
