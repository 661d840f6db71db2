"""RedisHealth against a real redis-server: one read, writes on change, expiry, atomic updates
across stores, and the HL-3 fallback (down, slow, garbled, back again)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis_server import RedisServer

from fsm_agent._internal.frozen import replace
from fsm_agent._internal.health import EndpointHealth, EndpointKey, HealthChange, MemoryHealth, apply
from fsm_agent._internal.health_redis import RedisHealth, decode, encode

KEY = EndpointKey("chat_completions", "http://127.0.0.1:1/v1", "gpt-4.1-mini")
OTHER = EndpointKey("anthropic_messages", "http://127.0.0.1:1", "claude-sonnet-4-5")
# The stores of the tests about what is stored wait on Redis up to 1 s: a loaded 2-core machine may
# hold redis-server off the CPU for over 50 ms, and those tests are not about the budget (HL-3).
SEMANTICS_TIMEOUT = 1.0


@pytest.fixture
def store(redis_server: RedisServer, redis_prefix: str) -> Iterator[RedisHealth]:
    with RedisHealth(redis_server.url, prefix=redis_prefix, timeout=SEMANTICS_TIMEOUT) as made:
        yield made


@pytest.fixture
def second(redis_server: RedisServer, redis_prefix: str) -> Iterator[RedisHealth]:
    """Another store on the same Redis and prefix: what a second process sees."""
    with RedisHealth(redis_server.url, prefix=redis_prefix, timeout=SEMANTICS_TIMEOUT) as made:
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
    take_probe=st.none() | st.text(max_size=24),  # BO-7: the probe's owner goes through Redis too
    at=st.sampled_from([0.0, 1.0]),  # the writer's clock: unknown, or (1.0) read as it writes
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
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
        if change.at:  # the writer's clock, read when it writes (as `EndpointLink` does)
            change = replace(change, at=time.time())
        expected = apply(expected, change)
        written, kept = writer.update(key, change), memory.update(key, change)
        # A store may forget a value whose times have all passed (`expires_at`): what is still in
        # force must agree.
        assert in_force(written, now) == in_force(kept, now) == in_force(expected, now)
        # Redis forgets such a value as it writes it; the model forgets it too, or what the value
        # carried past its times (the owner of a probe that ended) would reach the next change on
        # one side only.
        written_at = time.time()
        if (expires := expected.expires_at(written_at)) is not None and expires <= written_at:
            expected, memory = EndpointHealth(), MemoryHealth()
    assert in_force(second.get(key), now) == in_force(expected, now)
    assert store.shared and second.shared


def in_force(health: EndpointHealth, now: float) -> EndpointHealth:
    """`health` without the times that have passed."""
    passed: dict[str, Any] = {}
    deadlines = (
        ("breaker_open_until", "breaker_open_for"),
        ("probe_until", "probe_for"),
        ("cooldown_until", "cooldown_for"),
    )
    for until, length in deadlines:
        if getattr(health, until) <= now:
            passed.update({until: 0.0, length: 0.0})
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
    with (
        caplog.at_level(logging.WARNING, logger="fsm_agent"),
        RedisHealth(f"redis://127.0.0.1:{port}/0", retry_interval=60) as down,
    ):
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
    with (
        caplog.at_level(logging.WARNING, logger="fsm_agent"),
        RedisHealth(f"redis://127.0.0.1:{silent_server}/0", retry_interval=60) as slow,
    ):
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
    with (
        caplog.at_level(logging.INFO, logger="fsm_agent"),
        RedisHealth(fresh_redis_server.url, retry_interval=0.05) as store,
    ):
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


# -- one schema for stored health (HL-2): what is written is read back, every field -------------------
_VALUES = {
    bool: st.booleans(),
    int: st.integers(0, 2**53),
    float: st.floats(0, 1e12, allow_nan=False, allow_infinity=False),
    str: st.text(max_size=64),  # a request id is ours, but any text must come back as it went
}
# Built from the class itself: a field added to EndpointHealth is covered without editing this.
healths = st.builds(
    EndpointHealth,
    **{name: _VALUES[type(getattr(EndpointHealth(), name))] for name in EndpointHealth.__match_args__},
)


@settings(max_examples=300, deadline=None)
@given(health=healths)
def test_every_health_value_survives_encode_and_decode(health: EndpointHealth) -> None:
    assert decode(encode(health)) == health
    assert decode(encode(health).encode()) == health  # as bytes, the way Redis gives it back


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(health=healths)
def test_every_health_value_is_read_back_through_redis(
    store: RedisHealth, second: RedisHealth, redis_client: redis.Redis, health: EndpointHealth
) -> None:
    key = EndpointKey("chat_completions", "http://127.0.0.1:1/v1", uuid.uuid4().hex)
    redis_client.set(store.redis_key(key), encode(health))  # what a writer of this version stores
    assert second.get(key) == health
    assert second.shared


def test_a_taken_probe_is_read_back_and_health_stays_shared(
    store: RedisHealth, second: RedisHealth, caplog: pytest.LogCaptureFixture
) -> None:
    now = time.time()
    with caplog.at_level(logging.WARNING, logger="fsm_agent"):
        store.update(KEY, HealthChange(stall=True, breaker_open_until=now - 1, at=now - 3))
        taken = store.update(KEY, HealthChange(take_probe="req-1", probe_until=now + 30, at=now))
        assert taken.probe_owner == "req-1"
        seen = second.get(KEY)  # the other process reads the probe back (BO-7)
        assert seen == taken
        # and both go on writing: the probe stalls and re-trips the breaker
        second.update(KEY, HealthChange(stall=True, at=now))
        second.update(KEY, HealthChange(breaker_open_until=now + 60, probe_until=0.0, at=now))
        after = store.get(KEY)
    assert after.stale_streak == 2 and after.breaker_open_until == now + 60 and after.probe_owner == ""
    assert store.shared and second.shared
    assert warnings_of(caplog) == []


def test_queued_changes_with_a_probe_are_written_back_after_a_restart(
    fresh_redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    now = time.time()
    with (
        caplog.at_level(logging.INFO, logger="fsm_agent"),
        RedisHealth(fresh_redis_server.url, retry_interval=0.05) as store,
    ):
        store.update(KEY, HealthChange(stall=True, breaker_open_until=now - 1, at=now - 3))
        fresh_redis_server.kill()
        store.update(KEY, HealthChange(take_probe="req-2", probe_until=now + 30, at=now))  # queued
        store.update(OTHER, HealthChange(cooldown_until=now + 60, at=now))  # queued, another key
        assert not store.shared
        fresh_redis_server.start()
        time.sleep(0.06)  # past retry_interval: the next operation tries Redis again
        store.get(OTHER)  # any operation writes the queue back first, whatever its key
        assert store.shared
        with RedisHealth(fresh_redis_server.url) as other:
            # The restarted server kept nothing (no persistence): what it holds came from the queue.
            seen = other.get(KEY)
            assert seen.probe_owner == "req-2" and seen.probe_until == now + 30
            assert other.get(OTHER).cooldown_until == now + 60
            assert other.shared
    assert len(warnings_of(caplog)) == 1


def test_a_restart_between_operations_costs_no_outage(
    fresh_redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The pooled connections die with the server; the first command after the restart reconnects
    (one retry on a broken connection) instead of declaring Redis unusable."""
    with caplog.at_level(logging.WARNING, logger="fsm_agent"), RedisHealth(fresh_redis_server.url) as store:
        store.update(KEY, HealthChange(streaming_disabled=True))
        fresh_redis_server.kill()
        fresh_redis_server.start()
        assert store.get(KEY) == EndpointHealth()  # the restarted server kept nothing
        assert store.shared
    assert warnings_of(caplog) == []


