"""The smaller holes of the third hardening round, through the real SDK clients over loopback:
Bedrock tool input holding NaN/Infinity (SEC-4, as Chat refuses it); an in-stream error with a
numeric code whose type says rate limit or overload (BO-1); a trace with a negative back-off
setting (SEC-7: a TraceFormatError naming the line); `replay` and `diagram --trace` on a FIFO with
no writer (refused at once) and `diagram` on a file name holding escape codes (printed escaped);
an interrupt set before the first request of a process (SEC-8: before the client's probes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import openai
import pytest
from hardening_kit import KITS, boto_close
from helpers import INSTANT, params

import fsm_agent
from fsm_agent._internal.trace.sinks import MemorySink
from fsm_agent.testing import Emulator, Scenario, StreamError
from fsm_agent.testing.eventstream import event_message

ROOT = Path(__file__).resolve().parents[2]


# -- Bedrock: NaN / Infinity in a tool's input --------------------------------------------------------
@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_bedrock_tool_input_with_nan_or_infinity_is_a_malformed_chunk(
    emulator: Emulator, number: str
) -> None:
    kit = KITS["bedrock_converse"]
    pieces = [kit.render(event) for event in kit.events]
    # botocore decodes the event's JSON, NaN included: the input arrives as an object holding nan
    payload = '{"contentBlockIndex": 1, "delta": {"toolUse": {"input": {"a": ' + number + "}}}}"
    pieces[5] = event_message("contentBlockDelta", payload.encode())
    emulator.script(kit.scenario([b"".join(pieces)]))
    client = kit.client(emulator)
    calls: list[Any] = []
    try:
        with pytest.raises(fsm_agent.ProviderStreamError) as caught:
            fsm_agent.Session(retries=0).stream(
                client, kit.params, **kit.api, on_tool_args=lambda *args: calls.append(args)
            )
    finally:
        boto_close(client)
    assert caught.value.code == "provider_stream_malformed_chunk"
    assert "NaN or Infinity" in str(caught.value)
    assert calls == []  # no arguments that are not JSON reached the caller


def test_bedrock_tool_input_as_an_object_is_still_its_json(emulator: Emulator) -> None:
    kit = KITS["bedrock_converse"]
    pieces = [kit.render(event) for event in kit.events]
    payload = '{"contentBlockIndex": 1, "delta": {"toolUse": {"input": {"a": 1.5}}}}'
    pieces[5] = event_message("contentBlockDelta", payload.encode())
    emulator.script(kit.scenario([b"".join(pieces)]))
    client = kit.client(emulator)
    try:
        result = fsm_agent.Session(retries=0).stream(client, kit.params, **kit.api)
    finally:
        boto_close(client)
    assert json.loads(result.tool_calls[0].arguments) == {"a": 1.5}


# -- BO-1: a numeric code in an in-stream error ------------------------------------------------------
@pytest.mark.parametrize(
    ("code", "kind", "retried"),
    [
        ("429", "rate_limit_error", True),
        ("503", "overloaded_error", True),
        ("503", "server_error", True),
        ("529", "whatever", True),  # no known type: the number, read as a status (BO-1)
        ("400", "invalid_request_error", False),
    ],
)
def test_an_in_stream_error_with_a_numeric_code_is_retried_when_its_type_says_so(
    emulator: Emulator, code: str, kind: str, retried: bool
) -> None:
    emulator.script(
        Scenario.build("Hello there.", faults=[StreamError(frames=0, code=code, error_type=kind)]),
        Scenario.build("Hello there."),
    )
    client = openai.OpenAI(base_url=emulator.openai_base_url, api_key="sk-test", max_retries=0)
    try:
        if retried:
            result = fsm_agent.Session(backoff=INSTANT).stream(client, params())
            assert (result.content, result.attempts) == ("Hello there.", 2)
        else:
            with pytest.raises(fsm_agent.ProviderStreamError):
                fsm_agent.Session(backoff=INSTANT).stream(client, params())
            assert len(emulator.requests) == 1
    finally:
        client.close()


# -- SEC-7: a negative back-off setting in a trace -----------------------------------------------------
def _trace_with(tmp_path: Path, emulator: Emulator, change: dict[str, Any]) -> Path:
    emulator.script(Scenario.build("Hello there."))
    client = openai.OpenAI(base_url=emulator.openai_base_url, api_key="sk-test", max_retries=0)
    sink = MemorySink()
    try:
        fsm_agent.Session(trace=sink).stream(client, params())
    finally:
        client.close()
    lines = []
    for line in sink.text().splitlines():
        obj = json.loads(line)
        if isinstance(obj.get("settings"), dict):
            obj["settings"].update(change)
        lines.append(json.dumps(obj))
    path = tmp_path / "changed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    "change", [{"backoff_base": -1.0}, {"backoff_cap": -0.5}, {"max_wait": -3}, {"retries": -1}]
)
def test_a_negative_back_off_setting_in_a_trace_is_a_trace_format_error_naming_the_line(
    tmp_path: Path, emulator: Emulator, change: dict[str, Any]
) -> None:
    path = _trace_with(tmp_path, emulator, change)
    with pytest.raises(fsm_agent.TraceFormatError, match=r"line 1\): bad " + next(iter(change))):
        fsm_agent.replay(path)


# -- FIFOs and escape codes in file names ---------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fsm_agent", *args], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_replay_and_diagram_refuse_a_fifo_with_no_writer_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []
    reader = threading.Thread(target=lambda: _catch(outcome, lambda: fsm_agent.replay(fifo)), daemon=True)
    reader.start()
    reader.join(30)  # a blocked open never returns: the join's timeout is the failure
    assert not reader.is_alive(), "replay() blocked on the FIFO"
    assert isinstance(outcome[0], fsm_agent.TraceFormatError) and "FIFO" in str(outcome[0])
    for args in (("replay", str(fifo)), ("diagram", "--trace", str(fifo), "--out", str(tmp_path))):
        done = _cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.count("\n") == 1 and "is a FIFO, not a regular trace file" in done.stderr


def _catch(into: list[BaseException], run: Any) -> None:
    try:
        run()
    except BaseException as exc:
        into.append(exc)


def test_diagram_prints_a_file_name_with_escape_codes_escaped(tmp_path: Path, emulator: Emulator) -> None:
    good = _trace_with(tmp_path, emulator, {})
    hostile = tmp_path / "t\x1b]0;owned\x07\x1b[31mred.jsonl"
    good.rename(hostile)
    done = _cli("diagram", "--trace", str(hostile), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout and "\\x1b" in done.stdout
    missing = _cli("diagram", "--trace", str(tmp_path / "gone\x1b[2J.jsonl"))
    assert missing.returncode == 2 and "\x1b" not in missing.stderr and "\\x1b" in missing.stderr


# -- SEC-8: an interrupt before the first request of a process -----------------------------------------
FIRST_REQUEST = """
import sys, threading
import openai, fsm_agent
client = openai.OpenAI(api_key="sk-x", base_url="http://127.0.0.1:9/v1", max_retries=0)
stop = threading.Event()
stop.set()
for _ in (1, 2):
    try:
        fsm_agent.Session().stream(client, {"model": "m", "messages": []}, interrupt=stop)
    except InterruptedError:
        pass
    else:
        raise SystemExit("not interrupted")
lazy = [name for name in ("openai.resources.chat", "openai.resources.responses") if name in sys.modules]
print(lazy)
"""


def test_an_interrupt_set_before_the_first_request_is_honoured_before_the_clients_probes() -> None:
    """The probes would load the SDK's lazily imported resources (0.6-1 s under load): not one is
    loaded, so the interrupt did not wait for them."""
    done = subprocess.run(
        [sys.executable, "-c", FIRST_REQUEST], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
