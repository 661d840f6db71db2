"""A wrapped client's calls without streaming (WR-1, WR-4): `chat.completions.create()`,
`responses.create()`, `messages.create()`, `converse()` and `generate_content()`, sync and async,
over loopback against the emulator. They are requests of the session: a 503 is retried, a 429's
retry-after is waited out, a dead primary is left for the next route, a connection refused is
retried and then raised as the SDK raises it; the wrapped client's own retries are off. The answer
is the SDK's own object, equal to what the bare client returns for the same bytes."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from google import genai
from google.genai import types as genai_types
from openai.types.chat import ChatCompletion
from openai.types.responses import Response
from provider_clients import bedrock_client_without_retries, close_client

import fsm_agent
from fsm_agent._internal.providers.base import sdk_object
from fsm_agent.testing import Emulator, HttpError, Scenario, ScriptedToolCall, Stall, Text

CALL = ScriptedToolCall("read", '{"path": "a.txt"}', id="call_1")
ANSWER = Scenario(steps=(Text("Let me check."), CALL), id="resp_1", model="gpt-4.1")
CHAT = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "gpt-4.1", "input": "hi"}
CLAUDE = {"model": "claude-x", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
CONVERSE = {"modelId": "anthropic.claude", "messages": [{"role": "user", "content": [{"text": "hi"}]}]}
GEMINI = {"model": "gemini-2.5-flash", "contents": "hi"}


def closed_port() -> int:
    """A loopback port nothing listens on (a connection there is refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stamped(field: str) -> Callable[[Any], Any]:
    """An answer less the emulator's clock stamp (`created`): two requests may straddle a second."""

    def digest(answer: Any) -> Any:
        return {key: value for key, value in answer.model_dump().items() if key != field}

    return digest


@dataclass
class Api:
    """One API's plain call: its bare client (sync, async), the call, and what makes two answers equal."""

    name: str
    client: Callable[[str], Any]  # base URL -> sync client
    aclient: Callable[[str], Any] | None  # base URL -> async client
    base_url: Callable[[Emulator], str]
    call: Callable[[Any], Any]  # client -> its plain call (awaitable on an async client)
    sdk_type: type | None
    digest: Callable[[Any], Any] = lambda answer: answer  # what equality compares

    def text(self, answer: Any) -> str:
        return {
            "chat": lambda a: a.choices[0].message.content,
            "responses": lambda a: a.output_text,
            "anthropic": lambda a: a.content[0].text,
            "bedrock": lambda a: a["output"]["message"]["content"][0]["text"],
            "gemini": lambda a: a.text,
        }[self.name](answer)


def _bedrock(url: str) -> Any:
    class _At:
        bedrock_endpoint_url = url

    return bedrock_client_without_retries(_At())  # type: ignore[arg-type]


APIS = [
    Api(
        "chat",
        lambda url: openai.OpenAI(base_url=url, api_key="sk-test", max_retries=0),
        lambda url: openai.AsyncOpenAI(base_url=url, api_key="sk-test", max_retries=0),
        lambda emu: emu.openai_base_url,
        lambda client: client.chat.completions.create(**CHAT),
        ChatCompletion,
        stamped("created"),
    ),
    Api(
        "responses",
        lambda url: openai.OpenAI(base_url=url, api_key="sk-test", max_retries=0),
        lambda url: openai.AsyncOpenAI(base_url=url, api_key="sk-test", max_retries=0),
        lambda emu: emu.openai_base_url,
        lambda client: client.responses.create(**RESPONSES),
        Response,
        stamped("created_at"),
    ),
    Api(
        "anthropic",
        lambda url: anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0),
        lambda url: anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-test", max_retries=0),
        lambda emu: emu.anthropic_base_url,
        lambda client: client.messages.create(**CLAUDE),
        anthropic.types.Message,
    ),
    Api(
        "bedrock",
        _bedrock,
        None,
        lambda emu: emu.bedrock_endpoint_url,
        lambda client: client.converse(**CONVERSE),
        None,
        # the transport's own headers (its date) are not the answer's
        lambda answer: {key: value for key, value in answer.items() if key != "ResponseMetadata"},
    ),
    Api(
        "gemini",
        lambda url: genai.Client(api_key="k", http_options={"base_url": url}),
        None,
        lambda emu: emu.gemini_base_url,
        lambda client: client.models.generate_content(**GEMINI),
        genai_types.GenerateContentResponse,
        # the SDK keeps the transport's headers (its date) beside the answer
        lambda answer: answer.model_dump(exclude={"sdk_http_response"}),
    ),
]
ASYNC_APIS = [api for api in APIS if api.aclient is not None] + [APIS[-1]]  # gemini: `client.aio`

