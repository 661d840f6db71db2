"""bytes → SSE frames → one json.loads per payload → an adapter's normalized events.

Shared by the sync and async drivers. Pure: never performs I/O and reads no clock. It counts bytes
(the cap per attempt, SEC-2), payload frames and keepalives (WIRE-2/3), stops at an adapter's end
marker (WIRE-4), and turns undecodable input into `ProviderStreamError` with the offending text,
secrets redacted (RES-10, SEC-1). A translator's error becomes an `AttemptFailed` event after the
events that preceded it, so nothing already received is lost.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from ..errors import FsmAgentError, ProviderStreamError, StreamLimitError
from ..events import AttemptFailed, StreamEnd
from ..redact import redact, truncate
from .sse import SSEDecodeError, SSEDecoder, SSEFrame

__all__ = ["DEFAULT_MAX_BYTES", "Translator", "WirePipeline", "parse_json_payload"]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024


class Translator(Protocol):
    """One attempt's provider-specific translation of decoded frames into events."""

    done: bool

    def frame(self, frame: SSEFrame) -> list[Any]:
        """Events for one payload frame (may raise ProviderStreamError)."""
        ...

    def payload(self, payload: Any) -> list[Any]:
        """Events for one already-decoded chunk (object mode, WIRE-5)."""
        ...


def parse_json_payload(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        raise ProviderStreamError(
            f"the provider sent a stream frame that is not JSON: {truncate(redact(data), 200)!r}",
            code="provider_stream_non_json_data",
            raw_text=truncate(redact(data)),
        ) from None


class WirePipeline:
    __slots__ = (
        "_decoder",
        "_max_bytes",
        "_on_activity",
        "_translator",
        "active",
        "bytes_read",
        "frames",
        "keepalives",
    )

    def __init__(
        self,
        translator: Translator,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        on_activity: Callable[[str], None] | None = None,
    ) -> None:
        self._translator = translator
        self._decoder = SSEDecoder(max_line_bytes=max_bytes)
        self._max_bytes = max_bytes
        self._on_activity = on_activity
        self.bytes_read = 0
        self.frames = 0
        self.keepalives = 0
        self.active = False  # whether the last feed() carried a provider event (watchdog activity)

    @property
    def done(self) -> bool:
        return self._translator.done

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
        events.append(StreamEnd(frames=self.frames, keepalives=self.keepalives, complete=self.done))
        return events

    def _translate(self, frames: list[SSEFrame]) -> list[Any]:
        events: list[Any] = []
        self.active = False
        translator = self._translator
        on_activity = self._on_activity
        for frame in frames:
            if translator.done:
                break  # WIRE-4: nothing after the end marker counts
            if frame.is_keepalive:
                self.keepalives += 1
                continue
            if on_activity is not None:
                on_activity(frame.event or "message")
            if frame.event == "ping":
                # A provider ping is an event for the caller's liveness monitor, but neither
                # content nor watchdog activity: pings alone never keep a dead stream alive.
                self.keepalives += 1
                continue
            self.frames += 1
            self.active = True
            try:
                events.extend(translator.frame(frame))
            except FsmAgentError as exc:
                # What came before the bad frame in the same read is delivered first (a stub keeps
                # it); the failure follows as the attempt's last event.
                events.append(AttemptFailed(exc))
                break
        return events


def _decode_error(exc: SSEDecodeError) -> ProviderStreamError:
    raw = exc.raw.decode("utf-8", "backslashreplace")
    code = "provider_stream_frame_too_large" if "too large" in str(exc) else "provider_stream_invalid_utf8"
    return ProviderStreamError(
        f"the provider's stream could not be decoded: {exc}",
        code=code,
        raw_text=truncate(redact(raw)),
    )
