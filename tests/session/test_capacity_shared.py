"""CAP-3: the capacity in Redis is one bucket for every process that uses it, updated atomically
(compare-and-set, as health changes are); with Redis down each process keeps its own estimate
(HL-3), never failing or delaying a request for it."""

from __future__ import annotations

import threading

from redis_server import RedisServer

import fsm_agent
from fsm_agent._internal.capacity import Bucket, CapacityChange, CapacityKey, RateReading

KEY = CapacityKey("chat_completions|http://127.0.0.1:1/v1|gpt-4.1", "abc123")
READING = RateReading(
    requests_limit=100, requests_remaining=100, tokens_limit=10_000, tokens_remaining=10_000
)


def test_two_stores_share_one_bucket(redis_server: RedisServer, redis_prefix: str) -> None:
    with (
        fsm_agent.RedisHealth(redis_server.url, prefix=redis_prefix) as one,
        fsm_agent.RedisHealth(redis_server.url, prefix=redis_prefix) as other,
    ):
        learned, _ = one.capacity(KEY, CapacityChange("learn", 1000.0, reading=READING))
        assert learned.requests_limit == 100
        taken, _ = one.capacity(KEY, CapacityChange("reserve", 1000.0, tokens=50, max_wait=5))
        assert taken.requests_level == 99
        # the other process's first answer says more remains than the fleet has reserved: the
        # fleet's bucket is what it goes on from (a reading never raises a level)
        joined, _ = other.capacity(KEY, CapacityChange("learn", 1000.0, reading=READING))
        assert joined.requests_level == 99
        bucket, wait = other.capacity(KEY, CapacityChange("reserve", 1000.0, tokens=50, max_wait=5))
        assert wait == 0 and bucket.requests_level == 98 and bucket.tokens_level == 9900
        assert one.shared and other.shared


def test_concurrent_reservations_are_never_lost(redis_server: RedisServer, redis_prefix: str) -> None:
    stores = [fsm_agent.RedisHealth(redis_server.url, prefix=redis_prefix) for _ in range(4)]
    try:
        for store in stores:  # each has had an answer's headers (a reading of the same bucket)
            store.capacity(KEY, CapacityChange("learn", 1000.0, reading=READING))
        waits: list[float] = []

        def reserve(store: fsm_agent.RedisHealth) -> None:
            for _ in range(30):
                waits.append(
                    store.capacity(KEY, CapacityChange("reserve", 1000.0, tokens=1, max_wait=1e9))[1]
                )

        threads = [threading.Thread(target=reserve, args=(store,)) for store in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        bucket, _ = stores[0].capacity(KEY, CapacityChange("read", 1000.0))
        assert bucket.requests_level == 100 - 120  # every one of the 120 counted once
        assert sorted(waits)[-1] > 0  # the last ones were given slots later on (not all at once)
        assert len({round(wait, 6) for wait in waits if wait > 0}) == len([w for w in waits if w > 0])
    finally:
        for store in stores:
            store.close()


def test_redis_down_keeps_a_local_estimate(fresh_redis_server: RedisServer, redis_prefix: str) -> None:
    with fsm_agent.RedisHealth(fresh_redis_server.url, prefix=redis_prefix, retry_interval=60) as store:
        store.capacity(KEY, CapacityChange("learn", 1000.0, reading=READING))
        fresh_redis_server.kill()
        bucket, wait = store.capacity(KEY, CapacityChange("reserve", 1000.0, tokens=10, max_wait=5))
        assert not store.shared
        assert wait == 0 and bucket.requests_level == 99  # from what this process knew
        again, _ = store.capacity(KEY, CapacityChange("reserve", 1000.0, tokens=10, max_wait=5))
        assert again.requests_level == 98


def test_garbage_in_redis_is_the_fallback(redis_server: RedisServer, redis_prefix: str) -> None:
    import redis

    with fsm_agent.RedisHealth(redis_server.url, prefix=redis_prefix, retry_interval=60) as store:
        raw = redis.Redis.from_url(redis_server.url)
        try:
            raw.set(store.capacity_key(KEY), '{"requests_limit": "lots"}')
        finally:
            raw.close()
        bucket, _ = store.capacity(KEY, CapacityChange("learn", 1000.0, reading=READING))
        assert not store.shared  # the garbage is the fallback's cue (HL-3) ...
        assert bucket.requests_limit == 100 and bucket.requests_level == 100  # ... and the reading stands
        assert bucket != Bucket()
