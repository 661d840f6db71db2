"""What a replay found: its steps, the first mismatch, and how the run ended (TR-3, TR-4).

Plain data plus the comparison of a replayed transition with a recorded one. Time (`t`) is shown
but never compared: a replay feeds events at their recorded times, and a what-if run moves them.
Never performs I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ReplayMismatch
from ..result import StreamResult
from .records import TransitionRecord

__all__ = [
    "COMPARED_FIELDS",
    "Mismatch",
    "Outcome",
    "ReplayReport",
    "RequestReplay",
    "Step",
    "compare_records",
    "outcome_of",
]

COMPARED_FIELDS = ("attempt", "trigger", "source", "dest", "guards", "visible_chars", "tools_in_flight")
# Inputs that are settings: a what-if run changes them on purpose.
_SETTING_INPUTS = frozenset({"retries", "unsupported", "stale_giveup", "routes"})


def compare_records(
    recorded: TransitionRecord, replayed: TransitionRecord, overridden: Iterable[str] = ()
) -> dict[str, tuple[Any, Any]]:
    """The fields that differ, as name -> (recorded, replayed); inputs that are settings, or that a
    what-if run `overridden`, differ on purpose and are not compared."""
    skip = _SETTING_INPUTS.union(overridden)
    if "first_byte_stall" not in recorded.inputs:
        # A trace written before RC-9 counted only stalls in the endpoint's streak (its records
        # have no `first_byte_stall`, RC-8's input of the same change): its streak is not compared.
        skip = skip.union(("stale_streak",))
    diffs: dict[str, tuple[Any, Any]] = {}
    for name in COMPARED_FIELDS:
        want, got = getattr(recorded, name), getattr(replayed, name)
        if name == "guards" and not recorded.effects and replayed.effects:
            # A trace written before records named their effects was decided by a table that
            # asked fewer guards (which message applies is a guard now): those are not compared.
            got = {key: value for key, value in got.items() if key in want}
        elif name == "guards" and isinstance(want, dict) and isinstance(got, dict):
            # A guard the recorded table did not have yet, asked and False, decided nothing the
            # row taken (compared below: dest, effects) does not show (WD-8's stall rows).
            got = {key: value for key, value in got.items() if key in want or value}
        if want != got:
            diffs[name] = (want, got)
    if recorded.route is not None and recorded.route != replayed.route:  # RT-1; older traces have none
        diffs["route"] = (recorded.route, replayed.route)
    if recorded.effects and recorded.effects != replayed.effects:  # older traces name none
        diffs["effects"] = (recorded.effects, replayed.effects)
    for key, want in recorded.inputs.items():
        if key in skip:
            continue
        got = replayed.inputs.get(key)
        if want != got:
            diffs[f"inputs.{key}"] = (want, got)
    return diffs


def _brief(record: TransitionRecord | None) -> str:
    if record is None:
        return "(no step)"
    return f"{record.trigger}: {record.source} -> {record.dest}"


@dataclass(frozen=True, slots=True, repr=False)
class Step:
    """One transition of the replay beside the recorded one at the same position."""

    index: int  # 1-based, counted over the whole report
    request_id: str
    replayed: TransitionRecord | None  # None: the replay stopped before this recorded step
    recorded: TransitionRecord | None  # None: the replay went further than the recording
    delivered_chars: int | None = None  # text delivered to on_text so far (wire recordings only)
    differences: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    @property
    def matched(self) -> bool:
        return self.replayed is not None and self.recorded is not None and not self.differences

    def __repr__(self) -> str:
        state = "matched" if self.matched else f"differs in {len(self.differences)} field(s)"
        if self.replayed is None or self.recorded is None:
            state = "recorded only" if self.replayed is None else "replayed only"
        return f"<Step {self.index} {_brief(self.shown)}: {state}>"

    @property
    def shown(self) -> TransitionRecord:
        record = self.replayed if self.replayed is not None else self.recorded
        assert record is not None
        return record

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.index,
            "request_id": self.request_id,
            "matched": self.matched,
            "delivered_chars": self.delivered_chars,
            "replayed": self.replayed.as_dict() if self.replayed is not None else None,
            "recorded": self.recorded.as_dict() if self.recorded is not None else None,
            "differences": {name: list(pair) for name, pair in self.differences.items()},
        }


def _difference(name: str, want: Any, got: Any) -> str:
    if name != "guards" or not isinstance(want, dict) or not isinstance(got, dict):
        return f"{name} recorded {want!r}, replayed {got!r}"
    unset = "not evaluated"
    keys = [key for key in dict.fromkeys([*want, *got]) if want.get(key) != got.get(key)]
    return "guards " + ", ".join(
        f"{key} recorded {want.get(key, unset)}, replayed {got.get(key, unset)}" for key in keys
    )


@dataclass(frozen=True, slots=True)
class Mismatch:
    """The first step at which the replay differs from the recording."""

    step: int
    request_id: str
    seq: int
    expected: TransitionRecord | None
    got: TransitionRecord | None
    fields: dict[str, tuple[Any, Any]]

    @property
    def message(self) -> str:
        if self.got is None:
            return f"step {self.step}: the replay stopped; the recording has {_brief(self.expected)}"
        if self.expected is None:
            return f"step {self.step}: the replay took {_brief(self.got)}; the recording had ended"
        parts = "; ".join(_difference(name, want, got) for name, (want, got) in self.fields.items())
        return f"step {self.step} ({_brief(self.expected)}): {parts}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "request_id": self.request_id,
            "seq": self.seq,
            "message": self.message,
            "expected": self.expected.as_dict() if self.expected is not None else None,
            "got": self.got.as_dict() if self.got is not None else None,
            "fields": {name: list(pair) for name, pair in self.fields.items()},
        }


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended: `action` is "return", "raise" or "unknown" (the trace holds no more)."""

    action: str
    state: str
    attempts: int
    summary: str
    error: str | None = None
    stub: bool = False
    content: str | None = None  # the result's content (wire recordings only)

    def describe(self, would: bool = True) -> str:
        if self.action == "unknown":
            return self.summary
        verb = {"return": "return", "raise": "raise"}[self.action]
        if not would:
            verb = {"return": "returned", "raise": "raised"}[self.action]
            return f"{verb} {self.summary}"
        return f"would {verb} {self.summary}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "state": self.state,
            "attempts": self.attempts,
            "summary": self.summary,
            "description": self.describe(),
            "error": self.error,
            "stub": self.stub,
            "content": self.content,
        }