_MADE: list[Any] = []


@pytest.fixture(autouse=True)
def _closed_clients() -> Any:
    yield
    while _MADE:
        close_client(_MADE.pop())


def bare(api: Api, url: str) -> Any:
    made = api.client(url)
    _MADE.append(made)
    return made


def session(**settings: Any) -> fsm_agent.Session:
    return fsm_agent.Session(backoff=fsm_agent.Backoff(base=0), **settings)


def same_bytes(emulator: Emulator, run: Callable[[], Any], *scenarios: Scenario) -> Any:
    emulator.reset()
    emulator.script(*(scenarios or (ANSWER,)))
    return run()


def path(sink: fsm_agent.MemorySink) -> list[tuple[str, str, str]]:
    return [(r.trigger, r.source, r.dest) for r in sink.records]


def plain_only(emulator: Emulator) -> bool:
    return all(request.stream is False for request in emulator.requests)


# -- the answer is the SDK's own ----------------------------------------------------------------------------
@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
def test_a_plain_call_answers_the_sdks_own_object_equal_to_the_bare_clients(
    emulator: Emulator, api: Api
) -> None:
    client = bare(api, api.base_url(emulator))
    sink = fsm_agent.MemorySink()
    wrapped = fsm_agent.wrap(client, session(trace=sink))
    expected = same_bytes(emulator, lambda: api.call(client))
    answer = same_bytes(emulator, lambda: api.call(wrapped))
    if api.sdk_type is not None:
        assert type(answer) is api.sdk_type
        # the fields the SDK fills (less the transport's headers a Gemini answer keeps)
        assert answer.model_fields_set == expected.model_fields_set - {"sdk_http_response"}
    assert api.digest(answer) == api.digest(expected)
    assert api.text(answer) == "Let me check."
    assert plain_only(emulator) and len(emulator.requests) == 1
    assert path(sink) == [("start", "idle", "fallback"), ("fallback_done", "fallback", "done")]
    assert sink.records[0].guards["plain_request"] is True and sink.records[0].inputs["plain"] is True


def test_the_sdks_object_carries_the_request_id_as_the_bare_clients_does(emulator: Emulator) -> None:
    client = bare(APIS[0], emulator.openai_base_url)
    expected = same_bytes(emulator, lambda: client.chat.completions.create(**CHAT))
    answer = same_bytes(emulator, lambda: fsm_agent.wrap(client, session()).chat.completions.create(**CHAT))
    assert answer._request_id == expected._request_id == "req_emu1"
    assert answer == expected.model_copy(update={"created": answer.created})  # all but the clock
    messages = bare(APIS[2], emulator.anthropic_base_url)
    expected = same_bytes(emulator, lambda: messages.messages.create(**CLAUDE))
    answer = same_bytes(emulator, lambda: fsm_agent.wrap(messages, session()).messages.create(**CLAUDE))
    assert answer._request_id == expected._request_id == "req_emu1"


def test_a_raw_response_without_the_sdks_parts_gives_the_body_as_it_is() -> None:
    body = {"id": "x"}
    assert sdk_object(object(), body) is body


