"""bytes → SSE frames → one json.loads per payload → an adapter's normalized events.

Shared by the sync and async drivers. Pure: never performs I/O and reads no clock. It counts bytes
(the cap per attempt, SEC-2), payload frames and keepalives (WIRE-2/3), stops at an adapter's end
marker (WIRE-4), and turns undecodable input into `ProviderStreamError` with the offending text,
secrets redacted (RES-10, SEC-1). A translator's error becomes an `AttemptFailed` event after the
events that preceded it, so nothing already received is lost; one the adapter says is its
route's own rejection (`route_owned`, RC-7) is marked so.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterable, Callable, Iterable, Iterator
from typing import Any, Protocol

from ..errors import ErrorKind, FsmAgentError, ProviderStreamError, StreamLimitError
from ..events import AttemptFailed, FinishedResponse, FinishReason, StreamEnd
from ..redact import redact, truncate
from .shapes import PAYLOAD_ERRORS, as_malformed, parse_json
from .sse import SSEDecodeError, SSEDecoder, SSEFrame

__all__ = [
    "DEFAULT_MAX_BYTES",
    "SLICE",
    "JsonBodyPipeline",
    "Translator",
    "WirePipeline",
    "aread_json_body",
    "parse_json_payload",
    "read_json_body",
    "slices",
]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024


class Translator(Protocol):
    """One attempt's provider-specific translation of decoded frames into events."""

    done: bool

    def frame(self, frame: SSEFrame) -> list[Any]:
        """Events for one payload frame (may raise ProviderStreamError), in a new list the caller
        may keep and extend."""
        ...

    def payload(self, payload: Any) -> list[Any]:
        """Events for one already-decoded chunk (object mode, WIRE-5)."""
        ...


def parse_json_payload(data: str) -> Any:
    """One frame's payload as JSON (RES-10 for text that is not JSON; SEC-4 for NaN, 1e999 and
    nesting past the recursion limit)."""
    return parse_json(data, "stream frame")


class WirePipeline:
    bytes_are_progress = False  # WD-6: an event stream's progress is its events (a read is liveness)
    __slots__ = (
        "_decoder",
        "_max_bytes",
        "_on_activity",
        "_pending",
        "_route_owned",
        "_translator",
        "bytes_read",
        "done",
        "frames",
        "keepalives",
    )

    def __init__(
        self,
        translator: Translator,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        on_activity: Callable[[str], None] | None = None,
        route_owned: Callable[[BaseException], bool] | None = None,
    ) -> None:
        self._translator = translator
        self._route_owned = route_owned
        self._decoder = SSEDecoder(max_line_bytes=max_bytes)
        self._max_bytes = max_bytes
        self._on_activity = on_activity
        self.bytes_read = 0
        self.frames = 0
        self.keepalives = 0
        # The translator's `done` (WIRE-4), copied after each read it translates: the only place
        # where it changes, and a plain attribute is read on every read.
        self.done = translator.done
        # An error that stands unless the next payload says the answer reached its output limit
        # (`unless_at_limit`: a tool input cut by max_tokens, then the stop reason that says so).
        self._pending: ProviderStreamError | None = None

    def feed(self, chunk: bytes) -> list[Any]:
        self.bytes_read += len(chunk)
        if self.bytes_read > self._max_bytes:
            raise StreamLimitError(
                f"the stream passed the cap of {self._max_bytes} bytes per attempt; aborted"
            )
        try:
            frames = self._decoder.feed(chunk)
        except SSEDecodeError as exc:
            raise _decode_error(exc) from None
        return self._translate(frames)

    def end(self) -> list[Any]:
        """Events at EOF: anything the decoder still held, then StreamEnd."""
        try:
            frames = self._decoder.flush()
        except SSEDecodeError as exc:
            raise _decode_error(exc) from None
        events = self._translate(frames) if not self.done else []
        pending = self._pending
        if pending is not None:  # the stream ended before saying why: the error stands
            self._pending = None
            events.append(self._failed(_without_frames(pending)))
            return events
        events.append(StreamEnd(frames=self.frames, keepalives=self.keepalives, complete=self.done))
        return events

    def _translate(self, frames: list[SSEFrame]) -> list[Any]:
        events: list[Any] = []
        translator = self._translator
        on_activity = self._on_activity
        for frame in frames:
            if translator.done:
                break  # WIRE-4: nothing after the end marker counts
            if not frame.data:  # a keepalive (SSEFrame.is_keepalive, without the property's call)
                self.keepalives += 1
                continue
            name = frame.event
            if on_activity is not None:
                on_activity(name or "message")
            if name is not None and name == "ping":
                # A provider ping is an event for the caller's liveness monitor, but neither
                # content nor watchdog activity: pings alone never keep a dead stream alive.
                self.keepalives += 1
                continue
            self.frames += 1
            try:
                produced = translator.frame(frame)
                if self._pending is not None:
                    if not _reaches_limit(produced):  # the pending error stands, in their place
                        events.append(self._failed(_without_frames(self._pending)))
                        self._pending = None
                        break
                    self._pending = None  # the answer reached its output limit: settled
                if events:
                    events.extend(produced)
                else:
                    events = produced  # the common read, one frame: its list as it is
            except FsmAgentError as exc:
                # What came before the bad frame in the same read is delivered first (a stub keeps
                # it), then what the bad payload itself carried beside its error (ACC-10); the
                # failure follows as the attempt's last event.
                if isinstance(exc, ProviderStreamError):
                    if exc.unless_at_limit and self._pending is None:
                        self._pending = exc  # decided by the next payload
                        continue
                    events.extend(exc.events_before)
                failed = self._pending or exc  # a pending error was first: it stands
                self._pending = None
                events.append(self._failed(_without_frames(failed)))
                break
            except PAYLOAD_ERRORS as exc:  # the last net (SEC-4): a shape no rule foresaw
                failed = self._pending or as_malformed(exc, frame.data, "stream frame")
                self._pending = None
                events.append(AttemptFailed(failed))
                break
        self.done = translator.done
        return events

    def _failed(self, error: BaseException) -> AttemptFailed:
        """The event of an in-stream error; RC-7: with the route-owned kind when it is one."""
        route_owned = self._route_owned
        if route_owned is not None and route_owned(error):
            return AttemptFailed(error, kind=ErrorKind.ROUTE_OWNED)
        return AttemptFailed(error)


