"""A route's health across requests (RC-8, RC-9), with the real `openai` client over loopback HTTP:
connection errors count toward the breaker as 5xx and stalls do; the breaker is shared through the
health store (two `RedisHealth` stores on one real redis-server); its half-open probe (BO-7) after
server errors; and two scenarios of the failover scorecard issue 25 cites, scaled down:
"the primary never answers, the fallback does" and "a 60 s outage of 503s, 15 requests".

Wall-clock health time is virtual where a test needs minutes (`endpoint.wall_clock` stepped by
hand); no test waits out a back-off or a cooldown.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from helpers import INSTANT, PROMPTLY
from redis_server import RedisServer

import fsm_agent
from fsm_agent import Route
from fsm_agent._internal import endpoint
from fsm_agent.testing import Emulator, HttpError, NeverAnswers, Scenario

MESSAGES: Any = [{"role": "user", "content": "hi"}]
ANSWER = "The fallback answered."


class Clock:
    """The health store's wall clock, moved by hand (`endpoint.wall_clock` is its seam)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    made = Clock()
    monkeypatch.setattr(endpoint, "wall_clock", made)
    return made


@pytest.fixture
def fallback() -> Iterator[Emulator]:
    with Emulator(Scenario.build(ANSWER)) as emu:
        yield emu


class Clients:
    """The test's openai clients, closed at the end."""

    def __init__(self) -> None:
        self.made: list[Any] = []

    def openai(self, base_url: str, *, aio: bool = False) -> Any:
        kind = openai.AsyncOpenAI if aio else openai.OpenAI
        client = kind(base_url=base_url, api_key="sk-test", max_retries=0)
        self.made.append(client)
        return client

    def routes(self, primary: str, fallback: Emulator, *, aio: bool = False, **options: Any) -> list[Route]:
        return [
            Route(
                self.openai(primary, aio=aio),
                {"model": "gpt-4.1", "messages": MESSAGES},
                name="primary",
                **options,
            ),
            Route(
                self.openai(fallback.openai_base_url, aio=aio),
                {"model": "gpt-4.1-mini", "messages": MESSAGES},
                name="fallback",
            ),
        ]


@pytest.fixture
def clients() -> Iterator[Clients]:
    made = Clients()
    yield made
    for client in made.made:
        if isinstance(client, openai.AsyncOpenAI):
            asyncio.run(client.close())
        else:
            client.close()


def closed_port() -> str:
    """An address where nothing listens: every connection is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def on_primary(result: Any) -> int:
    """The attempts the request opened on the primary route."""
    return sum(1 for record in result.records if record.dest == "connecting" and record.route == "primary")


# -- RC-9: connection errors count; the breaker is shared; its half-open probe ----------------------------


def test_rc9_connection_errors_count_and_the_next_request_starts_on_the_fallback(
    fallback: Emulator, clients: Clients
) -> None:
    session = fsm_agent.Session(backoff=INSTANT, retries=2, stale_giveup=2)
    routes = clients.routes(closed_port(), fallback)
    first = session.stream(routes)
    assert (first.route, on_primary(first)) == ("fallback", 2)  # refused twice: the breaker opened
    second = session.stream(routes)
    assert (second.route, on_primary(second)) == ("fallback", 0)  # started on the fallback
    assert second.records[0].guards["breaker_tripped"] is True


def test_rc9_a_rate_limit_does_not_count_toward_the_breaker(
    emulator: Emulator, fallback: Emulator, clients: Clients
) -> None:
    """A 429 says the endpoint works and asks for less: its cooldown (BO-6) handles it, not the breaker."""
    emulator.script(Scenario.build("x", faults=[HttpError(429)]), then=Scenario.build("Primary."))
    session = fsm_agent.Session(backoff=INSTANT, retries=2, stale_giveup=1)
    result = session.stream(clients.routes(emulator.openai_base_url, fallback))
    assert (result.content, result.route) == ("Primary.", "primary")
    assert len(fallback.requests) == 0


def test_rc9_the_breaker_is_shared_through_the_health_store(
    redis_server: RedisServer, redis_prefix: str, emulator: Emulator, fallback: Emulator, clients: Clients
) -> None:
    """What one store's session learns, another store's session (another process, as far as its
    memory goes) honours on its next request: it starts on the fallback, the dead route untouched."""
    emulator.script(Scenario.build("x", faults=[HttpError(503)]))
    with (
        fsm_agent.RedisHealth(redis_server.url, prefix=redis_prefix) as one,
        fsm_agent.RedisHealth(redis_server.url, prefix=redis_prefix) as other,
    ):
        first = fsm_agent.Session(health=one, backoff=INSTANT, retries=2, stale_giveup=2)
        result = first.stream(clients.routes(emulator.openai_base_url, fallback))
        assert (result.route, len(emulator.requests)) == ("fallback", 2)
        second = fsm_agent.Session(health=other, backoff=INSTANT, retries=2, stale_giveup=2)
        result = second.stream(clients.routes(emulator.openai_base_url, fallback))
        assert (result.route, len(emulator.requests)) == ("fallback", 2)
        assert result.records[0].guards["breaker_tripped"] is True


def test_rc9_bo7_the_half_open_probe_after_server_errors(
    emulator: Emulator, fallback: Emulator, clients: Clients, clock: Clock
) -> None:
    emulator.script(Scenario.build("x", faults=[HttpError(503)]))
    session = fsm_agent.Session(backoff=INSTANT, retries=2, stale_giveup=2, breaker_cooldown=30)
    routes = clients.routes(emulator.openai_base_url, fallback)
    assert on_primary(session.stream(routes)) == 2  # opened the breaker
    clock.now += 10
    assert on_primary(session.stream(routes)) == 0  # open: skipped
    clock.now += 25  # past the cooldown: one request probes the primary
    probe = session.stream(routes)
    assert (probe.route, on_primary(probe)) == ("fallback", 1)  # a failed probe re-trips at once
    clock.now += 10
    assert on_primary(session.stream(routes)) == 0  # re-tripped for another cooldown
    emulator.script(Scenario.build("Primary is back."))
    clock.now += 25
    healed = session.stream(routes)
    assert (healed.content, healed.route) == ("Primary is back.", "primary")
    assert session.stream(routes).route == "primary"  # the probe's success closed the breaker


# -- the scorecard's scenarios, scaled down ----------------------------------------------------------------

SCORECARD = {"retries": 2, "backoff": fsm_agent.Backoff(0.5, 8, max_wait=10), "breaker_cooldown": 30}


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "async"])
def test_scorecard_primary_never_answers_and_the_fallback_answers_after_the_first_stall(
    emulator: Emulator, fallback: Emulator, clients: Clients, aio: bool
) -> None:
    """The scorecard's 30 s timeout scaled to 0.3 s: one stall on the silent primary, not three."""
    emulator.script(Scenario.build("x", faults=[NeverAnswers(seconds=30)]))
    session = fsm_agent.Session(stale_timeout=0.3, **SCORECARD)
    routes = clients.routes(emulator.openai_base_url, fallback, aio=aio)
    statuses: list[str] = []
    started = time.monotonic()
    if aio:
        result = asyncio.run(session.astream(routes, on_status=statuses.append))
    else:
        result = session.stream(routes, on_status=statuses.append)
    elapsed = time.monotonic() - started
    assert (result.content, result.route) == (ANSWER, "fallback")
    assert len(emulator.requests) == 1
    assert elapsed < 0.3 + PROMPTLY
    assert sum(status.startswith("stalled") for status in statuses) == 1
    print(
        f"\nscorecard 'primary never answers': {len(emulator.requests)} attempt on the primary, "
        f"answered in {elapsed:.2f} s"
    )


