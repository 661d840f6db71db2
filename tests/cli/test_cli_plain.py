"""The command line with pipes instead of a terminal (CLI-1..3, EMU-1): the real `python -m fsm_agent`
entry point as a subprocess; plain text with the same information and no escape codes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TypeVar

import openai
import pytest
from helpers import INSTANT

import fsm_agent

ROOT = Path(__file__).resolve().parents[2]
K = TypeVar("K")
Done = subprocess.CompletedProcess[str]


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "fsm_agent", *args]


def clean_env(**extra: str) -> dict[str, str]:
    keys = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")
    drop = (*keys, "NO_COLOR", "COLUMNS", "LINES")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("AWS_")}
    env.update(extra)
    return env


def run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 20
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(*args), capture_output=True, text=True, cwd=ROOT, env=env or clean_env(), timeout=timeout
    )


def run_all(commands: dict[K, list[str]], env: dict[str, str] | None = None) -> dict[K, Done]:
    """Run the commands at once (they are mostly waiting); every one has ended when this returns."""
    started = {
        key: subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env or clean_env()
        )
        for key, argv in commands.items()
    }
    done: dict[K, Done] = {}
    try:
        for key, process in started.items():
            out, err = process.communicate(timeout=60)
            done[key] = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    finally:
        for process in started.values():
            if process.poll() is None:
                process.kill()
                process.communicate()
    return done


def summary(stdout: str) -> dict[str, str]:
    rows = stdout.split("--- summary ---\n", 1)[1].splitlines()
    return {label.strip(): value for label, value in (re.split(r"\s{2,}", row, maxsplit=1) for row in rows)}


def trace_lines(path: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


@pytest.mark.slow
def test_default_demo_through_a_pipe(tmp_path: Path) -> None:
    """What `make demo` runs: no arguments, the default scenario, exit status 0."""
    trace = tmp_path / "demo.jsonl"
    done = run("demo", "--trace", str(trace))
    out = done.stdout
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in out + done.stderr and done.stderr == ""

    states = re.findall(r"^\[state\] (\w+)  \(attempt (\d), \d+\.\d\d s\)$", out, re.M)
    assert [s for s, _ in states] == [
        "connecting", "streaming_text", "streaming_tool", "retrying", "waiting",
        "connecting", "streaming_text", "streaming_tool", "finishing", "done",
    ]  # fmt: skip
    assert [a for _, a in states] == ["1", "1", "1", "1", "1", "2", "2", "2", "2", "2"]
    assert out.count("[reasoning]\nThe user asks what the service configuration sets up.") == 2
    assert out.count("[end of reasoning]\nI'll read the configuration first") == 2
    assert re.search(r"\[tool\] read_file: cut off after \d+ B of arguments \(attempt 1\); not executed", out)
    assert "[tool] read_file: arguments complete (97 B)" in out
    assert "\n[connection lost mid tool-call; reconnecting…]\n" in out
    assert "[warning] retrying: attempt 2 of 3 after RemoteProtocolError" in out
    assert '[tool call] read_file (call_read_settings)\n{\n  "path": "config/settings.yaml",' in out

    rows = summary(out)
    assert rows["outcome"] == "complete" and rows["attempts"] == "2" and rows["trace"] == str(trace)
    assert re.fullmatch(r"0\.\d\d s", rows["time to first token"])
    assert re.fullmatch(r"73 \(\d+\.\d tokens/s\)", rows["output tokens"])

    lines = trace_lines(str(trace))
    assert lines[0]["type"] == "request" and lines[0]["record_wire"] is False
    assert {line["type"] for line in lines[1:]} == {"transition"}
    assert "configuration" not in trace.read_text()  # no content without wire recording (TR-5)
    assert (trace.stat().st_mode & 0o777) == 0o600
    assert fsm_agent.replay(str(trace)).matched  # the tee'd trace replays (TR-3)


@pytest.mark.slow
def test_every_featured_scenario_and_every_api_ends_as_it_should() -> None:
    """All at once (they are mostly waiting): each scenario on Chat Completions, and the default
    scenario — the tool call cut and recovered — on the four other APIs."""
    summary_text = "- the service listens on port 8080;"
    recovered = '[tool call] read_file (call_read_settings)\n{\n  "path": "config/settings.yaml",'
    expected = {
        ("happy",): (0, "complete", summary_text),
        ("text-drop-stub",): (
            0,
            "stub",
            "[warning] stream lost after text (RemoteProtocolError); keeping it",
        ),
        ("stall-retry",): (0, "complete", "aborting attempt 1\n[state] retrying  (attempt 1,"),
        ("keepalive-fallback",): (0, "fallback", "falling back to a plain request"),
        ("stream-options-rejected",): (0, "complete", "[warning] the endpoint rejected stream_options"),
        ("interrupt",): (
            130,
            "interrupted",
            "[warning] interrupted by the demo's timer; the stream was closed",
        ),
        ("--api", "responses"): (0, "complete", recovered),
        ("--api", "anthropic_messages"): (0, "complete", recovered),
        ("--api", "bedrock_converse"): (0, "complete", recovered),
        ("--api", "gemini_generate_content"): (0, "complete", recovered),
    }
    runs = run_all({args: command("demo", *args, "--frame-delay", "0.01") for args in expected})
    outputs = {}
    for args, done in runs.items():
        out, err = done.stdout, done.stderr
        outputs[args] = out
        status, outcome, shown = expected[args]
        assert done.returncode == status, (args, err)
        assert "\x1b" not in out + err and "Traceback" not in err, args
        assert summary(out)["outcome"] == outcome, args
        assert shown in out, (args, out)
        Path(summary(out)["trace"]).unlink()
    assert "[warning]" not in outputs[("happy",)]  # nothing to say about a request that simply succeeds
    for api in ("responses", "anthropic_messages", "bedrock_converse", "gemini_generate_content"):
        out = outputs[("--api", api)]
        assert f"\n{api} · http://127.0.0.1:" in out
        assert "[state] streaming_tool  (attempt 1," in out and "[state] retrying  (attempt 1," in out
        assert "[connection lost mid tool-call; reconnecting…]" in out and summary(out)["attempts"] == "2"


def test_stream_without_a_key_says_which_variable_to_set(tmp_path: Path) -> None:
    env = clean_env(HOME=str(tmp_path), AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE=str(tmp_path / "c"))
    cases = {
        "chat_completions": "OPENAI_API_KEY",
        "responses": "OPENAI_API_KEY",
        "anthropic_messages": "ANTHROPIC_API_KEY",
        "bedrock_converse": "AWS_ACCESS_KEY_ID",
        "gemini_generate_content": "GEMINI_API_KEY or GOOGLE_API_KEY",
    }
    runs = run_all(
        {api: command("stream", "--api", api, "--model", "some-model", "Hello") for api in cases}, env
    )
    for api, done in runs.items():
        assert done.returncode == 2, (api, done.stderr)
        assert done.stdout == "" and len(done.stderr.splitlines()) == 1 and cases[api] in done.stderr, api
        assert "Traceback" not in done.stderr


def test_stream_from_the_emulator_with_a_system_prompt_and_tools(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "function": {"name": "lookup", "parameters": {}}}]))
    done = run(
        "stream", "--emulator", "tool-call", "--system", "Be brief.", "--tools", str(tools), "--retries", "0",
        "What", "is", "set?",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        "fsm-agent stream · chat_completions · emulator playing tool-call · model emulator-1" in done.stdout
    )
    assert "› What is set?" in done.stdout
    assert "[tool call] read_file (" in done.stdout and summary(done.stdout)["attempts"] == "1"
    Path(summary(done.stdout)["trace"]).unlink()


def test_setup_errors_are_one_line() -> None:
    cases = [
        (("demo", "no-such-scenario"), "unknown scenario 'no-such-scenario'"),
        (("stream", "--emulator", "nope", "hi"), "unknown scenario 'nope'"),
        (("stream", "hi"), "--model is required"),
        (("stream", "--emulator", "happy", "--base-url", "http://x", "hi"), "exclude each other"),
        (
            ("stream", "--emulator", "happy", "--tools", "/nonexistent.json", "hi"),
            "cannot read the tools file",
        ),
    ]
    runs = run_all({text: command(*args) for args, text in cases})
    for text, done in runs.items():
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and text in done.stderr, (
            done.stderr
        )


def test_demo_list_names_every_scenario_with_a_description() -> None:
    done = run("demo", "--list")
    assert done.returncode == 0
    for name in ("happy", "tool-call-recovered", "text-drop-stub", "stall-retry", "keepalive-fallback",
                 "stream-options-rejected", "interrupt"):  # fmt: skip
        assert re.search(rf"^  {re.escape(name)} +\S.+$", done.stdout, re.M), name
    assert "tool-call-recovered" in done.stdout.split("(default)")[0].splitlines()[-1]


def test_record_wire_writes_the_events_too(tmp_path: Path) -> None:
    trace = tmp_path / "wire.jsonl"
    done = run("demo", "happy", "--frame-delay", "0", "--record-wire", "--trace", str(trace))
    assert done.returncode == 0, done.stderr
    lines = trace_lines(str(trace))
    assert lines[0]["record_wire"] is True
    assert {str(line["type"]) for line in lines} - {"request", "transition"}, "no wire events written"
    assert "The configuration sets " in trace.read_text()  # the text, recorded with the wire
    assert fsm_agent.replay(str(trace)).matched


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_emulate_serves_until_ctrl_c_or_sigterm(stop_signal: signal.Signals) -> None:
    process = subprocess.Popen(
        command("emulate", "--scenario", "happy"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert process.stdout is not None
        banner = [process.stdout.readline() for _ in range(5)]
        urls = dict(re.findall(r"(base_url|endpoint_url)=(\S+)", "".join(banner)))
        base = re.search(r"base_url=(\S+/v1)", "".join(banner)).group(1)  # type: ignore[union-attr]
        assert urls["endpoint_url"] == base.removesuffix("/v1")
        assert f"http_options={{'base_url': '{base.removesuffix('/v1')}'}}" in banner[4]  # google-genai
        client = openai.OpenAI(base_url=base, api_key="anything", max_retries=0)
        with client:
            result = fsm_agent.Session(backoff=INSTANT).stream(
                client, {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            )
        assert result.content is not None and result.content.startswith(
            "The configuration sets up three things:"
        )
        assert result.reasoning is not None
    finally:
        process.send_signal(stop_signal)
        started = time.monotonic()
        out, err = process.communicate(timeout=5)
    expected = 130 if stop_signal is signal.SIGINT else 0  # Ctrl-C ends every command with 130
    # A stop is prompt (the emulator waits on an event, not a poll) — 10 s is a bound for a loaded
    # machine, not a measurement.
    assert process.returncode == expected and time.monotonic() - started < 10, err
    assert "emulator stopped" in out and "Traceback" not in err
    # A line per request served, printed soon after it arrived (before the stop).
    assert "#1 POST /v1/chat/completions (chat_completions, streaming, model m)\n" in out
    assert out.index("#1 POST") < out.index("emulator stopped")


def test_the_readme_shows_the_demo_capture() -> None:
    screen = (ROOT / "docs" / "demo-screen.txt").read_text(encoding="utf-8")
    assert "│ outcome              complete" in screen and " state  done  │  attempt 2/3" in screen
    assert f"```text\n{screen}```" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_a_reader_that_leaves_ends_the_run_quietly(tmp_path: Path) -> None:
    """`fsm-agent demo | head -3`: the request ends, no traceback, status 141 (as after SIGPIPE)."""
    process = subprocess.Popen(
        command("demo", "happy", "--frame-delay", "0.05", "--trace", str(tmp_path / "t.jsonl")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=clean_env(),
    )
    assert process.stdout is not None and process.stderr is not None
    head = [process.stdout.readline() for _ in range(3)]
    process.stdout.close()
    err = process.stderr.read()
    process.stderr.close()
    assert process.wait(timeout=10) == 141 and head[0].startswith(b"fsm-agent demo"), err
    assert err == b""


@pytest.mark.slow
def test_rate_limited_and_overloaded_demos_wait_and_complete(tmp_path: Path) -> None:
    """BO-2: `rate-limited` (HTTP 429, retry-after: 1) ends complete after waiting its hint;
    `overloaded` (529 twice, no hint) backs off twice. The replayed timeline shows each wait. (Both
    scripts on all four APIs in-process: tests/session/test_rate_limits.py.)"""
    runs: dict[tuple[str, ...], list[str]] = {
        ("rate-limited", "--api", api): command("demo", "rate-limited", "--api", api, "--frame-delay", "0.01")
        for api in ("chat_completions", "bedrock_converse")
    }
    runs[("overloaded",)] = command(
        "demo", "overloaded", "--api", "anthropic_messages", "--frame-delay", "0.01"
    )
    traces = {}
    for args, done in run_all(runs).items():
        out = done.stdout
        assert done.returncode == 0, (args, done.stderr)
        assert summary(out)["outcome"] == "complete", (args, out)
        traces[args] = summary(out)["trace"]
        if args[0] == "rate-limited":
            assert "[state] waiting  (attempt 1," in out
            assert "[warning] waiting 1.0 s before attempt 2: HTTP 429, retry-after" in out, out
            assert summary(out)["attempts"] == "2"
        else:
            assert out.count("[state] waiting") == 2 and summary(out)["attempts"] == "3"
    replayed = run("replay", traces[("rate-limited", "--api", "chat_completions")])
    assert replayed.returncode == 0, replayed.stderr
    assert "retrying -> waiting" in replayed.stdout and "[wait 1.000 s, retry-after]" in replayed.stdout
    what_if = run("replay", traces[("rate-limited", "--api", "chat_completions")], "--max-wait", "0.5")
    assert what_if.returncode == 1 and "would raise RateLimitError after 1 attempt" in what_if.stdout
    for path in traces.values():
        Path(path).unlink()
