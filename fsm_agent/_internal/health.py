"""Provider health per endpoint (HL-1): what a session learns about an endpoint and keeps.

An endpoint is (api, base URL, model). Its health is the stall breaker (streak, open-until, a probe
in flight), the rate-limit cooldown, and two quirks (`stream_options` rejected, streaming
unavailable). A store is read once when a request starts (`get`) and written only when health
changes (`update`), never per token. Changes are described as `HealthChange` values and applied
by the pure `apply()`, so every store (the in-process `MemoryHealth`, a shared one) agrees on what
a change means. Times are wall-clock seconds (`time.time()`), because a shared store spans machines.

HL-1: a wall clock can be stepped (NTP, an operator, another machine's skew), so every deadline is
kept with its original length (`*_for`), and what remains of it is never more than that length:
`bounded(health, now)` clamps each deadline to `now + length`, and `apply` does so at the writer's
`now` (`HealthChange.at`) before anything else, so a clock stepped back re-bases the stored deadline
once instead of keeping it for the size of the step.

This module never performs I/O; stores that do (Redis) live beside it.
"""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable

from .capacity import Bucket, CapacityChange, CapacityKey, apply_capacity
from .frozen import Frozen, replace, set_field

__all__ = [
    "EndpointHealth",
    "EndpointKey",
    "HealthChange",
    "HealthStore",
    "MemoryHealth",
    "apply",
    "bounded",
]


# The three records are `Frozen` value classes (compared and hashed by their fields, immutable):
# internal, and on the import path of every session (a frozen dataclass costs ~0.8 ms to define).
class EndpointKey(Frozen):
    """Which endpoint a request goes to: its API, base URL (no credentials) and model."""

    __slots__ = ("api", "base_url", "model")
    api: str
    base_url: str
    model: str

    def __init__(self, api: str, base_url: str, model: str) -> None:
        set_field(self, "api", api)
        set_field(self, "base_url", base_url)
        set_field(self, "model", model)

    def __str__(self) -> str:
        return f"{self.api}|{self.base_url}|{self.model}"


class EndpointHealth(Frozen):
    """One endpoint's health as a store holds it. The default value is a healthy endpoint."""

    __slots__ = (
        "breaker_open_for",
        "breaker_open_until",
        "cooldown_for",
        "cooldown_until",
        "prefill_refused",
        "probe_for",
        "probe_owner",
        "probe_until",
        "stale_streak",
        "stream_options_unsupported",
        "streaming_disabled",
    )
    stale_streak: int
    breaker_open_until: float  # > 0: tripped; requests refused until then (BO-7)
    probe_until: float  # a half-open probe is in flight until then (one at a time)
    probe_owner: str  # the request holding the probe (its request id)
    cooldown_until: float  # BO-6: requests wait until then before sending
    stream_options_unsupported: bool  # RES-8
    streaming_disabled: bool  # RES-9
    prefill_refused: bool  # RC-3: the endpoint refused an assistant prefill
    # HL-1: the original length of each deadline above (0.0: unknown, so not bounded)
    breaker_open_for: float
    probe_for: float
    cooldown_for: float

    def __init__(
        self,
        stale_streak: int = 0,
        breaker_open_until: float = 0.0,
        probe_until: float = 0.0,
        probe_owner: str = "",
        cooldown_until: float = 0.0,
        stream_options_unsupported: bool = False,
        streaming_disabled: bool = False,
        prefill_refused: bool = False,
        breaker_open_for: float = 0.0,
        probe_for: float = 0.0,
        cooldown_for: float = 0.0,
    ) -> None:
        set_field(self, "stale_streak", stale_streak)
        set_field(self, "breaker_open_until", breaker_open_until)
        set_field(self, "probe_until", probe_until)
        set_field(self, "probe_owner", probe_owner)
        set_field(self, "cooldown_until", cooldown_until)
        set_field(self, "stream_options_unsupported", stream_options_unsupported)
        set_field(self, "streaming_disabled", streaming_disabled)
        set_field(self, "prefill_refused", prefill_refused)
        set_field(self, "breaker_open_for", breaker_open_for)
        set_field(self, "probe_for", probe_for)
        set_field(self, "cooldown_for", cooldown_for)

    def is_default(self) -> bool:
        return self == _HEALTHY

    def expires_at(self, now: float) -> float | None:
        """When nothing in this value matters any more (a store may then forget it); None: keep.
        Quirks and a non-zero streak are kept; a closed breaker and an elapsed cooldown are not."""
        if (
            self.stream_options_unsupported
            or self.streaming_disabled
            or self.stale_streak
            or self.prefill_refused
        ):
            return None
        latest = max(self.breaker_open_until, self.probe_until, self.cooldown_until)
        return latest if latest > now else now


