"""Capacity learned from the providers' rate-limit signals (CAP-1..CAP-3): readings and buckets.

A `RateReading` is what one response said about an endpoint's rate limits, read from:

- OpenAI and compatible hosts (Groq, Together, DeepSeek, ...): `x-ratelimit-limit-requests`,
  `x-ratelimit-remaining-requests`, `x-ratelimit-reset-requests` and the same three for `tokens`
  (a reset is a duration: `1s`, `6m0s`, `20ms`, `1h2m3.5s`);
- Anthropic: `anthropic-ratelimit-requests-limit/-remaining/-reset` and `anthropic-ratelimit-tokens-*`
  (a reset is an RFC 3339 instant); the input/output token limits are read when the combined
  ones are absent (`anthropic-ratelimit-input-tokens-*`);
- Gemini: no headers; a 429 `RESOURCE_EXHAUSTED` carries `QuotaFailure` violations (the quota's
  id names its window, `...PerMinute...`, and `quotaValue` its limit) and `RetryInfo`;
- Bedrock: no headers; a `ThrottlingException` says only "none left", its wait the back-off's;
- any 429: none left until its hint (`retry-after`).

A `Bucket` is one (endpoint, key)'s capacity, per dimension (requests, tokens): a limit, a refill
rate, and a level at an instant — a token bucket refilled continuously, as the providers describe
theirs. A request reserves what it needs (`reserve`): the level may go below zero, and the
request waits until the refill pays its share (each request a slot of its own, so a fleet
resumes spread out, never all at once). A reading lowers the level to what the provider says
remains (`learn`: never raises it — reservations in flight have not reached the provider yet);
after a request, its token estimate is reconciled with its real usage (`refund`).

Pure: no I/O, no clock (`now` is given, wall-clock seconds: a shared store spans machines).
"""

from __future__ import annotations

import math
import re
from typing import Any

from .frozen import Frozen, replace, set_field

__all__ = [
    "Bucket",
    "CapacityChange",
    "CapacityKey",
    "RateReading",
    "apply_capacity",
    "read_rate_headers",
    "throttle_reading",
]

# When a reading says how much is left but not how fast it comes back, a minute's window (RPM,
# TPM: how every provider states its limits).
DEFAULT_WINDOW_S = 60.0
_MAX_VALUE = 2.0**53
_MAX_SECONDS = 366 * 86_400.0


class CapacityKey(Frozen):
    """Whose capacity: an endpoint (api, base URL, model) and the key it is used with (a short
    fingerprint of the API key, never the key)."""

    __slots__ = ("endpoint", "key_id")
    endpoint: str
    key_id: str

    def __init__(self, endpoint: str, key_id: str) -> None:
        set_field(self, "endpoint", endpoint)
        set_field(self, "key_id", key_id)

    def __str__(self) -> str:
        return f"{self.endpoint}|{self.key_id}"


class RateReading(Frozen):
    """What a response said of the endpoint's limits (None: not said). Resets in seconds from the
    reading's instant. `source`: "openai", "anthropic", "gemini", "bedrock", "429";
    `reset_is_next`: a throttle's reset is when the next unit comes back (its hint), not when all
    of it is back."""

    __slots__ = (
        "requests_limit",
        "requests_remaining",
        "requests_reset_s",
        "reset_is_next",
        "source",
        "tokens_limit",
        "tokens_remaining",
        "tokens_reset_s",
    )
    requests_limit: float | None
    requests_remaining: float | None
    requests_reset_s: float | None
    tokens_limit: float | None
    tokens_remaining: float | None
    tokens_reset_s: float | None
    source: str
    reset_is_next: bool

    def __init__(
        self,
        requests_limit: float | None = None,
        requests_remaining: float | None = None,
        requests_reset_s: float | None = None,
        tokens_limit: float | None = None,
        tokens_remaining: float | None = None,
        tokens_reset_s: float | None = None,
        source: str = "",
        reset_is_next: bool = False,
    ) -> None:
        set_field(self, "requests_limit", requests_limit)
        set_field(self, "requests_remaining", requests_remaining)
        set_field(self, "requests_reset_s", requests_reset_s)
        set_field(self, "tokens_limit", tokens_limit)
        set_field(self, "tokens_remaining", tokens_remaining)
        set_field(self, "tokens_reset_s", tokens_reset_s)
        set_field(self, "source", source)
        set_field(self, "reset_is_next", reset_is_next)

    def is_empty(self) -> bool:
        return all(
            value is None
            for value in (
                self.requests_limit,
                self.requests_remaining,
                self.tokens_limit,
                self.tokens_remaining,
            )
        )


