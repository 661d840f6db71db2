"""A session's hookup to OpenTelemetry (OT-1, OT-3): made at the first request that could be traced.

Setting a tracer or meter provider imports `opentelemetry.trace` or `opentelemetry.metrics` (the SDK,
an auto-instrumentation, the application's own code), or is left to the API by an environment
variable; with neither, every span and instrument would be a no-op, so the request is not traced
and neither OpenTelemetry nor our telemetry module is imported (their import was most of a
process's first request).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .drivers.source import ClientSource
from .trace.records import TransitionRecord

if TYPE_CHECKING:
    from .telemetry import RequestTelemetry, Telemetry

__all__ = ["Observer", "both"]

# The environment variables with which OpenTelemetry's API loads a provider itself, when first asked.
_PROVIDER_ENV = ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER")


class Observer:
    """One session's telemetry: off, not made yet, or made (then asked per request if active)."""

    __slots__ = ("_content", "_off", "_telemetry")

    def __init__(self, enabled: bool, content: bool | None) -> None:
        self._telemetry: Telemetry | None = None
        self._content = content
        self._off = not enabled  # also once opentelemetry-api has failed to import

    def request(
        self, source: ClientSource, api: str, model: str | None, params: dict[str, Any]
    ) -> RequestTelemetry | None:
        """This request's telemetry (OT-1), or None when nothing could receive it."""
        telemetry = self._telemetry
        if telemetry is None:
            if self._off or not _provider_possible():
                return None  # nothing could receive a span: nothing of OpenTelemetry is imported
            telemetry = _open_telemetry(self._content)
            if telemetry is None:
                self._off = True
                return None
            self._telemetry = telemetry
        if not telemetry.active():
            return None  # no provider set: every span and instrument would be a no-op (OT-3)
        try:
            client = source.peek()  # for server.address; the first attempt uses this very client
        except Exception:
            client = None  # the attempt meets the factory's error itself
        return telemetry.request(api=api, model=model, params=params, client=client)


def _provider_possible() -> bool:
    """Whether a tracer or meter provider can be set in this process yet (OT-1, OT-3)."""
    modules = sys.modules
    if "opentelemetry.trace" in modules or "opentelemetry.metrics" in modules:
        return True
    return any(os.environ.get(name) for name in _PROVIDER_ENV)


def _open_telemetry(content: bool | None) -> Telemetry | None:
    """OT-1: the session's telemetry, or None when `opentelemetry-api` does not import."""
    try:
        from .telemetry import Telemetry
    except ImportError:
        return None
    return Telemetry(content)


def both(
    first: Callable[[TransitionRecord], None], second: Callable[[TransitionRecord], None]
) -> Callable[[TransitionRecord], None]:
    """One record hook calling two (the trace's tap, then the request's telemetry)."""

    def hook(record: TransitionRecord) -> None:
        first(record)
        second(record)

    return hook
