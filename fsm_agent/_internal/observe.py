"""A session's hookup to OpenTelemetry (OT-1, OT-3): made at the first request that could be traced.

Setting a tracer or meter provider imports `opentelemetry.trace` or `opentelemetry.metrics` (the SDK,
an auto-instrumentation, the application's own code), or is left to the API by an environment
variable; until a provider is set, every span and instrument would be a no-op, so the request is not
traced and our telemetry module is not imported (nor OpenTelemetry, where nothing imported it: their
import was most of a process's first request). Whether one is set is asked of the modules already
imported: an SDK that imports `opentelemetry.trace` for its own spans (anthropic 2.x does) costs
the request a dictionary lookup and a type check, not our telemetry module and OpenTelemetry's
metrics API.
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

__all__ = ["Observer", "both", "sdk_configured"]

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
        if self._off or not sdk_configured():
            return None  # no provider set: every span and instrument would be a no-op (OT-3)
        telemetry = self._telemetry
        if telemetry is None:
            telemetry = _open_telemetry(self._content)
            if telemetry is None:
                self._off = True
                return None
            self._telemetry = telemetry
        try:
            client = source.peek()  # for server.address; the first attempt uses this very client
        except Exception:
            client = None  # the attempt meets the factory's error itself
        return telemetry.request(api=api, model=model, params=params, client=client)


def sdk_configured() -> bool:
    """True when the application has set a tracer or a meter provider (the OpenTelemetry SDK, or
    any other). Until then every span and instrument is a no-op, so a request skips telemetry
    altogether (OT-3: its cost stays off the request); checked per request, so a provider set
    later is used from the next request on. A provider is set through `opentelemetry.trace` or
    `opentelemetry.metrics`, so only those already imported are asked; a provider an environment
    variable names is loaded by the API when first asked, so then both are imported and asked."""
    modules = sys.modules
    if any(os.environ.get(name) for name in _PROVIDER_ENV):
        try:
            import opentelemetry.metrics
            import opentelemetry.trace  # noqa: F401  (asked through sys.modules below)
        except ImportError:
            return False  # no API: nothing could load the provider it names
    trace = modules.get("opentelemetry.trace")
    if trace is not None and not isinstance(
        trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
    ):
        return True
    metrics = modules.get("opentelemetry.metrics")
    return metrics is not None and not isinstance(
        metrics.get_meter_provider(), _unset_meter_providers(metrics)
    )


def _unset_meter_providers(metrics: Any) -> tuple[type, ...]:
    """The API's stand-ins for a meter provider not set: its no-op one, and the proxy it hands out
    before one is set (a private class, looked up defensively: without it, any provider counts as
    set, and the request is traced into no-op instruments)."""
    internal = sys.modules.get("opentelemetry.metrics._internal")
    proxy = getattr(internal, "_ProxyMeterProvider", None)
    if isinstance(proxy, type):
        return (metrics.NoOpMeterProvider, proxy)
    return (metrics.NoOpMeterProvider,)


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