# -- the session's back-off, hints, routes and health --------------------------------------------
@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
def test_a_503_then_an_answer_is_retried_by_the_session(emulator: Emulator, api: Api) -> None:
    sink = fsm_agent.MemorySink()
    wrapped = fsm_agent.wrap(bare(api, api.base_url(emulator)), session(trace=sink))
    answer = same_bytes(emulator, lambda: api.call(wrapped), Scenario(faults=(HttpError(503),)), ANSWER)
    assert api.text(answer) == "Let me check."
    assert len(emulator.requests) == 2 and plain_only(emulator)
    assert path(sink) == [
        ("start", "idle", "fallback"),
        ("error", "fallback", "retrying"),
        ("closed", "retrying", "fallback"),
        ("fallback_done", "fallback", "done"),
    ]
    assert sink.records[-1].attempt == 2


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
def test_a_429_with_retry_after_is_waited_out(emulator: Emulator, api: Api) -> None:
    sink = fsm_agent.MemorySink()
    wrapped = fsm_agent.wrap(bare(api, api.base_url(emulator)), session(trace=sink))
    limited = Scenario(faults=(HttpError(429, retry_after=0.05),))
    answer = same_bytes(emulator, lambda: api.call(wrapped), limited, ANSWER)
    assert api.text(answer) == "Let me check."
    waiting = [r for r in sink.records if r.dest == "waiting"]
    assert len(waiting) == 1 and waiting[0].inputs["wait_source"] == "retry-after"
    assert waiting[0].inputs["wait_s"] == pytest.approx(0.05)
    assert path(sink)[-2:] == [("waited", "waiting", "fallback"), ("fallback_done", "fallback", "done")]


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.name)
def test_a_dead_primary_is_left_for_the_next_route(emulator: Emulator, api: Api) -> None:
    dead = bare(api, api.base_url(emulator).replace(str(emulator.port), str(closed_port())))
    backup = bare(api, api.base_url(emulator))
    sink = fsm_agent.MemorySink()
    wrapped = fsm_agent.wrap(dead, session(trace=sink, retries=1), routes=[fsm_agent.Route(backup, {})])
    answer = same_bytes(emulator, lambda: api.call(wrapped))
    assert api.text(answer) == "Let me check."
    assert len(emulator.requests) == 1  # the dead primary's two attempts never reached it
    assert [r.dest for r in sink.records].count("switching") == 1
    assert sink.records[-1].route != sink.records[0].route


def test_a_connection_refused_is_retried_then_raised_as_the_sdk_raises_it(emulator: Emulator) -> None:
    dead = bare(APIS[0], f"http://127.0.0.1:{closed_port()}/v1")
    sink = fsm_agent.MemorySink()
    with pytest.raises(openai.APIConnectionError):
        fsm_agent.wrap(dead, session(trace=sink, retries=2)).chat.completions.create(**CHAT)
    assert [r.dest for r in sink.records].count("retrying") == 2
    assert sink.records[-1].dest == "failed" and sink.records[-1].attempt == 3


def test_a_stalled_plain_request_is_retried(emulator: Emulator) -> None:
    sink = fsm_agent.MemorySink()
    wrapped = fsm_agent.wrap(bare(APIS[0], emulator.openai_base_url), session(trace=sink, stale_timeout=0.3))
    stalled = Scenario(faults=(Stall(seconds=5.0, then="drop"),))
    answer = same_bytes(emulator, lambda: wrapped.chat.completions.create(**CHAT), stalled, ANSWER)
    assert answer.choices[0].message.content == "Let me check."
    assert ("stale", "fallback", "retrying") in path(sink)


def test_the_wrapped_clients_own_retries_stay_off(emulator: Emulator) -> None:
    retrying = openai.OpenAI(base_url=emulator.openai_base_url, api_key="sk-test", max_retries=5)
    _MADE.append(retrying)
    wrapped = fsm_agent.wrap(retrying, session(retries=0))
    emulator.script(Scenario(faults=(HttpError(503),)), ANSWER)
    with pytest.raises(openai.InternalServerError):
        wrapped.chat.completions.create(**CHAT)
    assert len(emulator.requests) == 1  # the session's budget (no retry), not the client's five


