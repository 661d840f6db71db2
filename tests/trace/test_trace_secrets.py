"""Secrets never reach a trace or a log (TR-5), even with wire recording on.

A recognisable key is planted in the client (api_key), its headers (default_headers), and the
request's params (extra_headers, a metadata field, extra_body); the real `openai` client talks to
the emulator over loopback HTTP, through success, retry, fallback and error paths.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import openai
import pytest
import structlog
from helpers import INSTANT
from structlog.testing import capture_logs

import fsm_agent
from fsm_agent.testing import (
    DropMidFrame,
    Emulator,
    HttpError,
    KeepaliveOnly,
    MalformedFrame,
    RejectStreamOptions,
    Scenario,
    ToolCall,
)

# Two shapes: one that looks like an OpenAI key (the redactor knows it), one that does not (only
# never writing it keeps it out).
KEYS = ("sk-PLANTEDsecret0123456789abcdef", "PLANTED-opaque-token-7f3a9c1e5b")
ANSWER = "The service listens on port 8080."
READ = ToolCall("read_file", '{"path": "a.txt"}')

SCRIPTS = {
    "happy": (Scenario.build(ANSWER),),
    "tool-call-recovered": (
        Scenario.build("Reading. ", tool_calls=[READ], faults=[DropMidFrame(1, kind="tool_args")]),
        Scenario.build("Reading. ", tool_calls=[READ]),
    ),
    "stream-options-rejected": (Scenario.build(ANSWER, faults=[RejectStreamOptions(422)]),),
    "keepalive-fallback": (Scenario.build(ANSWER, faults=[KeepaliveOnly(2)]), Scenario.build(ANSWER)),
    "malformed": (Scenario.build(ANSWER, faults=[MalformedFrame(1, payload="{not json " + KEYS[0])]),),
    "401": (Scenario.build(ANSWER, faults=[HttpError(401, message="bad key " + KEYS[0])]),),
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
@pytest.mark.parametrize("key", KEYS)
def test_planted_key_reaches_neither_trace_nor_logs(
    tmp_path: Path, emulator: Emulator, caplog: pytest.LogCaptureFixture, name: str, key: str
) -> None:
    emulator.script(*SCRIPTS[name])
    path = tmp_path / "trace.jsonl"
    client = openai.OpenAI(
        base_url=emulator.openai_base_url,
        api_key=key,
        max_retries=0,
        default_headers={"x-api-key": key, "X-Custom-Auth": f"Bearer {key}"},
    )
    params = {
        "model": "emulator-1",
        "messages": [{"role": "user", "content": "hi"}],
        "extra_headers": {"Authorization": f"Bearer {key}", "x-goog-api-key": key},
        "user": key,
        "extra_body": {"api_key": key},
    }
    session = fsm_agent.Session(backoff=INSTANT, trace=str(path), record_wire=True)
    caplog.set_level(logging.DEBUG)
    try:
        # some scenarios end in an error: that is the point
        with capture_logs() as captured, contextlib.suppress(Exception):
            session.stream(client, params)
    finally:
        client.close()
        assert session.trace is not None
        session.trace.close()
    # the request really carried the key
    assert any(key in str(request.headers) for request in emulator.requests)
    trace_text = path.read_text()
    assert '"type":"transition"' in trace_text and '"type":"events"' in trace_text
    assert key not in trace_text
    assert key not in repr(captured)
    assert key not in caplog.text
    assert fsm_agent.replay(path).matched


def test_logs_through_structlog_processors_hold_no_key(emulator: Emulator) -> None:
    """An application's own structlog configuration sees the records, never the key."""
    key = KEYS[1]
    emulator.script(*SCRIPTS["401"])
    rendered: list[str] = []

    def render(_: object, __: str, event_dict: dict[str, object]) -> str:
        rendered.append(repr(event_dict))
        raise structlog.DropEvent

    structlog.configure(processors=[render])
    client = openai.OpenAI(base_url=emulator.openai_base_url, api_key=key, max_retries=0)
    try:
        with pytest.raises(openai.AuthenticationError):
            fsm_agent.Session(backoff=INSTANT).stream(client, {"model": "m", "messages": [], "user": key})
    finally:
        client.close()
        structlog.reset_defaults()
    assert rendered and not any(key in line for line in rendered)