def _attempts(n: int) -> str:
    return f"{n} attempt" + ("" if n == 1 else "s")


def outcome_of(final: Any, state: str, attempts: int, content_known: bool) -> Outcome:
    """The outcome of a `Finish` result or a `Raise` error."""
    if isinstance(final, StreamResult):
        chars = len(final.content or "")
        if final.stub:
            dropped = (
                f"; dropped tools: {', '.join(final.dropped_tool_names)}" if final.dropped_tool_names else ""
            )
            kept = f"{chars} chars kept" if content_known else "content not recorded"
            summary = f"a stub (finish_reason=length, {kept}{dropped}) after {_attempts(attempts)}"
        elif not final.streamed:
            size = f"{chars} chars" if content_known else "content not recorded"
            summary = f"the non-streaming fallback's answer ({size}) after {_attempts(attempts)}"
        elif content_known:
            size = f"{chars} chars, {len(final.tool_calls)} tool call(s)"
            summary = f"the answer (finish_reason={final.finish_reason}, {size}) after {_attempts(attempts)}"
        else:
            summary = f"the answer (content not recorded) after {_attempts(attempts)}"
        return Outcome(
            "return",
            state,
            attempts,
            summary,
            stub=final.stub,
            content=final.content if content_known else None,
        )
    name = type(final).__name__
    return Outcome("raise", state, attempts, f"{name} after {_attempts(attempts)}", error=name)


