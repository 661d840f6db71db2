"""WD-5..WD-7 and WD-12 to the tick: the deadlines' defaults, and both clocks of the sync watchdog on
the shared timer run on a virtual clock (no thread, no sleep: the test moves the clock and wakes
the timer where its thread would have woken), so the rules hold whatever the machine's load.
(The async watchdog's timers: tests/drivers/test_async_watchdog.py's virtual loop; over loopback
with the real SDKs: tests/matrix/test_phases_and_clocks.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from test_overhead import VirtualClock

import fsm_agent
from fsm_agent._internal.deadlines import PhaseDeadlines, resolve_deadlines
from fsm_agent._internal.drivers.watchdog import Watchdog, WatchdogTimer


def armed(
    deadlines: PhaseDeadlines, phase: str = "first_event"
) -> tuple[VirtualClock, WatchdogTimer, Watchdog, list[float]]:
    clock = VirtualClock()
    timer = WatchdogTimer(clock, threaded=False)
    dog = Watchdog(1.0, timer=timer)
    dog.deadlines = deadlines
    aborted: list[float] = []  # each abort's time (armed after firing, it is aborted again every 50 ms)
    dog.start()
    dog.arm(lambda: aborted.append(clock.now), phase=phase)
    return clock, timer, dog, aborted


def run_until(clock: VirtualClock, timer: WatchdogTimer, until: float, **at: Any) -> None:
    """Move the clock from look to look up to `until`, waking the timer at each booked look."""
    while True:
        nxt = timer.run_due()
        if nxt is None or nxt > until:
            clock.now = until
            timer.run_due()
            return
        clock.now = nxt


def test_the_defaults_bound_a_silent_provider_by_connect_and_a_dead_one_by_liveness() -> None:
    plain = resolve_deadlines(None, None, "gpt-4.1", {})
    assert (plain.connect, plain.liveness) == (30.0, 60.0)
    assert plain.first_event == plain.thinking == plain.text == plain.tool_args == 180.0
    thinker = resolve_deadlines(None, None, "o3", {})  # WD-2's floor raises the progress phases only
    assert (thinker.connect, thinker.liveness, thinker.thinking) == (30.0, 60.0, 600.0)
    # WD-7: the clocks that judge a connection stay under a major provider's own 120 s close
    assert max(plain.connect, plain.liveness, thinker.connect, thinker.liveness) < 120.0


def test_stale_timeout_stays_the_one_knob_and_timeouts_refine_it() -> None:
    one = resolve_deadlines(None, 5.0, "o3", {})
    assert one.as_dict() == dict.fromkeys(
        ("connect", "first_event", "thinking", "text", "tool_args", "liveness"), 5.0
    )
    env = resolve_deadlines(None, None, "gpt-4.1", {"FSM_AGENT_STREAM_STALE_TIMEOUT": "40"})
    assert (env.connect, env.text) == (30.0, 40.0)
    fine = resolve_deadlines(fsm_agent.Timeouts(connect=2, text=50, liveness=20), 100.0, None, {})
    assert (fine.connect, fine.first_event, fine.text, fine.liveness) == (2.0, 100.0, 50.0, 20.0)
    # first_event is the threshold for leaving a route; on the last route it is waited out
    switch = resolve_deadlines(fsm_agent.Timeouts(first_event=20), None, "gpt-4.1", {})
    assert switch.for_attempt(route_left=True).first_event == 20.0
    assert switch.for_attempt(route_left=False).first_event == 180.0


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"connect": 0}, ValueError),
        ({"text": -1.0}, ValueError),
        ({"liveness": float("inf")}, ValueError),
        ({"thinking": "30"}, TypeError),
        ({"tool_args": True}, TypeError),
    ],
)
def test_timeouts_refuse_what_is_not_a_positive_number_of_seconds(given: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        fsm_agent.Timeouts(**given)
    with pytest.raises(TypeError):
        fsm_agent.Session(timeouts={"connect": 1.0})  # type: ignore[arg-type]


def test_headers_that_never_come_fire_at_connect_to_the_tick() -> None:
    """WD-7 with the defaults: a provider that accepts and never answers is stalled at 30 s, on
    the liveness clock, in the connect phase (WD-4: no later than the deadline itself here)."""
    clock, timer, dog, aborted = armed(resolve_deadlines(None, None, "o3", {}), phase="connect")
    start = clock.now
    run_until(clock, timer, start + 29.999)
    assert aborted == []
    run_until(clock, timer, start + 31)
    assert aborted[:1] == [start + 30.0]
    assert (dog.fired, dog.fired_phase, dog.fired_clock) == ("stale", "connect", "liveness")
    assert dog.deadline_seconds(dog.fired_clock) == 30.0


def test_a_dead_connection_fires_at_the_liveness_deadline_whatever_the_phase() -> None:
    clock, timer, dog, aborted = armed(resolve_deadlines(None, None, "o3", {}))
    start = clock.now
    dog.enter("thinking")  # 600 s of progress deadline
    clock.now = start + 5
    dog.keepalive()  # the endpoint keeps the connection alive: the liveness deadline holds
    run_until(clock, timer, start + 64.9)
    assert aborted == []
    run_until(clock, timer, start + 100)
    assert aborted[:1] == [start + 65.0]
    assert (dog.fired_phase, dog.fired_clock) == ("thinking", "liveness")


def test_a_live_connection_without_progress_fires_at_the_phase_deadline_and_pings_never_keep_it() -> None:
    clock, timer, dog, aborted = armed(resolve_deadlines(fsm_agent.Timeouts(thinking=120), None, "o3", {}))
    start = clock.now
    dog.enter("thinking")
    for second in range(10, 300, 10):  # a ping every 10 s, forever
        run_until(clock, timer, start + second)
        if aborted:
            break
        dog.keepalive()
    assert aborted[:1] == [start + 120.0]
    assert (dog.fired_phase, dog.fired_clock) == ("thinking", "progress")


def test_an_endpoint_that_never_sent_a_keepalive_is_judged_by_progress_alone() -> None:
    """An endpoint without keepalives (Chat Completions thinking in silence): no liveness deadline,
    so its silent reasoning runs to the progress deadline, as before the clocks."""
    clock, timer, dog, aborted = armed(resolve_deadlines(None, None, "o3", {}))
    start = clock.now
    run_until(clock, timer, start + 599)
    assert aborted == []
    run_until(clock, timer, start + 700)
    assert aborted[:1] == [start + 600.0] and dog.fired_clock == "progress"


def test_a_phase_with_a_shorter_deadline_is_aimed_at_at_once() -> None:
    """Progress moves the phase to text (5 s) from first_event (600 s): the booked look is brought
    forward (WD-12: on time on every clock, never at the older, later deadline)."""
    clock, timer, dog, aborted = armed(resolve_deadlines(fsm_agent.Timeouts(text=5), None, "o3", {}))
    start = clock.now
    clock.now = start + 1
    dog.touch()
    dog.enter("text")
    run_until(clock, timer, start + 5.999)
    assert aborted == []
    run_until(clock, timer, start + 10)
    assert aborted[:1] == [start + 6.0] and (dog.fired_phase, dog.fired_clock) == ("text", "progress")
