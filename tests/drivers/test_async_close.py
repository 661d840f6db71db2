"""Closing under pressure in the async driver: a second cancellation during a close, a worker thread
that ignores its abort, and a blocking call that retries after each abort (as botocore does)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import pytest

from fsm_agent._internal.drivers import aio_thread
from fsm_agent._internal.drivers.aio import close_shielded
from fsm_agent._internal.providers.base import AsyncAttempt, Attempt


def test_a_second_cancellation_does_not_cut_a_close_short() -> None:
    closed: list[float] = []

    async def closer() -> None:
        await asyncio.sleep(0.3)  # an SDK's __aexit__ returning its connection to the pool
        closed.append(time.monotonic())

    attempt = AsyncAttempt(closer=closer)

    async def request() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            await close_shielded(attempt.aclose(), attempt.abort)

    async def main() -> None:
        task = asyncio.create_task(request())
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.sleep(0.05)
        task.cancel()  # the second cancellation arrives mid-close
        with pytest.raises(asyncio.CancelledError):
            await task
        assert closed, "the close was finished before the cancellation propagated"

    asyncio.run(main())
    assert attempt.close_calls == 1


def test_closing_waits_a_bounded_time_for_a_worker_that_ignores_its_abort(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(aio_thread, "_EXIT_LIMIT", 0.3)
    release = threading.Event()

    def chunks() -> Any:
        yield b"x"
        release.wait(5)  # deaf to the abort: no socket to shut down
        yield b"y"

    async def main() -> float:
        bridge = aio_thread.ThreadedAttempt(lambda: Attempt(chunks=chunks()))
        bridge.start()
        await bridge.opened()
        await asyncio.sleep(0.05)
        started = time.monotonic()
        await asyncio.wait_for(bridge.aclose(), 5)
        return time.monotonic() - started

    try:
        assert asyncio.run(main()) < 1.0
    finally:
        release.set()


def test_a_cancelled_blocking_call_that_retries_after_each_abort_ends_its_thread() -> None:
    # Each try blocks in a frame the open-phase abort recognises as the HTTP stack's (by its module).
    code = compile("def recv_in_transport(s):\n    return s.recv(1)\n", "/x/httpcore/fake.py", "exec")
    namespace: dict[str, Any] = {"__name__": "httpcore._fake"}
    exec(code, namespace)
    tries: list[float] = []

    def call() -> None:
        for _ in range(5):
            here, there = socket.socketpair()
            tries.append(time.monotonic())
            try:
                namespace["recv_in_transport"](here)
            finally:
                here.close()
                there.close()

    before = {t for t in threading.enumerate() if t.name == "fsm-agent-plain"}

    def workers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "fsm-agent-plain" and t not in before]

    async def main() -> None:
        task = asyncio.ensure_future(aio_thread.run_in_thread(call))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        deadline = time.monotonic() + 2
        while workers() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert workers() == [] and len(tries) >= 2
