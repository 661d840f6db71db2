"""Shared helpers for the driver tests: real `openai` clients on the emulator, leak checks, spies.

`LeakCheck` proves a request left nothing behind: no thread besides those alive when it was made,
no HTTP request still in flight in a caller's connection pool, and — once the caller's clients are
closed — no connection open on the emulator. `AttemptSpy` records every attempt the Chat Completions
adapter opened, so a test can assert that each stream was closed exactly once. Helpers never
change the library's behaviour.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest

from fsm_agent import Backoff, Session
from fsm_agent._internal.drivers.watchdog import shared_timer
from fsm_agent._internal.endpoint import endpoint_key
from fsm_agent._internal.health import HealthChange
from fsm_agent._internal.providers import openai_chat
from fsm_agent._internal.providers.base import Attempt
from fsm_agent.testing import Emulator

MESSAGES = [{"role": "user", "content": "hi"}]

# Tests about what a retry decides, not about when it happens, retry at once (BO-2).
INSTANT = Backoff(base=0)

# How soon an interrupt or a cancellation must end a request in a test over loopback: far sooner
# than anything else in the test would end it (a 2-10 s stall of the emulator, a 30 s watchdog),
# with room for a loaded 2-core machine. It tells "the interrupt ended it" from "something else
# did"; how soon it really ends on a machine is a benchmark's to print, never a test's to race.
PROMPTLY = 1.5


def params(model: str = "gpt-4.1-mini", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [dict(m) for m in MESSAGES], **extra}


def preset_health(session: Session, client: Any, request: dict[str, Any], api: str, **change: Any) -> None:
    """Put the endpoint `client` sends `request` to in a state, as earlier requests of the session
    would have left it (HL-1): e.g. `stall=True` for one stall of the breaker's streak."""
    session.health.update(endpoint_key(api, client, request.get("model")), HealthChange(**change))


def make_client(emulator: Emulator, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=emulator.openai_base_url, api_key="sk-test", max_retries=0, **kwargs)


def busy_connections(client: openai.OpenAI) -> int:
    """HTTP connections of `client`'s pool still serving a request (a response never closed)."""
    pool = client._client._transport._pool  # httpx2.HTTPTransport → httpcore2.ConnectionPool
    return sum(1 for conn in pool.connections if not conn.is_idle() and not conn.is_closed())


def threads_since(before: set[threading.Thread]) -> list[threading.Thread]:
    """Threads started since `before` and still running, except the process's one watchdog timer
    thread (started by the first sync request, it lives as long as the process: not a leak)."""
    timer = shared_timer().thread
    return [t for t in threading.enumerate() if t not in before and t.is_alive() and t is not timer]


def assert_emulator_and_threads_idle(
    emulator: Emulator, before: set[threading.Thread], timeout: float
) -> None:
    """No connection left open on the emulator, no thread left running since `before`."""
    idle = emulator.wait_idle(timeout)
    assert idle, f"{emulator.open_connections} connection(s) still open on the emulator"
    deadline = time.monotonic() + timeout
    while threads_since(before) and time.monotonic() < deadline:
        time.sleep(0.01)
    left = threads_since(before)
    assert not left, f"threads left running: {[t.name for t in left]}"


def assert_each_closed_once(attempts: list[Any], count: int | None) -> None:
    """Each attempt's stream was closed, by exactly one close() call."""
    if count is not None:
        assert len(attempts) == count, f"{len(attempts)} attempts opened, wanted {count}"
    for i, attempt in enumerate(attempts):
        assert attempt.closed, f"attempt {i + 1}'s stream was never closed"
        assert attempt.close_calls == 1, f"attempt {i + 1} closed {attempt.close_calls} times"


@dataclass
class LeakCheck:
    """Snapshot the threads now; `assert_clean()` later proves nothing was left running or open."""

    emulator: Emulator
    clients: list[openai.OpenAI] = field(default_factory=list)
    threads_before: set[threading.Thread] = field(default_factory=lambda: set(threading.enumerate()))

    def client(self, **kwargs: Any) -> openai.OpenAI:
        """A caller's client, closed by `assert_clean()` after checking its pool is idle."""
        made = make_client(self.emulator, **kwargs)
        self.clients.append(made)
        return made

    def extra_threads(self) -> list[threading.Thread]:
        return threads_since(self.threads_before)

    def assert_clean(self, timeout: float = 2.0) -> None:
        for client in self.clients:
            assert busy_connections(client) == 0, "a response was left open in the caller's pool"
        for client in self.clients:
            client.close()
        assert_emulator_and_threads_idle(self.emulator, self.threads_before, timeout)