# -- one pool, a budget that measures Redis (HL-3) --------------------------------------------------
def _clients_of(server_client: redis.Redis) -> int:
    """Connections the server has open, not counting the one asking."""
    return int(server_client.info("clients")["connected_clients"]) - 1


def test_concurrent_async_operations_share_the_pool(fresh_redis_server: RedisServer) -> None:
    looker = redis.Redis.from_url(fresh_redis_server.url)
    keys = [EndpointKey("chat_completions", "http://127.0.0.1:1/v1", f"m{i}") for i in range(20)]
    peak = 0

    async def run(store: RedisHealth) -> None:
        nonlocal peak
        stall = HealthChange(stall=True)
        tasks = [
            asyncio.create_task(store.aupdate(keys[i % 20], stall) if i % 2 else store.aget(keys[i % 20]))
            for i in range(400)
        ]
        while not all(task.done() for task in tasks):
            peak = max(peak, _clients_of(looker))
            await asyncio.sleep(0.001)
        await asyncio.gather(*tasks)

    try:
        with RedisHealth(fresh_redis_server.url, max_connections=4) as store:
            asyncio.run(run(store))
            assert store.shared
            assert sum(store.get(key).stale_streak for key in keys) == 200  # no change lost
            peak = max(peak, _clients_of(looker))
            assert 1 <= peak <= 4
            assert store._sync.connection_pool._created_connections <= 4
    finally:
        looker.close()


