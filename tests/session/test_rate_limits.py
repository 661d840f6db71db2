"""Rate limits and overload end to end (BO-1..BO-7): the real `openai`, `anthropic`, `boto3` and
`google-genai` clients against the emulator over loopback HTTP, on every API that has the fault.

Hints are kept well under a second (0.3 s); the waits measured here are the library's own (when
the "waiting" notice went out → when the emulator read the next request)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import boto3
import botocore.config
import botocore.exceptions
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from helpers import PROMPTLY, assert_emulator_and_threads_idle

import fsm_agent
from fsm_agent import Backoff
from fsm_agent.testing import Emulator, HttpError, Scenario, Stall
from fsm_agent.testing.faults import RetryAfterForm
from fsm_agent.testing.registry import SCENARIOS

ANSWER = "Rate limits are fine."
MESSAGES: Any = [{"role": "user", "content": "hi"}]


def _bedrock(emu: Emulator) -> Any:
    return boto3.client(
        "bedrock-runtime",
        endpoint_url=emu.bedrock_endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        # botocore's own retries off: the session's waits are what is tested
        config=botocore.config.Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )


def _close_bedrock(client: Any) -> None:
    manager = getattr(getattr(getattr(client, "_endpoint", None), "http_session", None), "_manager", None)
    if manager is not None:
        for key in list(manager.pools.keys()):
            manager.pools[key].close()
    client.close()


@dataclass(frozen=True)
class Api:
    name: str
    params: dict[str, Any]
    sync_client: Callable[[Emulator], Any]
    async_client: Callable[[Emulator], Any]
    rate_limit_error: type[BaseException]
    status_error: type[BaseException]


def _gemini(emu: Emulator) -> Any:
    return genai.Client(api_key="AIza-test", http_options={"base_url": emu.gemini_base_url})


def _is_async(client: Any) -> bool:
    return isinstance(client, (openai.AsyncOpenAI, anthropic.AsyncAnthropic, genai.client.AsyncClient))


def _openai(emu: Emulator) -> Any:
    return openai.OpenAI(base_url=emu.openai_base_url, api_key="sk-test", max_retries=0)


def _aopenai(emu: Emulator) -> Any:
    return openai.AsyncOpenAI(base_url=emu.openai_base_url, api_key="sk-test", max_retries=0)


APIS = {
    "chat_completions": Api(
        "chat_completions",
        {"model": "gpt-4.1", "messages": MESSAGES},
        _openai,
        _aopenai,
        openai.RateLimitError,
        openai.APIStatusError,
    ),
    "responses": Api(
        "responses",
        {"model": "gpt-5", "input": "hi"},
        _openai,
        _aopenai,
        openai.RateLimitError,
        openai.APIStatusError,
    ),
    "anthropic_messages": Api(
        "anthropic_messages",
        {"model": "claude-emulated", "max_tokens": 64, "messages": MESSAGES},
        lambda emu: anthropic.Anthropic(base_url=emu.anthropic_base_url, api_key="k", max_retries=0),
        lambda emu: anthropic.AsyncAnthropic(base_url=emu.anthropic_base_url, api_key="k", max_retries=0),
        anthropic.RateLimitError,
        anthropic.APIStatusError,
    ),
    "bedrock_converse": Api(
        "bedrock_converse",
        {
            "modelId": "anthropic.claude-emulated-v1:0",
            "messages": [{"role": "user", "content": [{"text": "hi"}]}],
        },
        _bedrock,
        _bedrock,  # no async boto3: the async driver runs it in a worker thread
        botocore.exceptions.ClientError,
        botocore.exceptions.ClientError,
    ),
    "gemini_generate_content": Api(
        "gemini_generate_content",
        {"model": "gemini-2.5-flash", "contents": "hi"},
        lambda emu: _gemini(emu),
        lambda emu: _gemini(emu).aio,
        genai_errors.ClientError,
        genai_errors.APIError,
    ),
}


@dataclass
class Bench:
    """One API's clients on the emulator, closed and checked for leaks at the end."""

    api: Api
    emulator: Emulator
    clients: list[Any] = field(default_factory=list)
    threads_before: set[threading.Thread] = field(default_factory=lambda: set(threading.enumerate()))

    def client(self) -> Any:
        made = self.api.sync_client(self.emulator)
        self.clients.append(made)
        return made

    def aclient(self) -> Any:
        made = self.api.async_client(self.emulator)
        self.clients.append(made)
        return made

    def stream(self, session: fsm_agent.Session, **kwargs: Any) -> fsm_agent.StreamResult:
        return session.stream(self.client(), self.api.params, api=self.api.name, **kwargs)

    def script(self, *scenarios: Scenario) -> None:
        self.emulator.script(*scenarios)

    async def aclose(self) -> None:
        for client in self.clients:
            if isinstance(client, genai.client.AsyncClient):
                await client.aclose()
            elif _is_async(client):
                await client.close()

    def assert_clean(self) -> None:
        for client in self.clients:
            if self.api.name == "bedrock_converse":
                _close_bedrock(client)
            elif not _is_async(client):
                client.close()
        assert_emulator_and_threads_idle(self.emulator, self.threads_before, 2.0)


