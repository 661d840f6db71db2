"""Health shared across processes (HL-1..3): two OS processes, one real redis-server, real `openai`
clients over loopback. What one process learns — a tripped breaker, a rejected `stream_options`, a
429 cooldown — the other honours on its next request; a Redis killed mid-run costs nothing."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from redis_server import RedisServer

import fsm_agent
from fsm_agent import Route
from fsm_agent._internal.health import EndpointKey
from fsm_agent.testing import Emulator, HttpError, RejectStreamOptions, Scenario, Stall

HERE = Path(__file__).resolve().parents[1]  # tests/
MODEL = "gpt-4.1-mini"
PARAMS: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
BREAKER = {"retries": 0, "stale_timeout": 0.3, "stale_giveup": 1, "breaker_cooldown": 60}


def other_process(
    redis: RedisServer, prefix: str, emulator: Emulator, requests: int, **settings: Any
) -> list[Any]:
    """Process A: `requests` requests in another OS process sharing the Redis; its outcomes."""
    return other_process_run(redis, prefix, emulator, requests, **settings)[0]


def other_process_run(
    redis: RedisServer, prefix: str, emulator: Emulator, requests: int, **settings: Any
) -> tuple[list[Any], str]:
    """`other_process`, and what the process wrote to stderr (where its warnings go)."""
    done = subprocess.run(
        [
            sys.executable,
            str(HERE / "health_worker.py"),
            redis.url,
            prefix,
            emulator.openai_base_url,
            MODEL,
            str(requests),
            json.dumps(settings),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()], done.stderr


@pytest.fixture
def client(emulator: Emulator) -> Iterator[openai.OpenAI]:
    made = openai.OpenAI(base_url=emulator.openai_base_url, api_key="sk-test", max_retries=0)
    yield made
    made.close()


@pytest.fixture
def shared(redis_server: RedisServer, redis_prefix: str) -> Iterator[fsm_agent.RedisHealth]:
    with fsm_agent.RedisHealth(redis_server.url, prefix=redis_prefix) as health:
        yield health


def session(health: Any, **settings: Any) -> fsm_agent.Session:
    settings.setdefault("backoff", fsm_agent.Backoff(base=0))
    return fsm_agent.Session(health=health, **settings)


@pytest.mark.slow
def test_a_breaker_tripped_by_one_process_stops_the_other(
    redis_server: RedisServer,
    redis_prefix: str,
    emulator: Emulator,
    emulator_factory: Callable[..., Emulator],
    client: openai.OpenAI,
    shared: fsm_agent.RedisHealth,
) -> None:
    emulator.script(Scenario.build("never sent", faults=[Stall(0, seconds=30.0, then="drop")]))
    (stalled,) = other_process(redis_server, redis_prefix, emulator, 1, **BREAKER)
    assert stalled == {"outcome": "StreamStalledError", "stalls": 1}
    sent = len(emulator.requests)
    with pytest.raises(fsm_agent.ProviderUnresponsiveError):  # no route left: raised at once
        session(shared, **BREAKER).stream(client, PARAMS)
    backup = emulator_factory(Scenario.build("From the backup."))
    backup_client = openai.OpenAI(base_url=backup.openai_base_url, api_key="sk-test", max_retries=0)
    try:
        result = session(shared, **BREAKER).stream(
            [Route(client, PARAMS), Route(backup_client, PARAMS, name="backup")]
        )
    finally:
        backup_client.close()
    assert result.route == "backup" and result.content == "From the backup."
    assert len(emulator.requests) == sent  # the endpoint A found stalling got nothing from B


def test_a_quirk_learned_by_one_process_is_not_resent_by_the_other(
    redis_server: RedisServer,
    redis_prefix: str,
    emulator: Emulator,
    client: openai.OpenAI,
    shared: fsm_agent.RedisHealth,
) -> None:
    emulator.script(Scenario.build("Hello.", faults=[RejectStreamOptions(400)]))
    (learned,) = other_process(redis_server, redis_prefix, emulator, 1)
    assert learned["outcome"] == "ok"
    assert [("stream_options" in request.body) for request in emulator.requests] == [True, False]
    session_b = session(shared)
    result = session_b.stream(client, PARAMS)
    assert result.content == "Hello." and result.attempts == 1
    assert "stream_options" not in emulator.requests[-1].body  # RES-8, learned by A (HL-2)
    assert session_b.stream_options_unsupported


@pytest.mark.slow
def test_a_cooldown_set_by_one_process_is_honoured_by_the_other(
    redis_server: RedisServer,
    redis_prefix: str,
    emulator: Emulator,
    client: openai.OpenAI,
    shared: fsm_agent.RedisHealth,
) -> None:
    # A 6 s hint: long enough that the other process has surely exited and this one started inside
    # the cooldown, however loaded the machine (a 1 s hint raced the other process's start-up).
    emulator.script(Scenario.build(faults=[HttpError(429, retry_after=6.0)]), then=Scenario.build("Now."))
    (limited,) = other_process(redis_server, redis_prefix, emulator, 1, retries=0)
    assert limited["outcome"] == "RateLimitError"
    result = session(shared).stream(client, PARAMS)
    assert result.content == "Now."
    first = result.records[0]
    assert first.dest == "waiting" and first.inputs["wait_source"] == "cooldown"  # BO-6 across processes
    assert 0 < first.inputs["wait_s"] <= 6.0
    limited_at, answered_at = (request.received_at for request in emulator.requests)
    assert answered_at - limited_at >= 5.9  # no request was sent during A's cooldown


def test_redis_killed_mid_run_then_restarted(
    fresh_redis_server: RedisServer,
    emulator: Emulator,
    client: openai.OpenAI,
    caplog: pytest.LogCaptureFixture,
) -> None:
    emulator.script(
        Scenario.build("One."),
        Scenario.build("Two.", faults=[RejectStreamOptions(400)]),
        Scenario.build("Two."),  # the same request again, without stream_options (RES-8)
        then=Scenario.build("Three."),
    )
    with (
        caplog.at_level(logging.INFO, logger="fsm_agent"),
        fsm_agent.RedisHealth(fresh_redis_server.url, retry_interval=0.2) as health,
    ):
        worker = session(health)
        assert worker.stream(client, PARAMS).content == "One."
        fresh_redis_server.kill()
        # Redis is gone: requests go on from local memory; the quirk learned meanwhile is kept.
        assert worker.stream(client, PARAMS).content == "Two."
        assert worker.stream(client, PARAMS).content == "Three."
        assert worker.stream_options_unsupported and not health.shared
        fresh_redis_server.start()
        time.sleep(0.25)
        assert worker.stream(client, PARAMS).content == "Three."
        assert health.shared  # sharing resumed, with what was learned meanwhile
        with fsm_agent.RedisHealth(fresh_redis_server.url) as another_process:
            assert session(another_process).stream(client, PARAMS).content == "Three."
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "Redis" in r.getMessage()]
    assert len(warnings) == 1
    assert "stream_options" not in emulator.requests[-1].body  # the other store read A's quirk
    assert any("answers again" in r.getMessage() for r in caplog.records)


def test_async_requests_share_health_through_the_one_pool(
    redis_server: RedisServer,
    redis_prefix: str,
    emulator: Emulator,
    shared: fsm_agent.RedisHealth,
) -> None:
    import asyncio

    hello = Scenario.build("Hello.")
    emulator.script(Scenario.build("Hello.", faults=[RejectStreamOptions(400)]), then=hello)

    async def run() -> fsm_agent.StreamResult:
        client = openai.AsyncOpenAI(base_url=emulator.openai_base_url, api_key="sk-test", max_retries=0)
        try:
            return await session(shared).astream(client, PARAMS)
        finally:
            await client.close()

    assert asyncio.run(run()).content == "Hello."
    # one pool for sync and async requests (HL-3): the async request used a pooled connection
    assert shared._sync.connection_pool._created_connections == 1
    with fsm_agent.RedisHealth(redis_server.url, prefix=redis_prefix) as another_process:
        key = EndpointKey("chat_completions", emulator.openai_base_url.rstrip("/"), MODEL)
        assert another_process.get(key).stream_options_unsupported  # written through aupdate (HL-2)


def endpoint_of(emulator: Emulator) -> EndpointKey:
    return EndpointKey("chat_completions", emulator.openai_base_url.rstrip("/"), MODEL)


def wait_until_wall(when: float) -> None:
    """Sleep until the wall clock has passed `when` (a breaker's end read from Redis)."""
    while (left := when - time.time()) > 0:
        time.sleep(left + 0.02)


def redis_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    return [message for message in messages if "Redis" in message]


@pytest.mark.slow
def test_trip_probe_retrip_across_two_processes(
    redis_server: RedisServer,
    redis_prefix: str,
    emulator: Emulator,
    client: openai.OpenAI,
    shared: fsm_agent.RedisHealth,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """BO-7 across processes: B trips the breaker, A takes the half-open probe, stalls and re-trips
    it; B honours A's re-trip. Every store stays shared throughout (HL-2)."""
    emulator.script(Scenario.build("never sent", faults=[Stall(0, seconds=30.0, then="drop")]))
    with caplog.at_level(logging.WARNING, logger="fsm_agent"):
        with pytest.raises(fsm_agent.StreamStalledError):  # B trips the breaker for a short cooldown
            session(shared, **{**BREAKER, "breaker_cooldown": 0.5}).stream(client, PARAMS)
        tripped = shared.get(endpoint_of(emulator))
        assert tripped.breaker_open_until > 0 and shared.shared
        wait_until_wall(tripped.breaker_open_until)  # half-open now: the next request is the probe
        sent = len(emulator.requests)
        (probe,), stderr = other_process_run(redis_server, redis_prefix, emulator, 1, **BREAKER)
        assert probe == {"outcome": "StreamStalledError", "stalls": 1}  # A was let through, and stalled
        assert len(emulator.requests) == sent + 1
        assert "unusable" not in stderr  # A read back the value holding its own probe
        retripped = shared.get(endpoint_of(emulator))
        assert retripped.breaker_open_until > time.time() + 30  # A's re-trip (its cooldown: 60 s)
        assert retripped.probe_owner == "" and retripped.probe_until == 0.0  # the probe is free again
        assert retripped.stale_streak == 2
        with pytest.raises(fsm_agent.ProviderUnresponsiveError):  # B honours A's re-trip at once
            session(shared, **BREAKER).stream(client, PARAMS)
        assert len(emulator.requests) == sent + 1
        (refused,), stderr = other_process_run(redis_server, redis_prefix, emulator, 1, **BREAKER)
        assert refused == {"outcome": "ProviderUnresponsiveError", "stalls": 0}
        assert "unusable" not in stderr
    assert shared.shared
    assert redis_warnings(caplog) == []


def test_a_trip_queued_during_an_outage_reaches_the_other_process(
    fresh_redis_server: RedisServer,
    emulator: Emulator,
    client: openai.OpenAI,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """B trips the breaker while Redis is down (kept locally, queued); Redis restarts empty; B's next
    request writes the queue back first; then process A is refused without sending anything."""
    stall = Scenario.build("never sent", faults=[Stall(0, seconds=30.0, then="drop")])
    emulator.script(Scenario.build("One."), then=stall)
    with (
        caplog.at_level(logging.INFO, logger="fsm_agent"),
        fsm_agent.RedisHealth(fresh_redis_server.url, prefix="fleet", retry_interval=0.2) as health,
    ):
        worker = session(health, **BREAKER)
        assert worker.stream(client, PARAMS).content == "One."
        fresh_redis_server.kill()
        with pytest.raises(fsm_agent.StreamStalledError):
            worker.stream(client, PARAMS)
        assert not health.shared
        fresh_redis_server.start()
        time.sleep(0.25)  # past retry_interval
        sent = len(emulator.requests)
        with pytest.raises(fsm_agent.ProviderUnresponsiveError):  # its own trip, now from Redis
            worker.stream(client, PARAMS)
        assert health.shared
        (refused,), stderr = other_process_run(fresh_redis_server, "fleet", emulator, 1, **BREAKER)
        assert refused == {"outcome": "ProviderUnresponsiveError", "stalls": 0}
        assert len(emulator.requests) == sent
        assert "unusable" not in stderr
    assert len(redis_warnings(caplog)) == 1
    assert any("answers again" in r.getMessage() for r in caplog.records)


def test_200_concurrent_async_requests_use_the_pool_and_keep_redis_shared(
    fresh_redis_server: RedisServer, emulator: Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    """HL-3: 200 requests at once against a healthy Redis: it is never judged unusable (the budget
    measures Redis, not the loop), and the store never holds more connections than its pool."""
    import asyncio
    import threading

    import redis

    hello = Scenario.build("Hello.")
    emulator.script(Scenario.build("Hello.", faults=[RejectStreamOptions(400)]), then=hello)
    looker = redis.Redis.from_url(fresh_redis_server.url)
    peak = 0
    done = threading.Event()

    def watch() -> None:  # the server's own count of its clients, minus the one asking
        nonlocal peak
        while not done.is_set():
            peak = max(peak, int(looker.info("clients")["connected_clients"]) - 1)
            done.wait(0.002)

    async def run(health: fsm_agent.RedisHealth) -> list[fsm_agent.StreamResult]:
        client = openai.AsyncOpenAI(base_url=emulator.openai_base_url, api_key="sk-test", max_retries=0)
        try:
            one = session(health)
            return await asyncio.gather(*(one.astream(client, PARAMS) for _ in range(200)))
        finally:
            await client.close()

    watcher = threading.Thread(target=watch)
    with (
        caplog.at_level(logging.WARNING, logger="fsm_agent"),
        fsm_agent.RedisHealth(fresh_redis_server.url) as health,
    ):
        watcher.start()
        try:
            results = asyncio.run(run(health))
        finally:
            done.set()
            watcher.join()
        assert [result.content for result in results] == ["Hello."] * 200
        assert health.shared
        created = health._sync.connection_pool._created_connections
        assert 1 <= created <= health.max_connections
        assert health.get(endpoint_of(emulator)).stream_options_unsupported  # written through the pool
    looker.close()
    assert 1 <= peak <= health.max_connections, peak
    assert redis_warnings(caplog) == []
    print(f"200 concurrent astream: pool created {created} connections, server saw at most {peak}")
