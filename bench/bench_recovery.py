"""Recovery benchmark (issue 25b, RC-3/RC-4): a 2,000-token answer cut at 50%, rescued four ways.

The real `anthropic` client over loopback HTTP against the emulator (one word of the answer stands
for one token; the emulator sends three words a frame, `--frame-delay` seconds apart, as a model
streams). The first attempt is cut after half the text frames; the ways, measured side by side
(interleaved rounds, medians with min..max):

- continue: `Recovery(continue_=True)`: the shown half is sent back as a prefill, the rest streamed.
- restart: `Recovery(restart=True)`: a reset notice, then the whole answer again.
- bare SDK: `client.messages.stream(...)` with a hand-written retry of the whole request on error.
- resume: Responses background mode (RC-2) is not built; printed as such.

Printed, not asserted: tokens generated again (streamed by the rescue that the user had already
been shown) and wall time from the first request to the whole answer.

Run: .venv/bin/python bench/bench_recovery.py [--rounds 5] [--frame-delay 0.002]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import anthropic

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import interleaved_times

import fsm_agent
from fsm_agent.testing import DropAfter, Emulator, Scenario

TOKENS = 2000
WHOLE = " ".join(f"w{i % 1000}" for i in range(TOKENS)) + "."
TEXT_FRAMES = (TOKENS + 2) // 3
PARAMS = {"model": "claude-sonnet-4-6", "max_tokens": 4096, "messages": [{"role": "user", "content": "hi"}]}


def _tokens(text: str) -> int:
    return len(text.split())


class Ways:
    def __init__(self, emu: Emulator) -> None:
        self.emu = emu
        self.client = anthropic.Anthropic(base_url=emu.anthropic_base_url, api_key="sk-ant-x", max_retries=0)
        self.regenerated: dict[str, list[int]] = {}

    def _script(self) -> None:
        cut = Scenario.build(WHOLE, faults=[DropAfter(TEXT_FRAMES // 2, kind="text")])
        self.emu.reset()
        self.emu.script(cut, then=Scenario.build(WHOLE, continues=True))

    def _note(self, name: str, shown: int, streamed_after: int) -> None:
        # regenerated = what the rescue streamed beyond the half the user had not yet seen
        self.regenerated.setdefault(name, []).append(max(0, streamed_after - (TOKENS - shown)))

    def _library(self, name: str, recovery: fsm_agent.Recovery) -> None:
        self._script()
        session = fsm_agent.Session(backoff=fsm_agent.Backoff(base=0), recovery=recovery)
        got: list[str] = []
        seen: list[int] = []  # what the user had read when the stream was lost (the first notice)

        def on_status(message: str) -> None:
            if not seen:
                seen.append(_tokens("".join(got)))

        result = session.stream(
            self.client, PARAMS, on_text=got.append, on_status=on_status, on_reset=lambda shown: None
        )
        assert result.content is not None and _tokens(result.content) == TOKENS, result
        shown = seen[0]
        answered = self.emu.requests[-1]
        self._note(name, shown, _streamed(answered))

    def continue_(self) -> None:
        self._library("continue", fsm_agent.Recovery(continue_=True))

    def restart(self) -> None:
        self._library("restart", fsm_agent.Recovery(restart=True))

    def bare_sdk(self) -> None:
        self._script()
        shown = 0
        for _attempt in range(3):
            parts: list[str] = []
            try:
                with self.client.messages.stream(**PARAMS) as stream:
                    for text in stream.text_stream:
                        parts.append(text)
                    stream.get_final_message()
            except Exception:  # a hand-written retry: whatever broke the stream, ask again
                shown = _tokens("".join(parts))
                continue
            assert _tokens("".join(parts)) == TOKENS
            self._note("bare SDK + retry", shown, TOKENS)
            return
        raise AssertionError("the bare SDK never answered")


def _streamed(request: Any) -> int:
    """Tokens the emulator streamed for `request` (the rest after a prefill, or the whole)."""
    messages = request.body.get("messages") or []
    last = messages[-1] if messages else {}
    if last.get("role") == "assistant":
        return TOKENS - _tokens(last.get("content") or "")
    return TOKENS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--frame-delay", type=float, default=0.002)
    args = parser.parse_args()
    with Emulator(frame_delay=args.frame_delay) as emu:
        ways = Ways(emu)
        names = ["continue", "restart", "bare SDK + retry"]
        times = interleaved_times(ways.continue_, ways.restart, ways.bare_sdk, rounds=args.rounds)
        ways.client.close()
    print(
        f"{TOKENS}-token answer cut after {TEXT_FRAMES // 2} of {TEXT_FRAMES} text frames "
        f"({args.frame_delay * 1000:g} ms a frame), {args.rounds} interleaved rounds"
    )
    print(f"{'way':<18} {'tokens regenerated':>19} {'wall s (median [min..max])':>30}")
    for name, taken in zip(names, times, strict=True):
        regen = statistics.median(ways.regenerated[name])
        wall = f"{statistics.median(taken):.3f} [{min(taken):.3f}..{max(taken):.3f}]"
        print(f"{name:<18} {regen:>19.0f} {wall:>30}")
    print(f"{'resume':<18} {'n/a':>19} {'not built (RC-2)':>30}")
    base = statistics.median(times[2])
    for name, taken in zip(names[:2], times[:2], strict=True):
        print(f"{name} / bare SDK wall time: {statistics.median(taken) / base:.2f}")


if __name__ == "__main__":
    main()