def _number(raw: Any) -> float | None:
    if raw is None:
        return None
    try:
        value = float(str(raw).strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and 0 <= value <= _MAX_VALUE else None


# Compiled at its first match (by `re`'s own cache): importing the module compiles nothing.
_DURATION = r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+(?:\.\d+)?)ms)?$"


def parse_duration(raw: Any) -> float | None:
    """An OpenAI-style reset (`1s`, `6m0s`, `20ms`, `1h2m3.5s`, or plain seconds) in seconds."""
    if raw is None:
        return None
    text = str(raw).strip().lower()
    if not text or len(text) > 32:
        return None
    plain = _number(text)
    if plain is not None:
        return plain
    found = re.match(_DURATION, text)
    if found is None or not any(found.groups()):
        return None
    hours, minutes, seconds, millis = (float(part) if part else 0.0 for part in found.groups())
    total = hours * 3600 + minutes * 60 + seconds + millis / 1000
    return total if total <= _MAX_SECONDS else None


def _instant(raw: Any, now: float) -> float | None:
    """An Anthropic reset (an RFC 3339 instant) as seconds from `now`."""
    if raw is None:
        return None
    text = str(raw).strip()
    if len(text) > 40:
        return None
    from datetime import datetime  # only Anthropic's resets are instants: not at import

    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    seconds = when.timestamp() - now
    return max(0.0, seconds) if seconds <= _MAX_SECONDS else None


_RATE_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")


def _rate_headers(headers: Any) -> dict[str, Any]:
    """The response's rate-limit headers by lower-cased name, found in one pass over its headers
    (a case-insensitive `get` per name scans them all each time: a dozen scans a response, most
    of which find nothing). A name given twice keeps its last value. A headers object of a shape
    we do not know has none."""
    try:
        found = {}
        for name, value in headers.items():
            lower = str(name).lower()
            if lower.startswith(_RATE_PREFIXES):
                found[lower] = value
    except Exception:
        return {}
    return found


def read_rate_headers(headers: Any, now: float) -> RateReading | None:
    """CAP-1: the rate-limit headers of a response (OpenAI-style, then Anthropic's), or None."""
    if headers is None:
        return None
    found = _rate_headers(headers)
    if not found:
        return None
    get = found.get
    openai = RateReading(
        requests_limit=_number(get("x-ratelimit-limit-requests")),
        requests_remaining=_number(get("x-ratelimit-remaining-requests")),
        requests_reset_s=parse_duration(get("x-ratelimit-reset-requests")),
        tokens_limit=_number(get("x-ratelimit-limit-tokens")),
        tokens_remaining=_number(get("x-ratelimit-remaining-tokens")),
        tokens_reset_s=parse_duration(get("x-ratelimit-reset-tokens")),
        source="openai",
    )
    if not openai.is_empty():
        return openai
    tokens = "anthropic-ratelimit-tokens"
    if get(f"{tokens}-limit") is None and get("anthropic-ratelimit-input-tokens-limit") is not None:
        tokens = "anthropic-ratelimit-input-tokens"
    anthropic = RateReading(
        requests_limit=_number(get("anthropic-ratelimit-requests-limit")),
        requests_remaining=_number(get("anthropic-ratelimit-requests-remaining")),
        requests_reset_s=_instant(get("anthropic-ratelimit-requests-reset"), now),
        tokens_limit=_number(get(f"{tokens}-limit")),
        tokens_remaining=_number(get(f"{tokens}-remaining")),
        tokens_reset_s=_instant(get(f"{tokens}-reset"), now),
        source="anthropic",
    )
    return None if anthropic.is_empty() else anthropic


_QUOTA_FAILURE = "google.rpc.QuotaFailure"
_WINDOWS = (("perminute", 60.0), ("perhour", 3600.0), ("perday", 86_400.0), ("persecond", 1.0))


def _gemini_reading(exc: BaseException, hint: float | None) -> RateReading | None:
    """Gemini's 429: its `QuotaFailure` violations (which quota, its limit, its window)."""
    for body in (getattr(exc, "details", None), getattr(exc, "body", None)):
        error = body.get("error", body) if isinstance(body, dict) else None
        details = error.get("details") if isinstance(error, dict) else None
        if not isinstance(details, list):
            continue
        fields: dict[str, Any] = {}
        for detail in details:
            if not (isinstance(detail, dict) and str(detail.get("@type", "")).endswith(_QUOTA_FAILURE)):
                continue
            for violation in detail.get("violations") or ():
                if not isinstance(violation, dict):
                    continue
                quota = f"{violation.get('quotaId', '')} {violation.get('quotaMetric', '')}".lower()
                window = next((seconds for name, seconds in _WINDOWS if name in quota), DEFAULT_WINDOW_S)
                limit = _number(violation.get("quotaValue"))
                kind = "tokens" if "token" in quota else "requests"
                fields[f"{kind}_limit"] = limit
                fields[f"{kind}_remaining"] = 0.0
                fields[f"{kind}_reset_s"] = hint if hint is not None else window
        if fields:
            return RateReading(**fields, source="gemini", reset_is_next=True)
    return None