@pytest.fixture(params=sorted(APIS))
def bench(request: pytest.FixtureRequest, emulator: Emulator) -> Iterator[Bench]:
    yield Bench(APIS[request.param], emulator)


def ok() -> Scenario:
    return Scenario.build(ANSWER)


def fail(status: int, **hint: Any) -> Scenario:
    return Scenario.build(ANSWER, faults=[HttpError(status, **hint)])


def waits(result_or_records: Any) -> list[tuple[float, str]]:
    records = getattr(result_or_records, "records", result_or_records)
    return [(r.inputs["wait_s"], r.inputs["wait_source"]) for r in records if r.dest == "waiting"]


class Notices:
    """on_status, with the time each notice arrived."""

    def __init__(self) -> None:
        self.items: list[tuple[float, str]] = []
        self.waiting = threading.Event()

    def __call__(self, message: str) -> None:
        self.items.append((time.monotonic(), message))
        if message.startswith("waiting"):
            self.waiting.set()

    def first(self, prefix: str) -> tuple[float, str]:
        return next(item for item in self.items if item[1].startswith(prefix))


# -- BO-2: the server's hint, in each form ----
HINTS: dict[str, tuple[RetryAfterForm, float, str]] = {
    "retry-after-ms": ("ms", 0.3, "retry-after-ms"),
    "retry-after": ("seconds", 0.3, "retry-after"),
    # an HTTP date has whole seconds: the emulator sends the first whole second 0.3 s from now
    "http-date": ("http-date", 0.3, "retry-after"),
}


@pytest.mark.parametrize("form", sorted(HINTS))
def test_429_with_a_hint_then_the_answer_waits_the_hint(bench: Bench, form: str) -> None:
    shape, seconds, source = HINTS[form]
    bench.script(fail(429, retry_after=seconds, retry_after_form=shape), ok())
    notices = Notices()
    result = bench.stream(fsm_agent.Session(), on_status=notices)
    assert result.content == ANSWER and result.attempts == 2
    ((wait_s, wait_source),) = waits(result)
    assert wait_source == source
    if form == "http-date":
        assert 0.2 <= wait_s <= 1.3
    else:
        assert wait_s == pytest.approx(seconds)
    announced, message = notices.first("waiting")
    assert message.startswith(f"waiting {wait_s:.1f} s before attempt 2: HTTP 429, {source}")
    resent = bench.emulator.requests[1].received_at
    # The wait measured is the hint: never shorter (BO-2); a loaded machine may only make it longer.
    assert wait_s - 0.02 <= resent - announced < wait_s + PROMPTLY
    bench.assert_clean()


def test_503_twice_without_a_hint_backs_off_with_jitter(bench: Bench) -> None:
    bench.script(fail(503), fail(503), ok())
    sink = fsm_agent.MemorySink()
    session = fsm_agent.Session(backoff=Backoff(base=0.05, cap=1.0), trace=sink)
    result = bench.stream(session)
    assert result.content == ANSWER and result.attempts == 3
    taken = waits(result)
    assert [source for _, source in taken] == ["backoff", "backoff"]
    assert 0 <= taken[0][0] < 0.05 and 0 <= taken[1][0] < 0.1  # uniform(0, base * 2**(n-1))
    (header,) = [json.loads(line) for line in sink.lines if json.loads(line)["type"] == "request"]
    assert isinstance(header["settings"]["seed"], int)  # BO-5: the jitter's seed is in the trace
    bench.assert_clean()


