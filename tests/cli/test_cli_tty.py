"""The command line in a pseudo-terminal (CLI-1, CLI-3, RES-11): the real `python -m fsm_agent`
entry point under pexpect, its output fed to a pyte terminal emulator, the screen read back.

`FSM_AGENT_WRITE_DEMO_SCREEN=1 pytest tests/cli/test_cli_tty.py -k default_demo` rewrites
docs/demo-screen.txt from the final screen of that real run.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pexpect
import pyte
import pytest

ROOT = Path(__file__).resolve().parents[2]
ROWS, COLS = 60, 100
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][0-9A-Za-z]|\x1b[=>]")


class Terminal:
    """One run of the command in a pty of ROWS x COLS, its screen emulated by pyte."""

    def __init__(
        self, *args: str, rows: int = ROWS, cols: int = COLS, env: dict[str, str] | None = None
    ) -> None:
        environ = {
            k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES", "FORCE_COLOR")
        }
        environ["TERM"] = "xterm-256color"
        environ.update(env or {})
        self.child = pexpect.spawn(
            sys.executable, ["-m", "fsm_agent", *args], dimensions=(rows, cols), env=environ, cwd=str(ROOT)
        )
        self.screen = pyte.Screen(cols, rows)
        self._feed = pyte.ByteStream(self.screen)
        self.raw = bytearray()
        self.eof = False

    def pump(self, timeout: float = 0.05) -> None:
        """Read what the program wrote so far (up to `timeout` s of waiting) onto the screen."""
        if self.eof:
            return
        try:
            data = self.child.read_nonblocking(65536, timeout=timeout)
        except pexpect.TIMEOUT:
            return
        except pexpect.EOF:
            self.eof = True
            return
        self.raw += data
        self._feed.feed(data)

    @property
    def text(self) -> str:
        """The screen as it stands, trailing spaces and blank lines dropped."""
        lines = [line.rstrip() for line in self.screen.display]
        while lines and not lines[-1]:
            lines.pop()
        return "\n".join(lines)

    @property
    def transcript(self) -> str:
        """Everything written, escape codes removed: what was ever drawn, in order."""
        return ANSI.sub("", self.raw.decode("utf-8", "replace"))

    def wait_for(self, condition: Callable[[Terminal], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition(self):
            if self.eof or time.monotonic() > deadline:
                raise AssertionError(f"condition not met; screen:\n{self.text}")
            self.pump()

    def finish(self, timeout: float = 15.0) -> int:
        deadline = time.monotonic() + timeout
        while not self.eof:
            assert time.monotonic() < deadline, f"still running; screen:\n{self.text}"
            self.pump(0.2)
        self.child.close()
        assert self.child.signalstatus is None, "killed by a signal instead of exiting"
        return int(self.child.exitstatus)


@pytest.fixture
def terminal() -> Iterator[Callable[..., Terminal]]:
    """Start commands in terminals; any still running after the test (a failed one) is killed."""
    started: list[Terminal] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Terminal:
        started.append(Terminal(*args, env=env))
        return started[-1]

    yield start
    for term in started:
        if term.child.isalive() or not term.child.closed:
            term.child.close(force=True)


def remove_trace(screen: str) -> Path:
    """The trace file the summary names, deleted (each run writes a new one)."""
    found = re.search(r"(?:[│|] trace +|^trace +)(\S+\.jsonl)", screen, re.M)
    assert found, screen
    path = Path(found.group(1))
    path.unlink()
    return path


def status_states(transcript: str) -> list[str]:
    """The states the status bar showed, in order, repeats collapsed."""
    shown: list[str] = []
    for state in re.findall(r" state  (\w+)  │", transcript):
        if not shown or shown[-1] != state:
            shown.append(state)
    return shown


@pytest.mark.slow
def test_default_demo_on_a_terminal(terminal: Callable[..., Terminal]) -> None:
    term = terminal("demo")
    status = term.finish()
    screen, transcript = term.text, term.transcript
    assert status == 0, screen

    # The status bar showed the machine's states as they happened, the cut and the retry included.
    states = [state for state in status_states(transcript) if state != "idle"]  # idle: before the start
    assert states[:4] == ["connecting", "streaming_text", "streaming_tool", "retrying"], states
    assert states[-3:] == ["streaming_tool", "finishing", "done"], states
    assert re.search(r" state  done  │  attempt 2/3  │  \d+\.\d s", screen)

    # Reasoning in its own dimmed panel, closed above the answer.
    lines = screen.splitlines()
    panel = next(i for i, line in enumerate(lines) if line.startswith("╭─ reasoning"))
    answer = next(i for i, line in enumerate(lines) if line.startswith("I'll read the configuration first"))
    assert panel < answer and "The user asks what the service" in lines[panel + 1]
    assert re.search(r"\x1b\[2;3m[^\x1b]*The user asks", term.raw.decode()), "reasoning is not dimmed"

    # The tool call as it built: its name and its arguments parsed so far (ACC-11), growing as they
    # streamed, then the cut and the retry.
    previews = re.findall(r"⚙ read_file  (\{[^\r\n]*\})", transcript)
    paths = re.findall(r'\{path: "([^"]*)"', "\n".join(previews))
    assert paths and all("config/settings.yaml".startswith(path) for path in paths), previews
    grew = [p for i, p in enumerate(previews) if i == 0 or p != previews[i - 1]]
    assert any(len(a) < len(b) < len(c) for a, b, c in zip(grew, grew[1:], grew[2:], strict=False)), previews
    assert "⚙ read_file  arguments complete · 97 B" in transcript
    # (Read from the whole transcript: on a slow machine the final screen may have scrolled them off.)
    assert re.search(r"✗ read_file: cut off after \d+ B of arguments \(attempt 1\); not executed", transcript)
    assert "[connection lost mid tool-call; reconnecting…]" in transcript
    assert "⚠ retrying: attempt 2 of 3 after RemoteProtocolError" in transcript

    # The recovered call, its final arguments pretty-printed.
    assert "╭─ tool call · read_file" in screen and "call_read_settings" in screen
    assert '│   "path": "config/settings.yaml",' in screen and '│     "alerts"' in screen

    # The summary.
    assert re.search(r"│ outcome +complete", screen)
    assert re.search(r"│ time to first token +0\.\d\d s", screen)
    assert re.search(r"│ output tokens +73 \(\d+\.\d tokens/s\)", screen)
    assert re.search(r"│ attempts +2 ", screen)
    trace = Path(re.search(r"│ trace +(\S+\.jsonl)", screen).group(1))  # type: ignore[union-attr]
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [r["dest"] for r in records if r["type"] == "transition"].count("retrying") == 1
    trace.unlink()

    if os.environ.get("FSM_AGENT_WRITE_DEMO_SCREEN"):
        (ROOT / "docs" / "demo-screen.txt").write_text(screen + "\n", encoding="utf-8")


def test_a_partial_line_shows_before_its_newline(terminal: Callable[..., Terminal]) -> None:
    # Frames 0.3 s apart: "The configuration sets " arrives, then "up three things:\n" 0.3 s later.
    term = terminal("demo", "text-drop-stub", "--frame-delay", "0.3")
    term.wait_for(lambda t: "The configuration sets up three things:" in t.text)
    # A frame was drawn with the partial line alone, right above the status bar: before the rest of
    # its line (and its newline) had arrived. Read from the ordered transcript, not a timed look.
    assert re.search(r"[\r\n]The configuration sets \r?\n state  streaming_text  │", term.transcript)
    term.child.sendintr()
    assert term.finish() == 130
    assert re.search(r"│ outcome +interrupted", term.text)
    remove_trace(term.text)


def test_ctrl_c_during_a_stall_interrupts_at_once(terminal: Callable[..., Terminal]) -> None:
    term = terminal("demo", "stall-retry", "--stale-timeout", "30")
    term.wait_for(lambda t: "state  connecting" in t.text)
    time.sleep(0.3)  # the provider is silent now (it stalls after its first frame)
    sent = time.monotonic()
    term.child.sendintr()
    term.wait_for(lambda t: re.search(r"│ outcome +interrupted", t.text) is not None, timeout=2)
    shown = time.monotonic() - sent
    status = term.finish(timeout=2)
    exited = time.monotonic() - sent
    assert status == 130
    # The stream is closed, the summary on screen and the process gone within 0.5 s (an interrupted
    # run skips the interpreter's teardown of the SDKs' modules).
    assert shown < 0.5 and exited < 0.5, (shown, exited)
    assert "⚠ interrupted by Ctrl-C; the stream was closed" in term.text
    assert "stalled" not in term.transcript  # interrupted before the watchdog's 30 s
    remove_trace(term.text)


def test_no_color_on_a_terminal_writes_no_escape_codes(terminal: Callable[..., Terminal]) -> None:
    term = terminal("demo", "happy", "--no-color", "--frame-delay", "0")
    assert term.finish() == 0
    assert b"\x1b" not in term.raw
    assert "[reasoning]" in term.text and "outcome              complete" in term.text
    remove_trace(term.text)


@pytest.mark.slow
def test_the_status_bar_counts_down_a_rate_limit_wait(terminal: Callable[..., Terminal]) -> None:
    """BO-4: `rate-limited` waits its 1 s hint in `waiting`, the status bar counting it down."""
    term = terminal("demo", "rate-limited", "--frame-delay", "0")
    assert term.finish() == 0
    shown = [float(left) for left in re.findall(r" state  waiting (\d+\.\d) s  │", term.transcript)]
    assert shown and shown[0] >= 0.8 and min(shown) <= 0.5, shown  # drawn as it ran down
    assert shown == sorted(shown, reverse=True)
    assert re.search(r"│ outcome +complete", term.text)
    remove_trace(term.text)


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
@pytest.mark.parametrize(
    "args",
    [("demo", "--frame-delay", "0"), ("stream", "--emulator", "reasoning", "hi")],
    ids=["demo", "stream"],
)
def test_a_terminal_that_cannot_show_the_glyphs_gets_ascii(
    terminal: Callable[..., Terminal], args: tuple[str, ...], encoding: str
) -> None:
    """A non-UTF-8 terminal: the live display draws what the encoding can show, never a traceback."""
    term = terminal(*args, env={"PYTHONIOENCODING": encoding, "LC_ALL": "C"})
    status = term.finish()
    written = bytes(term.raw).decode(encoding)  # every byte is of the terminal's own encoding
    assert status == 0 and "Traceback" not in written, written[-2000:]
    assert re.search(r"outcome +complete", ANSI.sub("", written))
    remove_trace(ANSI.sub("", written))


def test_replay_on_a_terminal_fits_its_width(terminal: Callable[..., Terminal]) -> None:
    """A narrow terminal: every line of the timeline is cut to its width (`…` in the last column);
    a pipe still gets whole lines (tests/trace/test_replay_cli.py reads them)."""
    golden = ROOT / "tests" / "golden" / "tool-call-stub.jsonl"
    term = terminal("replay", str(golden), env={"COLUMNS": "60", "LINES": "60"})
    term.finish()
    lines = [line.rstrip() for line in ANSI.sub("", bytes(term.raw).decode()).splitlines()]
    assert any("source -> dest" in line or line.endswith("…") for line in lines), lines
    assert lines and max(len(line) for line in lines) <= 60, max(lines, key=len)
    assert sum(line.endswith("…") for line in lines) >= 3  # the step lines were longer than 60


def test_without_the_cli_extra_a_terminal_gets_plain_text_and_a_hint(
    terminal: Callable[..., Terminal], tmp_path: Path
) -> None:
    blocker = tmp_path / "rich"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('rich is not installed (test)')\n")
    term = terminal("demo", "happy", "--frame-delay", "0", env={"PYTHONPATH": str(tmp_path)})
    assert term.finish() == 0
    assert "pip install 'fsm_agent[cli]'" in term.transcript  # stderr shares the terminal
    assert "outcome              complete" in term.text and "╭" not in term.transcript  # plain view
    remove_trace(term.text)
