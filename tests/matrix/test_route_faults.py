"""Faults that belong to a route, once, over the provider x driver matrix (issue 25's classes 2-4):
RC-7 (a rejection the route's model or key owns switches when another route remains and is raised
as before when none does), RC-8 (a route silent before its first byte is left at once; a route's
own cap on its retries) and RC-9 (every failed attempt of a transient kind counts toward the
endpoint's breaker; a request whose route's breaker is open starts on the next route).

Each lane's real SDK client talks to the emulator over loopback HTTP: the primary route to the
lane's emulator, the fallback to a second one, so what each endpoint saw is counted apart. Each
API's error bodies are its own (`ContextTooLong`). Stale timeouts are 0.3 s; no test waits out a
back-off (`Backoff(base=0)`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import botocore.exceptions
import openai
import pytest
from google.genai import errors as genai_errors
from helpers import INSTANT, PROMPTLY, assert_emulator_and_threads_idle
from lanes import APIS, Lane, lane, lane_params

import fsm_agent
from fsm_agent.testing import (
    THREAD_PREFIX,
    ContextTooLong,
    Emulator,
    Flapping,
    HttpError,
    Scenario,
    Stall,
    StreamError,
)

__all__ = ["lane"]

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

ANSWER = "The fallback answered."

# The error each SDK raises for a 400 (what a caller's handler catches today, and still does).
BAD_REQUEST: dict[str, type[BaseException]] = {
    "chat": openai.BadRequestError,
    "responses": openai.BadRequestError,
    "anthropic": anthropic.BadRequestError,
    "bedrock": botocore.exceptions.ClientError,
    "gemini": genai_errors.ClientError,
}


def lanes(*args: Any, **kwargs: Any) -> Any:
    return pytest.mark.parametrize("lane", lane_params(*args, **kwargs), indirect=True)


# Every API sync, and Chat async: the async driver feeds a failure through the same core as the sync
# one (`DriverCore._failure`, the wire pipeline), so one async lane shows it; where the async driver's
# own path differs (a stall: timers and task cancellation), every lane runs.
SYNC_AND_ONE_ASYNC = pytest.mark.parametrize(
    "lane", [*lane_params(drivers=("sync",)), *lane_params(("chat",), ("async",))], indirect=True
)


@pytest.fixture
def fallback() -> Iterator[Emulator]:
    """The second route's emulator (the lane's own is the primary's)."""
    with Emulator(Scenario.build(ANSWER)) as emu:
        yield emu


def two_routes(lane: Lane, fallback: Emulator, **primary: Any) -> list[fsm_agent.Route]:
    first = lane.route(lane.client_of(lane.emulator), "primary-model", name="primary", **primary)
    return [first, lane.route(lane.client_of(fallback), "fallback-model", name="fallback")]


def guards_of(result: Any, dest: str) -> list[dict[str, bool]]:
    return [record.guards for record in result.records if record.dest == dest]


def assert_clean(lane: Lane, fallback: Emulator) -> None:
    threads = set(threading.enumerate())
    lane.threads_before |= {t for t in threads if t.name.startswith(THREAD_PREFIX)}  # the fallback's server
    lane.assert_clean()
    assert_emulator_and_threads_idle(fallback, threads, 2.0)


# -- RC-7: a rejection the route owns ------------------------------------------------------------------


@SYNC_AND_ONE_ASYNC
def test_rc7_a_prompt_too_long_for_the_model_switches_to_the_next_route(
    lane: Lane, fallback: Emulator
) -> None:
    lane.emulator.script(Scenario.build("x", faults=[ContextTooLong()]))
    got = lane.collect()
    result = lane.stream_routes(fsm_agent.Session(backoff=INSTANT), two_routes(lane, fallback), got)
    assert (result.content, result.route) == (ANSWER, "fallback")
    assert len(lane.emulator.requests) == 1  # not retried there: a bigger model is the cure
    assert len(fallback.requests) == 1
    (switch,) = guards_of(result, "switching")
    assert switch["route_owned"] is True
    assert any(status.startswith("switching to fallback") for status in got.statuses)
    assert got.text == ANSWER  # before anything visible: nothing to announce
    assert_clean(lane, fallback)


@lanes(drivers=("sync",))
def test_rc7_a_prompt_too_long_on_the_last_route_is_raised_as_before(lane: Lane) -> None:
    lane.emulator.script(Scenario.build("x", faults=[ContextTooLong()]))
    session = fsm_agent.Session(backoff=INSTANT)
    with pytest.raises(BAD_REQUEST[lane.api]) as caught:
        lane.stream(session, lane.collect())
    text = str(caught.value).lower()
    assert "too long" in text or "context" in text or "exceeds the maximum" in text
    assert len(lane.emulator.requests) == 1  # never retried
    assert session.stale_streak == 0  # nor counted against the endpoint (RC-9 counts transient ones)
    lane.assert_clean()


@lanes(drivers=("sync",))
def test_rc7_a_400_in_other_words_is_raised_and_the_next_route_is_not_tried(
    lane: Lane, fallback: Emulator
) -> None:
    """Bedrock's ValidationException and Gemini's INVALID_ARGUMENT are route-owned only in the
    words of an over-long prompt; any other 400 is a malformed request the next route would
    reject too (RT-2)."""
    lane.emulator.script(Scenario.build("x", faults=[HttpError(400, message="temperature: must be <= 2")]))
    with pytest.raises(BAD_REQUEST[lane.api]):
        lane.stream_routes(fsm_agent.Session(backoff=INSTANT), two_routes(lane, fallback))
    assert (len(lane.emulator.requests), len(fallback.requests)) == (1, 0)
    assert_clean(lane, fallback)