def test_x_should_retry_false_on_a_503_is_raised_at_once(bench: Bench) -> None:
    bench.script(fail(503, should_retry=False), ok())
    with pytest.raises(bench.api.status_error):
        bench.stream(fsm_agent.Session())
    assert len(bench.emulator.requests) == 1
    bench.assert_clean()


def test_x_should_retry_true_on_a_400_is_retried(bench: Bench) -> None:
    bench.script(fail(400, should_retry=True), ok())
    result = bench.stream(fsm_agent.Session(backoff=Backoff(base=0.01)))
    assert result.content == ANSWER and len(bench.emulator.requests) == 2
    bench.assert_clean()


def test_a_hint_above_max_wait_raises_the_sdks_error_at_once(bench: Bench) -> None:
    bench.script(fail(429, retry_after=5), ok())
    notices = Notices()
    session = fsm_agent.Session(backoff=Backoff(max_wait=1.0))
    with pytest.raises(bench.api.rate_limit_error):
        bench.stream(session, on_status=notices)
    assert len(bench.emulator.requests) == 1
    assert notices.items[-1][1] == (
        "giving up: the server asked to wait 5.0 s (retry-after), more than max_wait=1 s"
    )
    bench.assert_clean()


def test_overloaded_529_twice_then_the_answer(bench: Bench) -> None:
    bench.script(fail(529), fail(529), ok())
    result = bench.stream(fsm_agent.Session(backoff=Backoff(base=0.02)))
    assert result.content == ANSWER and result.attempts == 3
    bench.assert_clean()


@pytest.mark.parametrize("demo", ["rate-limited", "overloaded"])
def test_the_demo_scripts_end_complete(bench: Bench, demo: str) -> None:
    """What `fsm-agent demo rate-limited|overloaded` plays, on every API (waits kept short here)."""
    bench.script(*SCENARIOS[demo])
    notices = Notices()
    result = bench.stream(fsm_agent.Session(backoff=Backoff(base=0.02)), on_status=notices)
    assert result.content and result.finish_reason == "stop" and not result.stub
    sources = [source for _, source in waits(result)]
    assert sources == (["retry-after"] if demo == "rate-limited" else ["backoff", "backoff"])
    assert sum(message.startswith("waiting") for _, message in notices.items) == len(sources)
    bench.assert_clean()


# -- BO-4: interruptible, and no stall ----
@pytest.mark.parametrize("how", ["session.interrupt", "event"])
def test_an_interrupt_during_a_30_s_wait_ends_the_request_at_once(bench: Bench, how: str) -> None:
    bench.script(fail(429, retry_after=30), ok())
    session = fsm_agent.Session()
    notices = Notices()
    event = threading.Event()

    def interrupt() -> None:
        notices.waiting.wait(5)
        time.sleep(0.05)
        if how == "event":
            event.set()
        else:
            session.interrupt()

    threading.Thread(target=interrupt).start()
    with pytest.raises(InterruptedError):
        bench.stream(session, on_status=notices, interrupt=event)
    ended = time.monotonic()
    assert ended - notices.first("waiting")[0] < 0.05 + 0.2
    assert len(bench.emulator.requests) == 1
    bench.assert_clean()


@pytest.mark.parametrize("hint", [90, 120])
def test_bo3_a_hint_the_bare_openai_sdk_waits_out_is_waited_out_on_the_last_route(
    bench: Bench, hint: int
) -> None:
    """BO-3's default on the last route is 120 s, as the bare openai SDK's: a 90 s or 120 s hint is
    waited (the wait is announced, then interrupted here), never raised at once."""
    bench.script(fail(429, retry_after=hint), ok())
    notices = Notices()
    event = threading.Event()

    def on_status(message: str) -> None:
        notices(message)
        if message.startswith("waiting"):
            event.set()

    with pytest.raises(InterruptedError):
        bench.stream(fsm_agent.Session(), on_status=on_status, interrupt=event)
    assert notices.first("waiting")[1].startswith(f"waiting {hint:.1f} s before attempt 2: HTTP 429")
    assert not any(message.startswith("giving up") for _, message in notices.items)
    assert len(bench.emulator.requests) == 1
    bench.assert_clean()