_HEALTHY = EndpointHealth()
_EMPTY_BUCKET = Bucket()


class HealthChange(Frozen):
    """A change to one endpoint's health; fields left at their default change nothing."""

    __slots__ = (
        "at",
        "breaker_open_until",
        "cooldown_until",
        "prefill_refused",
        "probe_until",
        "stall",
        "stream_options_unsupported",
        "streaming_disabled",
        "success",
        "take_probe",
    )
    stall: bool  # WD-3, RC-9: one more failed attempt, a stall or another (the streak grows)
    success: bool  # a successful request or stub: streak reset, breaker closed
    breaker_open_until: float | None  # trip (or re-trip) the breaker until then
    probe_until: float | None  # take (or release, with 0.0) the half-open probe
    # BO-7: take the probe for this request id only if it is free at `at` (one probe at a time:
    # the store applies this atomically; the caller reads `probe_owner` of the result to know)
    take_probe: str | None
    # The writer's wall clock (0.0: unknown). HL-1: deadlines are first bounded at `at`, and a
    # deadline set with it keeps `until - at` as its length.
    at: float
    cooldown_until: float | None  # BO-6: a later cooldown replaces an earlier one
    stream_options_unsupported: bool
    streaming_disabled: bool
    prefill_refused: bool  # RC-3

    def __init__(
        self,
        stall: bool = False,
        success: bool = False,
        breaker_open_until: float | None = None,
        probe_until: float | None = None,
        take_probe: str | None = None,
        at: float = 0.0,
        cooldown_until: float | None = None,
        stream_options_unsupported: bool = False,
        streaming_disabled: bool = False,
        prefill_refused: bool = False,
    ) -> None:
        set_field(self, "stall", stall)
        set_field(self, "success", success)
        set_field(self, "breaker_open_until", breaker_open_until)
        set_field(self, "probe_until", probe_until)
        set_field(self, "take_probe", take_probe)
        set_field(self, "at", at)
        set_field(self, "cooldown_until", cooldown_until)
        set_field(self, "stream_options_unsupported", stream_options_unsupported)
        set_field(self, "streaming_disabled", streaming_disabled)
        set_field(self, "prefill_refused", prefill_refused)


def _within(until: float, length: float, now: float) -> float:
    return now + length if length > 0 and until - now > length else until


def bounded(health: EndpointHealth, now: float) -> EndpointHealth:
    """HL-1: `health` with no deadline further from `now` than its original length (pure). A clock
    stepped back leaves a deadline that seems to lie further ahead than it was ever set for; it is
    moved to `now + length`. A deadline of unknown length (0.0) is left alone."""
    breaker = _within(health.breaker_open_until, health.breaker_open_for, now)
    probe = _within(health.probe_until, health.probe_for, now)
    cooldown = _within(health.cooldown_until, health.cooldown_for, now)
    if (breaker, probe, cooldown) == (health.breaker_open_until, health.probe_until, health.cooldown_until):
        return health
    return replace(health, breaker_open_until=breaker, probe_until=probe, cooldown_until=cooldown)


def _length(until: float, at: float) -> float:
    return until - at if at > 0 and until > at else 0.0


