"""CB-1..6 for `astream()` with plain and coroutine callbacks (awaited in order, mixed freely), and
WIRE-5 for async clients that answer with objects, async iterables or a finished response."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from helpers import INSTANT, Collect, params
from test_async_support import AsyncAttemptSpy, AsyncCollect, AsyncLeakCheck, aleaks, aspy, astream

import fsm_agent
from fsm_agent.testing import DropMidFrame, KeepaliveOnly, Keepalives, Scenario, ToolCall

__all__ = ["aleaks", "aspy"]

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

TOOLS = [ToolCall("read_file", '{"path": "a.txt"}'), ToolCall("write_file", '{"path": "b.txt", "text": "é"}')]


def test_cb1_to_cb3_mixed_plain_and_coroutine_callbacks_keep_order(aleaks: AsyncLeakCheck) -> None:
    """Text and reasoning as coroutines, tool calls plain: the merged order is the wire's order."""
    scenario = Scenario.build(
        "Reading two files now, then I answer.", reasoning="Plan: read both.", tool_calls=TOOLS
    )
    aleaks.emulator.script(scenario, cycle=True)
    plain, mixed = Collect(), AsyncCollect()

    async def main() -> None:
        session = fsm_agent.Session(backoff=INSTANT)
        await astream(aleaks, session, plain)
        callbacks = mixed.callbacks()
        callbacks["on_tool_call"] = mixed.on_tool_call  # plain function among coroutines
        result = await session.astream(aleaks.client(), params(), **callbacks)
        assert result.content == "Reading two files now, then I answer."

    aleaks.run(main)
    assert mixed.order == plain.order
    kinds = [kind for kind, _ in plain.order]
    assert [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k] == ["reasoning", "text", "tool"]
    assert plain.tools == [(0, "read_file"), (1, "write_file")]
    assert all(isinstance(t, str) for t in plain.texts)


@pytest.mark.parametrize("kind", ["plain", "coroutine"])
@pytest.mark.parametrize("which", ["on_text", "on_tool_call"])
def test_cb6_content_callback_error_ends_the_request(
    aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy, kind: str, which: str
) -> None:
    aleaks.emulator.script(Scenario.build("Hello there, friend.", tool_calls=TOOLS), Scenario.build("never"))
    boom = ValueError("the caller's display broke")

    def fail(*_: Any) -> None:
        raise boom

    async def fail_async(*_: Any) -> None:
        await asyncio.sleep(0)
        raise boom

    async def main() -> None:
        callback = fail if kind == "plain" else fail_async
        with pytest.raises(ValueError) as caught:
            await fsm_agent.Session(backoff=INSTANT).astream(aleaks.client(), params(), **{which: callback})
        assert caught.value is boom

    aleaks.run(main)
    assert len(aleaks.emulator.requests) == 1  # never retried
    aspy.assert_each_closed_once(1)


@pytest.mark.parametrize(("retries", "library_text"), [(2, "reconnecting"), (0, "Stream stalled")])
def test_cb6_error_in_a_callback_given_library_text(
    aleaks: AsyncLeakCheck, aspy: AsyncAttemptSpy, retries: int, library_text: str
) -> None:
    """The library's own text (RES-3 marker, RES-5 warning) goes through the same callback rules."""
    cut = Scenario.build("Saving.", tool_calls=TOOLS[:1], faults=[DropMidFrame(1, kind="tool_args")])
    aleaks.emulator.script(cut, Scenario.build("never"))

    async def on_text(text: str) -> None:
        if library_text in text:
            raise RuntimeError("no library text, please")

    async def main() -> None:
        with pytest.raises(RuntimeError, match="no library text"):
            session = fsm_agent.Session(backoff=INSTANT, retries=retries)
            await session.astream(aleaks.client(), params(), on_text=on_text)

    aleaks.run(main)
    assert len(aleaks.emulator.requests) == 1
    aspy.assert_each_closed_once(1)