def throttle_reading(
    exc: BaseException, status: int | None, hint: float | None, now: float
) -> RateReading | None:
    """CAP-1: what a throttled attempt says: the response's headers when it has them (a 429 from
    OpenAI or Anthropic), Gemini's quota violations, or — any 429, Bedrock's `ThrottlingException` —
    "none left" until the hint."""
    from .backoff import _headers_of  # the one reader of an error's response headers

    headers = _headers_of(exc)
    now_reading = read_rate_headers(headers, now) if headers is not None else None
    throttled = (
        status == 429 or type(exc).__name__ == "ThrottlingException" or _code(exc) == "ThrottlingException"
    )
    if not throttled:
        return now_reading
    gemini = _gemini_reading(exc, hint)
    if gemini is not None:
        return gemini
    source = "bedrock" if _code(exc) == "ThrottlingException" else "429"
    if now_reading is not None:
        # the headers of a 429: what they say, with "none left" for the exhausted dimension
        remaining = now_reading.requests_remaining
        if (
            hint is not None
            and (remaining is None or remaining > 0)
            and (now_reading.tokens_remaining or 0) > 0
        ):
            return replace(now_reading, requests_remaining=0.0, requests_reset_s=hint, reset_is_next=True)
        return replace(now_reading, reset_is_next=hint is not None)
    return RateReading(requests_remaining=0.0, requests_reset_s=hint, source=source, reset_is_next=True)


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error")
        if isinstance(error, dict):
            return str(error.get("Code") or "")
    return ""


# -- the bucket ------------------------------------------------------------------------------------------
class Bucket(Frozen):
    """One (endpoint, key)'s capacity (0.0 limit: that dimension is unknown). Levels at `at`;
    rates per second."""

    __slots__ = (
        "at",
        "requests_level",
        "requests_limit",
        "requests_rate",
        "tokens_level",
        "tokens_limit",
        "tokens_rate",
    )
    requests_limit: float
    requests_rate: float
    requests_level: float
    tokens_limit: float
    tokens_rate: float
    tokens_level: float
    at: float

    def __init__(
        self,
        requests_limit: float = 0.0,
        requests_rate: float = 0.0,
        requests_level: float = 0.0,
        tokens_limit: float = 0.0,
        tokens_rate: float = 0.0,
        tokens_level: float = 0.0,
        at: float = 0.0,
    ) -> None:
        set_field(self, "requests_limit", requests_limit)
        set_field(self, "requests_rate", requests_rate)
        set_field(self, "requests_level", requests_level)
        set_field(self, "tokens_limit", tokens_limit)
        set_field(self, "tokens_rate", tokens_rate)
        set_field(self, "tokens_level", tokens_level)
        set_field(self, "at", at)

    def is_default(self) -> bool:
        """Nothing known: no limit of either dimension (a store keeps no such bucket)."""
        return self.requests_limit <= 0 and self.tokens_limit <= 0

    def expires_in(self) -> float:
        """How long until the bucket is full again (then it says nothing a reading would not)."""
        waits = [DEFAULT_WINDOW_S]
        for limit, rate, level in (
            (self.requests_limit, self.requests_rate, self.requests_level),
            (self.tokens_limit, self.tokens_rate, self.tokens_level),
        ):
            if limit > 0 and rate > 0:
                waits.append((limit - level) / rate)
        return max(waits) * 2


class CapacityChange(Frozen):
    """One operation on a bucket (applied atomically by the store), `op`: "reserve" what a request
    needs (taken only if its wait is within `max_wait`), "learn" a reading, "refund" tokens
    reserved and not used (negative: used beyond the estimate), "read"."""

    __slots__ = ("at", "max_wait", "op", "reading", "tokens")
    op: str
    at: float
    tokens: float
    max_wait: float
    reading: RateReading | None

    def __init__(
        self,
        op: str,
        at: float,
        tokens: float = 0.0,
        max_wait: float = 0.0,
        reading: RateReading | None = None,
    ) -> None:
        set_field(self, "op", op)
        set_field(self, "at", at)
        set_field(self, "tokens", tokens)
        set_field(self, "max_wait", max_wait)
        set_field(self, "reading", reading)


def _level(limit: float, rate: float, level: float, at: float, now: float) -> float:
    if limit <= 0:
        return 0.0
    return min(limit, level + rate * max(0.0, now - at))


def _refreshed(bucket: Bucket, now: float) -> Bucket:
    return replace(
        bucket,
        requests_level=_level(
            bucket.requests_limit, bucket.requests_rate, bucket.requests_level, bucket.at, now
        ),
        tokens_level=_level(bucket.tokens_limit, bucket.tokens_rate, bucket.tokens_level, bucket.at, now),
        at=max(now, bucket.at),
    )


