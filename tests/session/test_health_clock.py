"""HL-1: deadlines survive a stepped wall clock. Each deadline keeps its original length, and what
remains of it is never more than that: a clock stepped back an hour does not keep a breaker shut
for an hour, nor does a 30 s step add 30 s to a 2 s cooldown. A controllable clock, no waiting."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis_server import RedisServer

import fsm_agent
from fsm_agent._internal import endpoint
from fsm_agent._internal.actions import Remember
from fsm_agent._internal.endpoint import EndpointLink, HealthSettings
from fsm_agent._internal.health import (
    EndpointHealth,
    EndpointKey,
    HealthChange,
    HealthStore,
    MemoryHealth,
    apply,
    bounded,
)
from fsm_agent._internal.health_redis import RedisHealth
from fsm_agent.testing import Emulator, Scenario, Stall

KEY = EndpointKey("chat_completions", "http://127.0.0.1:1/v1", "gpt-4.1-mini")
BREAKER = HealthSettings(stale_giveup=1, breaker_cooldown=2.0, probe_lease=10.0)


class Clock:
    """A wall clock the test steps by hand."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def step(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[HealthStore]:
    if request.param == "memory":
        yield MemoryHealth()
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    prefix: str = request.getfixturevalue("redis_prefix")
    with RedisHealth(server.url, prefix=prefix, timeout=1.0) as made:  # not about the budget
        yield made


def link(store: HealthStore, clock: Clock, request_id: str = "req") -> EndpointLink:
    return EndpointLink(store, KEY, BREAKER, request_id, clock=clock)


def trip(store: HealthStore, clock: Clock) -> None:
    first = link(store, clock, "tripper")
    first.begin()
    first.remember(Remember("stall"))  # stale_giveup=1: the breaker opens for 2 s


def test_a_clock_stepped_back_an_hour_keeps_the_breaker_no_longer_than_its_cooldown(
    store: HealthStore,
) -> None:
    clock = Clock()
    trip(store, clock)
    facts = link(store, clock).begin()
    assert facts.breaker_retry_at is not None and facts.breaker_retry_at - clock() == pytest.approx(2.0)
    clock.step(-3600)
    facts = link(store, clock).begin()
    assert not facts.breaker_probe
    assert facts.breaker_retry_at is not None and facts.breaker_retry_at - clock() <= 2.0 + 1e-6
    # the re-base is in the store: another request of the same (stepped) clock agrees
    assert store.get(KEY).breaker_open_until - clock() <= 2.0 + 1e-6
    clock.step(2.01)  # the cooldown's length later, by the stepped clock: half-open
    assert link(store, clock, "prober").begin().breaker_probe


def test_a_30_s_step_back_adds_nothing_to_a_2_s_cooldown(store: HealthStore) -> None:
    clock = Clock()
    limited = link(store, clock)
    limited.begin()
    limited.remember(Remember("cooldown", seconds=2.0))  # BO-6
    assert link(store, clock).begin().cooldown_s == pytest.approx(2.0)
    clock.step(-30)
    assert 0 < link(store, clock).begin().cooldown_s <= 2.0 + 1e-6
    clock.step(2.01)
    assert link(store, clock).begin().cooldown_s == 0.0


def test_a_probe_lease_is_bounded_too(store: HealthStore) -> None:
    clock = Clock()
    trip(store, clock)
    clock.step(2.01)
    assert link(store, clock, "prober").begin().breaker_probe  # holds the probe for its 10 s lease
    clock.step(-3600)
    assert not link(store, clock, "other").begin().breaker_probe  # the lease still runs...
    clock.step(10.01)
    assert link(store, clock, "other").begin().breaker_probe  # ...for 10 s, not an hour more


def test_a_clock_stepped_forward_only_shortens(store: HealthStore) -> None:
    clock = Clock()
    trip(store, clock)
    clock.step(30)
    assert link(store, clock, "prober").begin().breaker_probe  # past the cooldown: half-open at once


