"""One proxied answer on the wire (PX-3..PX-6): a request's events, through its API's translator,
as that API's Server-Sent Events, with keepalives, in-band errors and cancellation.

`ProxiedStream` is the ASGI response. It runs two tasks: the stream, and a listener for the
client's disconnect; whichever ends first ends the other, so a client that goes away cancels
the request, whose driver closes the upstream stream (RES-11, PX-6). The stream holds its HTTP
status until the first byte of the answer is ready: an error before it is an HTTP error with the
API's error body (PX-5); once `keepalive` seconds have passed with nothing to send (upstream
silence, a back-off wait, a tool call being built, which is sent whole), the 200 is sent and
then a keepalive (PX-4) whenever nothing else has been sent for that long. A request that ends
without a whole answer (an error, or a stub, RC-6) ends in-band with the API's error event and
no success marker. Events already waiting are sent in one write. The timer is the proxy's own,
on the event loop: the machine and its drivers know nothing of the downstream. Never decides
what the request does: that is the session's.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from ..iterate.arun import AsyncEventStream
from ..iterate.events import FinalEvent
from ..wrap.wire import WireError, WireFormat
from .failures import Scrubber, failure_of, incomplete_failure

__all__ = ["ProxiedStream", "WholeAnswer", "error_response"]

_BATCH_BYTES = 64 * 1024
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # nginx: pass each event on at once
]


def error_headers(error: WireError) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-type", b"application/json")]
    if error.status >= 500:
        # The session has spent its retries and routes on it already: the SDKs (openai, anthropic)
        # would retry a 5xx on their own, multiplying the attempts; this header tells them not to.
        headers.append((b"x-should-retry", b"false"))
    if error.retry_after is not None:
        headers.append((b"retry-after", error.retry_after.encode("latin-1", "replace")))
    return headers


async def error_response(
    send: Any, wire: WireFormat, error: WireError, extra: list[Any] | None = None
) -> None:
    body = json.dumps(wire.error_body(error), ensure_ascii=False).encode()
    headers = error_headers(error) + (extra or [])
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _disconnected(receive: Any) -> None:
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return


class ProxiedStream:
    """The ASGI response of one streamed request; `on_end(outcome, result, request_id)` is called
    once, when it has ended ("ok", "incomplete", "error", "cancelled")."""

    def __init__(
        self,
        events: AsyncEventStream,
        translator: Any,
        wire: WireFormat,
        *,
        keepalive: float,
        scrub: Scrubber,
        started_at: float,
        on_end: Callable[[str, Any, str | None], None],
        on_first_byte: Callable[[float], None],
        on_keepalive: Callable[[], None],
    ) -> None:
        self.events = events
        self.translator = translator
        self.wire = wire
        self.keepalive = keepalive
        self.scrub = scrub
        self.started_at = started_at
        self.on_end = on_end
        self.on_first_byte = on_first_byte
        self.on_keepalive = on_keepalive
        self._send: Any = None
        self._started = False
        self._last_sent = started_at
        self.outcome = "cancelled"
        self.result: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self._send = send
        body = asyncio.ensure_future(self._serve())
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait((body, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (body, gone):
                if not task.done():
                    task.cancel()
            await asyncio.wait((body, gone))
            self.on_end(self.outcome, self.result, self._request_id())
        if not body.cancelled():
            error = body.exception()
            if error is not None and not isinstance(error, OSError):
                raise error

    def _request_id(self) -> str | None:
        machine = self.events.meta.machine
        return None if machine is None else machine.request_id

    async def _start(self) -> None:
        headers = list(_SSE_HEADERS)
        request_id = self._request_id()
        if request_id is not None:
            headers.append((b"x-fsm-agent-request-id", request_id.encode("ascii", "replace")))
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})
        self._started = True

    async def _write(self, chunk: bytes, *, first: bool = False) -> None:
        if not self._started:
            await self._start()
        if first:
            self.on_first_byte(time.monotonic() - self.started_at)
        await self._send({"type": "http.response.body", "body": chunk, "more_body": True})
        self._last_sent = time.monotonic()

    async def _finish(self, chunk: bytes) -> None:
        if chunk:
            await self._write(chunk)
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _fail(self, error: WireError) -> None:
        self.outcome = "error" if error.kind != "incomplete" else "incomplete"
        if not self._started:  # before the first byte: an HTTP error with the API's body (PX-5)
            extra = []
            request_id = self._request_id()
            if request_id is not None:
                extra.append((b"x-fsm-agent-request-id", request_id.encode("ascii", "replace")))
            await error_response(self._send, self.wire, error, extra)
            return
        await self._finish(self.wire.error_frames(self.translator, error))  # in-band, no success marker

    async def _serve(self) -> None:
        events, wire, translate = self.events, self.wire, self.translator.event
        items = events._channel.items  # what is waiting already is taken without a wait
        loop = asyncio.get_running_loop()
        timer: asyncio.TimerHandle | None = None

        def keepalive_due() -> None:
            # One timer for the whole stream, moved on by what was sent meanwhile: nothing per event.
            nonlocal timer
            left = self._last_sent + self.keepalive - time.monotonic()
            if left <= 0:
                events.nudge()  # the stream's wait returns empty-handed: a keepalive is due
                left = self.keepalive
            timer = loop.call_later(left, keepalive_due)

        sent_any = False
        try:
            timer = loop.call_later(self.keepalive, keepalive_due)
            while True:
                try:
                    event = await events.next_or_nudged()
                except StopAsyncIteration:
                    await self._fail(WireError(502, "upstream", "the request ended without an answer"))
                    return
                except Exception as exc:
                    await self._fail(failure_of(exc, self.scrub))
                    return
                if event is None:  # nudged by the timer
                    if time.monotonic() - self._last_sent >= self.keepalive:
                        await self._write(wire.keepalive)  # PX-4: upstream silence
                        self.on_keepalive()
                    continue
                chunks: list[bytes] = []
                size = 0
                while True:
                    if type(event) is FinalEvent:
                        self.result = result = event.result
                        if result.stub or result.incomplete:
                            if chunks:
                                await self._write(b"".join(chunks), first=not sent_any)
                            await self._fail(incomplete_failure(result, self.scrub))
                            return
                        chunks.append(wire.frames(self.translator.final(result)) + wire.end)
                        await self._finish_ok(b"".join(chunks), first=not sent_any)
                        return
                    chunk = wire.frames(translate(event))
                    if chunk:
                        chunks.append(chunk)
                        size += len(chunk)
                    if not items or size >= _BATCH_BYTES:
                        break
                    event = await events.__anext__()  # an event is waiting: returns at once
                if chunks:
                    await self._write(b"".join(chunks), first=not sent_any)
                    sent_any = True
        finally:
            if timer is not None:
                timer.cancel()
            await events.aclose()  # PX-6: the upstream request ends with the downstream one

    async def _finish_ok(self, chunk: bytes, *, first: bool) -> None:
        await self._write(chunk, first=first)
        self.outcome = "ok"
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})


class WholeAnswer(ProxiedStream):
    """A request that did not ask for a stream: the same request and translator, its payloads
    folded into the API's final object (`WireFormat.whole`) and sent as one JSON body; an error or
    a stub is an HTTP error with the API's body. A client that disconnects still cancels it."""

    async def _serve(self) -> None:
        events, translate = self.events, self.translator.event
        payloads: list[dict[str, Any]] = []
        try:
            try:
                async for event in events:
                    if type(event) is FinalEvent:
                        self.result = result = event.result
                        if result.stub or result.incomplete:
                            await self._fail(incomplete_failure(result, self.scrub))
                            return
                        payloads += self.translator.final(result)
                    else:
                        payloads += translate(event)
            except Exception as exc:
                await self._fail(failure_of(exc, self.scrub))
                return
            body = json.dumps(self.wire.whole(payloads), ensure_ascii=False).encode()
            self.on_first_byte(time.monotonic() - self.started_at)
            headers = [(b"content-type", b"application/json")]
            request_id = self._request_id()
            if request_id is not None:
                headers.append((b"x-fsm-agent-request-id", request_id.encode("ascii", "replace")))
            await self._send({"type": "http.response.start", "status": 200, "headers": headers})
            self._started = True
            await self._send({"type": "http.response.body", "body": body, "more_body": False})
            self.outcome = "ok"
        finally:
            await events.aclose()
