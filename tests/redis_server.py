"""A real `redis-server` for the tests of shared health (HL-2, HL-3), on a free loopback port.

`redis_server` (one per test session) and `fresh_redis_server` (one per test, for tests that kill
and restart it) start the machine's `redis-server` with no persistence and stop it afterwards.
Without `redis-server` the tests that use them are skipped with one reason, except under `CI=true`,
where a missing server fails them: CI installs it (`.ci/run`) and must run these tests.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
import redis

SKIP_REASON = "redis-server is not installed (apt-get install redis-server): shared-health tests need it"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class RedisServer:
    """One `redis-server` process on 127.0.0.1; `kill()` and `start()` again keep its port."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode} on port {self.port}")
            if self._answers():
                return self
            time.sleep(0.01)
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)
        self.process = None


def _binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but redis-server is missing: .ci/run must install it")
        pytest.skip(SKIP_REASON)
    return binary


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(_binary()).start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def fresh_redis_server() -> Iterator[RedisServer]:
    """A server of this test's own, which the test may kill and start again."""
    server = RedisServer(_binary()).start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def redis_prefix(request: pytest.FixtureRequest) -> str:
    """A key prefix of this test's own on the shared server."""
    return f"t{abs(hash(request.node.nodeid)) % 10**10}"


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A plain client of the shared server, to look at what it really holds."""
    client = redis.Redis.from_url(redis_server.url)
    try:
        yield client
    finally:
        client.close()
