"""RedisHealth against a real redis-server: one read, writes on change, expiry, atomic updates
across stores, and the HL-3 fallback (down, slow, garbled, back again)."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis_server import RedisServer

from fsm_agent.health import EndpointHealth, EndpointKey, HealthChange, MemoryHealth, apply
from fsm_agent.health_redis import RedisHealth, decode, encode

KEY = EndpointKey("chat_completions", "http://127.0.0.1:1/v1", "gpt-4.1-mini")
OTHER = EndpointKey("anthropic_messages", "http://127.0.0.1:1", "claude-sonnet-4-5")


@pytest.fixture
def store(redis_server: RedisServer, redis_prefix: str) -> Iterator[RedisHealth]:
    with RedisHealth(redis_server.url, prefix=redis_prefix) as made:
        yield made


@pytest.fixture
def second(redis_server: RedisServer, redis_prefix: str) -> Iterator[RedisHealth]:
    """Another store on the same Redis and prefix: what a second process sees."""
    with RedisHealth(redis_server.url, prefix=redis_prefix) as made:
        yield made


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    return [message for message in messages if "Redis" in message]


def test_a_healthy_endpoint_is_one_read_and_no_key(store: RedisHealth, redis_client: redis.Redis) -> None:
    assert store.get(KEY) == EndpointHealth()
    assert store.round_trips == 1
    assert redis_client.exists(store.redis_key(KEY)) == 0


def test_a_change_is_seen_by_another_store(store: RedisHealth, second: RedisHealth) -> None:
    store.update(KEY, HealthChange(stream_options_unsupported=True))
    store.update(KEY, HealthChange(stall=True))
    seen = second.get(KEY)
    assert seen.stream_options_unsupported and seen.stale_streak == 1
    assert second.get(OTHER) == EndpointHealth()


def test_quirks_and_streaks_are_kept_without_expiry(store: RedisHealth, redis_client: redis.Redis) -> None:
    store.update(KEY, HealthChange(streaming_disabled=True))
    assert redis_client.pttl(store.redis_key(KEY)) == -1  # no expiry


def test_a_cooldown_expires_when_it_ends(store: RedisHealth, redis_client: redis.Redis) -> None:
    until = time.time() + 0.15
    store.update(KEY, HealthChange(cooldown_until=until))
    name = store.redis_key(KEY)
    assert 0 < redis_client.pttl(name) <= 150
    time.sleep(0.2)
    assert redis_client.exists(name) == 0


def test_an_open_breaker_expires_and_a_success_deletes(store: RedisHealth, redis_client: redis.Redis) -> None:
    name = store.redis_key(KEY)
    store.update(KEY, HealthChange(stall=True, breaker_open_until=time.time() + 60))
    assert redis_client.pttl(name) == -1  # the streak is kept (WD-3) while the breaker is open
    store.update(KEY, HealthChange(success=True))
    assert redis_client.exists(name) == 0  # healthy again: nothing worth keeping
    store.update(KEY, HealthChange(probe_until=time.time() + 30))
    assert 29_000 < redis_client.pttl(name) <= 30_001


def test_concurrent_writers_lose_no_change(redis_server: RedisServer, redis_prefix: str) -> None:
    stores = [RedisHealth(redis_server.url, prefix=redis_prefix) for _ in range(4)]
    try:
        for made in stores:
            made.get(KEY)  # each starts from the same value, so most first writes collide

        def stalls(made: RedisHealth) -> None:
            for _ in range(25):
                made.update(KEY, HealthChange(stall=True))

        threads = [threading.Thread(target=stalls, args=(made,)) for made in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(made.shared for made in stores)
        assert stores[0].get(KEY).stale_streak == 100
    finally:
        for made in stores:
            made.close()


changes = st.builds(
    HealthChange,
    stall=st.booleans(),
    success=st.booleans(),
    breaker_open_until=st.none() | st.floats(1e9, 3e9),
    probe_until=st.none() | st.just(0.0) | st.floats(1e9, 3e9),
    cooldown_until=st.none() | st.floats(1e9, 3e9),
    stream_options_unsupported=st.booleans(),
    streaming_disabled=st.booleans(),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sequence=st.lists(changes, max_size=6))
def test_redis_applies_changes_as_apply_does(
    store: RedisHealth, second: RedisHealth, sequence: list[HealthChange]
) -> None:
    key = EndpointKey("chat_completions", "http://127.0.0.1:1/v1", uuid.uuid4().hex)  # fresh each example
    expected = EndpointHealth()
    memory = MemoryHealth()
    now = time.time()
    for i, change in enumerate(sequence):
        writer = store if i % 2 == 0 else second  # two stores: each sees the other's writes
        expected = apply(expected, change)
        written, kept = writer.update(key, change), memory.update(key, change)
        # A store may forget a value whose times have all passed (`expires_at`): what is still in
        # force must agree.
        assert in_force(written, now) == in_force(kept, now) == in_force(expected, now)
    assert in_force(second.get(key), now) == in_force(expected, now)
    assert store.shared and second.shared


def in_force(health: EndpointHealth, now: float) -> EndpointHealth:
    """`health` without the times that have passed."""
    fields = {name: getattr(health, name) for name in ("breaker_open_until", "probe_until", "cooldown_until")}
    passed = {name: 0.0 for name, value in fields.items() if value <= now}
    if "probe_until" in passed:
        passed["probe_owner"] = ""
    return replace(health, **passed)


def test_encode_decode_round_trip_and_unknown_fields() -> None:
    health = EndpointHealth(stale_streak=2, cooldown_until=1.5e9, streaming_disabled=True)
    assert decode(encode(health)) == health
    assert decode(b'{"stale_streak": 1, "a_field_of_a_newer_version": 3}') == EndpointHealth(stale_streak=1)


GARBAGE = [b"not json", b"[1, 2]", b'{"stale_streak": "x"}', b'{"cooldown_until": true}']


@pytest.mark.parametrize("raw", GARBAGE)
def test_a_garbled_value_falls_back_with_one_warning(
    store: RedisHealth, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture, raw: bytes
) -> None:
    store.update(OTHER, HealthChange(stream_options_unsupported=True))  # known before the garbage
    redis_client.set(store.redis_key(KEY), raw)
    with caplog.at_level(logging.INFO, logger="fsm_agent"):
        assert store.get(KEY) == EndpointHealth()
        assert not store.shared
        assert store.get(OTHER).stream_options_unsupported  # the last value it knew
        store.update(KEY, HealthChange(stall=True))
    assert len(warnings_of(caplog)) == 1


def test_a_wrong_type_at_the_key_falls_back(store: RedisHealth, redis_client: redis.Redis) -> None:
    redis_client.hset(store.redis_key(KEY), "stale_streak", 3)
    assert store.get(KEY) == EndpointHealth()
    assert not store.shared


def test_a_redis_that_is_down_costs_nothing_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with caplog.at_level(logging.WARNING, logger="fsm_agent"), RedisHealth(
        f"redis://127.0.0.1:{port}/0", retry_interval=60
    ) as down:
        for _ in range(5):
            down.update(KEY, HealthChange(stall=True))
        assert down.get(KEY).stale_streak == 5  # local memory serves
        assert down.round_trips == 1  # one connection refused; no retry until retry_interval
    assert len(warnings_of(caplog)) == 1


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server that accepts connections and never answers: a hung Redis."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.05)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        server.close()


def test_a_silent_redis_is_given_up_on_its_timeout(
    silent_server: int, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="fsm_agent"), RedisHealth(
        f"redis://127.0.0.1:{silent_server}/0", retry_interval=60
    ) as slow:
        assert slow.get(KEY) == EndpointHealth()
        assert not slow.shared
        assert slow.update(KEY, HealthChange(stall=True)).stale_streak == 1
        assert asyncio.run(slow.aget(KEY)).stale_streak == 1  # not retried before retry_interval
    assert len(warnings_of(caplog)) == 1
    assert "TimeoutError" in warnings_of(caplog)[0]


def test_a_silent_redis_bounds_the_async_store(silent_server: int) -> None:
    with RedisHealth(f"redis://127.0.0.1:{silent_server}/0", retry_interval=60) as slow:
        assert asyncio.run(slow.aupdate(KEY, HealthChange(stall=True))).stale_streak == 1
        assert not slow.shared


def test_changes_learned_while_redis_was_away_are_shared_when_it_returns(
    fresh_redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="fsm_agent"), RedisHealth(
        fresh_redis_server.url, retry_interval=0.05
    ) as store:
        store.update(KEY, HealthChange(stream_options_unsupported=True))
        fresh_redis_server.kill()
        for _ in range(3):
            store.update(KEY, HealthChange(stall=True))
        assert store.get(KEY).stale_streak == 3 and not store.shared
        fresh_redis_server.start()
        time.sleep(0.06)
        assert store.get(KEY).stale_streak == 3
        assert store.shared
        with RedisHealth(fresh_redis_server.url) as other:
            # The restarted server kept nothing (no persistence): what it holds came from the flush.
            assert other.get(KEY) == EndpointHealth(stale_streak=3)
    messages = [r.getMessage() for r in caplog.records]
    assert len(warnings_of(caplog)) == 1
    assert any("answers again" in message for message in messages)


def test_async_store_shares_with_the_sync_one(store: RedisHealth, second: RedisHealth) -> None:
    async def run() -> EndpointHealth:
        await store.aupdate(KEY, HealthChange(cooldown_until=time.time() + 30))
        await store.aupdate(KEY, HealthChange(stall=True))
        return await store.aget(KEY)

    seen = asyncio.run(run())
    assert seen.stale_streak == 1 and seen.cooldown_until > time.time()
    assert second.get(KEY) == seen
    assert store.shared


def test_a_callers_client_tells_where_and_is_not_closed(
    redis_server: RedisServer, redis_prefix: str, redis_client: redis.Redis
) -> None:
    with RedisHealth(redis_client, prefix=redis_prefix) as store:
        store.update(KEY, HealthChange(streaming_disabled=True))
        assert asyncio.run(store.aget(KEY)).streaming_disabled
    assert redis_client.ping()  # still usable: the store closed only its own connections
    async_client = redis.asyncio.Redis(host="127.0.0.1", port=redis_server.port)
    with RedisHealth(async_client, prefix=redis_prefix) as store:
        assert store.get(KEY).streaming_disabled
    asyncio.run(async_client.aclose())


def test_anything_else_is_refused() -> None:
    with pytest.raises(TypeError, match="redis URL"):
        RedisHealth(object())
    with pytest.raises(ValueError, match="timeout"):
        RedisHealth("redis://127.0.0.1:1/0", timeout=0)
