"""WD-5..WD-8 over the provider x driver matrix: the watchdog's phases and its two clocks, with the
real SDK clients on the emulator over loopback HTTP (the harness: tests/matrix/lanes.py).

Each test scales the deadlines down to tenths of a second and checks one side only, with a wide
margin: a deadline that must fire is set far below the provider's silence (and the test's bound
far above the deadline), a deadline that must not fire far above it. The liveness clock is reset
by keepalives the emulator sends every few hundredths of a second during a "live" silence
(`Stall(keepalive_every=...)`; on Bedrock an event of a type botocore does not model). The
deadline that fired is read from the records (`stall_phase`, `stall_clock`), never from a race.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from helpers import INSTANT, PROMPTLY
from lanes import APIS, Lane, lane, lane_params

import fsm_agent
from fsm_agent.testing import NoHeaders, Scenario, Stall

__all__ = ["lane"]

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

# Where a lane's reasoning can be cut: after its first reasoning frame.
AFTER_FIRST_THOUGHT = {"frames": 1, "kind": "reasoning"}
THOUGHT = "Let me think this through with care before I answer you."


# The five APIs on stream(), and the async driver on Chat (and Anthropic, where a stall must fire):
# what the clocks do is the pump's and the watchdog's, written once for both drivers; the timer
# each driver arms differs (both to the tick on a virtual clock: test_watchdog_clocks.py,
# test_async_watchdog.py).
EVERY_API_AND_ASYNC = pytest.mark.parametrize(
    "lane", [*lane_params(APIS, ("sync",)), *lane_params(("chat",), ("async",))], indirect=True
)
STALLS_EVERY_API_AND_ASYNC = pytest.mark.parametrize(
    "lane", [*lane_params(APIS, ("sync",)), *lane_params(("chat", "anthropic"), ("async",))], indirect=True
)


def stalls(sink: fsm_agent.MemorySink) -> list[dict[str, Any]]:
    """The cause of every stall of the trace (what WD-8 puts in the records)."""
    return [record.cause for record in sink.records if record.trigger == "stale"]


def session(sink: fsm_agent.MemorySink, timeouts: fsm_agent.Timeouts, **kwargs: Any) -> fsm_agent.Session:
    kwargs.setdefault("retries", 0)
    return fsm_agent.Session(backoff=INSTANT, timeouts=timeouts, trace=sink, **kwargs)


@STALLS_EVERY_API_AND_ASYNC
def test_wd6_a_connection_that_goes_dead_while_thinking_is_stalled_at_its_liveness_deadline(
    lane: Lane,
) -> None:
    """Keepalives, then nothing at all: the liveness deadline (0.2 s) fires, long before the
    thinking phase's progress deadline (20 s) would."""
    live_then_dead = [
        Stall(**AFTER_FIRST_THOUGHT, seconds=0.1, keepalive_every=0.03),
        Stall(**AFTER_FIRST_THOUGHT, seconds=30),
    ]
    lane.emulator.script(Scenario.build("Answer.", reasoning=THOUGHT, faults=live_then_dead))
    sink = fsm_agent.MemorySink()
    started = time.monotonic()
    with pytest.raises(fsm_agent.StreamStalledError) as caught:
        lane.stream(session(sink, fsm_agent.Timeouts(liveness=0.2, thinking=20.0)), lane.collect())
    assert time.monotonic() - started < 0.2 + 0.1 + PROMPTLY  # far below the 20 s progress deadline
    [cause] = stalls(sink)
    assert (cause["stall_phase"], cause["stall_clock"], cause["stale_timeout"]) == (
        "thinking",
        "liveness",
        0.2,
    )
    assert "keepalives included" in str(caught.value)
    lane.assert_closed_once(1)
    lane.assert_clean()


@STALLS_EVERY_API_AND_ASYNC
def test_wd6_a_live_connection_that_only_pings_is_stalled_at_the_progress_deadline(lane: Lane) -> None:
    """Keepalives for 30 s and nothing else: alive, so the liveness deadline never fires; the
    thinking phase's progress deadline (0.25 s) does. A ping-only stream never lives forever."""
    pings_only = [Stall(**AFTER_FIRST_THOUGHT, seconds=30, keepalive_every=0.03)]
    lane.emulator.script(Scenario.build("Answer.", reasoning=THOUGHT, faults=pings_only))
    sink = fsm_agent.MemorySink()
    started = time.monotonic()
    with pytest.raises(fsm_agent.StreamStalledError):
        lane.stream(session(sink, fsm_agent.Timeouts(liveness=5.0, thinking=0.25)), lane.collect())
    assert time.monotonic() - started < 0.25 + PROMPTLY
    [cause] = stalls(sink)
    assert (cause["stall_phase"], cause["stall_clock"], cause["stale_timeout"]) == (
        "thinking",
        "progress",
        0.25,
    )
    lane.assert_clean()