@lanes(("chat",), ("sync",))
@pytest.mark.parametrize("host", ["vllm", "deepseek"])
def test_rc7_openai_compatible_hosts_words_switch_too(lane: Lane, fallback: Emulator, host: Any) -> None:
    lane.emulator.script(Scenario.build("x", faults=[ContextTooLong(tokens=9000, limit=8192, host=host)]))
    result = lane.stream_routes(fsm_agent.Session(backoff=INSTANT), two_routes(lane, fallback))
    assert (result.route, len(lane.emulator.requests)) == ("fallback", 1)
    assert_clean(lane, fallback)


# Each API's in-stream error for an over-long prompt, where one comes inside a 200 stream: the
# Responses `response.failed` event, Bedrock's `validationException` message, Chat's error chunk,
# Anthropic's `error` event, Gemini's error chunk.
IN_STREAM_TOO_LONG = {
    "chat": StreamError(0, message="maximum context length exceeded", code="context_length_exceeded"),
    "responses": StreamError(
        0, message="Your input exceeds the context window of this model.", code="context_length_exceeded"
    ),
    "anthropic": StreamError(
        0, message="prompt is too long: 215000 tokens > 200000 maximum", error_type="invalid_request_error"
    ),
    "bedrock": StreamError(
        0, message="Input is too long for requested model.", bedrock_exception="validationException"
    ),
    "gemini": StreamError(
        0,
        message="The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
        code="invalid_argument",
    ),
}


@lanes(drivers=("sync",))
def test_rc7_the_same_rejection_inside_a_stream_switches_too(lane: Lane, fallback: Emulator) -> None:
    lane.emulator.script(Scenario.build("x", faults=[IN_STREAM_TOO_LONG[lane.api]]))
    result = lane.stream_routes(fsm_agent.Session(backoff=INSTANT), two_routes(lane, fallback))
    assert (result.content, result.route, len(lane.emulator.requests)) == (ANSWER, "fallback", 1)
    assert any(guards.get("route_owned") for guards in guards_of(result, "switching"))
    assert_clean(lane, fallback)


# -- RC-8: a route silent before its first byte; a route's own retries ----------------------------------


@lanes()
def test_rc8_a_route_silent_before_its_first_byte_is_left_after_one_stall(
    lane: Lane, fallback: Emulator
) -> None:
    lane.emulator.script(Scenario.build("x", faults=[Stall(0, seconds=10)]))  # headers, then nothing
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3, retries=2)
    got = lane.collect()
    started = time.monotonic()
    result = lane.stream_routes(session, two_routes(lane, fallback), got)
    elapsed = time.monotonic() - started
    assert (result.content, result.route) == (ANSWER, "fallback")
    assert len(lane.emulator.requests) == 1  # one stall, not three
    assert elapsed < 0.3 + PROMPTLY
    assert any(guards.get("first_byte_stall") for guards in guards_of(result, "switching"))
    assert any("sent nothing before the deadline" in status for status in got.statuses)
    assert_clean(lane, fallback)


@lanes(drivers=("sync",))
def test_rc8_a_route_with_its_own_retry_cap_is_left_sooner(lane: Lane, fallback: Emulator) -> None:
    lane.emulator.script(Scenario.build("x", faults=[HttpError(503)]))
    session = fsm_agent.Session(backoff=INSTANT, retries=2, stale_giveup=0)  # the breaker off: the cap alone
    result = lane.stream_routes(session, two_routes(lane, fallback, retries=1))
    assert result.route == "fallback"
    assert len(lane.emulator.requests) == 2  # the route's one retry, not the session's two
    assert_clean(lane, fallback)


# -- RC-9: the breaker counts every transient failure ---------------------------------------------------


@SYNC_AND_ONE_ASYNC
def test_rc9_server_errors_open_the_breaker_and_the_next_request_starts_on_the_next_route(
    lane: Lane, fallback: Emulator
) -> None:
    lane.emulator.script(Scenario.build("x", faults=[HttpError(503)]))
    session = fsm_agent.Session(backoff=INSTANT, retries=2, stale_giveup=2)
    routes = two_routes(lane, fallback)
    first = lane.stream_routes(session, routes)
    assert first.route == "fallback"
    assert len(lane.emulator.requests) == 2  # the second 503 opened the breaker: its last retry unspent
    assert any(guards.get("breaker_now_open") for guards in guards_of(first, "switching"))
    second = lane.stream_routes(session, routes)
    assert second.route == "fallback"
    assert len(lane.emulator.requests) == 2  # the dead route was not touched again
    assert second.records[0].guards["breaker_tripped"] is True
    assert len(fallback.requests) == 2
    assert_clean(lane, fallback)


@lanes(drivers=("sync",))
def test_rc9_a_flapping_route_serves_and_never_opens_the_breaker(lane: Lane, fallback: Emulator) -> None:
    lane.emulator.script(Scenario.build("Up again.", faults=[Flapping(503, down=1, up=1)]))
    session = fsm_agent.Session(backoff=INSTANT, retries=2, stale_giveup=2)
    routes = two_routes(lane, fallback)
    for _ in range(3):
        result = lane.stream_routes(session, routes)
        assert (result.content, result.route, result.attempts) == ("Up again.", "primary", 2)
    assert (len(lane.emulator.requests), len(fallback.requests)) == (6, 0)  # each success reset the streak
    assert_clean(lane, fallback)


assert set(APIS) == set(BAD_REQUEST)
