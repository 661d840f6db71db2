"""OT-1..3 with the real OpenTelemetry SDK (in-memory span exporter and metric reader): each outcome of
the machine — success, silent retry, mid-tool reconnect, stub, stall, fallback, interrupt, failure —
gives the expected span tree, attributes, events and status on all four APIs, each driven through its
real SDK client against the emulator; the metrics have the GenAI names, units and attributes; content
is recorded only when the application opts in; a broken span processor changes no outcome."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from helpers import INSTANT
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from otel_support import Otel, otel
from provider_clients import anthropic_client as _anthropic
from provider_clients import bedrock_client as _bedrock
from provider_clients import close_client as _close
from provider_clients import openai_client as _openai

import fsm_agent
from fsm_agent.testing import (
    BedrockAccessDenied,
    DropAfter,
    DropMidFrame,
    Emulator,
    Fault,
    HttpError,
    Scenario,
    Stall,
    StreamingUnsupported,
    ToolCall,
)

__all__ = ["otel"]

WRITE = ToolCall("write_file", '{"path": "notes.txt", "text": "hello"}', arg_fragment=5)


@dataclass(frozen=True)
class Api:
    """One API: its client, request, GenAI names, and the fault that makes streaming unavailable."""

    name: str
    make: Callable[[Emulator], Any]
    params: dict[str, Any]
    provider: str
    model: str
    unsupported: Fault


BEDROCK_MODEL = "us.anthropic.claude-sonnet-4-5-v1:0"
APIS = {
    api.name: api
    for api in (
        Api(
            "chat_completions",
            _openai,
            {
                "model": "gpt-4.1",
                "messages": [{"role": "user", "content": "secret prompt"}],
                "temperature": 0.2,
            },
            "openai",
            "gpt-4.1",
            StreamingUnsupported(),
        ),
        Api(
            "responses",
            _openai,
            {"model": "gpt-5", "input": "secret prompt", "max_output_tokens": 300},
            "openai",
            "gpt-5",
            StreamingUnsupported(),
        ),
        Api(
            "anthropic_messages",
            _anthropic,
            {
                "model": "claude-emulated",
                "max_tokens": 256,
                "messages": [{"role": "user", "content": "secret prompt"}],
            },
            "anthropic",
            "claude-emulated",
            StreamingUnsupported(),
        ),
        Api(
            "bedrock_converse",
            _bedrock,
            {
                "modelId": BEDROCK_MODEL,
                "messages": [{"role": "user", "content": [{"text": "secret prompt"}]}],
                "inferenceConfig": {"maxTokens": 128},
            },
            "aws.bedrock",
            BEDROCK_MODEL,
            BedrockAccessDenied(),
        ),
    )
}


@pytest.fixture(params=sorted(APIS))
def api(request: pytest.FixtureRequest) -> Api:
    return APIS[request.param]


@dataclass
class Tree:
    """The spans of one request: the request span and its children, in start order."""

    root: ReadableSpan
    children: list[ReadableSpan]

    @property
    def transitions(self) -> list[tuple[str, str, str]]:
        return [
            (
                e.attributes["fsm_agent.trigger"],
                e.attributes["fsm_agent.source"],
                e.attributes["fsm_agent.dest"],
            )
            for e in self.root.events
            if e.name == "fsm_agent.transition"
        ]

    def phases(self) -> list[tuple[str, str, StatusCode]]:
        return [(s.name, s.attributes["fsm_agent.outcome"], s.status.status_code) for s in self.children]


def tree_of(spans: list[ReadableSpan]) -> Tree:
    spans = [
        s
        for s in spans
        if s.instrumentation_scope is not None and s.instrumentation_scope.name == "fsm_agent"
    ]
    roots = [s for s in spans if s.name.startswith(("chat ", "generate_content "))]
    assert len(roots) == 1, [s.name for s in spans]
    root = roots[0]
    children = sorted((s for s in spans if s is not root), key=lambda s: s.start_time or 0)
    for child in children:
        assert child.parent is not None and child.parent.span_id == root.context.span_id, child.name
        assert child.context.trace_id == root.context.trace_id
        assert root.start_time <= child.start_time and child.end_time <= root.end_time
    return Tree(root, children)


def run(
    api: Api, emu: Emulator, *scenarios: Scenario, session: fsm_agent.Session | None = None, **kw: Any
) -> Any:
    emu.script(*scenarios)
    client = api.make(emu)
    try:
        session = session or fsm_agent.Session(backoff=INSTANT)
        return session.stream(client, dict(api.params), api=api.name, **kw)
    finally:
        _close(client)


def assert_request_attributes(root: ReadableSpan, api: Api, emu: Emulator) -> None:
    attributes = root.attributes
    assert root.name == f"chat {api.model}"
    assert root.kind is SpanKind.CLIENT
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == api.provider
    assert attributes["gen_ai.request.model"] == api.model
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["server.port"] == emu.port
    assert attributes["fsm_agent.route"] == f"{api.name}:{api.model}"


def assert_no_content(spans: list[ReadableSpan]) -> None:
    for span in spans:
        values = [*span.attributes.values(), *(v for e in span.events for v in e.attributes.values())]
        assert not any("secret prompt" in str(v) or "Hello" in str(v) for v in values), span.name
        assert (
            "gen_ai.input.messages" not in span.attributes and "gen_ai.output.messages" not in span.attributes
        )


# -- the outcomes ---------------------------------------------------------------------------------------
def test_success(otel: Otel, emulator: Emulator, api: Api) -> None:
    result = run(api, emulator, Scenario.build("Hello there."))
    tree = tree_of(otel.spans())
    root = tree.root
    assert_request_attributes(root, api, emulator)
    assert root.status.status_code is StatusCode.UNSET
    attributes = root.attributes
    assert attributes["gen_ai.response.model"] == result.model
    if result.id is not None:
        assert attributes["gen_ai.response.id"] == result.id
    assert attributes["gen_ai.response.finish_reasons"] == (result.finish_reason,)
    assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (10, 20)
    assert (
        attributes["fsm_agent.attempts"],
        attributes["fsm_agent.stub"],
        attributes["fsm_agent.streamed"],
    ) == (
        1,
        False,
        True,
    )
    assert 0 < attributes["gen_ai.response.time_to_first_chunk"] < (root.end_time - root.start_time) / 1e9
    assert tree.transitions == [
        ("start", "idle", "connecting"),
        ("text", "connecting", "streaming_text"),
        ("finish", "streaming_text", "finishing"),
        ("end", "finishing", "done"),
    ]
    start = root.events[0].attributes
    assert start["fsm_agent.guards"] == (
        "breaker_tripped=false",
        "cooldown_too_long=false",
        "capacity_too_long=false",  # CAP-2 (issue 29's rows, before the cooldown's wait)
        "capacity_short=false",
        "cooling_down=false",
        "plain_request=false",  # WR-1: a wrapped client's call without streaming
        "streaming_disabled=false",
    )
    assert tree.phases() == [("fsm_agent.attempt", "done", StatusCode.UNSET)]
    assert tree.children[0].attributes["fsm_agent.attempt"] == 1
    assert_no_content(otel.spans())


def test_silent_retry(otel: Otel, emulator: Emulator, api: Api) -> None:
    result = run(
        api, emulator, Scenario.build("Hello.", faults=[DropAfter(0)]), Scenario.build("Hello again.")
    )
    assert result.attempts == 2
    tree = tree_of(otel.spans())
    assert tree.root.status.status_code is StatusCode.UNSET
    assert tree.root.attributes["fsm_agent.attempts"] == 2
    phases = tree.phases()
    assert phases[0][:2] == ("fsm_agent.attempt", "retrying") and phases[0][2] is StatusCode.ERROR
    assert phases[1] == ("fsm_agent.attempt", "done", StatusCode.UNSET)
    assert [c.attributes["fsm_agent.attempt"] for c in tree.children] == [1, 2]
    assert tree.children[0].attributes["error.type"]  # the transport error the attempt died of
    retry = next(e for e in tree.root.events if e.attributes.get("fsm_agent.dest") == "retrying")
    assert "is_transient=true" in retry.attributes["fsm_agent.guards"]
    assert "has_visible_text=false" in retry.attributes["fsm_agent.guards"]
    assert otel.metrics()["fsm_agent.retries"][0][1][0].value == 1


def test_mid_tool_reconnect(otel: Otel, emulator: Emulator, api: Api) -> None:
    cut = Scenario.build("Writing it.", tool_calls=[WRITE], faults=[DropMidFrame(2, kind="tool_args")])
    result = run(api, emulator, cut, Scenario.build("Writing it.", tool_calls=[WRITE]))
    assert result.attempts == 2 and [c.name for c in result.tool_calls] == ["write_file"]
    tree = tree_of(otel.spans())
    assert tree.root.status.status_code is StatusCode.UNSET
    assert ("error", "streaming_tool", "retrying") in tree.transitions
    retry = next(e for e in tree.root.events if e.attributes.get("fsm_agent.dest") == "retrying")
    guards = retry.attributes["fsm_agent.guards"]
    assert "has_visible_text=true" in guards and "tool_in_flight=true" in guards
    assert (
        retry.attributes["fsm_agent.tools_in_flight"] == 1 and retry.attributes["fsm_agent.visible_chars"] > 0
    )
    assert [p[:2] for p in tree.phases()] == [
        ("fsm_agent.attempt", "retrying"),
        ("fsm_agent.attempt", "done"),
    ]


def test_stub(otel: Otel, emulator: Emulator, api: Api) -> None:
    scenario = Scenario.build(
        "Hello there, my good friend.", chunk_size=4, faults=[DropAfter(2, kind="text")]
    )
    result = run(api, emulator, scenario)
    assert result.stub
    tree = tree_of(otel.spans())
    root = tree.root
    assert root.status.status_code is StatusCode.UNSET  # a stub is an answer, not an error
    assert root.attributes["fsm_agent.stub"] is True
    assert root.attributes["gen_ai.response.finish_reasons"] == ("length",)
    assert tree.transitions[-2:] == [("error", "streaming_text", "stubbing"), ("closed", "stubbing", "done")]
    assert tree.phases()[0][1:] == ("stubbing", StatusCode.ERROR)
    assert otel.metrics()["fsm_agent.stubs"][0][1][0].value == 1


def test_stall(otel: Otel, emulator: Emulator, api: Api) -> None:
    session = fsm_agent.Session(stale_timeout=0.3, backoff=INSTANT)
    result = run(
        api,
        emulator,
        Scenario.build("Hello.", faults=[Stall(0, seconds=10)]),
        Scenario.build("Hi."),
        session=session,
    )
    assert result.attempts == 2
    tree = tree_of(otel.spans())
    assert ("stale", "connecting", "stalled") in tree.transitions
    assert ("closed", "stalled", "retrying") in tree.transitions
    first = tree.children[0]
    assert (first.attributes["fsm_agent.outcome"], first.attributes["error.type"]) == (
        "stalled",
        "StreamStalledError",
    )
    assert first.status.status_code is StatusCode.ERROR
    assert (first.end_time - first.start_time) / 1e9 >= 0.25  # the attempt's span shows the silence
    # WD-8: which phase and which clock fired, on the request's span and on the transition's event
    root = tree.root
    assert (root.attributes["fsm_agent.stall_phase"], root.attributes["fsm_agent.stall_clock"]) == (
        "first_event",
        "progress",
    )
    [stale] = [e for e in root.events if e.attributes.get("fsm_agent.trigger") == "stale"]
    assert stale.attributes["fsm_agent.stall_phase"] == "first_event"
    measured = otel.metrics()
    assert measured["fsm_agent.stalls"][0][1][0].value == 1
    assert measured["fsm_agent.retries"][0][1][0].value == 1


def test_fallback(otel: Otel, emulator: Emulator, api: Api) -> None:
    result = run(api, emulator, Scenario.build("Hello there.", faults=[api.unsupported]))
    assert result.streamed is False
    tree = tree_of(otel.spans())
    root = tree.root
    assert root.status.status_code is StatusCode.UNSET
    assert root.attributes["fsm_agent.streamed"] is False
    assert [p[:2] for p in tree.phases()] == [
        ("fsm_agent.attempt", "fallback"),
        ("fsm_agent.fallback", "done"),
    ]
    assert tree.transitions[-2:] == [
        ("error", "connecting", "fallback"),
        ("fallback_done", "fallback", "done"),
    ]
    assert otel.metrics()["fsm_agent.fallbacks"][0][1][0].value == 1


def test_interrupt(otel: Otel, emulator: Emulator, api: Api) -> None:
    stop = threading.Event()
    scenario = Scenario.build("One two three four.", chunk_size=4, faults=[Stall(2, seconds=10, kind="text")])
    with pytest.raises(InterruptedError):
        run(
            api,
            emulator,
            scenario,
            session=fsm_agent.Session(stale_timeout=30),
            on_text=lambda _: stop.set(),
            interrupt=stop,
        )
    tree = tree_of(otel.spans())
    root = tree.root
    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes["error.type"] == "InterruptedError"
    assert tree.transitions[-1][0] == "interrupt" and tree.transitions[-1][2] == "failed"
    exception = [e for e in root.events if e.name == "exception"]
    assert len(exception) == 1 and exception[0].attributes["exception.type"] == "InterruptedError"
    assert tree.phases()[0][1:] == ("failed", StatusCode.ERROR)


def test_failure(otel: Otel, emulator: Emulator, api: Api) -> None:
    with pytest.raises(Exception) as caught:
        run(
            api,
            emulator,
            Scenario.build("x", faults=[HttpError(400, message="bad request: no such parameter")]),
        )
    tree = tree_of(otel.spans())
    root = tree.root
    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes["error.type"] == type(caught.value).__qualname__
    assert root.attributes["fsm_agent.attempts"] == 1
    exception = [e for e in root.events if e.name == "exception"]
    assert len(exception) == 1 and exception[0].attributes["exception.type"].endswith(
        type(caught.value).__name__
    )
    assert tree.transitions == [("start", "idle", "connecting"), ("error", "connecting", "failed")]
    measured = otel.metrics()
    ((_, points),) = measured["gen_ai.client.operation.duration"]
    assert points[0].attributes["error.type"] == type(caught.value).__qualname__
    assert "gen_ai.client.token.usage" not in measured


# -- metrics ------------------------------------------------------------------------------------------------
def test_metrics_names_units_attributes(otel: Otel, emulator: Emulator, api: Api) -> None:
    run(api, emulator, Scenario.build("Hello there."))
    measured = otel.metrics()
    base = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": api.provider,
        "gen_ai.request.model": api.model,
        "server.address": "127.0.0.1",
        "server.port": emulator.port,
    }
    ((unit, points),) = measured["gen_ai.client.operation.duration"]
    assert unit == "s" and len(points) == 1 and points[0].count == 1 and points[0].sum > 0
    assert dict(points[0].attributes) == {
        **base,
        "gen_ai.response.model": points[0].attributes["gen_ai.response.model"],
    }
    ((unit, points),) = measured["gen_ai.client.operation.time_to_first_chunk"]
    assert unit == "s" and points[0].count == 1
    ((unit, points),) = measured["gen_ai.client.token.usage"]
    assert unit == "{token}"
    by_type = {p.attributes["gen_ai.token.type"]: p.sum for p in points}
    assert by_type == {"input": 10, "output": 20}
    assert not any(name.startswith("fsm_agent.") for name in measured)  # nothing to count on a clean run


def test_counter_units(otel: Otel, emulator: Emulator) -> None:
    api = APIS["chat_completions"]
    run(api, emulator, Scenario.build("Hello.", faults=[DropAfter(0)]), Scenario.build("Hello again."))
    ((unit, points),) = otel.metrics()["fsm_agent.retries"]
    assert unit == "{retry}"
    assert dict(points[0].attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4.1",
        "server.address": "127.0.0.1",
        "server.port": emulator.port,
    }


# -- nesting, content, OT-3 ---------------------------------------------------------------------------------
def test_sync_request_nests_under_the_callers_span(otel: Otel, emulator: Emulator) -> None:
    api = APIS["chat_completions"]
    with otel.tracer.start_as_current_span("handle user turn") as caller:
        run(api, emulator, Scenario.build("Hello there."))
    tree = tree_of(otel.spans())
    assert tree.root.parent is not None and tree.root.parent.span_id == caller.get_span_context().span_id


def test_the_attempt_span_is_current_while_the_attempt_runs(otel: Otel, emulator: Emulator) -> None:
    """The caller's own instrumentation (here: a span made in on_text) nests under the attempt."""
    api = APIS["chat_completions"]
    run(
        api,
        emulator,
        Scenario.build("Hello there."),
        on_text=lambda _: otel.tracer.start_span("on_text").end(),
    )
    spans = otel.spans()
    (attempt,) = tree_of(spans).children
    inner = [s for s in spans if s.name == "on_text"]
    assert inner and all(s.parent is not None and s.parent.span_id == attempt.context.span_id for s in inner)


