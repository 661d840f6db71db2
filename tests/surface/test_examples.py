"""Every script in examples/ runs against the built-in emulator and prints what it promises, and
the README's Quickstart is examples/quickstart.py, character for character (issue 14).

The examples run as a user runs them: a fresh interpreter, no provider key in the environment (so
each takes its emulator branch), the repository on the path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

EXPECTED = {
    "quickstart.py": [
        "Let me look that up.",
        "[calling get_weather…]",
        "finish_reason=tool_calls usage=Usage(input_tokens=10, output_tokens=20",
        'tool call: get_weather({"city": "Paris"})',
        "('streaming_tool', 'finishing', 'finish'), ('finishing', 'done', 'end')]",
    ],
    "tool_call_recovery.py": [
        "reconnecting",
        "-> stub=False attempts=2 finish_reason=tool_calls",
        '-> tool call read_file({"path": "config/settings.yaml"})',
        "Stream stalled mid tool-call (read_file)",
        "-> stub=True attempts=1 finish_reason=length",
        "-> dropped tools: ['read_file']",
    ],
    "async_streaming.py": [
        "'Say hello.' -> 'Hello!' (stop, 1 attempt(s))",
        "'Say hello again.' -> 'Hello!' (stop, 1 attempt(s))",
        "the slow request was cancelled after 0.5 s; its stream is closed",
    ],
    "routes.py": [
        "switching to claude: chat_completions:gpt-4.1 failed (HTTP 503",
        "Red, yellow and blue.",
        "-> answered by route 'claude' after 3 attempt(s)",
        "-> routes in the records: ['chat_completions:gpt-4.1', 'claude']",
        "-> the primary was asked 2 time(s)",
    ],
    "trace_and_replay.py": [
        "answer: 'Red, green, blue.' after 2 attempt(s); trace: request.jsonl",
        "7 step(s), matched>",
        "connecting -> retrying             error",
        "replay: all 7 steps matched",
        "with retries=0 it would raise RemoteProtocolError after 1 attempt",
    ],
    # issue 27: agent frameworks over a wrapped client, a drop mid tool call never noticed
    "with_openai_agents.py": [
        'agent called read_file({"path": "config/settings.yaml"})',
        "agent answered: The configured region is eu-west-1.",
        "the tool ran 1 time(s)",
        "fsm_agent: 2 attempt(s) on the busiest request",
    ],
    "with_pydantic_ai.py": [
        "The configured region is eu-west-1.",
        "the tool ran 1 time(s), with ['config/settings.yaml']",
        "the emulator served 3 requests (one was cut mid tool call)",
    ],
    "with_langchain.py": [
        "tool call read_file({'path': 'config/settings.yaml'})",
        "answer: The configured region is eu-west-1.",
        "the emulator served 3 requests (one was cut mid tool call)",
    ],
}
# The framework each of those needs (the `frameworks` extra): the older-SDK environment cannot
# install them (they need openai>=3, anthropic>=1.15), so there, and only there, they are skipped.
NEEDS = {
    "with_openai_agents.py": "agents",
    "with_pydantic_ai.py": "pydantic_ai",
    "with_langchain.py": "langchain_openai",
}


def user_env() -> dict[str, str]:
    keys = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AWS_ACCESS_KEY_ID", "GEMINI_API_KEY", "FSM_AGENT_")
    env = {name: value for name, value in os.environ.items() if not name.startswith(keys)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def test_every_example_is_checked() -> None:
    scripts = {path.name for path in EXAMPLES.glob("*.py") if not path.name.startswith("test_")}
    assert scripts == set(EXPECTED)


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_example_runs_against_the_emulator(script: str, tmp_path: Path) -> None:
    if script in NEEDS:
        import openai

        if openai.__version__.startswith(("0.", "1.")):
            pytest.skip("the older-SDK environment cannot install the agent frameworks")
        __import__(NEEDS[script])
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), str(tmp_path)],
        capture_output=True,
        text=True,
        env=user_env(),
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    for line in EXPECTED[script]:
        assert line in done.stdout, (line, done.stdout)


@pytest.mark.slow
def test_the_emulator_example_tests_pass_with_no_conftest(tmp_path: Path) -> None:
    """examples/test_my_agent.py gets its `emulator` fixture from the plugin, as a user's test would."""
    from importlib.metadata import entry_points

    module = "fsm_agent.testing.pytest_plugin"
    installed = any(ep.value == module for ep in entry_points(group="pytest11"))
    plugin = [] if installed else ["-p", module]  # an environment installed before the entry point
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-v",
            "-p",
            "no:cacheprovider",
            *plugin,
            "--rootdir",
            str(tmp_path),
            str(EXAMPLES / "test_my_agent.py"),
        ],
        capture_output=True,
        text=True,
        env=user_env(),
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0 and " 2 passed" in done.stdout, done.stdout + done.stderr


def test_the_readme_quickstart_is_the_quickstart_example() -> None:
    example = (EXAMPLES / "quickstart.py").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"```python\n{example}```" in readme, "paste examples/quickstart.py into the README's Quickstart"
