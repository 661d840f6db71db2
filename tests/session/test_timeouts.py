"""Stale-timeout resolution and reasoning floors (SPEC WD-2), retry and give-up settings."""

from __future__ import annotations

import pytest

from fsm_agent._internal import timeouts
from fsm_agent._internal.timeouts import (
    DEFAULT_STALE_TIMEOUT,
    REASONING_FLOORS,
    reasoning_floor,
    resolve_int_env,
    resolve_retries,
    resolve_stale_giveup,
    resolve_stale_timeout,
)

FLOORS: list[tuple[str | None, float | None]] = [
    # the floors SPEC WD-2 names
    ("o1", 600),
    ("o3", 600),
    ("deepseek-r1", 600),
    ("o3-mini", 300),
    ("o4-mini", 300),
    ("qwq-32b", 300),
    ("claude-opus-4", 240),
    ("claude-sonnet-4.5", 180),
    ("claude-sonnet-4.6", 180),
    # longest prefix wins
    ("o3-mini-2025-01-31", 300),
    ("o3-2025-04-16", 600),
    ("o1-mini", 300),
    ("o1-pro", 900),
    ("o3-pro", 900),
    ("gpt-5-pro", 900),
    ("gpt-5-mini", 300),
    ("gpt-5.1", 300),
    # case, surrounding space, path segments
    ("O3-MINI", 300),
    ("  o3  ", 600),
    ("openai/o3-mini", 300),
    ("accounts/x/models/deepseek-r1", 600),
    ("accounts/fireworks/models/qwq-32b", 300),
    ("deepseek/deepseek-r1-distill-llama-70b", 600),
    ("models/gemini-2.5-pro", 300),
    ("deepseek-reasoner", 600),
    ("qwq:32b", 300),
    ("deepseek-r1:70b", 600),
    # dashed and dotted versions; claude-opus-4-1 is still an opus-4
    ("claude-opus-4-1", 240),
    ("claude-opus-4.1", 240),
    ("claude-opus-4-20250514", 240),
    ("claude-opus-4-5-20251101", 240),
    ("claude-sonnet-4-5", 180),
    ("claude-sonnet-4-5-20250929", 180),
    ("claude-sonnet-4-6", 180),
    ("claude-sonnet-4-5@20250929", 180),
    # Bedrock ids and ARNs
    ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", 180),
    ("anthropic.claude-sonnet-4-5-v1:0", 180),
    ("eu.anthropic.claude-opus-4-1-20250805-v1:0", 240),
    ("apac.anthropic.claude-opus-4-20250514-v1:0", 240),
    ("global.anthropic.claude-sonnet-4-6-v1:0", 180),
    ("us.deepseek.r1-v1:0", 600),
    (
        "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-opus-4-1-20250805-v1:0",
        240,
    ),
    # no floor
    ("gpt-4o", None),
    ("gpt-4.1-mini", None),
    ("claude-sonnet-4-20250514", None),
    ("claude-3-7-sonnet-20250219", None),
    ("us.anthropic.claude-3-5-haiku-20241022-v1:0", None),
    ("o10", None),  # prefixes match at name boundaries only
    ("o3x", None),
    ("gpt-50", None),
    ("deepseek-v3", None),
    ("deepseek-r10", None),
    ("", None),
    ("   ", None),
    (None, None),
]


@pytest.mark.parametrize(("model", "floor"), FLOORS, ids=[repr(model) for model, _ in FLOORS])
def test_reasoning_floor(model: str | None, floor: float | None) -> None:
    assert reasoning_floor(model) == floor


def test_the_spec_floors_are_in_the_table() -> None:
    required = {
        "o1": 600,
        "o3": 600,
        "deepseek-r1": 600,
        "o3-mini": 300,
        "o4-mini": 300,
        "qwq-32b": 300,
        "claude-opus-4": 240,
        "claude-sonnet-4.5": 180,
        "claude-sonnet-4.6": 180,
    }
    assert {name: REASONING_FLOORS[name] for name in required} == required


def test_floors_added_at_runtime_are_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(REASONING_FLOORS, "my-thinker", 420.0)
    monkeypatch.setitem(REASONING_FLOORS, "claude-opus-4-1", 300.0)  # a dashed key works too
    assert reasoning_floor("acme/my-thinker-v2") == 420.0
    assert reasoning_floor("us.anthropic.claude-opus-4-1-20250805-v1:0") == 300.0
    assert reasoning_floor("claude-opus-4.1") == 300.0
    assert reasoning_floor("claude-opus-4-5") == 240.0


# -- resolution order -----------------------------------------------------------------------------

ENV = timeouts.STALE_TIMEOUT_ENV

