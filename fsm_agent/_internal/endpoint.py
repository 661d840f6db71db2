"""One request's link to its endpoint's health (HL-1): read once at the start, written on change.

`EndpointLink` is the one place where health meets a request. At the start (`begin`/`abegin`) it
reads the endpoint's `EndpointHealth`, takes the half-open breaker's probe when the breaker's
cooldown has passed and no other request holds it (BO-7), and turns the result into the facts the
machine's context starts from (`StartFacts`: streak, quirks, remaining cooldown, probe). While the
request runs, the machine's `Remember` actions become `HealthChange`s (`remember`/`aremember`): a
stall or another failed attempt of a transient kind (RC-9; tripping or re-tripping the breaker at
`stale_giveup`), a success (only written when there
was something to reset), a learned quirk, a cooldown after a 429/529 with a hint (BO-6). At the end
(`finish`/`afinish`) a probe that neither succeeded nor stalled is settled: a transient failure
re-trips the breaker, anything else just frees the probe. A route (RT-) gets a link of its own.

Times here are wall-clock (`wall_clock()`, or the link's own `clock`): a shared store spans processes.
HL-1: every change carries the link's `now` (`HealthChange.at`), so the deadlines it sets keep their
length, and a start that finds a deadline further ahead than its length (the clock was stepped
back) bounds it, in the store too, before deciding anything. Never decides policy beyond
translating facts; the machine decides.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from .actions import Remember
from .capacity import CapacityChange, CapacityKey
from .errors import ErrorKind, classify
from .frozen import Frozen, replace, set_field
from .health import EndpointHealth, EndpointKey, HealthChange, HealthStore, bounded
from .urls import is_botocore_client, url_text

__all__ = ["EndpointLink", "HealthSettings", "StartFacts", "base_url_of", "endpoint_key"]


def base_url_of(client: Any) -> str:
    """The base URL a client sends to, without credentials, query or fragment ("" if unknown).

    openai / anthropic clients have `base_url`; boto3 clients `meta.endpoint_url`; google-genai
    clients their `http_options.base_url`.
    """
    raw = None if is_botocore_client(client) else getattr(client, "base_url", None)
    if raw is None:
        meta = getattr(client, "meta", None)
        raw = getattr(meta, "endpoint_url", None)
    if raw is None:  # google-genai: the api client's http_options (Client and .aio alike)
        api_client = getattr(getattr(client, "models", None), "_api_client", None)
        raw = getattr(getattr(api_client, "_http_options", None), "base_url", None)
    if raw is None:
        return ""
    return _canonical_url(url_text(raw))


@functools.lru_cache(maxsize=256)
def _canonical_url(raw: str) -> str:
    # A pure function of the string, asked once or more per request: parsed once per URL.
    try:
        parts = urlsplit(raw)
    except ValueError:
        return ""
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def endpoint_key(api: str, client: Any, model: str | None, base_url: str | None = None) -> EndpointKey:
    """The endpoint `client` sends `model`'s requests of `api` to; `base_url`: the client's, when
    the caller has already read it (`base_url_of`)."""
    return EndpointKey(
        api=api, base_url=base_url_of(client) if base_url is None else base_url, model=model or ""
    )


class HealthSettings(Frozen):
    __slots__ = ("breaker_cooldown", "probe_lease", "stale_giveup")
    stale_giveup: int
    breaker_cooldown: float
    probe_lease: float  # how long a probe holds the half-open slot if its process dies mid-way

    def __init__(self, stale_giveup: int, breaker_cooldown: float, probe_lease: float) -> None:
        set_field(self, "stale_giveup", stale_giveup)
        set_field(self, "breaker_cooldown", breaker_cooldown)
        set_field(self, "probe_lease", probe_lease)


class StartFacts(Frozen):
    """What the request's context starts from (`RequestContext` fields of the same names, listed
    in `__match_args__`)."""

    __slots__ = (
        "breaker_probe",
        "breaker_retry_at",
        "capacity_wait_s",
        "cooldown_s",
        "prefill_refused",
        "stale_streak",
        "stream_options_unsupported",
        "streaming_disabled",
    )
    stale_streak: int
    streaming_disabled: bool
    stream_options_unsupported: bool
    cooldown_s: float
    breaker_probe: bool
    breaker_retry_at: float | None
    prefill_refused: bool  # RC-3
    capacity_wait_s: float  # CAP-2: the wait for the slot reserved in the endpoint's capacity

    def __init__(
        self,
        stale_streak: int,
        streaming_disabled: bool,
        stream_options_unsupported: bool,
        cooldown_s: float,
        breaker_probe: bool,
        breaker_retry_at: float | None,
        prefill_refused: bool = False,
        capacity_wait_s: float = 0.0,
    ) -> None:
        set_field(self, "stale_streak", stale_streak)
        set_field(self, "streaming_disabled", streaming_disabled)
        set_field(self, "stream_options_unsupported", stream_options_unsupported)
        set_field(self, "cooldown_s", cooldown_s)
        set_field(self, "breaker_probe", breaker_probe)
        set_field(self, "breaker_retry_at", breaker_retry_at)
        set_field(self, "prefill_refused", prefill_refused)
        set_field(self, "capacity_wait_s", capacity_wait_s)


class CapacityPlan(Frozen):
    """CAP-2: what a route's request needs of its endpoint's capacity: its (endpoint, key), the
    tokens it is estimated to use (its prompt at four characters a token, plus the output bound it
    asks for), and the longest wait for a slot it takes (BO-3's `max_wait` on that route)."""

    __slots__ = ("key", "max_wait", "tokens")
    key: CapacityKey
    tokens: int
    max_wait: float

    def __init__(self, key: CapacityKey, tokens: int, max_wait: float) -> None:
        set_field(self, "key", key)
        set_field(self, "tokens", tokens)
        set_field(self, "max_wait", max_wait)


def key_fingerprint(client: Any) -> str:
    """The API key a client sends, as a short fingerprint (never the key): whose rate limits.
    "" when the client shows none (boto3's credentials, a custom client)."""
    key = getattr(client, "api_key", None)
    if key is None:  # google-genai: its api client's key
        key = getattr(getattr(getattr(client, "models", None), "_api_client", None), "api_key", None)
    if not isinstance(key, str) or not key:
        return ""
    return _fingerprint(key)


@functools.lru_cache(maxsize=64)
def _fingerprint(key: str) -> str:
    # A pure function of the key, asked once per request of every route: hashed once per key.
    import hashlib  # here, not at import: it loads OpenSSL (~3 ms), which a request may not need

    return hashlib.sha256(key.encode()).hexdigest()[:12]


def wall_clock() -> float:
    """The wall clock a link reads when given none (`time.time()`); looked up at each read, so a
    test that steps the clock by hand replaces it here (a seam, as the watchdog timer's clock is)."""
    return time.time()


def _tripped(health: EndpointHealth, settings: HealthSettings) -> bool:
    return settings.stale_giveup > 0 and health.stale_streak >= settings.stale_giveup


class EndpointLink:
    """The health of one endpoint as one request sees and changes it."""

    def __init__(
        self,
        store: HealthStore,
        key: EndpointKey,
        settings: HealthSettings,
        request_id: str,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.store = store
        self._clock = clock  # wall-clock seconds; None: `wall_clock()`
        self.key = key
        self.settings = settings
        self.request_id = request_id
        self.probe = False  # this request holds the half-open probe (until settled)
        self._reset_needed = False  # the start health had a streak or breaker a success resets
        self.capacity: CapacityPlan | None = None  # CAP-2: set by the plan when the store keeps capacity
        self.reserved_tokens = 0.0  # CAP-2: the tokens a reservation took (reconciled at the end)

    def _now(self) -> float:
        return self._clock() if self._clock is not None else wall_clock()

    # -- the start ---------------------------------------------------------------------------------
    def _probe_change(self, health: EndpointHealth, now: float) -> HealthChange | None:
        """BO-7: the change that takes the probe, when the breaker is half-open and it is free."""
        if not _tripped(health, self.settings) or health.breaker_open_until > now:
            return None
        if health.probe_until > now:
            return None
        return HealthChange(take_probe=self.request_id, probe_until=now + self.settings.probe_lease, at=now)

    def _facts(self, health: EndpointHealth, now: float) -> StartFacts:
        self.probe = health.probe_owner == self.request_id and health.probe_until > now
        self._reset_needed = health.stale_streak > 0 or health.breaker_open_until > 0
        retry_at: float | None = None
        if _tripped(health, self.settings) and not self.probe:
            retry_at = max(health.breaker_open_until, health.probe_until, now)
        return StartFacts(
            stale_streak=health.stale_streak,
            streaming_disabled=health.streaming_disabled,
            stream_options_unsupported=health.stream_options_unsupported,
            cooldown_s=max(0.0, health.cooldown_until - now),
            breaker_probe=self.probe,
            breaker_retry_at=retry_at,
            prefill_refused=health.prefill_refused,
        )

    def begin(self) -> StartFacts:
        return _called(self.store, self._begin())

    async def abegin(self) -> StartFacts:
        return await _awaited(self.store, self._begin())

    def _begin(self) -> _StoreSteps[StartFacts]:
        now = self._now()
        health = yield self.key, None
        if bounded(health, now) != health:  # HL-1: the clock was stepped back; re-base in the store
            health = yield self.key, HealthChange(at=now)
        health = bounded(health, now)  # also when the store could not take the re-base
        take = self._probe_change(health, now)
        if take is not None:
            health = yield self.key, take
        facts = self._facts(health, now)
        plan = self.capacity
        skipped = facts.breaker_retry_at is not None or facts.cooldown_s > (plan.max_wait if plan else 0)
        if plan is None or skipped:
            return facts
        # CAP-2: this request's slot in the endpoint's capacity, taken now (atomically, for the
        # fleet with a shared store); not taken when it lies further than max_wait
        bucket, wait = yield (
            plan.key,
            CapacityChange("reserve", now, tokens=plan.tokens, max_wait=plan.max_wait),
        )
        if wait <= plan.max_wait:
            self.reserved_tokens = float(plan.tokens) if bucket.tokens_limit > 0 else 0.0
        if wait == 0 and facts.capacity_wait_s == 0:
            return facts  # the usual start: a slot at once (or nothing known to wait for)
        return replace(facts, capacity_wait_s=round(wait, 6))

    # -- while the request runs ----------------------------------------------------------------------
    def _change(self, action: Remember, now: float) -> HealthChange | None:
        fact = action.fact
        if fact in ("stall", "failure"):  # RC-9: any failed attempt of a transient kind counts
            self._reset_needed = True
            return HealthChange(stall=True, at=now)
        if fact == "success":
            if not self._reset_needed and not self.probe:
                return None  # nothing to reset: no write (HL-2)
            self.probe = False
            self._reset_needed = False
            return HealthChange(success=True, at=now)
        if fact == "cooldown":
            return HealthChange(cooldown_until=now + action.seconds, at=now)
        if fact == "stream_options_unsupported":
            return HealthChange(stream_options_unsupported=True, at=now)
        if fact == "streaming_disabled":
            return HealthChange(streaming_disabled=True, at=now)
        if fact == "prefill_refused":  # RC-3
            return HealthChange(prefill_refused=True, at=now)
        if fact == "capacity":  # CAP-1: learned by `_remember`, in the capacity of (endpoint, key)
            return None
        raise ValueError(f"unknown health fact {fact!r}")

    def _trip_change(self, health: EndpointHealth, now: float) -> HealthChange | None:
        """After a stall: (re-)trip the breaker once the streak reaches stale_giveup (BO-7)."""
        if not _tripped(health, self.settings):
            return None
        release = 0.0 if self.probe else None
        self.probe = False
        return HealthChange(
            breaker_open_until=now + self.settings.breaker_cooldown, probe_until=release, at=now
        )

    def remember(self, action: Remember) -> None:
        _called(self.store, self._remember(action))

    async def aremember(self, action: Remember) -> None:
        await _awaited(self.store, self._remember(action))

    def _remember(self, action: Remember) -> _StoreSteps[None]:
        now = self._now()
        if action.fact == "capacity":
            if self.capacity is not None and action.reading is not None:
                yield self.capacity.key, CapacityChange("learn", now, reading=action.reading)
            return
        change = self._change(action, now)
        if change is None:
            return
        health = yield self.key, change
        if change.stall:
            trip = self._trip_change(health, now)
            if trip is not None:
                yield self.key, trip

    # -- the end ---------------------------------------------------------------------------------------
    def _settle(self, error: BaseException | None) -> HealthChange | None:
        """A probe still held at the end: re-trip on a transient failure, else just free it."""
        if not self.probe:
            return None
        self.probe = False
        now = self._now()
        if error is not None and classify(error) is ErrorKind.TRANSIENT:
            reopen = now + self.settings.breaker_cooldown
            return HealthChange(breaker_open_until=reopen, probe_until=0.0, at=now)
        return HealthChange(probe_until=0.0, at=now)

    def finish(self, error: BaseException | None, used_tokens: int | None = None) -> None:
        _called(self.store, self._finish(error, used_tokens))

    async def afinish(self, error: BaseException | None, used_tokens: int | None = None) -> None:
        await _awaited(self.store, self._finish(error, used_tokens))

    def _finish(self, error: BaseException | None, used_tokens: int | None = None) -> _StoreSteps[None]:
        change = self._settle(error)
        if change is not None:
            yield self.key, change
        reserved, self.reserved_tokens = self.reserved_tokens, 0.0
        if self.capacity is not None and reserved and used_tokens is not None:
            # CAP-2: the estimate reconciled with the real usage (more used: taken; less: given back)
            yield self.capacity.key, CapacityChange("refund", self._now(), tokens=reserved - used_tokens)

    def learn(self, reading: Any) -> None:
        """CAP-1: a response's rate-limit reading, into the endpoint's capacity."""
        _called(self.store, self._remember(Remember("capacity", reading=reading)))

    async def alearn(self, reading: Any) -> None:
        await _awaited(self.store, self._remember(Remember("capacity", reading=reading)))


# A link's reads and writes of its store, written once: each yields `(key, None)` to read the
# endpoint's health or `(key, change)` to update it, and is sent the health the store returns.
# `begin`/`remember`/`finish` call the store, their `a…` twins await it; a store's error is raised
# to the caller from there (the steps hold nothing to clean up).
_T = TypeVar("_T")
if TYPE_CHECKING:
    _StoreSteps = Generator[tuple[Any, Any], Any, _T]


def _called(store: HealthStore, steps: _StoreSteps[_T]) -> _T:
    asked = _Asked(steps)
    while asked.next():
        asked.health = asked.of(store)
    result: _T = asked.result
    return result


async def _awaited(store: HealthStore, steps: _StoreSteps[_T]) -> _T:
    asked = _Asked(steps)
    while asked.next():
        asked.health = await asked.of_async(store)
    result: _T = asked.result
    return result


class _Asked:
    """What a link's steps ask of the store next, and what they returned."""

    __slots__ = ("_steps", "change", "health", "key", "result")

    def __init__(self, steps: _StoreSteps[Any]) -> None:
        self._steps = steps
        self.health: Any = None

    def next(self) -> bool:
        try:
            self.key, self.change = self._steps.send(self.health)
        except StopIteration as done:
            self.result: Any = done.value
            return False
        return True

    def of(self, store: HealthStore) -> Any:
        key, change = self.key, self.change
        if type(change) is CapacityChange:  # CAP-1: the plan sets one only for a store with capacity
            return store.capacity(key, change)  # type: ignore[attr-defined]
        return store.get(key) if change is None else store.update(key, change)

    def of_async(self, store: HealthStore) -> Awaitable[Any]:
        key, change = self.key, self.change
        if type(change) is CapacityChange:
            return store.acapacity(key, change)  # type: ignore[attr-defined,no-any-return]
        return store.aget(key) if change is None else store.aupdate(key, change)