def test_another_process_with_a_clock_an_hour_behind_is_bounded(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    with (
        RedisHealth(redis_server.url, prefix=redis_prefix, timeout=1.0) as here,
        RedisHealth(redis_server.url, prefix=redis_prefix, timeout=1.0) as there,
    ):
        ours = Clock()
        trip(here, ours)
        behind = Clock()
        behind.step(-3600)
        facts = link(there, behind).begin()
        assert facts.breaker_retry_at is not None and facts.breaker_retry_at - behind() <= 2.0 + 1e-6
        behind.step(2.01)
        assert link(there, behind, "prober").begin().breaker_probe
        assert here.shared and there.shared


# -- the pure rule -----------------------------------------------------------------------------------
times = st.floats(0, 4e9, allow_nan=False)
lengths = st.floats(0, 1e6, allow_nan=False)
healths = st.builds(
    EndpointHealth,
    breaker_open_until=times,
    probe_until=times,
    cooldown_until=times,
    breaker_open_for=lengths,
    probe_for=lengths,
    cooldown_for=lengths,
)
PAIRS = (
    ("breaker_open_until", "breaker_open_for"),
    ("probe_until", "probe_for"),
    ("cooldown_until", "cooldown_for"),
)


@settings(max_examples=300, deadline=None)
@given(health=healths, now=times)
def test_bounded_leaves_no_deadline_further_than_its_length(health: EndpointHealth, now: float) -> None:
    out = bounded(health, now)
    for until, length in PAIRS:
        span = getattr(health, length)
        if span > 0:
            assert getattr(out, until) - now <= span * (1 + 1e-12) + 1e-6
            assert getattr(out, until) <= getattr(health, until)  # only ever earlier
        else:
            assert getattr(out, until) == getattr(health, until)  # unknown length: left alone
    assert bounded(out, now) == out


def test_a_deadline_set_with_a_time_keeps_its_length() -> None:
    at = 1.8e9
    health = apply(EndpointHealth(), HealthChange(breaker_open_until=at + 2, at=at))
    health = apply(health, HealthChange(cooldown_until=at + 5, at=at))
    assert (health.breaker_open_for, health.cooldown_for) == (2.0, 5.0)
    # a change written by a clock an hour behind re-bases before it applies
    later = apply(health, HealthChange(stall=True, at=at - 3600))
    assert later.breaker_open_until == at - 3600 + 2 and later.cooldown_until == at - 3600 + 5
    assert apply(health, HealthChange(success=True, at=at)).breaker_open_for == 0.0


# -- through a session, the real openai client and the emulator ----------------------------------------
SETTINGS: dict[str, Any] = {"retries": 0, "stale_timeout": 0.3, "stale_giveup": 1, "breaker_cooldown": 2.0}
PARAMS: dict[str, Any] = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]}
STALL = Scenario.build("never sent", faults=[Stall(0, seconds=30.0, then="drop")])


@pytest.fixture
def stepped(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The wall clock every endpoint link reads, stepped by the test (`endpoint.wall_clock`)."""
    clock = Clock()
    monkeypatch.setattr(endpoint, "wall_clock", clock)
    return clock


def test_a_session_refuses_for_the_cooldown_not_the_step(
    store: HealthStore, stepped: Clock, emulator: Emulator
) -> None:
    emulator.script(STALL, then=Scenario.build("Back."))
    session = fsm_agent.Session(health=store, backoff=fsm_agent.Backoff(base=0), **SETTINGS)
    client = openai.OpenAI(base_url=emulator.openai_base_url, api_key="sk-test", max_retries=0)
    try:
        with pytest.raises(fsm_agent.StreamStalledError):  # the breaker trips for 2 s
            session.stream(client, PARAMS)
        stepped.step(-3600)
        with pytest.raises(fsm_agent.ProviderUnresponsiveError) as refused:
            session.stream(client, PARAMS)
        assert refused.value.retry_at is not None and refused.value.retry_at - stepped() <= 2.0 + 1e-6
        sent = len(emulator.requests)
        stepped.step(2.01)  # the cooldown's length later by the stepped clock: the probe goes out
        assert session.stream(client, PARAMS).content == "Back."
        assert len(emulator.requests) == sent + 1
        assert session.stale_streak == 0  # the probe succeeded: the breaker is closed
    finally:
        client.close()


def test_an_async_session_refuses_for_the_cooldown_not_the_step(stepped: Clock, emulator: Emulator) -> None:
    emulator.script(STALL, then=Scenario.build("Back."))
    session = fsm_agent.Session(backoff=fsm_agent.Backoff(base=0), **SETTINGS)

    async def run() -> str:
        client = openai.AsyncOpenAI(base_url=emulator.openai_base_url, api_key="sk-test", max_retries=0)
        try:
            with pytest.raises(fsm_agent.StreamStalledError):
                await session.astream(client, PARAMS)
            stepped.step(-3600)
            with pytest.raises(fsm_agent.ProviderUnresponsiveError) as refused:
                await session.astream(client, PARAMS)
            assert refused.value.retry_at is not None and refused.value.retry_at - stepped() <= 2.0 + 1e-6
            stepped.step(2.01)
            return (await session.astream(client, PARAMS)).content
        finally:
            await client.close()

    assert asyncio.run(run()) == "Back."