def apply(health: EndpointHealth, change: HealthChange, *, bound: bool = True) -> EndpointHealth:
    """The health after `change` (pure; every store uses it). `bound=False` for a change written
    late (queued while the store was away): its clock is old, and bounding by it would cut short
    the deadlines other processes set since."""
    updated = bounded(health, change.at) if bound and change.at > 0 else health
    if change.success:
        updated = replace(
            updated,
            stale_streak=0,
            breaker_open_until=0.0,
            breaker_open_for=0.0,
            probe_until=0.0,
            probe_for=0.0,
            probe_owner="",
        )
    if change.stall:
        updated = replace(updated, stale_streak=updated.stale_streak + 1)
    if change.breaker_open_until is not None:
        updated = replace(
            updated,
            breaker_open_until=change.breaker_open_until,
            breaker_open_for=_length(change.breaker_open_until, change.at),
        )
    if change.take_probe is not None:
        if change.probe_until is not None and updated.probe_until <= change.at:
            updated = replace(
                updated,
                probe_until=change.probe_until,
                probe_for=_length(change.probe_until, change.at),
                probe_owner=change.take_probe,
            )
    elif change.probe_until is not None:
        owner = updated.probe_owner if change.probe_until > 0 else ""
        updated = replace(
            updated,
            probe_until=change.probe_until,
            probe_for=_length(change.probe_until, change.at),
            probe_owner=owner,
        )
    if change.cooldown_until is not None and change.cooldown_until > updated.cooldown_until:
        updated = replace(
            updated,
            cooldown_until=change.cooldown_until,
            cooldown_for=_length(change.cooldown_until, change.at),
        )
    if change.stream_options_unsupported:
        updated = replace(updated, stream_options_unsupported=True)
    if change.streaming_disabled:
        updated = replace(updated, streaming_disabled=True)
    if change.prefill_refused:
        updated = replace(updated, prefill_refused=True)
    return updated


@runtime_checkable
class HealthStore(Protocol):
    """Where a session keeps endpoint health. Sync and async requests use their own pair."""

    def get(self, key: EndpointKey) -> EndpointHealth: ...

    def update(self, key: EndpointKey, change: HealthChange) -> EndpointHealth: ...

    async def aget(self, key: EndpointKey) -> EndpointHealth: ...

    async def aupdate(self, key: EndpointKey, change: HealthChange) -> EndpointHealth: ...


class MemoryHealth:
    """Health kept in this process (the default): a dict under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._health: dict[EndpointKey, EndpointHealth] = {}
        self._buckets: dict[CapacityKey, Bucket] = {}  # CAP-1: per (endpoint, key)

    # -- CAP-1..CAP-3: capacity, one bucket per (endpoint, key) ------------------------------------
    def capacity(self, key: CapacityKey, change: CapacityChange) -> tuple[Bucket, float]:
        """Apply `change` to the key's bucket atomically; the bucket after it and the wait."""
        with self._lock:
            bucket, wait = apply_capacity(self._buckets.get(key, _EMPTY_BUCKET), change)
            if bucket.is_default():
                self._buckets.pop(key, None)
            else:
                self._buckets[key] = bucket
            return bucket, wait

    async def acapacity(self, key: CapacityKey, change: CapacityChange) -> tuple[Bucket, float]:
        return self.capacity(key, change)

    def get(self, key: EndpointKey) -> EndpointHealth:
        with self._lock:
            return self._health.get(key, _HEALTHY)

    def update(self, key: EndpointKey, change: HealthChange) -> EndpointHealth:
        with self._lock:
            updated = apply(self._health.get(key, _HEALTHY), change)
            if updated.is_default():
                self._health.pop(key, None)
            else:
                self._health[key] = updated
            return updated

    async def aget(self, key: EndpointKey) -> EndpointHealth:
        return self.get(key)

    async def aupdate(self, key: EndpointKey, change: HealthChange) -> EndpointHealth:
        return self.update(key, change)

    def __repr__(self) -> str:
        with self._lock:
            return f"MemoryHealth({len(self._health)} endpoints)"
