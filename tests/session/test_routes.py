"""Routes (RT-1..4): one request over several clients/models/providers, real SDK clients over
loopback HTTP against two emulators (the primary's and the fallback's)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import boto3
import botocore.config
import helpers
import openai
import pytest
from provider_clients import anthropic_client as _anthropic
from provider_clients import close_client as _close
from provider_clients import openai_client as _openai

import fsm_agent
from fsm_agent import Route
from fsm_agent._internal.endpoint import endpoint_key
from fsm_agent._internal.health import HealthChange
from fsm_agent.testing import (
    DropAfter,
    DropMidFrame,
    Emulator,
    HttpError,
    Scenario,
    Stall,
    StreamingUnsupported,
    ToolCall,
)

INTRO = "I'll read the configuration first. "
READ = ToolCall("read_file", '{"path": "config/settings.yaml"}')
ALERTS = ToolCall("read_alerts", '{"path": "config/alerts.yaml", "level": "warn"}')
ANSWER = "The service listens on port 8080."
MESSAGES: Any = [{"role": "user", "content": "where does it listen?"}]


def _bedrock(emu: Emulator) -> Any:
    return boto3.client(
        "bedrock-runtime",
        endpoint_url=emu.bedrock_endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=botocore.config.Config(retries={"total_max_attempts": 1}),  # no retries of its own
    )


APIS: dict[str, tuple[Callable[[Emulator], Any], dict[str, Any]]] = {
    "chat_completions": (_openai, {"model": "gpt-4.1", "messages": MESSAGES}),
    "responses": (_openai, {"model": "gpt-5", "input": "where does it listen?"}),
    "anthropic_messages": (_anthropic, {"model": "claude-emulated", "max_tokens": 256, "messages": MESSAGES}),
    "bedrock_converse": (
        _bedrock,
        {
            "modelId": "us.anthropic.claude-sonnet-4-5-v1:0",
            "messages": [{"role": "user", "content": [{"text": "?"}]}],
        },
    ),
}


class Pair:
    """A primary and a fallback emulator, each with a client of a chosen API, closed at the end."""

    def __init__(self, factory: Callable[..., Emulator]) -> None:
        self.primary = factory()
        self.second = factory()
        self.clients: list[Any] = []
        self.threads_before = set(threading.enumerate())

    def route(self, emu: Emulator, api: str = "chat_completions", name: str | None = None) -> Route:
        make, params = APIS[api]
        client = make(emu)
        self.clients.append(client)
        return Route(client, params, name=name)

    def routes(self, first: str = "chat_completions", second: str = "anthropic_messages") -> list[Route]:
        return [self.route(self.primary, first), self.route(self.second, second)]

    def close(self) -> None:
        for client in self.clients:
            _close(client)
        for emu in (self.primary, self.second):
            helpers.assert_emulator_and_threads_idle(emu, self.threads_before, 2.0)


@pytest.fixture
def pair(emulator_factory: Callable[..., Emulator]) -> Iterator[Pair]:
    made = Pair(emulator_factory)
    yield made
    made.close()


def session(**kwargs: Any) -> fsm_agent.Session:
    kwargs.setdefault("backoff", fsm_agent.Backoff(base=0))  # instant retries
    kwargs.setdefault("stale_timeout", 5)
    return fsm_agent.Session(**kwargs)


def routes_of(result_or_records: Any) -> list[str | None]:
    records = getattr(result_or_records, "records", result_or_records)
    return list(dict.fromkeys(record.route for record in records))


# -- RT-1 / RT-2: a route that cannot serve is left, silently before anything visible -------------------
@pytest.mark.parametrize("first", sorted(APIS))
def test_primary_503_every_attempt_the_second_route_answers(pair: Pair, first: str) -> None:
    pair.primary.script(Scenario.build(faults=[HttpError(503)]))
    pair.second.script(Scenario.build(ANSWER))
    seen = helpers.Collect()
    second = _openai(pair.second)
    pair.clients.append(second)
    routes = [pair.route(pair.primary, first), Route(second, {"model": "gpt-4.1-mini", "messages": MESSAGES})]
    result = session().stream(routes, **seen.callbacks())
    assert result.content == ANSWER and not result.stub
    second_name = "chat_completions:gpt-4.1-mini"
    assert result.route == second_name
    first_name = f"{first}:{APIS[first][1].get('model') or APIS[first][1]['modelId']}"
    assert routes_of(result) == [first_name, second_name]
    assert seen.text == ANSWER  # switching before anything visible is silent: no marker (RT-3)
    assert len(pair.primary.requests) == 3  # its retries were spent first (RES-1)
    assert len(pair.second.requests) == 1
    assert any(status.startswith(f"switching to {second_name}") for status in seen.statuses)
    assert [record.dest for record in result.records].count("switching") == 1


def test_cut_mid_tool_call_after_text_switches_with_a_marker(pair: Pair) -> None:
    pair.primary.script(Scenario.build(INTRO, tool_calls=[READ], faults=[DropMidFrame(1, kind="tool_args")]))
    pair.second.script(Scenario.build("Reading the alerts. ", tool_calls=[ALERTS]))
    seen = helpers.Collect()
    routes = [
        pair.route(pair.primary, name="primary"),
        pair.route(pair.second, "anthropic_messages", name="backup"),
    ]
    result = session(retries=1).stream(routes, **seen.callbacks())
    assert not result.stub and result.route == "backup"
    markers = [text for text in seen.texts if "switching to backup" in text]
    assert len(markers) == 1  # RT-3: the marker names the route switched to
    assert [(call.name, call.arguments) for call in result.tool_calls] == [(ALERTS.name, ALERTS.arguments)]
    assert result.content == "Reading the alerts. "  # nothing of the first route's answer merged in
    assert seen.text.startswith(INTRO) and seen.text.endswith("Reading the alerts. ")
    assert len(pair.primary.requests) == 2 and len(pair.second.requests) == 1


def test_cut_after_text_without_a_tool_is_a_stub_and_the_second_route_is_not_tried(pair: Pair) -> None:
    pair.primary.script(Scenario.build(INTRO + "The service listens on", faults=[DropAfter(3)]))
    pair.second.script(Scenario.build(ANSWER))
    seen = helpers.Collect()
    result = session().stream(pair.routes(), **seen.callbacks())
    assert result.stub and result.finish_reason == "length"  # RES-4: never a second answer
    assert result.content == seen.text.strip() and "switching" not in seen.text
    assert result.route == "chat_completions:gpt-4.1"
    assert pair.second.requests == []


@pytest.mark.parametrize("status", [400, 422])
def test_a_malformed_request_is_raised_and_not_switched(pair: Pair, status: int) -> None:
    pair.primary.script(Scenario.build(faults=[HttpError(status, "messages: bad shape")]))
    with pytest.raises(openai.APIStatusError) as raised:
        session().stream(pair.routes())
    assert raised.value.status_code == status
    assert len(pair.primary.requests) == 1 and pair.second.requests == []


@pytest.mark.parametrize("status", [401, 403, 404])
def test_a_key_or_model_that_does_not_work_there_is_switched(pair: Pair, status: int) -> None:
    pair.primary.script(Scenario.build(faults=[HttpError(status)]))
    pair.second.script(Scenario.build(ANSWER))
    seen = helpers.Collect()
    result = session().stream(pair.routes(), **seen.callbacks())
    assert result.content == ANSWER and result.route == "anthropic_messages:claude-emulated"
    assert len(pair.primary.requests) == 1  # not retried: it will not work there
    assert seen.text == ANSWER
    switch = next(record for record in result.records if record.dest == "switching")
    assert switch.guards["route_refused"] is True and switch.inputs["error_status"] == status


def test_streaming_unsupported_in_raise_mode_is_switched(pair: Pair) -> None:
    pair.primary.script(Scenario.build(ANSWER, faults=[StreamingUnsupported()]))
    pair.second.script(Scenario.build(ANSWER))
    result = session(unsupported="raise").stream(pair.routes())
    assert result.streamed and result.route == "anthropic_messages:claude-emulated"


def test_every_route_failing_raises_the_last_routes_error(pair: Pair) -> None:
    pair.primary.script(Scenario.build(faults=[HttpError(503)]))
    pair.second.script(Scenario.build(faults=[HttpError(529)]))
    sink = fsm_agent.MemorySink()
    with pytest.raises(anthropic.APIStatusError) as raised:  # the last route's own SDK error (RT-4)
        fsm_agent.Session(retries=1, trace=sink).stream(pair.routes())
    assert raised.value.status_code == 529
    report = fsm_agent.replay(sink)
    (request,) = report.requests
    assert [step.recorded.route for step in request.steps if step.recorded is not None].count(
        "anthropic_messages:claude-emulated"
    ) >= 2
    assert routes_of([step.recorded for step in request.steps]) == [
        "chat_completions:gpt-4.1",
        "anthropic_messages:claude-emulated",
    ]
    assert report.matched


def test_the_one_client_form_names_its_route(emulator: Emulator) -> None:
    emulator.script(Scenario.build(ANSWER))
    client = _openai(emulator)
    try:
        result = session().stream(client, {"model": "gpt-4.1", "messages": MESSAGES})
    finally:
        client.close()
    assert result.route == "chat_completions:gpt-4.1"
    assert {record.route for record in result.records} == {"chat_completions:gpt-4.1"}


def test_factories_get_fresh_clients_and_every_one_is_closed(pair: Pair) -> None:
    pair.primary.script(Scenario.build(faults=[HttpError(404)]))
    pair.second.script(Scenario.build(ANSWER))
    made: list[Any] = []

    def factory(emu: Emulator) -> Callable[[], Any]:
        def make() -> Any:
            client = _openai(emu)
            made.append(client)
            return client

        return make

    routes = [
        Route(factory(pair.primary), {"model": "gpt-4.1", "messages": MESSAGES}),
        Route(factory(pair.second), {"model": "gpt-4.1", "messages": MESSAGES}),
    ]
    result = session().stream(routes)
    assert result.route == "chat_completions:gpt-4.1#2"  # the same default name twice: numbered
    assert made and all(client._client.is_closed for client in made)


def test_route_arguments_are_checked(pair: Pair) -> None:
    client = _openai(pair.primary)
    pair.clients.append(client)
    with pytest.raises(TypeError, match="belong to each"):
        session().stream([Route(client, {"model": "m", "messages": MESSAGES})], {"model": "m"})
    with pytest.raises(ValueError, match="at least one route"):
        session().stream([])
    with pytest.raises(TypeError, match=r"not a fsm_agent\.Route"):
        session().stream([client])
    with pytest.raises(ValueError, match="distinct"):
        session().stream([Route(client, {"model": "m"}, name="x"), Route(client, {"model": "n"}, name="x")])
    assert pair.primary.requests == []


# -- health per route (HL-1): an open breaker or a long cooldown skips a route, a short one is waited --
def test_a_primary_whose_breaker_is_open_is_skipped_at_once(pair: Pair) -> None:
    pair.primary.script(Scenario.build(ANSWER, faults=[Stall(0, seconds=30.0, then="drop")]))
    pair.second.script(Scenario.build(ANSWER))
    tripping = session(retries=0, stale_timeout=0.2, stale_giveup=1, breaker_cooldown=60)
    routes = pair.routes()
    first = tripping.stream(routes)  # the primary stalls once: its breaker trips; the second answers
    assert first.route == "anthropic_messages:claude-emulated"
    assert len(pair.primary.requests) == 1
    seen = helpers.Collect()
    second = tripping.stream(routes, **seen.callbacks())
    assert second.route == "anthropic_messages:claude-emulated"
    assert len(pair.primary.requests) == 1  # skipped: no request sent to it
    start = second.records[0]
    assert (start.source, start.dest, start.route) == ("idle", "switching", "chat_completions:gpt-4.1")
    assert start.guards["breaker_tripped"] is True
    assert any("breaker is open" in status for status in seen.statuses)
    with pytest.raises(fsm_agent.ProviderUnresponsiveError):  # no route left: raised, nothing sent
        tripping.stream(routes[:1])
    assert len(pair.primary.requests) == 1


def test_a_primary_cooling_down_is_waited_for_or_skipped(pair: Pair) -> None:
    pair.primary.script(Scenario.build(faults=[HttpError(429, retry_after=0.4)]), then=Scenario.build(ANSWER))
    pair.second.script(Scenario.build(ANSWER))
    health = fsm_agent.MemoryHealth()
    routes = pair.routes()
    with pytest.raises(openai.RateLimitError):  # BO-6: the 429's hint sets the endpoint's cooldown
        session(retries=0, health=health).stream(routes[:1])
    impatient = session(health=health, backoff=fsm_agent.Backoff(base=0, max_wait=0.1))
    skipped = impatient.stream(routes)  # the cooldown is longer than max_wait: the next route (RT-1)
    assert skipped.route == "anthropic_messages:claude-emulated"
    assert skipped.records[0].dest == "switching" and skipped.records[0].guards["cooldown_too_long"]
    assert len(pair.primary.requests) == 1
    patient = session(health=health).stream(routes)  # within max_wait: waited out (BO-6)
    assert patient.route == "chat_completions:gpt-4.1"
    waiting = patient.records[0]
    assert waiting.dest == "waiting" and waiting.inputs["wait_source"] == "cooldown"
    assert len(pair.primary.requests) == 2 and len(pair.second.requests) == 1
    assert pair.primary.requests[1].received_at - pair.primary.requests[0].received_at >= 0.35


def test_a_hint_longer_than_max_wait_switches(pair: Pair) -> None:
    pair.primary.script(Scenario.build(faults=[HttpError(429, retry_after=120)]))
    pair.second.script(Scenario.build(ANSWER))
    result = session().stream(pair.routes())
    assert result.route == "anthropic_messages:claude-emulated"
    assert len(pair.primary.requests) == 1  # BO-3: not waited out, not retried: switched (RT-2)
    switch = next(record for record in result.records if record.dest == "switching")
    assert switch.guards["hint_too_long"] is True


@pytest.mark.parametrize("hint", [61, 90])
def test_bo3_by_default_a_hint_over_60_s_switches_while_another_route_remains(pair: Pair, hint: int) -> None:
    """BO-3's default: 60 s while another route can serve (the last route alone waits up to 120 s)."""
    pair.primary.script(Scenario.build(faults=[HttpError(429, retry_after=hint)]))
    pair.second.script(Scenario.build(ANSWER))
    result = session().stream(pair.routes())
    assert result.route == "anthropic_messages:claude-emulated" and len(pair.primary.requests) == 1
    switch = next(record for record in result.records if record.dest == "switching")
    assert switch.guards["hint_too_long"] is True and switch.inputs["max_wait"] == 60.0


