"""`fsm-agent serve` (PX-1): the command checks its configuration before it starts, refuses an
open proxy off loopback, and serves the application on uvicorn with one or several workers,
whose metrics are summed; SIGTERM stops it and its workers, leaving nothing behind.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest
from proxy_server import ENVIRON, PROXY_KEY, ServeProcess, config_text

from fsm_agent.testing import Emulator, Scenario

ANSWER = "Served by a worker of fsm-agent serve."


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **ENVIRON}
    command = [sys.executable, "-m", "fsm_agent", "serve", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)


def test_a_bad_configuration_is_one_line_naming_its_line_and_key(tmp_path: Path, emulator: Emulator) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(config_text(emulator).replace('provider = "anthropic"', 'provider = "bedrock"'))
    done = _serve("--config", str(path))
    assert done.returncode == 2
    line = done.stderr.strip()
    assert line.startswith(f"fsm-agent serve: {path}:") and "models.claude.routes[0].provider" in line
    assert "\n" not in line


def test_an_open_proxy_is_refused_off_loopback(tmp_path: Path, emulator: Emulator) -> None:
    path = tmp_path / "open.toml"
    path.write_text(config_text(emulator).replace(f'keys = ["{PROXY_KEY}"]', ""))
    done = _serve("--config", str(path), "--host", "0.0.0.0")
    assert done.returncode == 2 and "without proxy keys" in done.stderr


@pytest.mark.slow
def test_two_workers_serve_and_stop_cleanly(tmp_path: Path, emulator: Emulator) -> None:
    path = tmp_path / "fsm-agent.toml"
    path.write_text(config_text(emulator))
    emulator.script(then=Scenario.build(ANSWER))
    server = ServeProcess(str(path), workers=2).start()
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=PROXY_KEY, max_retries=0, timeout=20)
        for _ in range(4):
            stream = client.chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == ANSWER
        client.close()
        metrics = httpx.get(f"{server.url}/metrics", timeout=5).text
        # Whichever worker answers the scrape, the count is the server's: all four requests.
        assert (
            'fsm_agent_proxy_requests_total{alias="chat",api="chat_completions",outcome="ok"} 4.0' in metrics
        )
    finally:
        status = server.stop()
    assert status == 0, server.output()
    assert emulator.wait_idle(timeout=5)


def test_a_served_application_is_built_with_its_startup_heap_frozen(
    tmp_path: Path, emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `fsm-agent serve`'s worker: the modules and clients held once the application is built are
    # out of the collector's generations (gc.freeze), so no full collection walks them mid-stream.
    from fsm_agent._internal.cli import serve_cmd

    path = tmp_path / "ok.toml"
    path.write_text(config_text(emulator))
    monkeypatch.setenv(serve_cmd.CONFIG_VARIABLE, str(path))
    for name, value in ENVIRON.items():
        monkeypatch.setenv(name, value)
    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        app = serve_cmd.worker_app()
        assert callable(app) and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
