"""Deadlines learned from traces (WD-9): the gaps each phase showed, and what they recommend.

A wire-recorded trace holds every event an attempt's provider sent, with its time. Each attempt is
walked once: the silence before each event that moves the answer is one sample of the phase the
attempt was in during that silence (`first_event` from the attempt's opening to its first such
event — the recording has no headers time, so it includes the connect phase —, then `thinking`,
`text` or `tool_args`). An attempt the watchdog ended contributes its last silence as censored (at
least that long: counted apart, never in the percentiles). Samples are grouped per (api, host,
model, phase); a group's recommendation is its high percentile times a margin, rounded up to
two significant digits, and only with enough samples. The liveness clock's gaps (keepalives) are
not recorded, so `connect` and `liveness` are left to their defaults.

Pure: reads parsed traces, performs no I/O, reads no clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..deadlines import PROGRESS_PHASES
from ..events import (
    FinishReason,
    ReasoningDelta,
    RefusalDelta,
    StaleTimeout,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    UsageReport,
)
from .reader import RequestTrace, Trace
from .whatif import segment

__all__ = ["GapGroup", "TuneReport", "tune"]

_PROGRESS = (TextDelta, ReasoningDelta, RefusalDelta, ToolCallDelta, ToolCallEnd, FinishReason, UsageReport)


@dataclass(slots=True)
class GapGroup:
    """The silences of one phase on one (api, host, model)."""

    api: str
    host: str
    model: str
    phase: str
    gaps: list[float] = field(default_factory=list)
    censored: list[float] = field(default_factory=list)

    def percentile(self, q: float) -> float | None:
        """The `q`-th percentile (0..100) of the gaps, nearest rank (None: no gap)."""
        if not self.gaps:
            return None
        ordered = sorted(self.gaps)
        rank = max(1, math.ceil(q / 100 * len(ordered)))
        return ordered[rank - 1]

    def recommended(self, q: float, margin: float, min_samples: int) -> float | None:
        """The recommended deadline: percentile `q` times `margin`, rounded up to two significant
        digits (0.135 -> 0.14, 5.94 -> 6, 145 -> 150: at most 10% more); None with
        fewer than `min_samples` gaps. Never below the longest censored silence (those attempts
        stalled: a deadline below what they waited is no deadline they would have survived)."""
        found = self.percentile(q)
        if found is None or len(self.gaps) < min_samples:
            return None
        return _round_up(max(found * margin, max(self.censored, default=0.0)))

    def as_dict(self, q: float, margin: float, min_samples: int) -> dict[str, Any]:
        gaps = self.gaps
        return {
            "api": self.api,
            "host": self.host,
            "model": self.model,
            "phase": self.phase,
            "samples": len(gaps),
            "censored": len(self.censored),
            "p50": self.percentile(50),
            "p90": self.percentile(90),
            "p99": self.percentile(99),
            f"p{q:g}": self.percentile(q),
            "max": max(gaps) if gaps else None,
            "recommended": self.recommended(q, margin, min_samples),
        }


@dataclass(slots=True)
class TuneReport:
    """Every group's gaps, and the settings that turn them into recommendations."""

    groups: dict[tuple[str, str, str, str], GapGroup] = field(default_factory=dict)
    percentile: float = 99.0
    margin: float = 1.5
    min_samples: int = 20
    requests: int = 0
    without_wire: int = 0  # requests whose trace holds no wire recording (nothing to learn from)

    def group(self, api: str, host: str, model: str, phase: str) -> GapGroup:
        key = (api, host, model, phase)
        found = self.groups.get(key)
        if found is None:
            found = self.groups[key] = GapGroup(api, host, model, phase)
        return found

    def endpoints(self) -> list[tuple[str, str, str]]:
        return sorted({key[:3] for key in self.groups})

    def timeouts(self, api: str, host: str, model: str) -> dict[str, float]:
        """The `Timeouts` fields recommended for one endpoint (phases with enough samples)."""
        out: dict[str, float] = {}
        for phase in PROGRESS_PHASES:
            found = self.groups.get((api, host, model, phase))
            value = found.recommended(self.percentile, self.margin, self.min_samples) if found else None
            if value is not None:
                out[phase] = value
        return out

    def snippet(self, api: str, host: str, model: str) -> str:
        """A line to paste: `fsm_agent.Timeouts(...)` for one endpoint."""
        fields = ", ".join(f"{name}={value:g}" for name, value in self.timeouts(api, host, model).items())
        return f"fsm_agent.Timeouts({fields})"

    def as_dict(self) -> dict[str, Any]:
        q, margin, least = self.percentile, self.margin, self.min_samples
        return {
            "percentile": q,
            "margin": margin,
            "min_samples": least,
            "requests": self.requests,
            "requests_without_wire": self.without_wire,
            "groups": [self.groups[key].as_dict(q, margin, least) for key in sorted(self.groups)],
            "timeouts": [
                {"api": api, "host": host, "model": model, "timeouts": self.timeouts(api, host, model)}
                for api, host, model in self.endpoints()
            ],
        }


def tune(
    traces: Iterable[Trace], *, percentile: float = 99.0, margin: float = 1.5, min_samples: int = 20
) -> TuneReport:
    """The gaps of every attempt of `traces`, grouped per (api, host, model, phase) (WD-9)."""
    report = TuneReport(percentile=percentile, margin=margin, min_samples=min_samples)
    for trace in traces:
        for found in trace.requests.values():
            report.requests += 1
            if not found.has_wire:
                report.without_wire += 1
                continue
            _learn(report, found)
    return report


def _round_up(seconds: float) -> float:
    """`seconds` rounded up to two significant digits."""
    if seconds <= 0:
        return 0.0
    step = 10.0 ** (math.floor(math.log10(seconds)) - 1)
    return float(f"{math.ceil(seconds / step - 1e-9) * step:.12g}")


def _endpoint(found: RequestTrace, route: int) -> tuple[str, str, str]:
    header = found.header
    details = header.route_details if header is not None else ()
    if route < len(details):
        detail = details[route]
        return str(detail.get("api") or "?"), str(detail.get("host") or "?"), str(detail.get("model") or "?")
    api = header.api if header is not None else None
    model = header.model if header is not None else None
    return api or "?", "?", model or "?"


def _learn(report: TuneReport, found: RequestTrace) -> None:
    seg = segment(found.events)
    for number, events in seg.attempts.items():
        api, host, model = _endpoint(found, seg.attempt_route.get(number, 0))
        last = seg.opened_at[number]
        phase = "first_event"
        for recorded in events:
            event = recorded.event
            if isinstance(event, StaleTimeout):
                report.group(api, host, model, phase).censored.append(round(recorded.t - last, 6))
                break
            if not isinstance(event, _PROGRESS):
                continue
            report.group(api, host, model, phase).gaps.append(round(max(recorded.t - last, 0.0), 6))
            last = recorded.t
            phase = _next_phase(phase, event)


def _next_phase(phase: str, event: object) -> str:
    """The phase after `event`, as the live watchdog tells it (`deadlines.phase_of`): a tool call
    holds `tool_args` until the finish reason; text (or a finish) makes it `text`; reasoning before
    anything else `thinking`."""
    if isinstance(event, FinishReason):
        return "text"
    if isinstance(event, ToolCallDelta) or phase == "tool_args":
        return "tool_args"
    if isinstance(event, TextDelta | RefusalDelta) or phase == "text":
        return "text"
    if isinstance(event, ReasoningDelta) and phase in ("first_event", "thinking"):
        return "thinking"
    return "text" if phase == "first_event" else phase