STALE: list[tuple[float | None, str | None, dict[str, str], float]] = [
    (None, None, {}, DEFAULT_STALE_TIMEOUT),
    (None, "gpt-4o", {}, 180.0),
    (None, "o3", {}, 600.0),
    (None, "o3-mini", {}, 300.0),
    (None, "claude-opus-4-1", {}, 240.0),
    (None, "claude-sonnet-4-5", {}, 180.0),
    (None, "us.anthropic.claude-sonnet-4-5-v1:0", {}, 180.0),
    # the environment wins over default and floor, as given
    (None, "o3", {ENV: "30"}, 30.0),
    (None, None, {ENV: "2.5"}, 2.5),
    (None, None, {ENV: " 45 "}, 45.0),
    (None, "o3", {ENV: ""}, 600.0),  # empty counts as unset
    (None, "o3", {"OTHER": "1"}, 600.0),
    # the explicit argument wins over everything, as given (no floor)
    (10.0, "o3", {ENV: "30"}, 10.0),
    (10, "o1", {}, 10.0),
    (0.5, None, {}, 0.5),
]


@pytest.mark.parametrize(("explicit", "model", "environ", "expected"), STALE)
def test_resolve_stale_timeout(
    explicit: float | None, model: str | None, environ: dict[str, str], expected: float
) -> None:
    resolved = resolve_stale_timeout(explicit, model, environ)
    assert resolved == expected
    assert type(resolved) is float


@pytest.mark.parametrize("raw", ["abc", "30s", "0", "-5", "nan", "inf"])
def test_invalid_stale_timeout_env_names_the_variable(raw: str) -> None:
    with pytest.raises(ValueError, match=ENV):
        resolve_stale_timeout(None, "o3", {ENV: raw})


@pytest.mark.parametrize("explicit", [0, -1.0, float("nan"), float("inf")])
def test_invalid_explicit_stale_timeout(explicit: float) -> None:
    with pytest.raises(ValueError, match="stale_timeout"):
        resolve_stale_timeout(explicit, None, {})


def test_explicit_stale_timeout_must_be_a_number() -> None:
    with pytest.raises(TypeError):
        resolve_stale_timeout("30", None, {})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        resolve_stale_timeout(True, None, {})


def test_os_environ_is_read_when_no_mapping_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "12")
    monkeypatch.setenv(timeouts.RETRIES_ENV, "4")
    monkeypatch.setenv(timeouts.STALE_GIVEUP_ENV, "0")
    assert resolve_stale_timeout(None, "o3") == 12.0
    assert resolve_retries(None) == 4
    assert resolve_stale_giveup(None) == 0
    monkeypatch.delenv(ENV)
    monkeypatch.delenv(timeouts.RETRIES_ENV)
    monkeypatch.delenv(timeouts.STALE_GIVEUP_ENV)
    assert resolve_stale_timeout(None, "o3") == 600.0
    assert resolve_retries(None) == 2
    assert resolve_stale_giveup(None) == 5


# -- integer settings -----------------------------------------------------------------------------

RETRIES = timeouts.RETRIES_ENV
GIVEUP = timeouts.STALE_GIVEUP_ENV


@pytest.mark.parametrize(
    ("explicit", "environ", "expected"),
    [
        (None, {}, 2),
        (None, {RETRIES: "0"}, 0),
        (None, {RETRIES: " 7 "}, 7),
        (None, {RETRIES: ""}, 2),
        (1, {RETRIES: "7"}, 1),
        (0, {}, 0),
    ],
)
def test_resolve_retries(explicit: int | None, environ: dict[str, str], expected: int) -> None:
    assert resolve_retries(explicit, environ) == expected


@pytest.mark.parametrize(
    ("explicit", "environ", "expected"),
    [(None, {}, 5), (None, {GIVEUP: "0"}, 0), (None, {GIVEUP: "9"}, 9), (3, {GIVEUP: "9"}, 3), (0, {}, 0)],
)
def test_resolve_stale_giveup(explicit: int | None, environ: dict[str, str], expected: int) -> None:
    assert resolve_stale_giveup(explicit, environ) == expected


@pytest.mark.parametrize("raw", ["-1", "two", "1.5", "2e3"])
@pytest.mark.parametrize("name", [RETRIES, GIVEUP])
def test_invalid_integer_env_names_the_variable(name: str, raw: str) -> None:
    with pytest.raises(ValueError, match=name):
        resolve_int_env(name, 1, {name: raw})


@pytest.mark.parametrize("resolve", [resolve_retries, resolve_stale_giveup])
def test_negative_explicit_integers_are_rejected(resolve: object) -> None:
    assert callable(resolve)
    with pytest.raises(ValueError):
        resolve(-1, {})
    with pytest.raises(TypeError):
        resolve(1.5, {})
    with pytest.raises(TypeError):
        resolve(True, {})


def test_resolve_int_env_default() -> None:
    assert resolve_int_env("FSM_AGENT_UNSET_FOR_TEST", 3, {}) == 3