# -- interrupts, async ---------------------------------------------------------------------------------
def test_an_interrupt_during_a_switch_ends_the_request(pair: Pair) -> None:
    pair.primary.script(Scenario.build(faults=[HttpError(503)]))
    pair.second.script(Scenario.build(ANSWER))
    stop = threading.Event()

    def on_status(message: str) -> None:
        if message.startswith("switching to"):
            stop.set()  # the caller's Ctrl-C, as the switch is announced

    with pytest.raises(InterruptedError):
        session().stream(pair.routes(), on_status=on_status, interrupt=stop)
    assert pair.second.requests == []


@pytest.mark.parametrize("first", ["chat_completions", "anthropic_messages"])
def test_async_routes_switch_like_sync_ones(pair: Pair, first: str) -> None:
    pair.primary.script(Scenario.build(INTRO, tool_calls=[READ], faults=[DropMidFrame(1, kind="tool_args")]))
    pair.second.script(Scenario.build("Reading the alerts. ", tool_calls=[ALERTS]))
    clients: list[Any] = []

    async def run() -> tuple[fsm_agent.StreamResult, list[str]]:
        texts: list[str] = []
        primary: Any = (
            openai.AsyncOpenAI(base_url=pair.primary.openai_base_url, api_key="sk-test", max_retries=0)
            if first == "chat_completions"
            else anthropic.AsyncAnthropic(
                base_url=pair.primary.anthropic_base_url, api_key="sk-ant-test", max_retries=0
            )
        )
        second = openai.AsyncOpenAI(base_url=pair.second.openai_base_url, api_key="sk-test", max_retries=0)
        clients.extend([primary, second])
        try:
            result = await session(retries=0).astream(
                [Route(primary, APIS[first][1]), Route(second, APIS["chat_completions"][1], name="backup")],
                on_text=texts.append,
            )
        finally:
            for client in clients:
                await client.close()
        return result, texts

    result, texts = asyncio.run(run())
    assert result.route == "backup" and [call.name for call in result.tool_calls] == [ALERTS.name]
    assert sum("switching to backup" in text for text in texts) == 1