def test_the_sdks_own_spans_nest_under_their_attempt(otel: Otel, emulator: Emulator) -> None:
    """The anthropic SDK traces each call itself: each of its spans is a child of the attempt that made it."""
    api = APIS["anthropic_messages"]
    run(api, emulator, Scenario.build("Hello.", faults=[DropAfter(0)]), Scenario.build("Hello again."))
    spans = otel.spans()
    tree = tree_of(spans)
    own = sorted(
        (s for s in spans if s.instrumentation_scope.name != "fsm_agent"), key=lambda s: s.start_time or 0
    )
    assert len(own) == 2
    assert [s.parent.span_id for s in own if s.parent] == [c.context.span_id for c in tree.children]


def test_content_is_recorded_only_when_opted_in(otel: Otel, emulator: Emulator, api: Api) -> None:
    run(
        api,
        emulator,
        Scenario.build("Hello there.", tool_calls=[WRITE]),
        session=fsm_agent.Session(telemetry_content=True),
    )
    root = tree_of(otel.spans()).root
    assert "secret prompt" in root.attributes["gen_ai.input.messages"]
    (message,) = json.loads(root.attributes["gen_ai.output.messages"])
    assert message["role"] == "assistant"
    assert {"type": "text", "content": "Hello there."} in message["parts"]
    assert {
        "type": "tool_call",
        "name": "write_file",
        "arguments": {"path": "notes.txt", "text": "hello"},
    }.items() <= next(p for p in message["parts"] if p["type"] == "tool_call").items()


