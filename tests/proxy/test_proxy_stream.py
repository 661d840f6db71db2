"""One proxied stream on the wire (PX-4, PX-6, PX-7, TR-1): keepalives through upstream silence,
a client that goes away cancels the upstream request, markers in the API's format, one trace file
per request that replays, metrics and bodies that hold no key, the body limit.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import httpx
import openai
import pytest
from proxy_server import PROXY_KEY, UPSTREAM_KEY, config_text, serve_in_thread

import fsm_agent
from fsm_agent._internal.cli.__main__ import main as cli_main
from fsm_agent._internal.wrap.text_gate import RESET_LINE
from fsm_agent.testing import DropAfter, DropMidFrame, Emulator, HttpError, Scenario, ScriptedToolCall, Stall

ANSWER = "A steady answer, sent through the proxy in several small chunks."
HEADERS = {"authorization": f"Bearer {PROXY_KEY}"}
CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def test_keepalives_carry_a_silent_upstream_past_a_shorter_idle_timeout(emulator: Emulator) -> None:
    # The upstream goes silent for 2 s mid-answer (a 40 s silence, scaled down); the client
    # gives up on any 1 s without a byte. Keepalives every 0.2 s keep it reading (PX-4).
    emulator.script(Scenario.build(ANSWER, faults=[Stall(frames=2, seconds=2.0)]))
    with serve_in_thread(config_text(emulator, keepalive=0.2, session="stale_timeout = 30")) as proxy:
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=PROXY_KEY, max_retries=0, timeout=1.0)
        stream = client.chat.completions.create(model="chat", messages=CHAT["messages"], stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        client.close()
        assert text == ANSWER
        assert len(emulator.requests) == 1  # no retry: the silence was carried, not cut

        # The same silence read raw: comments between the chunks, and the whole answer.
        emulator.script(Scenario.build(ANSWER, faults=[Stall(frames=2, seconds=0.8)]))
        with httpx.Client(timeout=httpx.Timeout(10, read=1.0)) as raw:
            body = raw.post(f"{proxy.url}/v1/chat/completions", json=CHAT, headers=HEADERS).text
        assert body.count(": keepalive\n\n") >= 2
        assert body.endswith("data: [DONE]\n\n")

        emulator.script(Scenario.build(ANSWER, faults=[Stall(frames=2, seconds=0.8)]))
        claude = {**CHAT, "model": "claude", "max_tokens": 50}
        with httpx.Client(timeout=httpx.Timeout(10, read=1.0)) as raw:
            body = raw.post(f"{proxy.url}/v1/messages", json=claude, headers=HEADERS).text
        assert body.count('event: ping\ndata: {"type":"ping"}\n\n') >= 2
        assert body.endswith('event: message_stop\ndata: {"type":"message_stop"}\n\n')


def test_a_client_that_goes_away_cancels_the_upstream_request(emulator: Emulator) -> None:
    emulator.script(Scenario.build(ANSWER, faults=[Stall(frames=3, seconds=30)]))
    with serve_in_thread(config_text(emulator, keepalive=5.0, session="stale_timeout = 60")) as proxy:
        with (
            httpx.Client(timeout=10) as raw,
            raw.stream("POST", f"{proxy.url}/v1/chat/completions", json=CHAT, headers=HEADERS) as response,
        ):
            assert response.status_code == 200
            first = next(response.iter_bytes())
            assert first.startswith(b"data: ")
        # The client closed mid-answer: the proxy's upstream connection closes with it (PX-6).
        assert emulator.wait_idle(timeout=3.0), "the upstream request outlived its client"
        metrics = _metrics(proxy.url)
        deadline = time.monotonic() + 3
        while 'outcome="cancelled"' not in metrics and time.monotonic() < deadline:
            time.sleep(0.02)
            metrics = _metrics(proxy.url)
        assert (
            'fsm_agent_proxy_requests_total{alias="chat",api="chat_completions",outcome="cancelled"} 1.0'
            in metrics
        )
        assert 'fsm_agent_proxy_in_flight{api="chat_completions"} 0.0' in metrics


def _metrics(url: str) -> str:
    return httpx.get(f"{url}/metrics", timeout=5).text


def test_a_reconnect_marker_reaches_the_client_as_text_and_the_tool_call_whole(emulator: Emulator) -> None:
    call = ScriptedToolCall("read_file", '{"path": "notes/a.txt"}')
    emulator.script(
        Scenario.build("Let me look.", tool_calls=[call], faults=[DropMidFrame(0, kind="tool_args")]),
        Scenario.build("Let me look.", tool_calls=[call]),
    )
    with serve_in_thread(config_text(emulator)) as proxy:
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=PROXY_KEY, max_retries=0, timeout=20)
        chunks = list(client.chat.completions.create(model="chat", messages=CHAT["messages"], stream=True))
        client.close()
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    calls = [tc for chunk in chunks if chunk.choices for tc in chunk.choices[0].delta.tool_calls or ()]
    assert text.startswith("Let me look.") and "reconnecting" in text and text.count("Let me look.") == 1
    assert [(tc.function.name, tc.function.arguments) for tc in calls] == [("read_file", call.arguments)]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_each_request_has_a_trace_file_that_replays_and_no_key_anywhere(
    emulator: Emulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    traces = tmp_path / "traces"
    echo = {"error": {"message": f"bad key {UPSTREAM_KEY}", "type": "server_error"}}
    emulator.script(Scenario.build(ANSWER, faults=[HttpError(500, body=echo)]), Scenario.build(ANSWER))
    text = config_text(emulator, proxy=f'trace_dir = "{traces}"\nrecord_wire = true')
    caplog.set_level(logging.DEBUG)
    with serve_in_thread(text) as proxy, httpx.Client(timeout=20) as raw:
        response = raw.post(f"{proxy.url}/v1/chat/completions", json=CHAT, headers=HEADERS)
        metrics = _metrics(proxy.url)
    assert response.status_code == 200 and response.text.endswith("data: [DONE]\n\n")
    request_id = response.headers["x-fsm-agent-request-id"]
    files = list(traces.iterdir())
    assert len(files) == 1 and request_id in files[0].name
    assert files[0].stat().st_mode & 0o077 == 0  # SEC-3
    report = fsm_agent.replay(files[0])
    assert report.matched and len(report.steps) >= 4  # the error, the retry, the answer
    assert cli_main(["replay", str(files[0])]) == 0  # `fsm-agent replay FILE` (TR-3, TR-4)
    everything = files[0].read_text() + metrics + response.text + caplog.text
    assert UPSTREAM_KEY not in everything
    assert 'fsm_agent_proxy_attempts_total{alias="chat",route="primary"} 2.0' in metrics


def test_the_body_limit_and_a_bad_body_are_refused_before_any_upstream(emulator: Emulator) -> None:
    with (
        serve_in_thread(config_text(emulator, proxy="max_body_bytes = 2000")) as proxy,
        httpx.Client(timeout=20) as raw,
    ):
        big = {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
        too_big = raw.post(f"{proxy.url}/v1/chat/completions", json=big, headers=HEADERS)
        assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "request_too_large"
        chunked = raw.post(
            f"{proxy.url}/v1/chat/completions",
            content=iter([json.dumps(big).encode()]),  # no content-length: counted as it arrives
            headers={**HEADERS, "content-type": "application/json"},
        )
        assert chunked.status_code == 413
        bad = raw.post(f"{proxy.url}/v1/messages", content=b"{nope", headers=HEADERS)
        assert bad.status_code == 400 and bad.json()["type"] == "error"
        odd_stream = raw.post(
            f"{proxy.url}/v1/chat/completions", json={**CHAT, "stream": "yes"}, headers=HEADERS
        )
        assert odd_stream.status_code == 400
        unknown = raw.post(f"{proxy.url}/v1/embeddings", json={}, headers=HEADERS)
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_endpoint"
        assert raw.get(f"{proxy.url}/healthz").json()["status"] == "ok"
    assert emulator.requests == []


def test_a_restarted_answer_reaches_the_client_as_a_restarting_line_then_the_new_answer(
    emulator: Emulator,
) -> None:
    # RC-4 through the proxy: the text shown cannot be withdrawn from a client, so the reset is
    # said in the text (as wrap() says it) and the new answer follows, ending as a whole answer.
    first, second = "An answer that will be lost midway through.", "A fresh answer, whole."
    emulator.script(Scenario.build(first, faults=[DropAfter(frames=1, kind="text")]), Scenario.build(second))
    with serve_in_thread(config_text(emulator, session="recovery = { restart = true }")) as proxy:
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=PROXY_KEY, max_retries=0, timeout=20)
        chunks = list(client.chat.completions.create(model="chat", messages=CHAT["messages"], stream=True))
        client.close()
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    shown, _, rest = text.partition(RESET_LINE)
    assert first.startswith(shown) and shown and rest == second
    assert chunks[-1].choices[0].finish_reason == "stop"