@EVERY_API_AND_ASYNC
def test_wd6_a_long_silence_with_pings_while_thinking_is_not_a_stall(lane: Lane) -> None:
    """The 90 s-class silence of a reasoning model, scaled down: 0.7 s with keepalives every
    0.02 s, with a liveness deadline of 0.5 s (shorter than the silence: only the keepalives keep
    it) and a thinking deadline of 10 s. The answer comes whole, on the first attempt."""
    silence = [Stall(**AFTER_FIRST_THOUGHT, seconds=0.7, keepalive_every=0.02)]
    lane.emulator.script(Scenario.build("The answer.", reasoning=THOUGHT, faults=silence))
    sink = fsm_agent.MemorySink()
    result = lane.stream(session(sink, fsm_agent.Timeouts(liveness=0.5, thinking=10.0)), lane.collect())
    assert result.content == "The answer." and result.reasoning == THOUGHT
    assert result.attempts == 1 and stalls(sink) == []
    lane.assert_clean()


@EVERY_API_AND_ASYNC
def test_wd5_a_slow_first_event_leaves_for_the_next_route(lane: Lane) -> None:
    """first_event (0.3 s) is the threshold for leaving a route: the first route's first text is
    30 s away, so the request goes on on the second route, which answers."""
    lane.emulator.script(
        Scenario.build("Slow.", faults=[Stall(0, kind="text", seconds=30)]), Scenario.build("Fast.")
    )
    sink = fsm_agent.MemorySink()
    started = time.monotonic()
    result = lane.stream(
        session(sink, fsm_agent.Timeouts(first_event=0.3), stale_timeout=20.0), lane.collect(), routes=2
    )
    assert time.monotonic() - started < 0.3 + PROMPTLY
    assert result.content == "Fast." and result.route == "route-2"
    [cause] = stalls(sink)
    assert (cause["stall_phase"], cause["stall_clock"]) == ("first_event", "progress")
    lane.assert_clean()


@EVERY_API_AND_ASYNC
def test_wd5_a_slow_first_event_is_waited_out_on_the_last_route(lane: Lane) -> None:
    """With no route left, first_event (0.15 s) is not a reason to give up: a first text 0.35 s
    away is waited for, up to the thinking deadline (stale_timeout, 10 s)."""
    lane.emulator.script(Scenario.build("Worth the wait.", faults=[Stall(0, kind="text", seconds=0.35)]))
    sink = fsm_agent.MemorySink()
    result = lane.stream(
        session(sink, fsm_agent.Timeouts(first_event=0.15), stale_timeout=10.0), lane.collect()
    )
    assert result.content == "Worth the wait." and result.attempts == 1
    assert stalls(sink) == []
    lane.assert_clean()


# Not on bedrock-async: boto3 has no async client, so its blocking open runs in a worker thread
# that an asyncio cancellation cannot reach; the request ends on time, but that thread waits out
# the provider's silence (as test_wd1_silence_before_response_headers_is_a_stall says).
@pytest.mark.parametrize("lane", [p for p in lane_params() if p.id != "bedrock-async"], indirect=True)
def test_wd5_headers_that_never_come_are_detected_at_connect(lane: Lane) -> None:
    """The provider accepts the connection, reads the request and sends nothing, not even the
    headers: the connect deadline (0.3 s) fires, not the progress deadlines (20 s)."""
    lane.emulator.script(Scenario.build("x", faults=[NoHeaders(seconds=30)]))
    sink = fsm_agent.MemorySink()
    started = time.monotonic()
    got = lane.collect()
    with pytest.raises(fsm_agent.StreamStalledError) as caught:
        lane.stream(session(sink, fsm_agent.Timeouts(connect=0.3), stale_timeout=20.0), got)
    assert time.monotonic() - started < 0.3 + PROMPTLY
    [cause] = stalls(sink)
    assert (cause["stall_phase"], cause["stall_clock"], cause["stale_timeout"]) == (
        "connect",
        "liveness",
        0.3,
    )
    assert "no response headers" in str(caught.value)
    said = "stalled before the response headers: no response headers for 0.3 s (phase connect)"
    assert [status for status in got.statuses if status.startswith("stalled")][:1] == [
        f"{said}; aborting attempt 1"
    ]
    lane.assert_clean()