def _reaches_limit(events: list[Any]) -> bool:
    """The events say the answer stopped at its output limit (finish reason `length`)."""
    return any(type(event) is FinishReason and event.reason == "length" for event in events)


def _without_frames(error: BaseException) -> BaseException:
    """`error` (a payload the translator refused, SEC-4) and the errors it was raised from, without
    their tracebacks. Its message says what was wrong and where; the frames of the decoding would
    only link the error to this read's events, which hold the error: a reference cycle of the
    whole request left to the garbage collector on every malformed payload."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        current.__traceback__ = None
        current = current.__cause__ or current.__context__
    return error


class JsonBodyPipeline:
    """WIRE-5 / SEC-5: a 200 answered with one JSON body instead of an event stream.

    The body is read like a stream — under the byte cap, each read decoded to text at once (an
    incremental UTF-8 decoder, so the bytes are not kept) — and parsed when it ends, into one
    `FinishedResponse` (`as_finished` turns the JSON into the SDK's object). Peak memory stays near
    twice the body: its text, then its parsed value.
    """

    __slots__ = ("_as_finished", "_decoder", "_max_bytes", "_parts", "bytes_read", "done")
    keepalives = 0  # a body has none
    bytes_are_progress = True  # WD-6: its bytes are the answer itself

    def __init__(self, as_finished: Callable[[Any], Any], *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._as_finished = as_finished
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._max_bytes = max_bytes
        self._parts: list[str] = []
        self.bytes_read = 0
        self.done = False

    def feed(self, chunk: bytes) -> list[Any]:
        self.bytes_read += len(chunk)
        if self.bytes_read > self._max_bytes:
            self._parts.clear()
            raise StreamLimitError(
                f"the JSON body passed the cap of {self._max_bytes} bytes per attempt; aborted"
            )
        try:
            self._parts.append(self._decoder.decode(chunk))
        except UnicodeDecodeError as exc:
            raise ProviderStreamError(
                f"the provider's JSON body is not UTF-8: {exc}", code="provider_stream_invalid_utf8"
            ) from None
        return []

    def end(self) -> list[Any]:
        try:
            self._parts.append(self._decoder.decode(b"", final=True))
        except UnicodeDecodeError as exc:
            raise ProviderStreamError(
                f"the provider's JSON body is not UTF-8: {exc}", code="provider_stream_invalid_utf8"
            ) from None
        text = "".join(self._parts)
        self._parts.clear()
        body = parse_json(text, "JSON body")
        del text
        return [FinishedResponse(self._as_finished(body))]


def read_json_body(
    chunks: Iterable[bytes], as_finished: Callable[[Any], Any], max_bytes: int = DEFAULT_MAX_BYTES
) -> Any:
    """SEC-5: a whole JSON body (the non-streaming fallback's answer, RES-9; a native Gemini JSON
    answer) read by the one body reader, `JsonBodyPipeline`: under the byte cap as it arrives, each
    read decoded at once; the finished response `as_finished` makes of it."""
    pipeline = JsonBodyPipeline(as_finished, max_bytes=max_bytes)
    for chunk in chunks:
        pipeline.feed(chunk)
    return _finished(pipeline)


async def aread_json_body(
    chunks: AsyncIterable[bytes], as_finished: Callable[[Any], Any], max_bytes: int = DEFAULT_MAX_BYTES
) -> Any:
    """`read_json_body` for an async body."""
    pipeline = JsonBodyPipeline(as_finished, max_bytes=max_bytes)
    async for chunk in chunks:
        pipeline.feed(chunk)
    return _finished(pipeline)


def _finished(pipeline: JsonBodyPipeline) -> Any:
    (event,) = pipeline.end()
    return event.response


SLICE = 64 * 1024  # a read larger than this is decoded a slice at a time (SEC-5)


def slices(chunk: bytes) -> Iterator[bytes]:
    """A large read in slices of `SLICE` bytes, so each is decoded and delivered before the next:
    the frames, texts and events of one huge read never exist all at once (SEC-5)."""
    for start in range(0, len(chunk), SLICE):
        yield chunk[start : start + SLICE]


def _decode_error(exc: SSEDecodeError) -> ProviderStreamError:
    raw = exc.raw.decode("utf-8", "backslashreplace")
    code = "provider_stream_frame_too_large" if "too large" in str(exc) else "provider_stream_invalid_utf8"
    return ProviderStreamError(
        f"the provider's stream could not be decoded: {exc}",
        code=code,
        raw_text=truncate(redact(raw)),
    )
