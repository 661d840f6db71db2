"""CAP-1, CAP-2: capacity learned from each provider's rate-limit signals, through the real SDK
clients against the emulator enforcing a limit (`RateLimit`): the headers reach the library through
the SDK's raw response (OpenAI, OpenAI Responses, Anthropic), Gemini's QuotaFailure and Bedrock's
ThrottlingException through the SDK's error. A request the known capacity has no room for waits its
slot in `waiting` (wait_source "capacity") or leaves for a route with headroom, and is not sent to
get a 429. Limits per 60 s window (no refill to speak of within a test) unless a wait is the point."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from google import genai
from provider_clients import anthropic_client, bedrock_client_without_retries, close_client, openai_client

import fsm_agent
from fsm_agent._internal.capacity import (
    Bucket,
    CapacityChange,
    RateReading,
    apply_capacity,
    parse_duration,
    read_rate_headers,
)
from fsm_agent.testing import Emulator, RateLimit

MESSAGES = [{"role": "user", "content": "hi"}]
FAST = fsm_agent.Backoff(base=0.0, max_wait=5.0)


def _gemini(emu: Emulator) -> Any:
    return genai.Client(api_key="AIza-test", http_options={"base_url": emu.gemini_base_url})


PROVIDERS: dict[str, tuple[str, Any, dict[str, Any]]] = {
    "chat_completions": ("openai", openai_client, {"model": "gpt-4.1", "messages": MESSAGES}),
    "responses": ("openai", openai_client, {"model": "gpt-5", "input": "hi"}),
    "anthropic_messages": (
        "anthropic",
        anthropic_client,
        {"model": "claude-emulated", "max_tokens": 64, "messages": MESSAGES},
    ),
    "gemini_generate_content": ("gemini", _gemini, {"model": "gemini-2.5-flash", "contents": "hi"}),
    "bedrock_converse": (
        "bedrock",
        bedrock_client_without_retries,
        {"modelId": "anthropic.claude-emulated", "messages": [{"role": "user", "content": [{"text": "hi"}]}]},
    ),
}


def _buckets(session: fsm_agent.Session) -> list[Bucket]:
    return list(session.health._buckets.values())  # type: ignore[attr-defined]


@pytest.mark.parametrize("api", ["chat_completions", "responses", "anthropic_messages"])
def test_headers_become_capacity_and_a_full_route_is_left_unsent(api: str) -> None:
    style, make, params = PROVIDERS[api]
    limit = RateLimit(requests=3, tokens=100_000, window=60.0, style=style)
    with Emulator(rate_limit=limit) as limited, Emulator() as spare:
        first, second = make(limited), make(spare)
        try:
            session = fsm_agent.Session(backoff=FAST)
            for _ in range(3):
                assert session.stream(first, params).route is not None
            (bucket,) = _buckets(session)
            assert bucket.requests_limit == 3 and bucket.tokens_limit == 100_000
            assert bucket.requests_level < 1  # none left, as the last answer's headers said
            assert bucket.requests_rate == pytest.approx(3 / 60, rel=0.05)  # learned from the reset
            statuses: list[str] = []
            routes = [
                fsm_agent.Route(first, params, name="limited"),
                fsm_agent.Route(second, params, name="spare"),
            ]
            result = session.stream(routes, on_status=statuses.append)
            assert result.route == "spare"
            assert limit.refused == 0 and len(limited.requests) == 3  # never sent to get a 429
            assert any("rate limit has no room" in status for status in statuses)
            assert result.records[0].guards["capacity_too_long"] is True
        finally:
            close_client(first)
            close_client(second)


@contextlib.contextmanager
def _limited_and_spare(
    make: Any, params: dict[str, Any], limit: RateLimit
) -> Iterator[list[fsm_agent.Route]]:
    """Two routes of one API: "limited" on an emulator enforcing `limit`, then "spare" on one
    without; their clients closed after."""
    with Emulator(rate_limit=limit) as limited, Emulator() as spare:
        first, second = make(limited), make(spare)
        try:
            yield [
                fsm_agent.Route(first, params, name="limited"),
                fsm_agent.Route(second, params, name="spare"),
            ]
        finally:
            close_client(first)
            close_client(second)


def test_gemini_quota_failure_teaches_the_limit() -> None:
    _, make, params = PROVIDERS["gemini_generate_content"]
    limit = RateLimit(requests=1, window=60.0, style="gemini")
    with _limited_and_spare(make, params, limit) as routes:
        session = fsm_agent.Session(backoff=FAST)
        assert session.stream(routes).route == "limited"
        assert session.stream(routes).route == "spare"  # a 429, its hint over max_wait: switched
        assert limit.refused == 1
        (bucket,) = _buckets(session)
        assert bucket.requests_limit == 1  # the QuotaFailure's quotaValue, its window a minute
        assert bucket.requests_rate == pytest.approx(1 / 60)
        assert session.stream(routes).route == "spare"
        assert limit.refused == 1  # the third went to the spare route without trying


def test_bedrock_throttling_is_a_cooldown_not_a_bucket() -> None:
    _, make, params = PROVIDERS["bedrock_converse"]
    limit = RateLimit(requests=1, window=60.0, style="bedrock")
    with _limited_and_spare(make, params, limit) as routes:
        session = fsm_agent.Session(backoff=FAST)
        assert session.stream(routes).route == "limited"
        assert session.stream(routes).route == "spare"  # ThrottlingException, a 60 s hint
        # Bedrock says no limit: nothing to bucket; the hint's cooldown (BO-6) holds it back
        assert all(bucket.requests_limit == 0 for bucket in _buckets(session))
        assert session.stream(routes).route == "spare" and limit.refused == 1


def test_a_request_waits_its_slot_instead_of_a_429() -> None:
    limit = RateLimit(requests=2, tokens=100_000, window=0.5)
    with Emulator(rate_limit=limit) as emu:
        client = openai_client(emu)
        try:
            session = fsm_agent.Session(backoff=FAST)
            params = {"model": "gpt-4.1", "messages": MESSAGES}
            results = [session.stream(client, params) for _ in range(6)]
            assert limit.refused == 0  # each waited for room instead of being sent to fail
            waits = [r.records[0] for r in results if r.records[0].dest == "waiting"]
            assert waits and all(record.inputs["wait_source"] == "capacity" for record in waits)
            assert all(0 < record.inputs["capacity_wait_s"] <= 0.5 for record in waits)
            assert all(record.effects == ("say_capacity_wait", "wait") for record in waits)
        finally:
            close_client(client)


def test_header_shapes() -> None:
    assert parse_duration("6m0s") == 360 and parse_duration("1.5s") == 1.5 and parse_duration("20ms") == 0.02
    assert parse_duration("1h2m3.5s") == 3723.5 and parse_duration("2") == 2.0
    assert parse_duration("soon") is None and parse_duration("9" * 40) is None
    reading = read_rate_headers(
        {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "49",
            "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:01Z",
            "anthropic-ratelimit-input-tokens-limit": "40000",
            "anthropic-ratelimit-input-tokens-remaining": "39000",
            "anthropic-ratelimit-input-tokens-reset": "2026-01-01T00:00:03Z",
        },
        now=1767225600.0,  # 2026-01-01T00:00:00Z
    )
    assert reading == RateReading(50, 49, 1.0, 40000, 39000, 3.0, "anthropic")
    assert read_rate_headers({"content-type": "text/event-stream"}, 0.0) is None
    assert read_rate_headers({"x-ratelimit-limit-requests": "nan"}, 0.0) is None


def test_rate_headers_are_read_whatever_the_headers_object() -> None:
    """The SDKs' case-insensitive headers (httpx), botocore's plain dict, and a dict spelt in any
    case give the same reading; a headers object that cannot be read gives none (never raises)."""
    import httpx

    pairs = {"X-RateLimit-Limit-Requests": "60", "X-RateLimit-Remaining-Requests": "59", "Server": "x"}
    expected = RateReading(60, 59, None, None, None, None, "openai")
    assert read_rate_headers(httpx.Headers(pairs), 0.0) == expected
    assert read_rate_headers(pairs, 0.0) == expected
    assert read_rate_headers({k.lower(): v for k, v in pairs.items()}, 0.0) == expected

    class Unreadable:
        def items(self) -> Any:
            raise RuntimeError("no headers here")

    assert read_rate_headers(Unreadable(), 0.0) is None
    assert read_rate_headers(object(), 0.0) is None


def test_the_estimate_is_reconciled_with_the_usage() -> None:
    bucket = Bucket(tokens_limit=1000, tokens_rate=1.0, tokens_level=1000, at=100.0)
    taken, wait = apply_capacity(bucket, CapacityChange("reserve", 100.0, tokens=600, max_wait=5))
    assert wait == 0 and taken.tokens_level == 400
    # the request asked for 600 (its prompt and max_tokens) and used 150: 450 come back
    back, _ = apply_capacity(taken, CapacityChange("refund", 100.0, tokens=450))
    assert back.tokens_level == 850
    short, wait = apply_capacity(back, CapacityChange("reserve", 100.0, tokens=950, max_wait=5))
    # 100 short, and 2% of the limit kept as headroom (a fleet's requests arrive a little out of order)
    assert wait == pytest.approx(120.0) and short.tokens_level == 850  # over max_wait: not taken


def test_async_requests_wait_their_slots_too() -> None:
    import asyncio

    import openai

    limit = RateLimit(requests=2, tokens=100_000, window=0.5)

    async def run(emu: Emulator) -> list[fsm_agent.StreamResult]:
        client = openai.AsyncOpenAI(base_url=emu.openai_base_url, api_key="sk-test", max_retries=0)
        try:
            session = fsm_agent.Session(backoff=FAST)
            params = {"model": "gpt-4.1", "messages": MESSAGES}
            return [await session.astream(client, params) for _ in range(5)]
        finally:
            await client.close()

    with Emulator(rate_limit=limit) as emu:
        results = asyncio.run(run(emu))
    assert limit.refused == 0
    assert any(r.records[0].inputs.get("wait_source") == "capacity" for r in results)


def test_a_bucket_that_knows_no_limit_takes_and_refunds_nothing() -> None:
    """CAP-2: an endpoint whose limits were never learned gives every request its slot at once,
    with nothing taken, refunded or remembered (the store keeps no such bucket); a reading still
    teaches it its limits."""
    for op, extra in (("reserve", {"tokens": 500, "max_wait": 0.0}), ("refund", {"tokens": 9}), ("read", {})):
        bucket, wait = apply_capacity(Bucket(at=3.0), CapacityChange(op, 7.0, **extra))
        assert (bucket, wait) == (Bucket(at=7.0), 0.0) and bucket.is_default()
    older, _ = apply_capacity(Bucket(at=9.0), CapacityChange("reserve", 7.0, tokens=1, max_wait=0.0))
    assert older == Bucket(at=9.0)  # a clock stepped back never moves a bucket's time back
    learned, _ = apply_capacity(Bucket(), CapacityChange("learn", 7.0, reading=RateReading(60, 59, 1.0)))
    assert learned.requests_limit == 60 and not learned.is_default()
