"""A session's requests in flight, so that `Session.interrupt()` reaches each (RES-11, SEC-8).

A request registers its watchdog before any planning work (a factory, a lazy SDK import) and
leaves when it ends, however it ends; an interrupt already set when it registers ends it at once.
"""

from __future__ import annotations

import threading
from typing import Protocol

__all__ = ["InFlight", "Interruptible"]


class Interruptible(Protocol):
    @property
    def interrupted(self) -> bool: ...

    def interrupt(self) -> None: ...


class InFlight:
    """The requests of one session that are running now (thread-safe)."""

    __slots__ = ("_handles", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handles: set[Interruptible] = set()

    def __len__(self) -> int:
        return len(self._handles)

    def __bool__(self) -> bool:
        return bool(self._handles)

    def running(self, handle: Interruptible) -> _Running:
        """`with in_flight.running(watchdog):` the request is reachable by `interrupt_all()`."""
        return _Running(self, handle)

    def interrupt_all(self) -> None:
        with self._lock:
            handles = list(self._handles)
        for handle in handles:
            handle.interrupt()


class _Running:
    """A class rather than a generator-based context manager: one small object per request, and
    no generator frame to keep alive while hundreds of requests are in flight."""

    __slots__ = ("_handle", "_registry")

    def __init__(self, registry: InFlight, handle: Interruptible) -> None:
        self._registry, self._handle = registry, handle

    def __enter__(self) -> None:
        registry = self._registry
        with registry._lock:
            registry._handles.add(self._handle)
        # SEC-8: an interrupt already set when a request begins ends it before any planning work.
        # The client's probes (inferring the API) load an SDK's lazily imported modules on the
        # first request of a process, 0.6-1 s under load, which an interrupt must not wait for.
        if self._handle.interrupted:
            self.__exit__()
            raise InterruptedError("the request was interrupted")

    def __exit__(self, *exc_info: object) -> None:
        registry = self._registry
        with registry._lock:
            registry._handles.discard(self._handle)
