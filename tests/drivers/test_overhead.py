"""Issue 13: what a request shares with the process, and that it leaves nothing there.

The table is built into one `transitions` machine per process, which fires every request's
transitions; sync requests share one watchdog timer thread; a client's no-retries view and a
model's stale timeout are remembered. These tests show the sharing is safe (concurrent requests
give byte-exact results and records), on time (WD-4 with 200 concurrent stalls) and leaves
nothing behind (10,000 requests, many of them raising in each state, checked with gc and
tracemalloc).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import logging
import os
import random
import subprocess
import sys
import threading
import time
import tracemalloc
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import botocore.config
import helpers
import httpx2
import openai
import pytest
import structlog
import transitions
from helpers import INSTANT, busy_connections, params, threads_since
from provider_clients import anthropic_client as _anthropic
from provider_clients import openai_client as _openai

import fsm_agent
from fsm_agent._internal import client_views
from fsm_agent._internal import session as session_module
from fsm_agent._internal.drivers import clients
from fsm_agent._internal.drivers.watchdog import Watchdog, WatchdogTimer, shared_timer
from fsm_agent._internal.machine import MACHINE_NAME, engine
from fsm_agent._internal.request_plan import new_machine
from fsm_agent._internal.timeouts import REASONING_FLOORS, resolve_stale_timeout
from fsm_agent._internal.trace.sinks import MemorySink
from fsm_agent.testing import Emulator, Scenario, Text, ToolCall
from fsm_agent.testing.chat import ChatWire
from fsm_agent.testing.faults import HttpError, MalformedFrame, Stall
from fsm_agent.testing.frames import RequestContext

leaks = helpers.leaks

SCENARIO = Scenario(
    steps=(
        Text("Writing it — “quoted” 😀 now. ", chunk_size=3),
        ToolCall("write", '{"p": "a.txt", "t": "é😀"}'),
    ),
    arg_fragment=4,
)


def _bedrock(emu: Emulator) -> Any:
    return boto3.client(
        "bedrock-runtime",
        endpoint_url=emu.bedrock_endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=botocore.config.Config(retries={"max_attempts": 1}, max_pool_connections=32),
    )


APIS: dict[str, tuple[Callable[[Emulator], Any], dict[str, Any]]] = {
    "chat_completions": (_openai, {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}),
    "responses": (_openai, {"model": "gpt-4.1", "input": "hi"}),
    "anthropic_messages": (
        _anthropic,
        {"model": "claude-emulated", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "bedrock_converse": (
        _bedrock,
        {"modelId": "m", "messages": [{"role": "user", "content": [{"text": "hi"}]}]},
    ),
}


@pytest.fixture(params=sorted(APIS))
def api_client(request: pytest.FixtureRequest, emulator: Emulator) -> Iterator[tuple[Any, dict[str, Any]]]:
    make, request_params = APIS[request.param]
    client = make(emulator)
    yield client, request_params
    client.close()


# -- one machine per process, and transitions is what fires ----------------------------------------------
def test_transitions_fires_every_transition_of_a_request(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    fired: list[tuple[str, str]] = []
    original = transitions.core.Event.trigger

    def spy(event: Any, model: Any, *args: Any, **kwargs: Any) -> bool:
        source = model.state.value
        moved: bool = original(event, model, *args, **kwargs)
        fired.append((event.name, f"{source}->{model.state.value}"))
        return moved

    monkeypatch.setattr(transitions.core.Event, "trigger", spy)
    emulator.script(SCENARIO)
    client = _openai(emulator)
    try:
        result = fsm_agent.Session().stream(client, params())
    finally:
        client.close()
    recorded = [(r.trigger, f"{r.source}->{r.dest}") for r in result.records]
    assert fired == recorded
    assert [name for name, _ in fired] == ["start", "text", "tool_start", "finish", "end"]


def test_the_table_decides_through_the_shared_machine(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Take the `text` rows out of the engine's `text` event: the request now fails with the
    library's MachineError (FSM-2), so the rows transitions holds are the ones that run."""
    machine = engine()
    assert isinstance(machine, transitions.Machine) and machine is engine()
    monkeypatch.setattr(machine.events["text"], "transitions", {})
    emulator.script(Scenario.build("hello"))
    client = _openai(emulator)
    try:
        with pytest.raises(fsm_agent.MachineError, match="no row of the table for 'text'"):
            fsm_agent.Session().stream(client, params())
    finally:
        client.close()


