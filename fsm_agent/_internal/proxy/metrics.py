"""The proxy's `/metrics` (Prometheus text, through `prometheus-client`).

Why Prometheus and not the OpenTelemetry metrics the session already emits (OT-2): those need
the application to configure an SDK and an exporter, which a proxy started from the command
line has not; a scrape endpoint needs none, and `prometheus-client` is one small package with
no dependencies. With several workers (`fsm-agent serve --workers N`) the counts of all of them
are summed through the client's multiprocess mode (`PROMETHEUS_MULTIPROC_DIR`, set by `serve`),
so a scrape that reaches any worker sees the whole server. Labels are names from the
configuration (API, alias, route, outcome), never anything from a request or a key (PX-7).
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["ProxyMetrics"]

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class ProxyMetrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self._multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self.requests = Counter(
            "fsm_agent_proxy_requests",
            "Proxied requests, by how they ended: ok, incomplete (ended in-band), error (HTTP error or "
            "in-band error), cancelled (the client went away)",
            ("api", "alias", "outcome"),
            registry=registry,
        )
        self.duration = Histogram(
            "fsm_agent_proxy_request_seconds",
            "Time from a request's arrival to its stream's end",
            ("api", "alias"),
            buckets=_BUCKETS,
            registry=registry,
        )
        self.first_byte = Histogram(
            "fsm_agent_proxy_first_byte_seconds",
            "Time from a request's arrival to the first byte of its answer sent downstream",
            ("api", "alias"),
            buckets=_BUCKETS,
            registry=registry,
        )
        self.attempts = Counter(
            "fsm_agent_proxy_attempts",
            "Upstream attempts of the requests that ended with an answer, by the route that answered",
            ("alias", "route"),
            registry=registry,
        )
        self.keepalives = Counter(
            "fsm_agent_proxy_keepalives",
            "Keepalives sent downstream during upstream silence",
            ("api",),
            registry=registry,
        )
        self.rejected = Counter(
            "fsm_agent_proxy_rejected",
            "Requests refused before reaching a route (auth, size, bad body, unknown model)",
            ("reason",),
            registry=registry,
        )
        gauge: dict[str, Any] = {"multiprocess_mode": "livesum"} if self._multiprocess else {}
        self.in_flight = Gauge(
            "fsm_agent_proxy_in_flight", "Requests being served now", ("api",), registry=registry, **gauge
        )

    def exposition(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        if self._multiprocess:
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
