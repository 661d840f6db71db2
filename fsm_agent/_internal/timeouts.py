"""Watchdog and retry settings: stale-timeout resolution and reasoning floors (WD-2, WD-3, RES-1).

Reasoning models think in silence before their first token, so a model may raise the default stale
timeout to its floor. Model ids are matched after normalization: any path prefix
(`openai/o3-mini`, `accounts/x/models/deepseek-r1`), Bedrock region and provider prefixes
(`us.anthropic.`), version suffixes (`-20250929-v1:0`), and `4-5` versus `4.5` spellings.

Pure functions: never performs I/O and reads no clock; the environment is read only when the
caller passes no mapping (then `os.environ` is consulted, nothing is written).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

__all__ = [
    "DEFAULT_RETRIES",
    "DEFAULT_STALE_GIVEUP",
    "DEFAULT_STALE_TIMEOUT",
    "REASONING_FLOORS",
    "RETRIES_ENV",
    "STALE_GIVEUP_ENV",
    "STALE_TIMEOUT_ENV",
    "reasoning_floor",
    "resolve_int_env",
    "resolve_retries",
    "resolve_stale_giveup",
    "resolve_stale_timeout",
]

DEFAULT_STALE_TIMEOUT: Final = 180.0
DEFAULT_RETRIES: Final = 2
DEFAULT_STALE_GIVEUP: Final = 5

STALE_TIMEOUT_ENV: Final = "FSM_AGENT_STREAM_STALE_TIMEOUT"
RETRIES_ENV: Final = "FSM_AGENT_STREAM_RETRIES"
STALE_GIVEUP_ENV: Final = "FSM_AGENT_STREAM_STALE_GIVEUP"

# Model-name prefix -> least stale timeout in seconds. The longest matching prefix wins, so a
# family entry can be refined by a more specific one (`o3-mini` beats `o3`). A prefix matches only
# at a name boundary: "o1" matches "o1", "o1-mini", "o1.2", never "o10". Spell versions with dots;
# ids spelled with dashes (`claude-sonnet-4-5`) are matched too. Entries equal to the default
# document models known to answer within it; they also shield them from a broader entry.
REASONING_FLOORS: dict[str, float] = {
    # OpenAI reasoning models: long silent reasoning before the first token.
    "o1": 600.0,
    "o1-mini": 300.0,
    "o1-pro": 900.0,  # can think for many minutes at a time
    "o3": 600.0,
    "o3-mini": 300.0,
    "o3-pro": 900.0,  # as o1-pro
    "o4-mini": 300.0,
    "gpt-5": 300.0,  # reasoning by default; high effort runs for minutes
    "gpt-5-pro": 900.0,
    # Open-weight reasoning models, served by many hosts.
    "deepseek-r1": 600.0,
    "deepseek-reasoner": 600.0,  # DeepSeek's API name for R1
    "qwq": 300.0,  # every QwQ variant (`qwq:32b` in Ollama)
    "qwq-32b": 300.0,
    # Anthropic with extended thinking.
    "claude-opus-4": 240.0,
    "claude-sonnet-4.5": 180.0,
    "claude-sonnet-4.6": 180.0,
    # Google, through the OpenAI-compatible endpoint: thinking happens before the first chunk.
    "gemini-2.5-pro": 300.0,
}

# Bedrock cross-region inference profiles put a geography in front of the provider.
_BEDROCK_REGION = re.compile(r"^(?:us|us-gov|eu|apac|jp|au|ca|global)\.")
_BEDROCK_PROVIDER = re.compile(r"^(anthropic|deepseek|openai|qwen|mistral|meta|amazon|cohere|ai21|writer)\.")
# Release dates and revision tags: -20250929, -2025-01-31, @20250929 (Vertex), -v1:0 (Bedrock).
_VERSION_SUFFIX = re.compile(r"(?:[-@](?:\d{8}|\d{4}-\d{2}-\d{2}))?(?:-v\d+:\d+)?$")
_DASHED_VERSION = re.compile(r"(?<=\d)-(?=\d)")


def reasoning_floor(model: str | None) -> float | None:
    """The stale-timeout floor of `model`, or None when no entry of REASONING_FLOORS matches.

    Case-insensitive; the longest matching prefix wins (on a tie, the larger floor). Answers are
    cached per model while REASONING_FLOORS is unchanged (an edit of the table is seen at once).
    """
    if not model or not model.strip():
        return None
    table = tuple(REASONING_FLOORS.items())
    cache = _floor_cache
    if cache.get(_TABLE_KEY) != table:
        cache.clear()  # the table changed (or first use): canonicalise it once more
        cache[_TABLE_KEY] = table
        cache[_FLOORS_KEY] = [(_canonical(prefix), floor) for prefix, floor in table]
    try:
        found: float | None = cache[model]
        return found
    except KeyError:
        pass
    floors: list[tuple[str, float]] = cache[_FLOORS_KEY]
    best: tuple[int, float] | None = None
    for name in _candidate_names(model):
        for prefix, floor in floors:
            if _matches(name, prefix) and (best is None or (len(prefix), floor) > best):
                best = (len(prefix), floor)
    found = None if best is None else best[1]
    if len(cache) > _FLOOR_CACHE_SIZE:
        cache.clear()  # many distinct model ids: start over rather than grow without bound
        cache[_TABLE_KEY] = table
        cache[_FLOORS_KEY] = floors
    cache[model] = found
    return found


# reasoning_floor's memory: model id -> floor, plus the table it was computed from (its snapshot and
# canonical prefixes, under keys no model id can be). Dict operations are atomic under the GIL; a
# race only computes an answer twice.
_TABLE_KEY: Final = ("table",)
_FLOORS_KEY: Final = ("floors",)
_FLOOR_CACHE_SIZE: Final = 1024
_floor_cache: dict[Any, Any] = {}


def resolve_stale_timeout(
    explicit: float | None, model: str | None, environ: Mapping[str, str] | None = None
) -> float:
    """Seconds of wire silence before a stream is stalled (WD-2).

    The explicit argument wins, as given; else FSM_AGENT_STREAM_STALE_TIMEOUT, as given; else the
    default of 180 s raised to the model's reasoning floor. A value that is not a positive, finite
    number of seconds raises ValueError (an empty variable counts as unset).
    """
    if explicit is not None:
        return _positive_seconds(explicit, "stale_timeout")
    raw = _read_env(STALE_TIMEOUT_ENV, environ)
    if raw is not None:
        try:
            seconds = float(raw)
        except ValueError:
            raise ValueError(f"{STALE_TIMEOUT_ENV} must be a number of seconds, got {raw!r}") from None
        return _positive_seconds(seconds, STALE_TIMEOUT_ENV)
    floor = reasoning_floor(model)
    return DEFAULT_STALE_TIMEOUT if floor is None else max(DEFAULT_STALE_TIMEOUT, floor)


def resolve_int_env(name: str, default: int, environ: Mapping[str, str] | None = None) -> int:
    """The non-negative integer in environment variable `name`, or `default` when it is unset or
    empty. Anything else raises ValueError naming the variable."""
    raw = _read_env(name, environ)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a non-negative integer, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {raw!r}")
    return value


def resolve_retries(explicit: int | None, environ: Mapping[str, str] | None = None) -> int:
    """Transient-error retries (RES-1): explicit, else FSM_AGENT_STREAM_RETRIES, else 2."""
    if explicit is not None:
        return _non_negative(explicit, "retries")
    return resolve_int_env(RETRIES_ENV, DEFAULT_RETRIES, environ)


def resolve_stale_giveup(explicit: int | None, environ: Mapping[str, str] | None = None) -> int:
    """Stalls in a row before the session gives up (WD-3; 0 disables): explicit, else
    FSM_AGENT_STREAM_STALE_GIVEUP, else 5."""
    if explicit is not None:
        return _non_negative(explicit, "stale_giveup")
    return resolve_int_env(STALE_GIVEUP_ENV, DEFAULT_STALE_GIVEUP, environ)


# -- internals -----------------------------------------------------------------------------------


def _read_env(name: str, environ: Mapping[str, str] | None) -> str | None:
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None or not raw.strip():
        return None
    return raw.strip()


def _positive_seconds(value: float, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{source} must be a number of seconds, got {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{source} must be a positive, finite number of seconds, got {value!r}")
    return seconds


def _non_negative(value: int, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{source} must be an integer, got {value!r}")
    if value < 0:
        raise ValueError(f"{source} must be a non-negative integer, got {value!r}")
    return value


def _canonical(name: str) -> str:
    """Lower case, with versions spelled dotted (`claude-sonnet-4-5` -> `claude-sonnet-4.5`)."""
    return _DASHED_VERSION.sub(".", name.strip().lower())


def _candidate_names(model: str) -> Iterator[str]:
    """The canonical spellings of `model` worth matching: the whole id and its last path segment,
    each without Bedrock prefixes and version suffixes."""
    lowered = model.strip().lower()
    for name in dict.fromkeys((lowered, lowered.rsplit("/", 1)[-1])):
        yield _canonical(name)
        bare = _BEDROCK_REGION.sub("", name)
        provider = _BEDROCK_PROVIDER.match(bare)
        spellings = [bare]
        if provider is not None:
            rest = bare[provider.end() :]
            # `anthropic.claude-…` is named without its provider; `deepseek.r1-…` with it.
            spellings = [rest, f"{provider.group(1)}-{rest}"]
        for spelling in spellings:
            yield _canonical(_VERSION_SUFFIX.sub("", spelling))


def _matches(name: str, prefix: str) -> bool:
    if not prefix or not name.startswith(prefix):
        return False
    return len(name) == len(prefix) or not name[len(prefix)].isalnum()