def test_a_records_inputs_are_a_plain_dict_in_their_order_and_small() -> None:
    """The 23 inputs of every record are a plain dict (JSON, equality, mutation as before), in the
    documented order, sharing their key table with every other record's (a third of the size)."""
    from fsm_agent._internal.context import RequestContext

    ctx = RequestContext(route_names=("a", "b"))
    ctx.attempt, ctx.visible_chars = 2, 7
    first, second = ctx.guard_inputs(), ctx.guard_inputs()
    assert type(first) is dict and first == second and first is not second
    assert list(first)[:4] == ["attempt", "retries", "retries_used", "visible_chars"]
    assert (first["attempt"], first["visible_chars"], first["routes"], len(first)) == (2, 7, 2, 23)
    assert json.loads(json.dumps(first)) == first
    literal = dict(first.items())  # how big the same 23 entries are as an ordinary dict
    assert sys.getsizeof(first) * 2 < sys.getsizeof(literal)
    first["extra"] = 1  # still an ordinary dict to whoever holds it; the other record is untouched
    assert "extra" not in second and len(ctx.guard_inputs()) == 23


_FORKED_IDS = """
import os
from fsm_agent._internal.request_plan import new_machine
from fsm_agent._internal.session import Session
def next_id():
    return new_machine(Session(), ("r",)).request_id
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write, next_id().encode())
    os._exit(0)
os.close(write)
child = os.read(read, 64).decode()
os.waitpid(pid, 0)
print(next_id(), child)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")
def test_request_ids_differ_in_a_forked_child_and_ignore_the_global_rng() -> None:
    """Ids and seeds come from the OS's randomness, also in a forked child: two processes of a
    fleet never draw the same ids, and the caller seeding `random` changes nothing."""
    random.seed(7)
    first = new_machine(session_module.Session(), ("r",)).request_id
    random.seed(7)
    second = new_machine(session_module.Session(), ("r",)).request_id
    assert first != second and len(first) == 16 and int(first, 16) >= 0
    out = subprocess.run([sys.executable, "-c", _FORKED_IDS], capture_output=True, text=True, check=True)
    parent, child = out.stdout.split()
    assert len(parent) == len(child) == 16 and parent != child


def test_no_machine_is_built_per_request(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    engine()  # built on first use; from then on never again
    built: list[object] = []
    original = transitions.Machine.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(transitions.Machine, "__init__", counting)
    client = _openai(emulator)
    try:
        for _ in range(5):
            fsm_agent.Session().stream(client, params())
    finally:
        client.close()
    assert built == []
    assert engine().models == []  # request models are never attached: nothing to release


# -- concurrent requests on the shared machine and timer ---------------------------------------------------
def test_concurrent_sync_requests_are_byte_exact(
    emulator: Emulator, api_client: tuple[Any, dict[str, Any]]
) -> None:
    client, request_params = api_client
    emulator.default = SCENARIO
    sink = MemorySink()
    session = fsm_agent.Session(trace=sink)
    alone = session.stream(client, request_params)
    expected_path = [(r.trigger, r.source, r.dest, r.guards) for r in alone.records]
    text = SCENARIO.text

    def one(_: int) -> tuple[Any, str]:
        seen: list[str] = []
        return session.stream(client, request_params, on_text=seen.append), "".join(seen)

    with ThreadPoolExecutor(max_workers=16) as pool:
        outcomes = list(pool.map(one, range(48)))
    ids = set()
    for result, delivered in outcomes:
        assert result.content == text and delivered == text
        assert [(c.name, c.arguments) for c in result.tool_calls] == [("write", '{"p": "a.txt", "t": "é😀"}')]
        assert [(r.trigger, r.source, r.dest, r.guards) for r in result.records] == expected_path
        assert [r.seq for r in result.records] == list(range(len(expected_path)))
        assert len({r.request_id for r in result.records}) == 1
        ids.add(result.records[0].request_id)
    assert len(ids) == 48
    by_request: dict[str, list[int]] = {}
    for record in sink.records:
        by_request.setdefault(record.request_id, []).append(record.seq)
    assert all(seqs == list(range(len(expected_path))) for seqs in by_request.values())
    assert shared_timer().pending() == 0


_STALLING_EMULATOR = """
import sys
from fsm_agent.testing import Emulator, Scenario, Stall
with Emulator(default=Scenario.build("Hello.", faults=[Stall(1, seconds=3)])) as emu:
    print(emu.openai_base_url, flush=True)
    sys.stdin.read()  # serve until the test closes our stdin