def test_async_interrupt_during_a_switch(pair: Pair) -> None:
    pair.primary.script(Scenario.build(faults=[HttpError(503)]))
    pair.second.script(Scenario.build(ANSWER))

    async def run() -> None:
        primary = openai.AsyncOpenAI(base_url=pair.primary.openai_base_url, api_key="sk-test", max_retries=0)
        second = openai.AsyncOpenAI(base_url=pair.second.openai_base_url, api_key="sk-test", max_retries=0)
        stop = threading.Event()

        def on_status(message: str) -> None:
            if message.startswith("switching to"):
                stop.set()

        try:
            with pytest.raises(InterruptedError):
                await session().astream(
                    [Route(primary, APIS["chat_completions"][1]), Route(second, APIS["chat_completions"][1])],
                    on_status=on_status,
                    interrupt=stop,
                )
        finally:
            await primary.close()
            await second.close()

    asyncio.run(run())
    assert pair.second.requests == []


# -- traces: replay step for step, what-if without the fallback route -----------------------------------
@pytest.mark.parametrize("record_wire", [True, False])
def test_a_multi_route_trace_replays_step_for_step(pair: Pair, record_wire: bool) -> None:
    pair.primary.script(Scenario.build(INTRO, tool_calls=[READ], faults=[DropMidFrame(1, kind="tool_args")]))
    pair.second.script(Scenario.build("Reading the alerts. ", tool_calls=[ALERTS]))
    sink = fsm_agent.MemorySink(record_wire=record_wire)
    result = fsm_agent.Session(retries=0, trace=sink).stream(pair.routes())
    assert result.route == "anthropic_messages:claude-emulated"
    report = fsm_agent.replay(sink)
    assert report.matched, report.first_mismatch
    (request,) = report.requests
    assert [step.replayed.route for step in request.steps if step.replayed is not None] == [
        record.route for record in result.records
    ]
    assert request.outcome.action == request.recorded_outcome.action == "return"

    alone = fsm_agent.replay(sink, routes=1)  # what if there had been no second route?
    (what_if,) = alone.requests
    assert what_if.outcome.action == "return" and what_if.outcome.stub  # RES-5: a stub with a warning
    assert not alone.matched