@pytest.mark.parametrize("kind", ["plain", "coroutine"])
def test_cb4_cb5_activity_and_status_errors_are_swallowed(aleaks: AsyncLeakCheck, kind: str) -> None:
    cut = Scenario.build("Saving.", tool_calls=TOOLS[:1], faults=[DropMidFrame(1, kind="tool_args")])
    aleaks.emulator.script(cut, Scenario.build("Saving.", tool_calls=TOOLS[:1], faults=[Keepalives()]))
    calls: dict[str, int] = {"activity": 0, "status": 0}

    def plain(name: str) -> Any:
        def callback(_: str) -> None:
            calls[name] += 1
            raise RuntimeError(f"{name} broke")

        return callback

    def coroutine(name: str) -> Any:
        async def callback(_: str) -> None:
            await asyncio.sleep(0)
            calls[name] += 1
            raise RuntimeError(f"{name} broke")

        return callback

    make = plain if kind == "plain" else coroutine

    async def main() -> None:
        result = await fsm_agent.Session(backoff=INSTANT).astream(
            aleaks.client(), params(), on_activity=make("activity"), on_status=make("status")
        )
        assert result.tool_calls[0].name == "read_file" and result.attempts == 2

    aleaks.run(main)
    assert calls["status"] == 1  # "retrying…"
    assert calls["activity"] > 5  # every provider event, keepalives excluded


def test_cb5_nothing_sent_to_on_status_on_success(aleaks: AsyncLeakCheck) -> None:
    aleaks.emulator.script(Scenario.build("Fine.", tool_calls=TOOLS))
    got = AsyncCollect()

    async def main() -> None:
        await astream(aleaks, fsm_agent.Session(backoff=INSTANT), got, activity=True)

    aleaks.run(main)
    assert got.statuses == [] and got.activity


def test_fallback_delivers_once_to_coroutine_callbacks(aleaks: AsyncLeakCheck) -> None:
    aleaks.emulator.script(Scenario.build("Whole answer.", reasoning="once", faults=[KeepaliveOnly(2)]))
    got = AsyncCollect()

    async def main() -> None:
        result = await astream(aleaks, fsm_agent.Session(backoff=INSTANT), got)
        assert result.streamed is False

    aleaks.run(main)
    assert (got.texts, got.reasoning) == (["Whole answer."], ["once"])


# -- WIRE-5: async clients that answer with objects ------------------------------------------------


def _chunk(**delta: Any) -> Any:
    finish = delta.pop("finish", None)
    return SimpleNamespace(
        id="obj-1", model="obj-model", choices=[SimpleNamespace(index=0, delta=delta, finish_reason=finish)]
    )


class _Chunks:
    """An async stream of chunk objects with an async close(), like openai's AsyncStream."""

    def __init__(self, items: list[Any]) -> None:
        self._items = items
        self.closed = 0

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._gen()

    async def _gen(self) -> AsyncIterator[Any]:
        for item in self._items:
            await asyncio.sleep(0)
            yield item

    async def close(self) -> None:
        self.closed += 1


def _client(answer: Any) -> Any:
    async def create(**kwargs: Any) -> Any:
        return answer(kwargs)

    return SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))


def test_wire5_async_client_answering_with_chunk_objects() -> None:
    stream = _Chunks(
        [
            _chunk(content="Hel"),
            _chunk(content=[{"type": "text", "text": "lo"}]),
            _chunk(tool_calls=[{"index": 0, "id": 7, "function": {"name": "f", "arguments": '{"a"'}}]),
            _chunk(tool_calls=[{"index": 0, "function": {"arguments": ": 1}"}}]),
            _chunk(finish="tool_calls"),
        ]
    )
    seen: list[dict[str, Any]] = []
    client = _client(lambda kwargs: seen.append(kwargs) or stream)
    got = AsyncCollect()

    async def main() -> Any:
        return await fsm_agent.Session().astream(client, params(), **got.callbacks(activity=True))

    result = asyncio.run(main())
    assert (result.content, result.finish_reason) == ("Hello", "tool_calls")
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [("7", "f", '{"a": 1}')]
    assert got.texts == ["Hel", "lo"] and got.tools == [(0, "f")] and len(got.activity) == 5
    assert stream.closed == 1 and seen[0]["stream"] is True


def test_wire5_async_client_answering_with_a_finished_completion() -> None:
    message = SimpleNamespace(role="assistant", content="Done at once.", tool_calls=None)
    finished = SimpleNamespace(
        id="c1",
        model="m",
        choices=[SimpleNamespace(index=0, message=message, finish_reason="stop")],
        usage=None,
    )
    requests: list[dict[str, Any]] = []
    client = _client(lambda kwargs: requests.append(kwargs) or finished)
    session = fsm_agent.Session(backoff=INSTANT)
    got = AsyncCollect()

    async def main() -> Any:
        return await session.astream(client, params(), **got.callbacks())

    result = asyncio.run(main())
    assert (result.content, result.streamed, result.raw) == ("Done at once.", False, finished)
    assert len(requests) == 1  # the finished answer in hand is used, not requested again
    assert session.streaming_disabled and got.texts == ["Done at once."]
