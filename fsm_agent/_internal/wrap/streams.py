"""The stream objects a wrapped client's streaming calls return (WR-1, WR-2).

`WrappedStream` / `AsyncWrappedStream` iterate the SDK's own objects, made by the API's
translator and builder from the request's events (`Session.iter()` / `aiter()`); `fsm_result` is
the `StreamResult` once the stream has ended. They close as the SDK's streams close (`close()`,
`with`, `async with`; `await close()` on the async one), ending the request if it still runs. The
`response` attribute stands where the SDK keeps its HTTP response, for the SDK's helper streams
that close through it. Never reads the wire.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from typing import Any

from ..iterate.arun import AsyncEventStream
from ..iterate.events import TextEvent
from ..iterate.run import EventStream
from ..result import StreamResult

__all__ = ["AsyncWrappedStream", "ResponseView", "WrappedStream"]


class ResponseView:
    """Where the SDK's stream keeps its HTTP response: closing it ends the request. It holds the
    request's events, not the stream (no cycle: a dropped stream is freed, and its request ended,
    at once)."""

    __slots__ = ("_events",)

    def __init__(self, events: Any) -> None:
        self._events = events

    headers: dict[str, str] = {}  # noqa: RUF012  # read-only: the attempts' headers are the session's
    status_code = 200

    def close(self) -> None:
        self._events.close()

    async def aclose(self) -> None:
        await self._events.aclose()


def _produce(events: EventStream, objects: Any) -> Generator[Any, None, None]:
    """The SDK's objects of a request's events (the API's translator and builder)."""
    text, build, translate = objects.text, objects.build, objects.translator.event
    for event in events:
        if type(event) is TextEvent:
            yield from text(event.text)
        else:
            for payload in translate(event):
                yield build(payload)


async def _aproduce(events: AsyncEventStream, objects: Any) -> AsyncGenerator[Any, None]:
    text, build, translate = objects.text, objects.build, objects.translator.event
    async for event in events:
        if type(event) is TextEvent:
            for item in text(event.text):
                yield item
        else:
            for payload in translate(event):
                yield build(payload)


class WrappedStream:
    """A wrapped client's stream: iterate it for the SDK's objects; `fsm_result` after its end."""

    def __init__(self, events: EventStream, objects: Any) -> None:
        self._events = events
        self._objects = objects
        self._iterator = _produce(events, objects)  # not a method: no cycle through `self`
        self.response = ResponseView(events)

    def __iter__(self) -> Iterator[Any]:
        return self._iterator

    def __next__(self) -> Any:
        return next(self._iterator)

    @property
    def fsm_result(self) -> StreamResult | None:
        """The request's `StreamResult` once the stream has ended (None before)."""
        return self._events.result

    def close(self) -> None:
        self._events.close()
        self._iterator.close()

    def __enter__(self) -> WrappedStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncWrappedStream:
    """The async twin of `WrappedStream`: `async for`, `await close()`, `async with`."""

    def __init__(self, events: AsyncEventStream, objects: Any) -> None:
        self._events = events
        self._objects = objects
        self._iterator = _aproduce(events, objects)
        self.response = ResponseView(events)

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterator

    async def __anext__(self) -> Any:
        return await self._iterator.__anext__()

    @property
    def fsm_result(self) -> StreamResult | None:
        """The request's `StreamResult` once the stream has ended (None before)."""
        return self._events.result

    async def close(self) -> None:
        await self._events.aclose()
        await self._iterator.aclose()

    aclose = close

    async def __aenter__(self) -> AsyncWrappedStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