def test_the_timeline_prints_route_names_without_control_characters(pair: Pair) -> None:
    import io

    from fsm_agent._internal.cli.replay_cmd import format_report

    pair.primary.script(Scenario.build(faults=[HttpError(404)]))
    pair.second.script(Scenario.build(ANSWER))
    sink = fsm_agent.MemorySink()
    routes = [pair.route(pair.primary, name="first\x1b[2J"), pair.route(pair.second, name="second\x07")]
    fsm_agent.Session(trace=sink).stream(routes)
    out = io.StringIO()
    format_report(fsm_agent.replay(sink), out)
    text = out.getvalue()
    assert "first\\x1b[2J" in text and "second\\x07" in text  # SEC-7: escaped, never printed raw
    assert "\x1b" not in text and "\x07" not in text
    assert "\x1b" not in text and "\x07" not in text


# -- each route's probe is settled by that route's own outcome (BO-7 with routes) ------------------------
def test_a_probe_that_fails_re_trips_its_route_even_when_the_next_route_answers(pair: Pair) -> None:
    pair.primary.script(Scenario.build(faults=[HttpError(503)]))
    pair.second.script(Scenario.build(ANSWER))
    routes = pair.routes()
    s = session(retries=0, stale_giveup=1, breaker_cooldown=30)
    first = routes[0]
    # The primary's breaker tripped earlier and its cooldown is over: this request is its probe.
    helpers.preset_health(s, first.client_or_factory, first.params, "chat_completions", stall=True)
    key = endpoint_key("chat_completions", first.client_or_factory, first.params["model"])
    s.health.update(key, HealthChange(breaker_open_until=time.time() - 1))
    result = s.stream(routes)
    assert result.content == ANSWER and result.route == "anthropic_messages:claude-emulated"
    health = s.health.get(key)
    assert health.breaker_open_until > time.time() + 20  # the failed probe re-tripped the primary
    assert health.probe_until == 0.0  # and freed its slot


def test_astream_closes_every_factory_client_when_the_routes_are_refused(pair: Pair) -> None:
    made: list[Any] = []

    def factory() -> Any:
        client = openai.AsyncOpenAI(base_url=pair.primary.openai_base_url, api_key="sk-test", max_retries=0)
        closed: list[bool] = []
        original = client.close

        async def close() -> None:
            closed.append(True)
            await original()

        client.close = close  # type: ignore[method-assign]
        made.append(closed)
        return client

    params = {"model": "gpt-4.1", "messages": MESSAGES}
    routes = [Route(factory, params), Route(factory, "not a dict"), Route(factory, params)]  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        asyncio.run(session().astream(routes))
    assert made and all(closed == [True] for closed in made), made
