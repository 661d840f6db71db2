"""`fsm-agent replay` through its real entry point (TR-3, TR-4), and replay without any provider SDK."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"

# A meta path hook that makes every provider SDK (and the HTTP stacks under them) unimportable.
BLOCK_SDKS = textwrap.dedent(
    """
    import sys
    BLOCKED = ("openai", "anthropic", "boto3", "botocore", "httpx2")

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, Blocker())
    """
)


def run_cli(*args: str, block_sdks: bool = False) -> subprocess.CompletedProcess[str]:
    if block_sdks:
        code = BLOCK_SDKS + (
            "from fsm_agent._internal.cli.__main__ import main\nraise SystemExit(main(sys.argv[1:]))\n"
        )
        command = [sys.executable, "-c", code, *args]
    else:
        command = [sys.executable, "-m", "fsm_agent", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_timeline_of_a_golden_trace() -> None:
    done = run_cli("replay", str(GOLDEN / "tool-call-recovered.jsonl"))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "source -> dest" in out and "guards" in out
    assert (
        "streaming_tool -> retrying" in out
        and "is_transient budget_left has_visible_text tool_in_flight" in out
    )
    rows = [line for line in out.splitlines() if " -> " in line and line[2:6].strip().isdigit()]
    assert len(rows) == 9
    first = rows[0].split()
    assert first[:3] == ["1", f"{float(first[1]):.3f}", "0"]  # step, time, attempt
    assert "recorded outcome: returned the answer" in out
    assert "all 9 steps matched" in out


def test_a_mismatch_exits_1_and_names_the_step(tmp_path: Path) -> None:
    lines = (GOLDEN / "text-drop-stub.jsonl").read_text().splitlines()
    edited = []
    for line in lines:
        obj = json.loads(line)
        if obj["type"] == "transition" and obj["trigger"] == "error":
            obj["guards"]["has_visible_text"] = False
        edited.append(json.dumps(obj))
    path = tmp_path / "edited.jsonl"
    path.write_text("\n".join(edited) + "\n")
    done = run_cli("replay", str(path))
    assert done.returncode == 1
    assert "MISMATCH at step 3" in done.stdout
    assert "has_visible_text recorded False, replayed True" in done.stdout


def test_json_report() -> None:
    done = run_cli("replay", "--json", str(GOLDEN / "stall-retry.jsonl"))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["matched"] is True and report["first_mismatch"] is None
    (request,) = report["requests"]
    assert request["mode"] == "wire" and request["settings"]["stale_timeout"] == 0.3
    triggers = [step["replayed"]["trigger"] for step in request["steps"]]
    assert triggers == ["start", "stale", "closed", "closed", "text", "finish", "end"]
    assert request["outcome"]["action"] == "return"


def test_what_if_options() -> None:
    done = run_cli("replay", "--retries", "0", str(GOLDEN / "tool-call-recovered.jsonl"))
    assert done.returncode == 1
    assert "what if: retries=0" in done.stdout
    assert "what-if outcome:  would return a stub" in done.stdout
    assert "replay diverges at step 4" in done.stdout

    done = run_cli("replay", "--unsupported", "raise", "--json", str(GOLDEN / "keepalive-fallback.jsonl"))
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert (
        report["requests"][0]["outcome"]["description"]
        == "would raise StreamingUnsupportedError after 1 attempt"
    )

    done = run_cli("replay", "--stale-timeout", "30", str(GOLDEN / "stall-retry.jsonl"))
    assert done.returncode == 0
    assert "assumed it stayed silent for 30 s" in done.stdout


def test_an_unreadable_trace_exits_2_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    lines = (GOLDEN / "happy.jsonl").read_text().splitlines()
    path.write_text("\n".join([*lines[:2], "{not json", *lines[3:]]) + "\n")
    done = run_cli("replay", str(path))
    assert done.returncode == 2
    assert "line 3" in done.stderr


def test_cli_replay_needs_no_provider_sdk() -> None:
    done = run_cli("replay", str(GOLDEN / "tool-call-recovered.jsonl"), block_sdks=True)
    assert done.returncode == 0, done.stderr
    assert "all 9 steps matched" in done.stdout


@pytest.mark.parametrize("name", ["tool-call-recovered", "stall-breaker", "keepalive-fallback"])
def test_library_replay_needs_no_provider_sdk(name: str) -> None:
    code = BLOCK_SDKS + textwrap.dedent(
        f"""
        import fsm_agent
        report = fsm_agent.replay({str(GOLDEN / (name + ".jsonl"))!r})
        assert report.matched, report.first_mismatch
        what_if = fsm_agent.replay({str(GOLDEN / (name + ".jsonl"))!r}, retries=0, unsupported="raise")
        for blocked in ("openai", "anthropic", "boto3", "botocore", "httpx2"):
            assert blocked not in sys.modules, blocked
        try:
            import openai
        except ImportError:
            pass
        else:
            raise AssertionError("the blocker did not work")
        print("ok", len(report.steps))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok ")