@dataclass(slots=True, repr=False)
class RequestReplay:
    """The replay of one request of the trace."""

    def __repr__(self) -> str:
        mismatch = self.first_mismatch
        where = "matched" if mismatch is None else f"first mismatch at step {mismatch.step}"
        return f"<RequestReplay {self.request_id}: {len(self.steps)} step(s), {where}>"

    request_id: str
    mode: str  # "wire" (events re-fed) or "records" (records re-fired from their inputs)
    settings: dict[str, Any]  # the settings the replay ran with
    overrides: dict[str, Any]
    steps: list[Step] = field(default_factory=list)
    outcome: Outcome | None = None
    recorded_outcome: Outcome | None = None
    notes: list[str] = field(default_factory=list)
    # WD-10: in a what-if run, each attempt that would have stalled: attempt, t, phase, deadline
    stalls: list[dict[str, Any]] = field(default_factory=list)
    cost: Any = None  # COST-1: a `cost.RequestCost`, what the request (and its faults) cost
    machine: Any = None  # the replayed machine, while the cost is made from it

    @property
    def first_mismatch(self) -> Mismatch | None:
        for step in self.steps:
            if not step.matched:
                ref = step.recorded if step.recorded is not None else step.replayed
                assert ref is not None
                return Mismatch(
                    step.index, self.request_id, ref.seq, step.recorded, step.replayed, step.differences
                )
        return None

    @property
    def matched(self) -> bool:
        return self.first_mismatch is None

    def as_dict(self) -> dict[str, Any]:
        mismatch = self.first_mismatch
        return {
            "request_id": self.request_id,
            "mode": self.mode,
            "settings": _plain_settings(self.settings),
            "overrides": _plain_settings(self.overrides),
            "matched": self.matched,
            "first_mismatch": mismatch.as_dict() if mismatch is not None else None,
            "outcome": self.outcome.as_dict() if self.outcome is not None else None,
            "recorded_outcome": self.recorded_outcome.as_dict()
            if self.recorded_outcome is not None
            else None,
            "notes": self.notes,
            "stalls": self.stalls,
            "cost": self.cost.as_dict() if self.cost is not None else None,
            "steps": [step.as_dict() for step in self.steps],
        }


@dataclass(slots=True, repr=False)
class ReplayReport:
    """What `fsm_agent.replay()` found (TR-3): did every step match, and if not, where not.

    `repr(report)` is one short line; `str(report)` is the readable timeline that
    `fsm-agent replay` prints (TR-4).

    Attributes:
        source: The trace replayed (a path, or "memory trace").
        overrides: The settings a what-if replay changed (`retries`, `stale_timeout`, ...); empty
            for a plain replay.
        requests: One `RequestReplay` per request in the trace, in order.
    """

    source: str
    overrides: dict[str, Any]
    requests: list[RequestReplay] = field(default_factory=list)

    @property
    def steps(self) -> list[Step]:
        return [step for request in self.requests for step in request.steps]

    @property
    def first_mismatch(self) -> Mismatch | None:
        for request in self.requests:
            mismatch = request.first_mismatch
            if mismatch is not None:
                return mismatch
        return None

    @property
    def matched(self) -> bool:
        return self.first_mismatch is None

    @property
    def outcome(self) -> Outcome | None:
        """The outcome of the last request (most traces hold one)."""
        return self.requests[-1].outcome if self.requests else None

    def __repr__(self) -> str:
        mismatch = self.first_mismatch
        where = "matched" if mismatch is None else f"first mismatch at step {mismatch.step}"
        what_if = f", what if {_brief_settings(self.overrides)}" if self.overrides else ""
        return (
            f"<ReplayReport {_brief_source(self.source)}: {len(self.requests)} request(s), "
            f"{len(self.steps)} step(s), {where}{what_if}>"
        )

    def __str__(self) -> str:
        from .timeline import timeline

        return timeline(self)

    def check(self) -> ReplayReport:
        """Raise `ReplayMismatch` naming the first differing step, if any; else return self."""
        mismatch = self.first_mismatch
        if mismatch is not None:
            raise ReplayMismatch(f"{self.source}: {mismatch.message}")
        return self

    def as_dict(self) -> dict[str, Any]:
        mismatch = self.first_mismatch
        return {
            "source": self.source,
            "overrides": _plain_settings(self.overrides),
            "matched": self.matched,
            "first_mismatch": mismatch.as_dict() if mismatch is not None else None,
            "requests": [request.as_dict() for request in self.requests],
        }


def _plain_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings as JSON takes them: a `Timeouts` (WD-10) as the fields it sets."""
    return {key: value.as_dict() if hasattr(value, "as_dict") else value for key, value in settings.items()}


def _brief_source(source: str, limit: int = 60) -> str:
    return source if len(source) <= limit else "…" + source[-(limit - 1) :]


def _brief_settings(overrides: dict[str, Any]) -> str:
    text = " ".join(f"{key}={value}" for key, value in overrides.items())
    return text if len(text) <= 80 else text[:79] + "…"
