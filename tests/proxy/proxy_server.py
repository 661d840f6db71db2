"""The proxy on a real uvicorn server for the tests: in this process (a thread) or as
`fsm-agent serve` subprocesses, on free loopback ports, always stopped in teardown.

`config_text(emulator)` writes a configuration whose aliases route to the emulator: `chat`
(Chat Completions and Responses, with a second route `backup`), `solo` (the same, one route),
`claude` (Anthropic Messages).
The upstream key is `UPSTREAM_KEY`, read from the environment variable `EMU_KEY`; the proxy's
own key is `PROXY_KEY`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn

from fsm_agent.proxy import app, parse_config
from fsm_agent.testing import Emulator

UPSTREAM_KEY = "sk-upstream-secret-0123456789abcdef"
PROXY_KEY = "fsm-proxy-key-for-tests"
ENVIRON = {"EMU_KEY": UPSTREAM_KEY}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def config_text(emulator: Emulator, *, keepalive: float = 5.0, session: str = "", proxy: str = "") -> str:
    return f"""
[proxy]
keys = ["{PROXY_KEY}"]
keepalive = {keepalive}
{proxy}

[session]
retries = 2
backoff = {{ base = 0.0 }}
{session}

[models.chat]
[[models.chat.routes]]
provider = "openai"
base_url = "{emulator.openai_base_url}"
key_env = "EMU_KEY"
model = "gpt-4.1-mini"
name = "primary"

[[models.chat.routes]]
provider = "openai"
base_url = "{emulator.openai_base_url}"
key_env = "EMU_KEY"
model = "gpt-4.1"
name = "backup"

[models.solo]
[[models.solo.routes]]
provider = "openai"
base_url = "{emulator.openai_base_url}"
key_env = "EMU_KEY"
model = "gpt-4.1-mini"

[models.claude]
[[models.claude.routes]]
provider = "anthropic"
base_url = "{emulator.anthropic_base_url}"
key_env = "EMU_KEY"
model = "claude-sonnet-4-5"
"""


class ThreadServer:
    """uvicorn serving an ASGI app on a thread of this process."""

    def __init__(self, asgi: Any) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(
            uvicorn.Config(asgi, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
        )
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the proxy did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
        assert not self.thread.is_alive(), "the proxy's server thread did not stop"


@contextmanager
def serve_in_thread(text: str) -> Iterator[ThreadServer]:
    server = ThreadServer(app(parse_config(text, "test.toml", ENVIRON))).start()
    try:
        yield server
    finally:
        server.stop()


class ServeProcess:
    """`fsm-agent serve` as a subprocess of its own session (its workers with it), on a free port;
    `stop()` sends SIGTERM and waits, and kills the whole group if it lingers."""

    def __init__(
        self, config_path: str, *, workers: int = 1, extra_env: dict[str, str] | None = None
    ) -> None:
        self.port = free_port()
        self.config_path = config_path
        self.workers = workers
        self.env = {**os.environ, **ENVIRON, **(extra_env or {})}
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = f"{config_path}.{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> ServeProcess:
        command = [
            sys.executable, "-m", "fsm_agent", "serve", "--config", self.config_path,
            "--port", str(self.port), "--workers", str(self.workers), "--log-level", "warning",
            "--graceful-timeout", "2",
        ]  # fmt: skip
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        pids: set[int] = set()
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"fsm-agent serve exited {self.process.returncode}: {self.output()}")
            try:
                pids.add(httpx.get(f"{self.url}/healthz", timeout=1).json()["pid"])
            except (httpx.HTTPError, ValueError):
                time.sleep(0.05)
                continue
            if len(pids) >= self.workers or self.workers == 1:
                return self
        self.stop()
        raise RuntimeError(f"fsm-agent serve did not answer on {self.url}: {self.output()}")

    def output(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as log:
                return log.read()
        except OSError:
            return ""

    def stop(self) -> int | None:
        process, self.process = self.process, None
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # a worker left behind, if any
        return process.returncode
