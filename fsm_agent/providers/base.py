"""What every provider adapter offers the drivers, and the per-attempt stream handle.

Adapters translate, they do not decide: they open an attempt through the SDK, turn its bytes or
objects into normalized events, and serve the non-streaming fallback. Classification of errors is
`errors.classify`; policy is the machine's.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from ..actions import OpenAttempt
from ..wire.pipeline import Translator

__all__ = ["Attempt", "ProviderAdapter", "as_plain", "socket_of"]


class ProviderAdapter(Protocol):
    api: str

    def model_of(self, params: dict[str, Any]) -> str | None: ...

    def open(self, client: Any, params: dict[str, Any], plan: OpenAttempt, read_timeout: float) -> Attempt:
        """Send the streaming request; return once the response has begun (headers read)."""
        ...

    def translator(self) -> Translator: ...

    def request_plain(self, client: Any, params: dict[str, Any]) -> Any:
        """The same request without streaming (RES-9 fallback); returns the finished response."""
        ...

    def finished_events(self, response: Any) -> list[Any]:
        """Normalized events of a finished response (fallback, WIRE-5)."""
        ...


def socket_of(http_response: Any) -> socket.socket | None:
    """The socket under an httpx/httpx2 response, so a blocked read can be aborted from outside."""
    extensions = getattr(http_response, "extensions", None) or {}
    stream = extensions.get("network_stream")
    get_extra = getattr(stream, "get_extra_info", None)
    sock = get_extra("socket") if get_extra is not None else None
    return sock if isinstance(sock, socket.socket) else None


class Attempt:
    """One attempt's open stream: raw byte chunks, decoded objects, or a finished response.

    `close()` runs the closer exactly once, whoever calls it first; `abort()` may be called from
    another thread (the watchdog) to end a blocked read: it shuts the socket down, which wakes the
    reading thread, and the reader's own close follows.
    """

    def __init__(
        self,
        *,
        chunks: Iterable[bytes] | None = None,
        objects: Iterable[Any] | None = None,
        finished: Any = None,
        closer: Callable[[], None] | None = None,
        sock: socket.socket | None = None,
    ) -> None:
        self.chunks = chunks
        self.objects = objects
        self.finished = finished
        self._closer = closer
        self._sock = sock
        self._lock = threading.Lock()
        self.closed = False
        self.close_calls = 0

    def iter_chunks(self) -> Iterator[bytes]:
        assert self.chunks is not None
        return iter(self.chunks)

    def abort(self) -> None:
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        elif self.objects is not None:
            # No socket to shut down (a custom client): closing its iterator is the best we can do.
            close = getattr(self.objects, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):  # the reader thread may be inside it
                    close()

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
        self.close_calls += 1
        if self._closer is not None:
            self._closer()


def as_plain(obj: Any) -> Any:
    """SDK objects (pydantic models, namespaces, plain objects) as dicts and lists (WIRE-5)."""
    if obj is None or isinstance(obj, (str, int, float, bool, dict)):
        if isinstance(obj, dict):
            return {key: as_plain(value) for key, value in obj.items()}
        return obj
    if isinstance(obj, (list, tuple)):
        return [as_plain(item) for item in obj]
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump()
    fields = getattr(obj, "__dict__", None)
    if isinstance(fields, dict):
        return {key: as_plain(value) for key, value in fields.items() if not key.startswith("_")}
    return obj