def _wait_for(limit: float, rate: float, level: float, need: float) -> float:
    if limit <= 0 or rate <= 0 or need <= 0:
        return 0.0
    short = min(need, limit) - level
    return short / rate if short > 0 else 0.0


def _rate(limit: float, remaining: float | None, reset_s: float | None, known: float) -> float:
    """The refill rate a reading implies: what is missing over the time it takes to come back;
    else the one known; else the limit over a minute."""
    if remaining is not None and reset_s is not None and reset_s > 0 and limit - remaining >= 1:
        return (limit - remaining) / reset_s
    if known > 0:
        return known
    return limit / DEFAULT_WINDOW_S if limit > 0 else 0.0


def _learn_one(
    limit: float,
    rate: float,
    level: float,
    reading_limit: float | None,
    remaining: float | None,
    reset_s: float | None,
    next_in: bool,
) -> tuple[float, float, float]:
    if reading_limit is not None and reading_limit > 0:
        new_limit = reading_limit
        known = rate if limit == reading_limit else 0.0
        if next_in:  # a throttle's hint says nothing of the refill rate
            new_rate = known or new_limit / DEFAULT_WINDOW_S
        else:
            new_rate = _rate(new_limit, remaining, reset_s, known)
        start = level if limit > 0 else new_limit
    elif limit > 0:
        new_limit, new_rate, start = limit, rate, level
    else:
        return limit, rate, level  # nothing known of this dimension, and nothing said
    if remaining is None:
        return new_limit, new_rate, min(start, new_limit)
    observed = remaining
    if next_in and remaining < 1 and reset_s is not None and new_rate > 0:
        observed = min(remaining, 1 - new_rate * reset_s)  # the next unit comes back in reset_s
    return new_limit, new_rate, min(start, observed)


def apply_capacity(bucket: Bucket, change: CapacityChange) -> tuple[Bucket, float]:
    """The bucket after `change`, and (for `reserve`) the wait before the request may be sent."""
    now = change.at
    if bucket.is_default() and not (change.op == "learn" and change.reading is not None):
        # Nothing known of the endpoint's limits (a provider that sends no rate-limit headers, or
        # none learned yet): no slot to take, nothing to refund; the bucket as refreshing it gives.
        return Bucket(
            bucket.requests_limit,
            bucket.requests_rate,
            0.0,
            bucket.tokens_limit,
            bucket.tokens_rate,
            0.0,
            max(now, bucket.at),
        ), 0.0
    current = _refreshed(bucket, now)
    if change.op == "read":
        return current, 0.0
    if change.op == "reserve":
        # A slot is given with one request's (and 2% of the tokens') headroom left in the bucket:
        # requests of a fleet reach the provider a little out of the order of their slots, and the
        # headroom absorbs that instead of a 429 (the rate, and so the throughput, is the limit's).
        margin_r = 1.0 if current.requests_limit > 2 else 0.0
        margin_t = current.tokens_limit * 0.02
        requests_free = current.requests_level - margin_r
        tokens_free = current.tokens_level - margin_t
        wait = max(
            _wait_for(current.requests_limit, current.requests_rate, requests_free, 1.0),
            _wait_for(current.tokens_limit, current.tokens_rate, tokens_free, change.tokens),
        )
        if wait > change.max_wait:
            return current, wait  # not taken: the request goes elsewhere, or unreserved
        taken = replace(
            current,
            requests_level=current.requests_level - 1.0 if current.requests_limit > 0 else 0.0,
            tokens_level=current.tokens_level - min(change.tokens, current.tokens_limit)
            if current.tokens_limit > 0
            else 0.0,
        )
        return taken, wait
    if change.op == "refund":
        if current.tokens_limit <= 0:
            return current, 0.0
        return replace(
            current, tokens_level=min(current.tokens_limit, current.tokens_level + change.tokens)
        ), 0.0
    if change.op == "learn" and change.reading is not None:
        reading = change.reading
        r_limit, r_rate, r_level = _learn_one(
            current.requests_limit,
            current.requests_rate,
            current.requests_level,
            reading.requests_limit,
            reading.requests_remaining,
            reading.requests_reset_s,
            reading.reset_is_next,
        )
        t_limit, t_rate, t_level = _learn_one(
            current.tokens_limit,
            current.tokens_rate,
            current.tokens_level,
            reading.tokens_limit,
            reading.tokens_remaining,
            reading.tokens_reset_s,
            reading.reset_is_next,
        )
        learned = Bucket(r_limit, r_rate, r_level, t_limit, t_rate, t_level, current.at)
        return learned, 0.0
    return current, 0.0