def test_an_open_breaker_refuses_a_plain_call_before_sending_it(emulator: Emulator) -> None:
    wrapped = fsm_agent.wrap(bare(APIS[0], emulator.openai_base_url), session(retries=0, stale_giveup=1))
    emulator.script(Scenario(faults=(HttpError(503),)))
    with pytest.raises(openai.InternalServerError):
        wrapped.chat.completions.create(**CHAT)
    with pytest.raises(fsm_agent.ProviderUnresponsiveError):
        wrapped.chat.completions.create(**CHAT)
    assert len(emulator.requests) == 1


def test_an_answer_from_a_route_of_another_api_is_the_calls_own_type(emulator: Emulator) -> None:
    dead = bare(APIS[0], f"http://127.0.0.1:{closed_port()}/v1")
    claude = bare(APIS[2], emulator.anthropic_base_url)
    route = fsm_agent.Route(claude, {"model": "claude-x", "max_tokens": 100})
    wrapped = fsm_agent.wrap(dead, session(retries=0), routes=[route])
    emulator.script(ANSWER)
    completion = wrapped.chat.completions.create(**CHAT)
    assert type(completion) is ChatCompletion
    message = completion.choices[0].message
    assert message.content == "Let me check." and completion.choices[0].finish_reason == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in message.tool_calls or []] == [
        ("read", '{"path": "a.txt"}')
    ]


# -- async ---------------------------------------------------------------------------------------------------
def _async_call(api: Api, url: str) -> tuple[Any, Callable[[Any], Any], Callable[[], Any]]:
    """The async client, its plain call on a (wrapped) client, and how to close it."""
    if api.aclient is None:  # gemini: the same client's `aio`
        client = api.client(url)
        _MADE.append(client)
        return client, lambda c: c.aio.models.generate_content(**GEMINI), client.aio.aclose
    aclient = api.aclient(url)
    return aclient, api.call, aclient.close


@pytest.mark.parametrize("api", ASYNC_APIS, ids=lambda api: api.name)
def test_async_plain_calls_are_retried_and_answer_the_sdks_own_object(emulator: Emulator, api: Api) -> None:
    async def main() -> None:
        client, call, close = _async_call(api, api.base_url(emulator))
        sink = fsm_agent.MemorySink()
        wrapped = fsm_agent.wrap(client, session(trace=sink))
        emulator.reset()
        emulator.script(ANSWER)
        expected = await call(client)
        emulator.reset()
        emulator.script(ANSWER)
        answer = await call(wrapped)
        assert type(answer) is api.sdk_type and api.digest(answer) == api.digest(expected)
        emulator.reset()
        limited, failing = (
            Scenario(faults=(HttpError(429, retry_after=0.05),)),
            Scenario(faults=(HttpError(503),)),
        )
        emulator.script(limited, failing, ANSWER)
        answer = await call(wrapped)
        assert type(answer) is api.sdk_type and api.text(answer) == "Let me check."
        assert len(emulator.requests) == 3 and plain_only(emulator)
        assert [r.dest for r in sink.records][2:] == [
            "fallback", "retrying", "waiting", "fallback", "retrying", "fallback", "done"
        ]  # fmt: skip
        await close()

    asyncio.run(main())


@pytest.mark.parametrize("record_wire", [False, True])
def test_a_plain_requests_trace_replays(emulator: Emulator, tmp_path: Any, record_wire: bool) -> None:
    trace = tmp_path / "plain.jsonl"
    settings = {"trace": str(trace), "record_wire": record_wire}
    wrapped = fsm_agent.wrap(bare(APIS[0], emulator.openai_base_url), session(**settings))
    limited = Scenario(faults=(HttpError(429, retry_after=0.05),))
    same_bytes(emulator, lambda: wrapped.chat.completions.create(**CHAT), limited, ANSWER)
    report = fsm_agent.replay(trace)
    assert report.matched, report.first_mismatch
