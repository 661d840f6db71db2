"""What a user meets at the command line when things go wrong: never a traceback (issue 14).

Every bad input is one line on stderr and exit status 2; a reader that leaves the pipe early ends
every subcommand with status 141 and nothing on stderr; Ctrl-C during start-up ends it with 130
(or the shell's equivalent, death by SIGINT) and no traceback; `--version` answers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fsm_agent

ROOT = Path(__file__).resolve().parents[2]


def env(tmp_path: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FSM_AGENT_", "OPENAI_", "ANTHROPIC_"))}
    return {**base, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp_path / "state"), **extra}


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "fsm_agent", *args]


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("trace")
    path = tmp / "t.jsonl"
    done = subprocess.run(
        command("demo", "happy", "--frame-delay", "0", "--trace", str(path)),
        capture_output=True,
        text=True,
        env=env(tmp),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return path


BAD_INPUTS = {
    "negative retries": (["stream", "--emulator", "happy", "--retries", "-1", "hi"], {}),
    "zero stale timeout": (["demo", "--stale-timeout", "0"], {}),
    "stale timeout not a number": (["stream", "--emulator", "happy", "--stale-timeout", "soon", "hi"], {}),
    "negative frame delay": (["demo", "--frame-delay", "-1"], {}),
    "port out of range": (["emulate", "--port", "70000"], {}),
    "retries env not a number": (["demo"], {"FSM_AGENT_STREAM_RETRIES": "abc"}),
    "stale timeout env zero": (["demo"], {"FSM_AGENT_STREAM_STALE_TIMEOUT": "0"}),
    "giveup env negative": (["stream", "--emulator", "happy", "hi"], {"FSM_AGENT_STREAM_STALE_GIVEUP": "-3"}),
    "replay a directory": (["replay", "{tmp}"], {}),
    "replay a missing file": (["replay", "{tmp}/missing.jsonl"], {}),
    "replay negative retries": (["replay", "{tmp}/missing.jsonl", "--retries", "-2"], {}),
    "diagram over a directory": (["diagram", "--trace", "{tmp}"], {}),
    "unknown scenario": (["demo", "no-such-scenario"], {}),
    "unknown api": (["demo", "--api", "telepathy"], {}),
    "unknown option": (["replay", "--colour"], {}),
    "missing model": (["stream", "hi"], {}),
    "demo trace names a directory": (["demo", "happy", "--trace", "{tmp}"], {}),
    "stream trace names a directory": (["stream", "--emulator", "happy", "--trace", "{tmp}", "hi"], {}),
    "demo trace in a missing directory": (["demo", "happy", "--trace", "{tmp}/no/t.jsonl"], {}),
    "stream trace in a missing directory": (
        ["stream", "--emulator", "happy", "--trace", "{tmp}/no/t.jsonl", "hi"],
        {},
    ),
    "state home is a file": (["demo", "happy"], {"XDG_STATE_HOME": "{tmp}/a-file"}),
    "state home is unwritable": (["stream", "--emulator", "happy", "hi"], {"XDG_STATE_HOME": "/proc/fsm"}),
}


@pytest.mark.slow
def test_each_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    processes = {}
    for name, (args, extra) in BAD_INPUTS.items():
        argv = command(*(arg.replace("{tmp}", str(tmp_path)) for arg in args))
        environ = env(
            tmp_path, **{key: value.replace("{tmp}", str(tmp_path)) for key, value in extra.items()}
        )
        processes[name] = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ
        )
    for name, process in processes.items():
        _, err = process.communicate(timeout=60)
        lines = err.strip().splitlines()
        assert process.returncode == 2 and len(lines) == 1, (name, process.returncode, err)
        assert lines[0].startswith("fsm-agent") and "Traceback" not in err, (name, err)


def test_version() -> None:
    done = subprocess.run(
        command("--version"), capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert done.returncode == 0 and done.stdout.startswith(f"fsm-agent {fsm_agent.__version__} ")


def _closed_pipe_run(argv: list[str], environ: dict[str, str]) -> tuple[int, str]:
    """Run with stdout a pipe whose reader has already left (`| head -1` after its line, at once)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    process = subprocess.Popen(argv, stdout=write_end, stderr=subprocess.PIPE, env=environ)
    os.close(write_end)
    _, err = process.communicate(timeout=60)
    return process.returncode, err.decode()


@pytest.mark.slow
def test_every_subcommand_leaves_a_closed_pipe_silently_with_141(tmp_path: Path, trace_file: Path) -> None:
    cases = [
        ["demo", "--list"],
        ["demo", "happy", "--frame-delay", "0"],
        ["stream", "--emulator", "happy", "hi"],
        ["emulate", "--list"],
        ["emulate"],
        ["replay", str(trace_file)],
        ["replay", str(trace_file), "--json"],
        ["diagram", "--out", str(tmp_path / "d"), "--no-svg"],
        ["diagram", "--trace", str(trace_file), "--out", str(tmp_path / "o"), "--no-svg"],
    ]
    for args in cases:
        status, err = _closed_pipe_run(command(*args), env(tmp_path))
        assert (status, err) == (141, ""), (args, status, err)