def test_bo3_a_hint_over_120_s_is_raised_at_once_by_default(bench: Bench) -> None:
    bench.script(fail(429, retry_after=121), ok())
    notices = Notices()
    with pytest.raises(bench.api.rate_limit_error):
        bench.stream(fsm_agent.Session(), on_status=notices)
    assert notices.items[-1][1].endswith("more than max_wait=120 s")
    assert len(bench.emulator.requests) == 1
    bench.assert_clean()


def test_a_task_cancelled_during_a_30_s_wait_ends_at_once(bench: Bench) -> None:
    bench.script(fail(429, retry_after=30), ok())

    async def main() -> float:
        notices = Notices()
        session = fsm_agent.Session()
        task = asyncio.create_task(
            session.astream(bench.aclient(), bench.api.params, api=bench.api.name, on_status=notices)
        )
        while not notices.waiting.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        cancelled_at = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        elapsed = time.monotonic() - cancelled_at
        await bench.aclose()
        return elapsed

    assert asyncio.run(main()) < 0.2
    assert len(bench.emulator.requests) == 1
    bench.assert_clean()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_1_s_wait_with_a_0_3_s_stale_timeout_is_not_a_stall(emulator: Emulator, mode: str) -> None:
    bench = Bench(APIS["chat_completions"], emulator)
    bench.script(fail(429, retry_after=1.0), ok())
    session = fsm_agent.Session(stale_timeout=0.3)
    if mode == "sync":
        result = bench.stream(session)
    else:

        async def main() -> fsm_agent.StreamResult:
            try:
                return await session.astream(bench.aclient(), bench.api.params)
            finally:
                await bench.aclose()

        result = asyncio.run(main())
    assert result.content == ANSWER and waits(result) == [(1.0, "retry-after")]
    assert not any(r.dest == "stalled" for r in result.records) and session.stale_streak == 0
    bench.assert_clean()


# -- BO-6: cooldown ----
def test_a_cooldown_makes_concurrent_requests_wait_instead_of_sending(emulator: Emulator) -> None:
    """One client, 20 async requests: the first meets a 429 with retry-after 0.5; the 19 that start
    while the endpoint cools down wait it out without sending anything."""
    bench = Bench(APIS["chat_completions"], emulator)
    bench.script(fail(429, retry_after=0.5), *[ok() for _ in range(20)])

    async def main() -> list[fsm_agent.StreamResult]:
        session = fsm_agent.Session()
        client = bench.aclient()
        notices = Notices()
        first = asyncio.create_task(session.astream(client, bench.api.params, on_status=notices))
        while not notices.waiting.is_set():
            await asyncio.sleep(0.005)
        others = [asyncio.create_task(session.astream(client, bench.api.params)) for _ in range(19)]
        try:
            return await asyncio.gather(first, *others)
        finally:
            await bench.aclose()

    results = asyncio.run(main())
    assert all(result.content == ANSWER for result in results)
    assert [source for result in results[1:] for _, source in waits(result)] == ["cooldown"] * 19
    requests = emulator.requests
    assert len(requests) == 21
    limited_at = requests[0].received_at
    during = [r for r in requests[1:] if r.received_at < limited_at + 0.45]
    assert len(during) <= 1  # at most one request to the endpoint while it cools down
    bench.assert_clean()


# -- BO-7: the breaker recovers ----
def _sleep_until(wall: float) -> None:
    time.sleep(max(0.0, wall - time.time()) + 0.02)