def test_content_switch_from_the_environment(
    otel: Otel, emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = APIS["chat_completions"]
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    run(api, emulator, Scenario.build("Hello there."))
    root = tree_of(otel.spans()).root
    assert '"secret prompt"' in root.attributes["gen_ai.input.messages"]
    # ...and the session's own argument wins over the environment.
    otel.exporter.clear()
    run(api, emulator, Scenario.build("Hello there."), session=fsm_agent.Session(telemetry_content=False))
    assert_no_content(otel.spans())


def test_telemetry_off_records_nothing(otel: Otel, emulator: Emulator) -> None:
    result = run(
        APIS["chat_completions"],
        emulator,
        Scenario.build("Hello there."),
        session=fsm_agent.Session(telemetry=False),
    )
    assert result.content == "Hello there."
    assert otel.spans() == [] and otel.metrics() == {}


@pytest.mark.parametrize("where", ["start", "end", "export"])
@pytest.mark.parametrize("outcome", ["success", "retry", "failure"])
def test_broken_telemetry_changes_no_outcome(
    otel: Otel, emulator: Emulator, outcome: str, where: str
) -> None:
    """OT-3: a span processor raising from every span start (or end), or an exporter failing, is
    logged, not raised; the caller's context is left as it was."""
    api = APIS["chat_completions"]
    otel.gate.broken = where
    texts: list[str] = []
    before = trace.get_current_span()
    if outcome == "failure":
        with pytest.raises(openai.BadRequestError):
            run(api, emulator, Scenario.build("x", faults=[HttpError(400)]))
    else:
        first = (
            Scenario.build("Hello.", faults=[DropAfter(0)])
            if outcome == "retry"
            else Scenario.build("Hello there.")
        )
        result = run(api, emulator, first, Scenario.build("Hello there."), on_text=texts.append)
        assert result.content == "Hello there." and "".join(texts) == "Hello there."
        assert result.attempts == (2 if outcome == "retry" else 1)
    assert trace.get_current_span() is before
    assert otel.metrics()["gen_ai.client.operation.duration"]  # metrics still flow