"""


@pytest.fixture
def stalling_emulator_url() -> Iterator[str]:
    """An emulator in a child process whose every stream stalls after its first frame: its 200
    handler threads do not compete with the 200 callers for this process's GIL."""
    child = subprocess.Popen(
        [sys.executable, "-c", _STALLING_EMULATOR], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        yield child.stdout.readline().strip()
    finally:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.close()
        child.wait(10)
        child.stdout.close()


class VirtualClock:
    """A monotonic clock that moves only when told (WD-4 to the tick, whatever the machine's load)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_wd4_the_shared_timer_wakes_at_each_deadline_and_at_nothing_else() -> None:
    """200 watchdogs on one timer, on a virtual clock: each armed attempt is aborted at its own
    deadline (last activity + stale timeout) to the tick, never before; activity that pushed a
    deadline back moves the abort with it; an interrupt aborts at once; and the timer wakes only at
    deadlines and interrupts (no polling), so a slow deadline never delays another's (WD-4)."""
    clock = VirtualClock()
    timer = WatchdogTimer(clock, threaded=False)
    rng = random.Random(4)
    aborted: set[int] = set()
    dogs = [Watchdog(rng.uniform(0.1, 5.0), timer=timer) for _ in range(200)]
    for n, dog in enumerate(dogs):
        dog.start()
        dog.arm(functools.partial(aborted.add, n))
    armed_at = clock.now
    # Activity on 50 of them (lock-free touches the timer finds when it wakes), interrupts on 10.
    touched = rng.sample(range(200), 50)
    touches = {n: armed_at + rng.uniform(0, dogs[n].stale_timeout) for n in touched}
    untouched = sorted(set(range(200)) - set(touches))
    interrupts = {n: armed_at + rng.uniform(0, dogs[n].stale_timeout) for n in rng.sample(untouched, 10)}
    expected = {n: touches.get(n, armed_at) + dog.stale_timeout for n, dog in enumerate(dogs)}
    expected.update(interrupts)
    due_times = set(expected.values()) | {armed_at + dogs[n].stale_timeout for n in touches}
    pending = sorted(
        [(when, "touch", n) for n, when in touches.items()]
        + [(when, "interrupt", n) for n, when in interrupts.items()]
    )
    aborted_at: dict[int, float] = {}
    wakes: list[float] = []
    next_look = timer.run_due()
    while next_look is not None or pending:
        if pending and (next_look is None or pending[0][0] <= next_look):
            clock.now, what, n = pending.pop(0)
            if what == "touch":
                dogs[n].touch()
            else:
                dogs[n].interrupt()
        else:
            assert next_look is not None
            clock.now = next_look
            wakes.append(clock.now)
        next_look = timer.run_due()
        for n in aborted - set(aborted_at):
            aborted_at[n] = clock.now
            dogs[n].disarm()  # the reading thread noticed its aborted read
    assert sorted(aborted_at) == list(range(200))
    for n, when in aborted_at.items():
        assert when == pytest.approx(expected[n], abs=1e-9), (n, when - expected[n])
        assert dogs[n].fired == ("interrupt" if n in interrupts else "stale")
    # Every wake-up was a deadline (an original one, found pushed back by a touch, or the new one),
    # or the one look 50 ms after an abort that checks the reader has noticed it: no look between.
    due_times |= {when + 0.05 for when in aborted_at.values()}
    for wake in wakes:
        assert any(abs(wake - due) < 1e-9 for due in due_times), wake
    for dog in dogs:
        dog.stop()
    assert timer.pending() == 0


def test_the_timer_thread_is_woken_only_by_a_look_earlier_than_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Requests one after another book their looks later than the one the timer thread already
    sleeps until: none of them wakes it (a wake-up for nothing costs the request a GIL hand-off
    with the timer thread, ~5 % of a short request's wall time). A look earlier than the thread's
    own wakes it at once."""
    timer = shared_timer()
    notified: list[float] = []
    notify = timer._cond.notify

    def counting(n: int = 1) -> None:
        notified.append(time.monotonic())
        notify(n)

    monkeypatch.setattr(timer._cond, "notify", counting)  # observes; the thread is the real one
    first = Watchdog(600.0)
    first.start()
    first.arm(lambda: None)
    booked = first._entry
    assert booked is not None
    assert helpers.wait_until(lambda: timer._wake_at == booked[0], timeout=30), "never slept until it"
    before = len(notified)
    for _ in range(200):  # the request's lifetime of a sequence of sync requests, each later
        dog = Watchdog(600.0)
        dog.start()
        dog.arm(lambda: None)
        dog.disarm()
        dog.stop()
    assert len(notified) == before and timer._wake_at == booked[0]
    sooner = Watchdog(300.0)
    sooner.start()
    sooner.arm(lambda: None)
    assert len(notified) == before + 1
    soon_entry = sooner._entry
    assert soon_entry is not None
    assert helpers.wait_until(lambda: timer._wake_at == soon_entry[0], timeout=30), "not woken"
    sooner.stop()
    first.stop()
    assert timer.pending() == 0


_FORKED_TIMER = """
import os, time
from fsm_agent._internal.drivers.watchdog import Watchdog, shared_timer
def until(condition):
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.001)
timer = shared_timer()
parent = Watchdog(30.0)
parent.start()
parent.arm(lambda: None)
until(lambda: timer._wake_at == parent._entry[0])  # the parent's thread sleeps until it
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    started = timer.thread is not None  # the parent's thread is not the child's
    child = Watchdog(60.0)  # a look later than the one the parent's thread sleeps until
    child.start()
    child.arm(lambda: None)
    thread = timer.thread
    if thread is not None and thread.is_alive():
        until(lambda: timer._wake_at == child._entry[0])  # sleeps until the child's own look
    answer = f"{started} {thread is not None and thread.is_alive()} {timer.pending()}"
    child.stop()
    os.write(write, answer.encode())
    os._exit(0)
os.close(write)
print(os.read(read, 64).decode())
os.waitpid(pid, 0)
parent.stop()
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")
def test_a_forked_child_starts_its_own_timer_thread_at_its_first_look() -> None:
    """The parent's timer thread sleeps until a look 30 s away; a forked child has no thread, and
    its first look starts one, though it is later than the parent's: the child's timer forgets
    the parent's thread's plans and the parent's requests' looks at the fork (a look at one in
    the child would shut down a socket the parent still reads)."""
    out = subprocess.run([sys.executable, "-c", _FORKED_TIMER], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "1"]


@pytest.mark.slow
def test_200_concurrent_sync_requests_stall_on_the_one_shared_timer(
    stalling_emulator_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 sync requests stall at once, over loopback: every one ends in StreamStalledError, no
    abort comes before its request's deadline, one timer thread serves them all and nothing is left
    behind. How late the aborts are under load is `bench/bench_watchdog.py`'s to print (WD-4's
    rule itself is the virtual-clock test above)."""
    early: list[float] = []  # an abort before its deadline: by how much
    lock = threading.Lock()

    class TimedWatchdog(Watchdog):  # observes the aborts; changes nothing
        def _fire(self, reason: str) -> None:
            if reason == "stale" and self.fired is None:
                late = self._clock() - (self._last_activity + self.stale_timeout)
                if late < 0:
                    with lock:
                        early.append(late)
            super()._fire(reason)

    monkeypatch.setattr(session_module, "Watchdog", TimedWatchdog)
    threads_before = set(threading.enumerate())
    session = fsm_agent.Session(stale_timeout=0.6, retries=0, stale_giveup=0)  # giveup 0: no WD-3 trip
    count = 200
    limits = httpx2.Limits(max_connections=count, max_keepalive_connections=count)
    client = openai.OpenAI(  # one pool with a connection for each caller
        base_url=stalling_emulator_url,
        api_key="sk-test",
        max_retries=0,
        http_client=httpx2.Client(limits=limits),
    )
    outcomes: list[BaseException | None] = []
    watchdog_threads: list[int] = []
    start = threading.Barrier(count)
    lock = threading.Lock()

    def on_status(message: str) -> None:
        if message.startswith("stalled"):
            names = [t.name for t in threading.enumerate()]
            with lock:
                watchdog_threads.append(names.count("fsm-agent-watchdog"))

    def one() -> None:
        start.wait()
        try:
            session.stream(client, params(), on_status=on_status)
            outcome: BaseException | None = None
        except BaseException as exc:
            outcome = exc
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=one, name="test-wd4-caller") for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(outcomes) == count
    wrong = [exc for exc in outcomes if not isinstance(exc, fsm_agent.StreamStalledError)]
    assert wrong == [], wrong[:3]
    assert early == [], f"{len(early)} attempts aborted before their deadline"
    assert watchdog_threads and set(watchdog_threads) == {1}  # one timer thread for all 200 requests
    assert shared_timer().pending() == 0
    assert busy_connections(client) == 0, "a response was left open in the pool"
    client.close()
    assert threads_since(threads_before) == []


# -- nothing left behind: 10,000 requests, raising in every state --------------------------------------------
def _frames(scenario: Scenario) -> list[tuple[bytes, str]]:
    ctx = RequestContext(
        api="chat", path="/v1/chat/completions", body={"stream": True}, seq=1, created=1, stream=True
    )
    return [(frame.data, frame.kind) for frame in ChatWire().stream_frames(scenario, ctx)]


def _memory_client(answer: Callable[[], httpx2.Response]) -> openai.OpenAI:
    """A real openai client whose transport answers from memory (10,000 loopback requests would
    not fit the test budget; the emulator's own renderer makes the bodies)."""
    http = httpx2.Client(transport=httpx2.MockTransport(lambda request: answer()))
    return openai.OpenAI(base_url="http://leak.invalid/v1", api_key="sk", max_retries=2, http_client=http)


def _sse(parts: list[bytes]) -> Callable[[], httpx2.Response]:
    return lambda: httpx2.Response(
        200, headers={"content-type": "text/event-stream"}, content=b"".join(parts)
    )


class Raise(Exception):
    pass


def _raiser(when: Callable[[Any], bool]) -> Callable[..., None]:
    def callback(*args: Any) -> None:
        if when(args[-1]):
            raise Raise("the caller's callback raised")

    return callback


def _cases() -> dict[str, tuple[str, Any, dict[str, Any], dict[str, Any]]]:
    """state the request raises in -> (client, session settings, stream() keyword arguments)."""
    full = _frames(SCENARIO)
    text_and_tool = [data for data, kind in full if kind not in ("finish", "usage", "end")]
    finished = [data for data, kind in full if kind != "end"]
    malformed_after_finish = [*finished, b"data: {not json\n\n"]
    completion = ChatWire().json_body(
        SCENARIO,
        RequestContext(api="chat", path="/v1/chat/completions", body={}, seq=1, created=1, stream=False),
    )

    def fresh_error() -> httpx2.Response:
        return httpx2.Response(500, json={"error": {"message": "boom", "type": "server_error"}})

    def is_marker(text: Any) -> bool:
        return isinstance(text, str) and "reconnecting" in text

    return {
        "done": ("done", _memory_client(_sse([d for d, _ in full])), {}, {}),
        "idle": ("idle", _memory_client(_sse([d for d, _ in full])), {"stale_giveup": 1}, {}),
        "connecting": ("connecting", _memory_client(fresh_error), {"retries": 0}, {}),
        "connecting_interrupt": (
            "connecting",
            _memory_client(_sse([d for d, _ in full])),
            {},
            {"on_activity": _raiser_base(KeyboardInterrupt)},
        ),
        "streaming_text": (
            "streaming_text",
            _memory_client(_sse([d for d, _ in full])),
            {},
            {"on_text": _raiser(lambda text: True)},
        ),
        "streaming_tool": (
            "streaming_tool",
            _memory_client(_sse([d for d, _ in full])),
            {},
            {"on_tool_call": _raiser(lambda name: True)},
        ),
        "finishing": ("finishing", _memory_client(_sse(malformed_after_finish)), {}, {}),
        "retrying": (
            "retrying",
            _memory_client(_sse(text_and_tool)),
            {"retries": 1},
            {"on_text": _raiser(is_marker)},
        ),
        "stubbing": (
            "stubbing",
            _memory_client(_sse(text_and_tool)),
            {"retries": 0},
            {"on_text": _raiser(lambda text: "not executed" in text)},
        ),
        "fallback": (
            "fallback",
            _memory_client(lambda: httpx2.Response(200, json=completion)),
            {},
            {"on_text": _raiser(lambda text: True)},
        ),
    }


def _raiser_base(kind: type[BaseException]) -> Callable[..., None]:
    def callback(*args: Any) -> None:
        raise kind()

    return callback


def _run_case(
    case: tuple[str, Any, dict[str, Any], dict[str, Any]], sink: Any = None, session: Any = None
) -> str:
    state, client, settings, kwargs = case
    if session is None:
        session = fsm_agent.Session(trace=sink, **settings)
    if state == "idle":  # the breaker (WD-3) is open: it refuses the request before it connects
        helpers.preset_health(
            session, client, params(), "chat_completions", stall=True, breaker_open_until=time.time() + 60
        )
    try:
        session.stream(client, params(), **kwargs)
    except (Exception, KeyboardInterrupt) as exc:
        return type(exc).__name__
    return "finished"


def test_each_case_raises_from_the_state_it_names() -> None:
    for name, case in _cases().items():
        sink = MemorySink()
        outcome = _run_case(case, sink)
        last = sink.records[-1]
        if name == "done":
            assert outcome == "finished" and last.dest == "done"
        else:
            assert outcome != "finished", name
            assert (last.source, last.dest) == (case[0], "failed"), (name, last.source, last.dest)


def _cyclic_per_request(run: Callable[[], object], count: int = 20) -> float:
    """Objects the garbage collector finds in reference cycles, per call of `run` (warmed up)."""
    for _ in range(3):
        run()
    gc.collect()
    gc.disable()
    try:
        for _ in range(count):
            run()
        return gc.collect() / count
    finally:
        gc.enable()


@pytest.mark.slow
def test_no_request_leaves_a_reference_cycle_whatever_state_it_ends_in() -> None:
    """A request that raises keeps no reference to itself through the error it raised (the error's
    traceback holds the driver's frames): every case, sync, leaves nothing for the collector. A
    failed request used to leave ~180 objects in cycles, ~300 in the async driver."""
    for name, case in _cases().items():
        session = fsm_agent.Session(**case[2])
        run = functools.partial(_run_case, case, session=session)
        cyclic = min(_cyclic_per_request(run), _cyclic_per_request(run))  # as below
        assert cyclic <= 2, (name, cyclic)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["http_500", "malformed_chunk", "stall"])
def test_no_async_request_leaves_a_reference_cycle(emulator: Emulator, fault: str) -> None:
    faults: dict[str, tuple[Any, type[BaseException]]] = {
        "http_500": (HttpError(500), openai.InternalServerError),
        "malformed_chunk": (MalformedFrame(1), fsm_agent.ProviderStreamError),
        "stall": (Stall(1, seconds=2), fsm_agent.StreamStalledError),
    }
    injected, expected = faults[fault]
    emulator.default = Scenario.build("hello", faults=[injected])
    session = fsm_agent.Session(retries=1, backoff=INSTANT, stale_timeout=0.2, stale_giveup=0)

    async def main() -> float:
        client = openai.AsyncOpenAI(base_url=emulator.openai_base_url, api_key="sk-test", max_retries=0)
        try:
            count = 10
            raised: list[str] = []  # (pytest.raises keeps the error and its frames itself)

            async def one() -> None:
                try:
                    await session.astream(client, params())
                except expected as exc:
                    raised.append(type(exc).__name__)

            for _ in range(3):
                await one()
            windows = []
            for _ in range(2):  # the smaller of two windows: garbage other tests left comes once
                gc.collect()
                gc.disable()
                try:
                    for _ in range(count):
                        await one()
                    windows.append(gc.collect() / count)
                finally:
                    gc.enable()
            assert raised == [expected.__name__] * (2 * count + 3)
            return min(windows)
        finally:
            await client.close()

    cyclic = asyncio.run(main())
    assert cyclic <= 20, cyclic  # the event loop's own bookkeeping; ~300 before


@pytest.fixture
def structlog_unconfigured() -> Iterator[None]:
    """structlog as an application that never configured it (structlog's `capture_logs`, used by
    other tests, leaves it configured to print to stdout: 50,000 records would be printed)."""
    configured, saved = structlog.is_configured(), structlog.get_config()
    structlog.reset_defaults()
    try:
        yield
    finally:
        if configured:
            structlog.configure(**saved)


@pytest.mark.slow
@pytest.mark.timeout(240)  # ~10 s on a quiet machine; the SDK's own request building dominates
def test_ten_thousand_requests_leave_nothing_behind(structlog_unconfigured: None) -> None:
    """10,000 requests cycling through the cases (nine in ten raise, one in each state). The gc's
    object count is compared over all of them; tracemalloc watches the last 2,000 (tracing every
    allocation of all 10,000 would not fit the test budget; a per-request leak shows in any
    window), both after a warm-up."""
    cases = [(case, fsm_agent.Session(**case[2])) for case in _cases().values()]
    outcomes: dict[str, int] = {}

    def run(count: int) -> None:
        for i in range(count):
            case, session = cases[i % len(cases)]
            outcome = _run_case(case, session=session)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1

    run(3 * len(cases))  # first-use costs: lazy imports, the engine, the SDKs' caches
    outcomes.clear()
    gc.collect()
    objects_before = len(gc.get_objects())
    run(8_000)
    tracemalloc.start()
    try:
        gc.collect()
        before, _ = tracemalloc.get_traced_memory()
        run(2_000)
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    growth_objects = len(gc.get_objects()) - objects_before
    assert outcomes.get("finished", 0) == 1000 and sum(outcomes.values()) == 10_000
    assert after - before < 100_000, f"{after - before} bytes more after 2,000 more requests"
    assert growth_objects < 500, f"{growth_objects} more objects tracked by gc after 10,000 requests"
    assert engine().models == []
    assert shared_timer().pending() == 0
    assert all(not session._in_flight for _, session in cases)
    assert len(client_views._views) <= len(cases)  # one view per caller's client, no more


# -- remembered per client and per model ---------------------------------------------------------------------
def test_the_no_retries_view_is_made_once_per_client_and_dies_with_it() -> None:
    client = openai.OpenAI(base_url="http://x.invalid/v1", api_key="sk-1")
    view = client_views.without_sdk_retries(client)
    assert view.max_retries == 0 and client.max_retries == 2
    assert client_views.without_sdk_retries(client) is view
    client.api_key = "sk-2"  # a setting reassigned: a fresh view sees it, as a fresh copy would
    assert client_views.without_sdk_retries(client).api_key == "sk-2"
    size = len(client_views._views)
    alive = weakref.ref(client)
    del client, view
    gc.collect()
    assert alive() is None  # the remembered view did not keep the client alive
    assert len(client_views._views) <= size - 1  # and its entry went with it


def test_stale_timeout_lookups_are_remembered_and_follow_table_edits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FSM_AGENT_STREAM_STALE_TIMEOUT", raising=False)
    assert resolve_stale_timeout(None, "o3-mini-2025-01-31") == 300.0
    assert resolve_stale_timeout(None, "o3-mini-2025-01-31") == 300.0
    monkeypatch.setitem(REASONING_FLOORS, "o3-mini", 420.0)
    assert resolve_stale_timeout(None, "o3-mini-2025-01-31") == 420.0


# -- import: light, and no other library's globals touched ---------------------------------------------------
def test_import_is_light_and_touches_no_other_librarys_logger() -> None:
    code = (
        "import logging, sys\n"
        "import fsm_agent\n"
        "t = logging.getLogger('transitions.core')\n"
        "lazy = ('structlog', 'rich', 'fsm_agent._internal.trace.replay')\n"
        "print(t.level, len(t.filters), *(m in sys.modules for m in lazy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "0", "False", "False", "False"]


def test_transitions_debug_lines_about_our_machine_are_dropped(
    emulator: Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    client = _openai(emulator)
    try:
        with caplog.at_level(logging.DEBUG):
            fsm_agent.Session().stream(client, params())
            other = transitions.Machine(states=["a", "b"], initial="a", name="theirs")
            other.add_transition("go", "a", "b")
            other.go()  # type: ignore[attr-defined]
    finally:
        client.close()
    ours = [r for r in caplog.records if r.name.startswith("transitions") and MACHINE_NAME in r.getMessage()]
    theirs = [r for r in caplog.records if r.name.startswith("transitions") and "theirs" in r.getMessage()]
    assert ours == [] and theirs


class _ShapedLikeAClient:
    """A client of no known SDK: its shape may change, so it is probed every time."""


def test_client_shape_answers_are_remembered_only_for_sdk_classes() -> None:
    odd = _ShapedLikeAClient()
    assert not clients.looks_like_client(odd)
    odd.messages = object()  # type: ignore[attr-defined]
    assert clients.looks_like_client(odd)
    del odd.messages  # type: ignore[attr-defined]
    assert not clients.looks_like_client(odd)
    assert _ShapedLikeAClient not in clients._client_classes

    async def create(**kwargs: Any) -> None:
        return None

    odd.messages = type("Messages", (), {"create": staticmethod(create)})()  # type: ignore[attr-defined]
    assert clients.is_async_client(odd)
    odd.messages = type("Messages", (), {"create": staticmethod(lambda **kwargs: None)})()  # type: ignore[attr-defined]
    assert not clients.is_async_client(odd)
    assert _ShapedLikeAClient not in clients._async_by_class

    sync = openai.OpenAI(api_key="sk-test", base_url="http://127.0.0.1:9/v1")
    aio = openai.AsyncOpenAI(api_key="sk-test", base_url="http://127.0.0.1:9/v1")
    bedrock = boto3.client(
        "bedrock-runtime",
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )
    try:
        for client, is_async in ((sync, False), (aio, True), (bedrock, False)):
            for _ in range(2):  # the second answer comes from the class's memory, and agrees
                assert clients.looks_like_client(client)
                assert clients.is_async_client(client) is is_async
            assert type(client) in clients._client_classes
            assert clients._async_by_class[type(client)] is is_async
        assert not clients.looks_like_client(lambda: sync)  # a factory stays a factory
    finally:
        sync.close()
        bedrock.close()