def outage(emulator: Emulator, fallback: Emulator, clients: Clients, clock: Clock, **settings: Any) -> int:
    """15 requests, one every 4 s, through a 60 s outage of the primary (every answer a 503):
    how many attempts reached the primary."""
    emulator.reset()
    emulator.script(Scenario.build("x", faults=[HttpError(503)]))
    session = fsm_agent.Session(stale_timeout=30, **{**SCORECARD, "backoff": INSTANT, **settings})
    routes = clients.routes(emulator.openai_base_url, fallback)
    for _ in range(15):
        assert session.stream(routes).route == "fallback"
        clock.now += 4
    return len(emulator.requests)


def test_scorecard_a_60_s_outage_of_503s_costs_the_dead_route_a_few_attempts_not_45(
    emulator: Emulator, fallback: Emulator, clients: Clients, clock: Clock
) -> None:
    """The waits between retries are taken out (`Backoff(base=0)`): they change how long a request
    takes, not how many attempts reach the primary."""
    without_breaker = outage(emulator, fallback, clients, clock, stale_giveup=0)
    clock.now += 600
    with_breaker = outage(emulator, fallback, clients, clock)  # stale_giveup: the default, 5
    print(
        f"\nscorecard '60 s outage, 15 requests': {with_breaker} attempts on the dead route "
        f"({without_breaker} without the breaker)"
    )
    assert without_breaker == 45
    assert with_breaker <= 6


# -- RC-8: a route's own retries, in the trace too ---------------------------------------------------------


@pytest.mark.parametrize("record_wire", [True, False])
def test_rc8_a_routes_retry_cap_is_in_the_trace_and_replays(
    emulator: Emulator, fallback: Emulator, clients: Clients, record_wire: bool
) -> None:
    emulator.script(Scenario.build("x", faults=[HttpError(503)]))
    sink = fsm_agent.MemorySink(record_wire=record_wire)
    session = fsm_agent.Session(backoff=INSTANT, retries=2, stale_giveup=0, trace=sink)
    result = session.stream(clients.routes(emulator.openai_base_url, fallback, retries=0))
    assert (result.route, on_primary(result)) == ("fallback", 1)
    report = fsm_agent.replay(sink)
    assert report.matched, report.first_mismatch


@pytest.mark.parametrize("retries", [-1, True, 1.5, "2"])
def test_rc8_a_routes_retry_cap_is_checked(emulator: Emulator, clients: Clients, retries: Any) -> None:
    route = Route(
        clients.openai(emulator.openai_base_url), {"model": "m", "messages": MESSAGES}, retries=retries
    )
    with pytest.raises(ValueError, match="retries must be a whole number"):
        fsm_agent.Session().stream([route])
    assert emulator.requests == []
