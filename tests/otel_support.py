"""The OpenTelemetry SDK for the telemetry tests: installed once per process as the global tracer and
meter providers (the API allows setting them only once), with an in-memory span exporter behind a
gate that a test opens, and an in-memory metric reader with delta temporality, so each test sees only
its own spans and measurements. The gate can also be made to raise (a broken span processor, OT-3).
Other test modules run with the gate shut: their spans are made and dropped.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class FailingExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        raise ConnectionError("the collector is down")


class Gate(SpanProcessor):
    """Passes finished spans to the exporter while open; raises from every hook while broken."""

    def __init__(self, inner: SpanProcessor) -> None:
        self.inner = inner
        self.failing_export = SimpleSpanProcessor(FailingExporter())
        self.open = False
        self.broken: str | None = None  # "start", "end" (the processor raises) or "export"

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self.broken == "start":
            raise RuntimeError("broken span processor (on_start)")

    def on_end(self, span: ReadableSpan) -> None:
        if self.broken == "end":
            raise RuntimeError("broken span processor (on_end)")
        if self.broken == "export":
            self.failing_export.on_end(span)
        elif self.open:
            self.inner.on_end(span)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


@dataclass
class Otel:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    gate: Gate
    tracer: Any

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def metrics(self) -> dict[str, list[Any]]:
        """Metric name -> (unit, data points) measured since the last call."""
        data = self.reader.get_metrics_data()
        found: dict[str, list[Any]] = {}
        if data is None:
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                if scope.scope.name != "fsm_agent":
                    continue
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).append((metric.unit, list(metric.data.data_points)))
        return found


_installed: Otel | None = None


def install() -> Otel:
    global _installed
    if _installed is None:
        exporter = InMemorySpanExporter()
        gate = Gate(SimpleSpanProcessor(exporter))
        provider = TracerProvider()
        provider.add_span_processor(gate)
        trace.set_tracer_provider(provider)
        reader = InMemoryMetricReader(
            preferred_temporality={
                Counter: AggregationTemporality.DELTA,
                Histogram: AggregationTemporality.DELTA,
            }
        )
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        _installed = Otel(exporter, reader, gate, trace.get_tracer("tests"))
    return _installed


@pytest.fixture
def otel() -> Iterator[Otel]:
    """The SDK, with a clean exporter and reader, open for this test only."""
    sdk = install()
    sdk.exporter.clear()
    sdk.reader.get_metrics_data()  # drop what other tests measured
    sdk.gate.open, sdk.gate.broken = True, None
    try:
        yield sdk
    finally:
        sdk.gate.open, sdk.gate.broken = False, None
        sdk.exporter.clear()
