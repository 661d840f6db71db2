"""`RateLimit`: the emulator enforcing a requests-per-window and tokens-per-window limit (issue 29).

A continuous token bucket per dimension, as the providers describe theirs: `requests` and
`tokens` are the limits of one `window` (a minute at a provider; a test scales it down), refilled
at limit/window per second. A request is charged one request and its tokens, estimated as the
providers do before a request runs (the text of its body at four characters a token, plus the
output bound it asks for). What is left is told in the headers of every answer, in the provider's
style: `openai` (`x-ratelimit-*`, resets as durations) or `anthropic` (`anthropic-ratelimit-*`,
resets as RFC 3339 instants); `gemini` and `bedrock` send none and answer a refused request as
those providers do (RESOURCE_EXHAUSTED with QuotaFailure and RetryInfo; ThrottlingException). A
refused request gets a 429 with `retry-after` and is served no scenario.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = ["RateLimit"]

STYLES = ("openai", "anthropic", "gemini", "bedrock")


def _chars(value: Any, depth: int = 0) -> int:
    if depth > 32:
        return 0
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(
            _chars(item, depth + 1) for key, item in value.items() if key not in ("role", "type", "model")
        )
    if isinstance(value, list):
        return sum(_chars(item, depth + 1) for item in value)
    return 0


def request_tokens(body: Any) -> int:
    """A request's tokens as the limiter charges them: its prompt's text at four characters a
    token, plus its output bound."""
    if not isinstance(body, dict):
        return 0
    keys = ("messages", "input", "instructions", "system", "contents", "tools")
    prompt = (sum(_chars(body.get(key)) for key in keys) + 3) // 4
    bound = next(
        (
            value
            for key in ("max_tokens", "max_completion_tokens", "max_output_tokens")
            if isinstance(value := body.get(key), int)
        ),
        0,
    )
    return prompt + bound


@dataclass
class RateLimit:
    """Limits the emulator enforces (see the module's text). `clock` is the monotonic clock it
    reads (a test may pass its own)."""

    requests: int = 0  # 0: no request limit
    tokens: int = 0  # 0: no token limit
    window: float = 60.0
    style: str = "openai"
    clock: Any = time.monotonic
    admitted_at: list[float] = field(default_factory=list)  # when each admitted request arrived
    refused: int = 0
    _levels: dict[str, float] = field(default_factory=dict)
    _at: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(f"RateLimit style must be one of {STYLES}, not {self.style!r}")
        if self.window <= 0 or self.requests < 0 or self.tokens < 0:
            raise ValueError("RateLimit needs a window > 0 and limits >= 0")

    def _limits(self) -> dict[str, int]:
        return {
            name: limit for name, limit in (("requests", self.requests), ("tokens", self.tokens)) if limit
        }

    def admit(self, body: Any) -> tuple[bool, float, dict[str, str]]:
        """Charge a request: (admitted, retry-after seconds when refused, the headers to send)."""
        need = {"requests": 1.0, "tokens": float(request_tokens(body))}
        with self._lock:
            now = self.clock()
            limits = self._limits()
            for name, limit in limits.items():
                level = self._levels.get(name, float(limit))
                if self._at is not None:
                    level = min(float(limit), level + (now - self._at) * limit / self.window)
                self._levels[name] = level
            self._at = now
            short = {
                name: (min(need[name], limit) - self._levels[name]) * self.window / limit
                for name, limit in limits.items()
                if self._levels[name] < min(need[name], limit)
            }
            if short:
                self.refused += 1
                wait = max(short.values())
                return False, wait, self._headers(limits, wait)
            for name in limits:
                self._levels[name] -= need[name]
            self.admitted_at.append(now)
            return True, 0.0, self._headers(limits, 0.0)

    def _headers(self, limits: dict[str, int], wait: float) -> dict[str, str]:
        headers: dict[str, str] = {}
        if wait > 0:
            headers["retry-after"] = f"{max(wait, 0.001):.3f}"
        if self.style not in ("openai", "anthropic"):
            return headers
        for name, limit in limits.items():
            level = max(0.0, self._levels[name])
            reset = (limit - level) * self.window / limit
            remaining = str(math.floor(level))
            if self.style == "openai":
                headers[f"x-ratelimit-limit-{name}"] = str(limit)
                headers[f"x-ratelimit-remaining-{name}"] = remaining
                headers[f"x-ratelimit-reset-{name}"] = f"{reset:.3f}s"
            else:
                when = datetime.fromtimestamp(time.time() + reset, tz=UTC)
                headers[f"anthropic-ratelimit-{name}-limit"] = str(limit)
                headers[f"anthropic-ratelimit-{name}-remaining"] = remaining
                headers[f"anthropic-ratelimit-{name}-reset"] = when.isoformat(timespec="milliseconds")
        return headers

    def refusal(self, wait: float) -> tuple[dict[str, Any] | None, dict[str, str]]:
        """The body of a refused request in the provider's style (None: the wire's own 429), and
        headers of its own."""
        if self.style == "gemini":
            quota = "GenerateRequestsPerMinutePerProjectPerModel"
            body = {
                "error": {
                    "code": 429,
                    "message": "Resource has been exhausted (e.g. check quota).",
                    "status": "RESOURCE_EXHAUSTED",
                    "details": [
                        {
                            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                            "violations": [
                                {
                                    "quotaMetric": "generativelanguage.googleapis.com/generate_requests",
                                    "quotaId": quota,
                                    "quotaValue": str(self.requests or self.tokens),
                                }
                            ],
                        },
                        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{wait:.3f}s"},
                    ],
                }
            }
            return body, {}
        if self.style == "bedrock":
            return {"message": "Too many requests, please wait before trying again."}, {
                "x-amzn-ErrorType": "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"
            }
        return None, {}

    def throughput(self, skip: int = 0) -> float:
        """Admitted requests per second after the first `skip` (the burst the full bucket allows)."""
        times = self.admitted_at[skip:]
        if len(times) < 2 or times[-1] <= times[0]:
            return 0.0
        return (len(times) - 1) / (times[-1] - times[0])
