"""Telemetry benchmarks (issue 15, OT-3): what a short request costs with telemetry on.

(0) The telemetry alone, fed the records of a short request, against the cost of that request.
(1) `Session(telemetry=True)` with no OpenTelemetry SDK configured (the global no-op providers) vs
`Session(telemetry=False)`: goal < 5% slower. (2) The same with the SDK configured: a TracerProvider
with an in-memory exporter behind a SimpleSpanProcessor and a MeterProvider with an in-memory
reader (printed, no goal). A short request: a real openai client on an in-memory transport, 20 text
chunks, one attempt. Off and on run interleaved, in batches; we print the median of the per-round
ratios with their spread (min..max), and the median time per request of each.

Run: .venv/bin/python bench/bench_telemetry.py   (or `make bench`).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import chat_body, memory_openai_client

import fsm_agent

PARAMS = {"model": "bench-model", "messages": [{"role": "user", "content": "hi"}]}
ROUNDS = 41
BATCH = 50


def short_request(session: fsm_agent.Session) -> Callable[[], None]:
    body, text, _ = chat_body(text_chunks=20, args_total=40, arg_fragment=20)
    client = memory_openai_client(body)

    def run() -> None:
        for _ in range(BATCH):
            result = session.stream(client, PARAMS)
            assert result.content == text

    return run


def batch_time(fn: Callable[[], None]) -> float:
    # CPU time of this process (all its threads): the machine is shared, and wall time would
    # measure the neighbours' load more than our own work.
    start = time.process_time()
    fn()
    return (time.process_time() - start) / BATCH


def compare(label: str, off: Callable[[], None], on: Callable[[], None], goal: str) -> None:
    off(), on()  # warm up: imports, pools, lazily made instruments
    ratios, offs, ons = [], [], []
    for i in range(ROUNDS):
        # Interleaved, alternating which goes first, so drift and warm caches favour neither.
        if i % 2:
            t_on, t_off = batch_time(on), batch_time(off)
        else:
            t_off, t_on = batch_time(off), batch_time(on)
        ratios.append(t_on / t_off)
        offs.append(t_off)
        ons.append(t_on)
    median = statistics.median(ratios)
    print(f"{label}: {ROUNDS} rounds of {BATCH} requests each, interleaved")
    print(f"  telemetry off  {statistics.median(offs) * 1e6:8.1f} us CPU/request (median)")
    print(f"  telemetry on   {statistics.median(ons) * 1e6:8.1f} us CPU/request (median)")
    quartiles = statistics.quantiles(ratios, n=4)
    print(
        f"  on/off = {median:.3f} (median of rounds; quartiles {quartiles[0]:.3f}..{quartiles[2]:.3f},"
        f" spread {min(ratios):.3f}..{max(ratios):.3f})  -> {100 * (median - 1):+.1f}%  {goal}"
    )
    # The fastest batch of each: the least disturbed by the neighbours on a shared machine.
    print(f"  best batch on/off = {min(ons) / min(offs):.3f}")


def telemetry_alone(session: fsm_agent.Session, request_cost: float, label: str) -> None:
    """The telemetry of one request with nothing else: its span, its records, its result, its metrics
    (the records and result of a real short request, replayed into a fresh observer each time).
    Stable where whole requests on a shared machine are noisy."""
    from fsm_agent._internal.telemetry import Telemetry

    body, _, _ = chat_body(text_chunks=20, args_total=40, arg_fragment=20)
    client = memory_openai_client(body)
    result = session.stream(client, PARAMS)
    telemetry = Telemetry()
    runs = 2000
    costs = []
    for _ in range(7):
        start = time.process_time()
        for _ in range(runs):
            observer = telemetry.request(
                api="chat_completions", model="bench-model", params=PARAMS, client=client
            )
            with observer:
                for record in result.records:
                    observer.on_record(record)
                observer.succeeded(result)
        costs.append((time.process_time() - start) / runs)
    cost = statistics.median(costs)
    print(
        f"{label}: telemetry alone {cost * 1e6:.1f} us CPU/request "
        f"(spread {min(costs) * 1e6:.1f}..{max(costs) * 1e6:.1f}; {len(result.records)} transitions) "
        f"= {100 * cost / request_cost:.2f}% of a short request ({request_cost * 1e6:.0f} us CPU)"
    )


def main() -> None:
    off = short_request(fsm_agent.Session(telemetry=False))
    on = short_request(fsm_agent.Session(telemetry=True))
    request_cost = statistics.median(batch_time(off) for _ in range(5))
    telemetry_alone(fsm_agent.Session(telemetry=False), request_cost, "(0) no OpenTelemetry SDK configured")
    compare("(1) no OpenTelemetry SDK configured", off, on, "(goal < +5%)")

    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))

    def cleared(run: Callable[[], None]) -> Callable[[], None]:
        def go() -> None:
            run()
            exporter.clear()  # keep memory flat; clearing is outside no request

        return go

    telemetry_alone(
        fsm_agent.Session(telemetry=False), request_cost, "(2a) SDK configured, in-memory exporter"
    )
    exporter.clear()
    compare("(2b) SDK configured, in-memory exporter", cleared(off), cleared(on), "(printed, no goal)")


if __name__ == "__main__":
    main()
