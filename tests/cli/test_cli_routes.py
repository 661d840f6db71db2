"""Routes on the command line (RT-1..4): `demo provider-down`, `stream --fallback API:MODEL`, and
`replay` showing each step's route and `--routes 1`; the real `python -m fsm_agent` as a subprocess."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_cli_plain import command, run, run_all, summary, trace_lines

import fsm_agent


@pytest.mark.slow
def test_provider_down_switches_to_the_fallback_route(tmp_path: Path) -> None:
    trace = tmp_path / "down.jsonl"
    runs = run_all(
        {
            "demo": command("demo", "provider-down", "--frame-delay", "0.005", "--trace", str(trace)),
            "stream": command(
                "stream",
                "--emulator",
                "provider-down",
                "--fallback",
                "anthropic_messages:claude-emulator-2",
                "--api",
                "responses",
                "where does it listen?",
            ),
        }
    )
    demo, stream = runs["demo"], runs["stream"]
    assert demo.returncode == 0, demo.stderr
    out = demo.stdout
    assert "fallback route · model emulator-2" in out
    switched = "[warning] switching to chat_completions:emulator-2: chat_completions:emulator-1 failed (HTTP"
    assert switched in out
    assert "[route] now on chat_completions:emulator-2" in out
    assert "- the service listens on port 8080;" in out
    rows = summary(out)
    assert rows["outcome"] == "complete" and rows["route"] == "chat_completions:emulator-2"
    assert rows["attempts"] == "4"
    assert [line["type"] for line in trace_lines(str(trace))][:1] == ["request"]
    assert trace_lines(str(trace))[0]["routes"][1]["name"] == "chat_completions:emulator-2"
    assert fsm_agent.replay(str(trace)).matched

    assert stream.returncode == 0, stream.stderr
    assert summary(stream.stdout)["route"] == "anthropic_messages:claude-emulator-2"
    assert "[route] now on anthropic_messages:claude-emulator-2" in stream.stdout
    Path(summary(stream.stdout)["trace"]).unlink()

    timeline = run("replay", str(trace))
    assert timeline.returncode == 0, timeline.stderr
    lines = timeline.stdout.splitlines()
    assert any(line.split()[:1] == ["step"] and "route" in line.split() for line in lines)
    steps = [line for line in lines if line.strip()[:1].isdigit()]
    assert "chat_completions:emulator-1" in steps[0] and "chat_completions:emulator-2" in steps[-1]

    alone = run("replay", str(trace), "--routes", "1")
    assert alone.returncode == 1  # a divergence under other settings
    assert "what if: routes=1" in alone.stdout
    assert "would raise InternalServerError after 3 attempts" in alone.stdout


def test_a_bad_fallback_is_one_line() -> None:
    for value, said in (
        ("claude", "expected API:MODEL"),
        ("nope:model", "unknown api 'nope'"),
        ("chat_completions:", "expected API:MODEL"),
    ):
        done = run("stream", "--emulator", "happy", "--fallback", value, "hi")
        assert done.returncode == 2, value
        assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.slow
def test_the_live_view_shows_the_switch_and_the_route() -> None:
    from test_cli_tty import Terminal

    term = Terminal("demo", "provider-down", "--frame-delay", "0.02")
    term.wait_for(lambda t: "route chat_completions:emulator-2" in t.transcript)  # the status bar
    assert term.finish() == 0
    transcript = term.transcript
    assert "switching to chat_completions:emulator-2" in transcript  # the warning line
    assert "↪ now on route chat_completions:emulator-2" in transcript
    assert re.search(r"route\s+chat_completions:emulator-2", term.text)  # the summary panel