@pytest.fixture
def leaks(emulator: Emulator) -> Iterator[LeakCheck]:
    """A LeakCheck made after the emulator started; tests call `leaks.assert_clean()` at the end."""
    yield LeakCheck(emulator)


class AttemptSpy:
    """Every Attempt the Chat Completions adapter returned, in order, and every exception its byte
    stream raised (so a test can check that the very same object reached the caller)."""

    def __init__(self) -> None:
        self.attempts: list[Attempt] = []
        self.errors: list[BaseException] = []

    def watch(self, attempt: Attempt) -> Attempt:
        self.attempts.append(attempt)
        if attempt.chunks is not None:
            attempt.chunks = self._recording(attempt.chunks)
        return attempt

    def _recording(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        try:
            yield from chunks
        except Exception as exc:
            self.errors.append(exc)
            raise

    def assert_each_closed_once(self, count: int | None = None) -> None:
        assert_each_closed_once(self.attempts, count)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> AttemptSpy:
    recorder = AttemptSpy()
    original = openai_chat.ChatCompletionsAdapter.open

    def open_and_record(self: Any, *args: Any, **kwargs: Any) -> Attempt:
        return recorder.watch(original(self, *args, **kwargs))

    monkeypatch.setattr(openai_chat.ChatCompletionsAdapter, "open", open_and_record)
    return recorder


class Collect:
    """Callback recorder: `texts`, `reasoning`, `tools`, `statuses`, `activity`, and the merged order."""

    def __init__(self) -> None:
        self.texts: list[Any] = []
        self.reasoning: list[Any] = []
        self.tools: list[tuple[int, str]] = []
        self.statuses: list[str] = []
        self.activity: list[str] = []
        self.order: list[tuple[str, Any]] = []

    def on_text(self, text: Any) -> None:
        self.texts.append(text)
        self.order.append(("text", text))

    def on_reasoning(self, text: Any) -> None:
        self.reasoning.append(text)
        self.order.append(("reasoning", text))

    def on_tool_call(self, index: int, name: str) -> None:
        self.tools.append((index, name))
        self.order.append(("tool", (index, name)))

    def on_status(self, message: str) -> None:
        self.statuses.append(message)
        self.order.append(("status", message))

    def on_activity(self, kind: str) -> None:
        self.activity.append(kind)

    def callbacks(self, *, activity: bool = False) -> dict[str, Callable[..., Any]]:
        out: dict[str, Callable[..., Any]] = {
            "on_text": self.on_text,
            "on_reasoning": self.on_reasoning,
            "on_tool_call": self.on_tool_call,
            "on_status": self.on_status,
        }
        if activity:
            out["on_activity"] = self.on_activity
        return out

    @property
    def text(self) -> str:
        return "".join(self.texts)


def sse(payload: dict[str, Any] | str, *, event: str | None = None, newline: str = "\n") -> bytes:
    """One SSE frame (for a scenario's raw frames)."""
    import json

    data = payload if isinstance(payload, str) else json.dumps(payload)
    head = f"event: {event}{newline}" if event else ""
    return f"{head}data: {data}{newline}{newline}".encode()


def chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish_reason: str | None = None,
    usage: dict[str, Any] | None = None,
    choices: bool = True,
    cid: str = "chatcmpl-raw",
    model: str = "raw-model",
) -> dict[str, Any]:
    """A chat.completion.chunk dict."""
    body: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": 1, "model": model}
    body["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason}] if choices else []
    if usage is not None:
        body["usage"] = usage
    return body


DONE = b"data: [DONE]\n\n"


def text_frames(*pieces: str, finish: str = "stop") -> tuple[bytes, ...]:
    """Raw frames of a plain text answer ending in `[DONE]`."""
    frames = [sse(chunk({"role": "assistant", "content": ""}))]
    frames.extend(sse(chunk({"content": piece})) for piece in pieces)
    frames.append(sse(chunk({}, finish_reason=finish)))
    frames.append(DONE)
    return tuple(frames)


def wait_until(predicate: Callable[[], bool], timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()