def test_a_busy_event_loop_is_not_held_against_redis(
    redis_server: RedisServer, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The loop is blocked for far longer than the 50 ms budget while an operation is in flight:
    Redis answered in time, so the store stays shared."""
    with RedisHealth(redis_server.url, prefix=redis_prefix) as store:  # the default budget, 50 ms
        loop_blocked_during_an_operation(store, caplog)


def loop_blocked_during_an_operation(store: RedisHealth, caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> EndpointHealth:
        task = asyncio.create_task(store.aupdate(KEY, HealthChange(streaming_disabled=True)))
        await asyncio.sleep(0)  # the operation starts
        time.sleep(0.3)  # the loop's own delay: a callback hogging it
        return await task

    with caplog.at_level(logging.WARNING, logger="fsm_agent"):
        assert asyncio.run(run()).streaming_disabled
    assert store.shared
    assert warnings_of(caplog) == []


def test_closing_stops_the_worker_threads(redis_server: RedisServer, redis_prefix: str) -> None:
    before = set(threading.enumerate())
    with RedisHealth(redis_server.url, prefix=redis_prefix) as store:
        asyncio.run(store.aget(KEY))
    assert [t for t in threading.enumerate() if t not in before and t.is_alive()] == []


# -- no password in what the store writes itself (SEC-9) ----------------------------------------------
def test_a_urls_password_shows_neither_in_the_repr_nor_in_the_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as probe:  # a port nobody listens on: the warning comes at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    urls = [
        f"redis://127.0.0.1:{port}/0?password=hunter2-query-secret",
        f"redis://fleet:hunter2-userinfo-secret@127.0.0.1:{port}/0",
        f"redis://:hunter2-bare-secret@127.0.0.1:{port}/0?socket_keepalive=true",
    ]
    for url in urls:
        caplog.clear()
        with (
            caplog.at_level(logging.WARNING, logger="fsm_agent"),
            RedisHealth(url, retry_interval=60) as down,
        ):
            down.get(KEY)
            texts = [repr(down), str(down), *warnings_of(caplog)]
        assert len(warnings_of(caplog)) == 1
        assert f"127.0.0.1:{port}/0" in texts[0]  # where it points is still said
        for text in texts:
            assert "hunter2" not in text and "fleet" not in text, text


def test_a_callers_clients_password_is_not_shown(redis_server: RedisServer) -> None:
    client = redis.Redis(host="127.0.0.1", port=redis_server.port, password="hunter2-client-secret")
    with RedisHealth(client) as store:
        assert "hunter2" not in repr(store)
    client.close()


def test_a_closed_store_serves_async_requests_from_its_memory(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    store = RedisHealth(redis_server.url, prefix=redis_prefix)
    asyncio.run(store.aupdate(KEY, HealthChange(stream_options_unsupported=True)))
    store.close()
    before = set(threading.enumerate())
    assert asyncio.run(store.aget(KEY)).stream_options_unsupported  # what it knew; nothing raised
    assert [t for t in threading.enumerate() if t not in before] == []  # no worker started again


def test_a_closed_store_sends_nothing_more_to_redis_sync_or_async(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    store = RedisHealth(redis_server.url, prefix=redis_prefix, timeout=SEMANTICS_TIMEOUT)
    store.update(KEY, HealthChange(stream_options_unsupported=True))
    store.close()
    sent = store.round_trips
    assert store.get(KEY).stream_options_unsupported  # from its memory
    store.update(KEY, HealthChange(stall=True))
    assert asyncio.run(store.aget(KEY)).stale_streak == 1  # one store, one behaviour
    assert store.round_trips == sent  # nothing sent after close(), no connection reopened


def test_a_retried_write_whose_first_reply_was_lost_counts_once(
    store: RedisHealth, second: RedisHealth, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py retries a command once on a broken connection, with the same arguments: the script
    may have run already. A retry that finds our own value in place (its writer token) is our
    write, not a rival's to add the change to; a rival's equal value is still a rival's."""
    script = store._script

    def reply_lost_then_retried(**kwargs: Any) -> Any:
        script(**kwargs)  # ran in Redis; the reply never came back
        return script(**kwargs)  # redis-py's retry sends the very same command again

    store.update(KEY, HealthChange(stall=True))
    monkeypatch.setattr(store, "_script", reply_lost_then_retried)
    assert store.update(KEY, HealthChange(stall=True)).stale_streak == 2
    assert decode(redis_client.get(store.redis_key(KEY))).stale_streak == 2
    monkeypatch.undo()
    second.update(OTHER, HealthChange(stall=True))  # a rival's value equal to the one we compute:
    assert store.update(OTHER, HealthChange(stall=True)).stale_streak == 2  # both stalls counted


def test_a_late_change_does_not_cut_short_a_breaker_set_since(
    store: RedisHealth, second: RedisHealth
) -> None:
    """A change queued during an outage keeps its old clock: written back later, it must not bound
    (and so shorten) a breaker another process tripped since (HL-1)."""
    now = time.time()
    second.update(KEY, HealthChange(breaker_open_until=now + 30, at=now))  # tripped just now, 30 s
    queued = HealthChange(stall=True, at=now - 60)  # learned a minute ago, while Redis was away
    written = store._write(KEY, queued, late=True)
    assert written.breaker_open_until == pytest.approx(now + 30, abs=1e-3) and written.stale_streak == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")
def test_a_forked_child_does_not_hang_on_a_lock_held_at_the_fork(store: RedisHealth) -> None:
    store.update(KEY, HealthChange(stream_options_unsupported=True))
    holding, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        with store._lock:
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    holding.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: its copy of the lock is held by a thread it does not have
        status = 0
        try:
            signal.alarm(20)
            ok = (
                asyncio.run(store.aget(KEY)).stream_options_unsupported
                and store.get(KEY).stream_options_unsupported
            )
            status = 0 if ok else 1
        except BaseException:
            status = 2
        finally:
            os._exit(status)
    release.set()
    holder.join()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