def test_the_breaker_lets_one_probe_through_and_recovers(emulator: Emulator) -> None:
    bench = Bench(APIS["chat_completions"], emulator)
    stall = Scenario.build(ANSWER, faults=[Stall(0, seconds=5, then="drop")])
    bench.script(stall, stall, ok())
    # A cooldown of 0.5 s (not less): the refused request must start within it after the stall,
    # also on a loaded machine; the test then sleeps until the probe is allowed, so it costs ~1 s.
    session = fsm_agent.Session(stale_timeout=0.3, stale_giveup=1, retries=0, breaker_cooldown=0.5)
    with pytest.raises(fsm_agent.StreamStalledError):
        bench.stream(session)
    with pytest.raises(fsm_agent.ProviderUnresponsiveError) as refused:
        bench.stream(session)
    assert len(emulator.requests) == 1  # refused before connecting
    retry_at = refused.value.retry_at
    assert retry_at is not None and 0 < retry_at - time.time() <= 0.5
    _sleep_until(retry_at)
    with pytest.raises(fsm_agent.StreamStalledError):  # the probe stalls: the breaker re-trips
        bench.stream(session)
    with pytest.raises(fsm_agent.ProviderUnresponsiveError) as again:
        bench.stream(session)
    assert again.value.retry_at is not None and again.value.retry_at > retry_at
    assert len(emulator.requests) == 2
    _sleep_until(again.value.retry_at)
    assert bench.stream(session).content == ANSWER  # the probe succeeds: closed
    assert session.stale_streak == 0
    assert bench.stream(session).content == ANSWER  # and stays closed
    bench.assert_clean()


def test_one_probe_at_a_time(emulator: Emulator) -> None:
    bench = Bench(APIS["chat_completions"], emulator)
    slow = Scenario.build(ANSWER, faults=[Stall(1, seconds=0.2)])  # the probe takes a while
    bench.script(Scenario.build(ANSWER, faults=[Stall(0, seconds=5, then="drop")]), slow, ok())
    session = fsm_agent.Session(stale_timeout=0.3, stale_giveup=1, retries=0, breaker_cooldown=0.1)
    with pytest.raises(fsm_agent.StreamStalledError):
        bench.stream(session)

    async def main() -> list[Any]:
        client = bench.aclient()
        await asyncio.sleep(0.15)  # past the breaker's cooldown: half-open
        try:
            calls = [session.astream(client, bench.api.params) for _ in range(5)]
            return await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await bench.aclose()

    outcomes = asyncio.run(main())
    answers = [o for o in outcomes if isinstance(o, fsm_agent.StreamResult)]
    refused = [o for o in outcomes if isinstance(o, fsm_agent.ProviderUnresponsiveError)]
    assert len(answers) == 1 and len(refused) == 4, outcomes
    assert len(emulator.requests) == 2
    assert bench.stream(session).content == ANSWER  # the probe's success closed the breaker
    bench.assert_clean()


# -- BO-5: replay never sleeps ----
def test_replay_of_waits_matches_without_sleeping_and_what_if_base_0_drops_them(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = Bench(APIS["chat_completions"], emulator)
    bench.script(fail(503), fail(429, retry_after=0.2), ok())
    sink = fsm_agent.MemorySink(record_wire=True)
    result = bench.stream(fsm_agent.Session(trace=sink, backoff=Backoff(base=0.2)))
    recorded = waits(result)
    assert [source for _, source in recorded] == ["backoff", "retry-after"]
    bench.assert_clean()

    # Only this thread may not sleep: the process's watchdog timer thread waits on a condition too.
    replaying = threading.current_thread()
    real_sleep, real_wait = time.sleep, threading.Condition.wait

    def no_sleep(seconds: float) -> None:
        if threading.current_thread() is replaying:
            raise AssertionError("replay slept")
        real_sleep(seconds)

    def no_wait(condition: threading.Condition, timeout: float | None = None) -> bool:
        if threading.current_thread() is replaying:
            raise AssertionError("replay slept")
        return real_wait(condition, timeout)

    monkeypatch.setattr(time, "sleep", no_sleep)
    monkeypatch.setattr(threading.Condition, "wait", no_wait)
    report = fsm_agent.replay(sink)
    assert report.matched and waits([step.replayed for step in report.steps]) == recorded
    # what-if Backoff(base=0): the back-off wait is gone, the server's hint stays
    what_if = fsm_agent.replay(sink, backoff_base=0.0)
    (request,) = what_if.requests
    assert request.outcome is not None and request.outcome.action == "return"
    assert waits([step.replayed for step in what_if.steps if step.replayed]) == [(0.2, "retry-after")]
    # what-if a shorter max_wait: the hint is not waited out, the 429 is raised
    shorter = fsm_agent.replay(sink, max_wait=0.1)
    assert shorter.requests[0].outcome is not None and shorter.requests[0].outcome.action == "raise"