def test_ctrl_c_during_start_up_exits_130_without_a_traceback(tmp_path: Path) -> None:
    # The interpreter's own start-up (before any line of ours runs) is Python's business: the
    # delays start once a bare interpreter of the same environment would have started.
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "pass"], env=env(tmp_path), check=True)
    bare = time.monotonic() - started
    for delay in (bare * 1.5, bare * 1.5 + 0.1, bare * 1.5 + 0.3, bare * 1.5 + 0.6):
        for args in (["demo", "--no-color"], ["emulate"], ["stream", "--emulator", "happy", "hi"]):
            process = subprocess.Popen(
                command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env(tmp_path)
            )
            time.sleep(delay)
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=30)
            # 130, or death by SIGINT before our first line ran (a shell shows both as 130)
            assert process.returncode in (130, -signal.SIGINT), (args, delay, process.returncode, err)
            assert b"Traceback" not in err, (args, delay, err.decode())


_SWALLOWED_CTRL_C = r"""
import weakref
from fsm_agent._internal.cli import __main__ as cli


def start_up():
    # Ctrl-C arriving while a callback runs (as the import system's module-lock callback does):
    # Python cannot raise its KeyboardInterrupt there and would go on
    class Value:
        pass

    def callback(ref):
        raise KeyboardInterrupt

    value = Value()
    ref = weakref.ref(value, callback)
    del value
    print("went on")
    return 0


cli.main = start_up
cli.console()
"""


def test_a_ctrl_c_python_cannot_raise_still_exits_130_without_a_traceback(tmp_path: Path) -> None:
    """The deterministic form of the race above: the KeyboardInterrupt of a SIGINT that lands in a
    callback is "ignored" by Python (printed with a traceback, and the command went on to exit
    0); the command's unraisable hook ends it with 130 instead."""
    done = subprocess.run(
        [sys.executable, "-c", _SWALLOWED_CTRL_C], capture_output=True, env=env(tmp_path), timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (130, b"", b"")


def test_cli_traces_go_to_the_per_user_state_directory_latest_100_kept(tmp_path: Path) -> None:
    from fsm_agent._internal.cli import trace_dir

    state = tmp_path / "state"
    directory = state / "fsm-agent" / "traces"
    directory.mkdir(parents=True)
    for n in range(105):
        old = directory / f"old-{n:03}.jsonl"
        old.write_text("")
        os.utime(old, (1_000_000 + n, 1_000_000 + n))
    done = subprocess.run(
        command("demo", "happy", "--frame-delay", "0", "--no-color"),
        capture_output=True,
        text=True,
        env=env(tmp_path),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    kept = sorted(path.name for path in directory.iterdir())
    assert len(kept) == trace_dir.KEEP and "old-005.jsonl" not in kept and "old-006.jsonl" in kept
    newest = [name for name in kept if not name.startswith("old-")]
    assert len(newest) == 1 and str(directory / newest[0]) in done.stdout  # the summary says where
    assert (directory / newest[0]).stat().st_mode & 0o077 == 0 and directory.stat().st_mode & 0o077 == 0
    assert fsm_agent.replay(str(directory / newest[0])).matched


@pytest.mark.parametrize(
    "args",
    [["demo", "happy", "--frame-delay", "0"], ["stream", "--emulator", "happy", "hi"]],
    ids=["demo", "stream"],
)
def test_output_to_a_full_device_is_one_line_and_exit_2(tmp_path: Path, args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            command(*args), stdout=full, stderr=subprocess.PIPE, text=True, env=env(tmp_path)
        )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stderr)
    assert lines[0] == f"fsm-agent {args[0]}: cannot write the output: No space left on device"


ENCODINGS = {"ascii": {"PYTHONIOENCODING": "ascii"}, "latin-1": {"PYTHONIOENCODING": "latin-1"}}


@pytest.mark.parametrize("encoding", list(ENCODINGS))
@pytest.mark.parametrize(
    "args",
    [["demo", "--frame-delay", "0"], ["stream", "--emulator", "reasoning", "hi"]],
    ids=["demo", "stream"],
)
def test_a_terminal_that_cannot_show_the_glyphs_gets_ascii_when_piped(
    tmp_path: Path, args: list[str], encoding: str
) -> None:
    done = subprocess.run(
        command(*args), capture_output=True, env=env(tmp_path, **ENCODINGS[encoding]), timeout=60
    )
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    text = done.stdout.decode(encoding)  # every byte is of the terminal's own encoding
    assert "summary" in text and "[state] done" in text
    if encoding == "ascii":
        assert " - " in text.splitlines()[0]  # the header's `·` became its stand-in
