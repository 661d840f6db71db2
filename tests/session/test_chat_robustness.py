"""Callbacks (CB-1..6), client factories, the caller's params, bad input (SEC-1), the byte cap
(SEC-2) and the structlog record of every transition (FSM-5), with the real `openai` client on the
emulator over loopback HTTP."""

from __future__ import annotations

import copy
from typing import Any

import helpers
import openai
import pytest
import structlog
from helpers import (
    DONE,
    INSTANT,
    AttemptSpy,
    Collect,
    LeakCheck,
    chunk,
    make_client,
    params,
    sse,
    text_frames,
)

import fsm_agent
from fsm_agent.testing import (
    ChatShape,
    DropAfter,
    DropMidFrame,
    KeepaliveOnly,
    Keepalives,
    RejectStreamOptions,
    Scenario,
    Text,
    ToolCall,
)

leaks = helpers.leaks
spy = helpers.spy

FSM5_FIELDS = ("request_id", "attempt", "seq", "t", "trigger", "source", "dest", "guards",
               "visible_chars", "tools_in_flight")  # fmt: skip
WRITE = ToolCall("write_file", '{"path": "a.txt", "text": "some longer content here"}', arg_fragment=4)


# -- CB-1..3: content callbacks ------------------------------------------------------------------------


def test_cb1_on_text_gets_strings_only_in_order(leaks: LeakCheck) -> None:
    frames = (
        sse(chunk({"role": "assistant", "content": None})),
        sse(chunk({"content": [{"type": "text", "text": "Hello"}]})),
        sse(chunk({"content": None, "reasoning_content": None})),
        sse(chunk({"content": ""})),
        sse(chunk({"content": [{"type": "text", "text": ", "}, {"type": "text", "text": "world"}]})),
        sse(chunk({"content": "!"})),
        sse(chunk({}, finish_reason="stop")),
        DONE,
    )
    leaks.emulator.script(Scenario(raw=frames))
    got = Collect()
    result = fsm_agent.Session(backoff=INSTANT).stream(leaks.client(), params(), **got.callbacks())
    assert got.texts == ["Hello", ", world", "!"]
    assert result.content == "Hello, world!"
    leaks.assert_clean()


def test_cb3_on_tool_call_fires_once_when_named_while_arguments_stream(leaks: LeakCheck) -> None:
    leaks.emulator.script(
        Scenario(
            steps=(Text("Before. "), WRITE, Text("After."), ToolCall("second", '{"b": 2}', arg_fragment=2))
        )
    )
    order: list[str] = []
    result = fsm_agent.Session(backoff=INSTANT).stream(
        leaks.client(),
        params(),
        on_tool_call=lambda index, name: order.append(f"tool {index} {name}"),
        on_text=lambda text: order.append("text"),
        on_activity=lambda kind: order.append("activity"),
    )
    tools = [entry for entry in order if entry.startswith("tool")]
    assert tools == ["tool 0 write_file", "tool 1 second"]
    # many argument frames still arrived after the call was announced
    after_first = order[order.index("tool 0 write_file") + 1 :]
    assert after_first.count("activity") > len(WRITE.arguments) // 4
    assert result.content == "Before. After."  # text after a tool call is delivered and kept
    assert "text" in after_first
    leaks.assert_clean()


# -- CB-4 / CB-5: liveness and status callbacks --------------------------------------------------------


def test_cb4_on_activity_fires_on_every_provider_event(leaks: LeakCheck) -> None:
    frames = text_frames("a", "b", "c", "d")  # 6 JSON chunks and [DONE]
    interleaved: list[bytes] = []
    for frame in frames:
        interleaved += [b": keepalive\n\n", b"data:\n\n", frame]
    leaks.emulator.script(Scenario(raw=tuple(interleaved)))
    got = Collect()
    result = fsm_agent.Session().stream(leaks.client(), params(), **got.callbacks(activity=True))
    assert result.content == "abcd"
    assert 6 <= len(got.activity) <= 7  # every chunk ([DONE] may count); comments and bare data never
    assert all(isinstance(kind, str) for kind in got.activity)
    leaks.assert_clean()


def test_cb4_on_activity_raising_is_swallowed(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("Hello there.", tool_calls=[WRITE]))
    calls: list[str] = []

    def broken(kind: str) -> None:
        calls.append(kind)
        raise RuntimeError("monitor is broken")

    got = Collect()
    result = fsm_agent.Session().stream(leaks.client(), params(), on_activity=broken, **got.callbacks())
    assert len(calls) > 5
    assert result.content == "Hello there." and result.tool_calls[0].arguments == WRITE.arguments
    assert result.attempts == 1 and got.statuses == []
    leaks.assert_clean()


def test_cb5_on_status_silent_on_plain_success(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("Answer.", reasoning="Thinking.", tool_calls=[WRITE]))
    got = Collect()
    result = fsm_agent.Session().stream(leaks.client(), params(), **got.callbacks(activity=True))
    assert result.attempts == 1 and got.statuses == []
    leaks.assert_clean()


def test_cb5_on_status_raising_does_not_stop_a_retry(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("x", faults=[DropAfter(1)]), Scenario.build("Recovered."))
    notices: list[str] = []

    def broken(message: str) -> None:
        notices.append(message)
        raise RuntimeError("status bar is broken")

    result = fsm_agent.Session(backoff=INSTANT).stream(leaks.client(), params(), on_status=broken)
    assert result.content == "Recovered." and result.attempts == 2
    assert notices and "retrying" in notices[0]
    leaks.assert_clean()


# -- CB-6: a content callback that raises ends the request ---------------------------------------------


class Boom(Exception):
    pass


@pytest.mark.parametrize("callback", ["on_text", "on_reasoning", "on_tool_call"])
def test_cb6_content_callback_raising_ends_the_request(
    leaks: LeakCheck, spy: AttemptSpy, callback: str
) -> None:
    leaks.emulator.script(Scenario.build("Some answer text.", reasoning="Some thoughts.", tool_calls=[WRITE]))
    error = Boom("caller's bug")
    seen: list[Any] = []

    def raising(*args: Any) -> None:
        seen.append(args)
        raise error

    statuses: list[str] = []
    with pytest.raises(Boom) as caught:
        fsm_agent.Session().stream(leaks.client(), params(), on_status=statuses.append, **{callback: raising})
    assert caught.value is error
    assert len(seen) == 1  # nothing more delivered after it raised
    assert len(leaks.emulator.requests) == 1  # never retried
    assert not any("retrying" in s for s in statuses)
    spy.assert_each_closed_once(1)
    leaks.assert_clean()


@pytest.mark.parametrize("library_text", ["reconnecting", "Stream stalled mid tool-call"])
def test_cb6_raising_on_the_library_text(leaks: LeakCheck, spy: AttemptSpy, library_text: str) -> None:
    cut = Scenario.build("Writing.", tool_calls=[WRITE], faults=[DropMidFrame(2, kind="tool_args")])
    leaks.emulator.script(cut, Scenario.build("Writing.", tool_calls=[WRITE]))
    error = Boom("display cannot show it")
    retries = 1 if library_text == "reconnecting" else 0

    def on_text(text: str) -> None:
        if library_text in text:
            raise error

    statuses: list[str] = []
    try:
        with pytest.raises(Boom) as caught:
            fsm_agent.Session(backoff=INSTANT, retries=retries).stream(
                leaks.client(), params(), on_text=on_text, on_status=statuses.append
            )
    finally:
        leaks.clients[0].close()  # let the emulator go idle even when the machine failed
    assert caught.value is error
    assert len(leaks.emulator.requests) == 1
    assert not any("retrying" in s for s in statuses)
    spy.assert_each_closed_once(1)
    leaks.assert_clean()


def test_cb6_raising_during_fallback_delivery(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("Plain.", faults=[KeepaliveOnly(2)]))
    error = Boom("no")

    def on_text(text: str) -> None:
        raise error

    with pytest.raises(Boom) as caught:
        fsm_agent.Session(backoff=INSTANT).stream(leaks.client(), params(), on_text=on_text)
    assert caught.value is error
    leaks.assert_clean()


# -- client factories and the caller's own client ------------------------------------------------------


def test_factory_gives_each_attempt_its_own_client_and_closes_it(leaks: LeakCheck) -> None:
    leaks.emulator.script(
        Scenario.build("x", faults=[DropAfter(1)]),
        Scenario.build("x", faults=[DropAfter(1)]),
        Scenario.build("Ok."),
    )
    made: list[openai.OpenAI] = []

    def factory() -> openai.OpenAI:
        made.append(make_client(leaks.emulator))
        return made[-1]

    result = fsm_agent.Session(backoff=INSTANT).stream(factory, params())
    assert result.content == "Ok." and result.attempts == 3
    assert len(made) == 3 and len({id(c) for c in made}) == 3
    assert all(client.is_closed() for client in made)
    leaks.assert_clean()  # no caller's client: every connection must already be gone


@pytest.mark.parametrize("outcome", ["error", "fallback", "stub"])
def test_factory_clients_closed_whatever_the_outcome(leaks: LeakCheck, outcome: str) -> None:
    leaks.emulator.script(
        {
            "error": Scenario.build("x", faults=[DropAfter(1)]),
            "fallback": Scenario.build("Plain.", faults=[KeepaliveOnly(2)]),
            "stub": Scenario.build("Some words then a drop here.", faults=[DropAfter(2, kind="text")]),
        }[outcome]
    )
    made: list[openai.OpenAI] = []

    def factory() -> openai.OpenAI:
        made.append(make_client(leaks.emulator))
        return made[-1]

    session = fsm_agent.Session(backoff=INSTANT, retries=1)
    if outcome == "error":
        with pytest.raises(Exception, match=r"peer closed|incomplete"):
            session.stream(factory, params())
    else:
        session.stream(factory, params())
    assert made and all(client.is_closed() for client in made)
    leaks.assert_clean()


def test_direct_client_is_never_closed(leaks: LeakCheck) -> None:
    leaks.emulator.script(
        Scenario.build("x", faults=[DropAfter(1)]),
        Scenario.build("Fine."),
        Scenario.build("x", faults=[DropAfter(1)]),
    )
    client = leaks.client()
    session = fsm_agent.Session(backoff=INSTANT, retries=1)
    assert session.stream(client, params()).content == "Fine."
    assert not client.is_closed()
    with pytest.raises(Exception, match=r"peer closed|incomplete"):
        session.stream(client, params())
    assert not client.is_closed()
    leaks.emulator.script(Scenario.build("Still open."))
    assert client.chat.completions.create(model="m", messages=[]).choices[0].message.content == "Still open."
    leaks.assert_clean()


def test_callers_params_never_mutated(leaks: LeakCheck) -> None:
    caller = params(
        tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        stream_options={"include_usage": False, "extra": 1},
        temperature=0.2,
    )
    snapshot = copy.deepcopy(caller)
    leaks.emulator.script(
        Scenario.build("x", faults=[RejectStreamOptions(400)]),
        Scenario.build("x", faults=[DropAfter(1)]),
        Scenario.build("Ok."),
    )
    session = fsm_agent.Session(backoff=INSTANT)
    client = leaks.client()
    assert session.stream(client, caller).content == "Ok."
    leaks.emulator.script(Scenario.build("Plain.", faults=[KeepaliveOnly(1)]))
    assert session.stream(client, caller).content == "Plain."
    assert caller == snapshot
    sent = leaks.emulator.requests[0].body
    assert sent["stream_options"] == {"include_usage": True, "extra": 1}
    assert sent["tools"] == snapshot["tools"] and sent["temperature"] == 0.2
    leaks.assert_clean()


# -- SEC-1: chunks of the wrong shape ------------------------------------------------------------------

BAD_FRAMES = {
    "content-number": (sse(chunk({"content": 42})), "content"),
    "tool-calls-string": (sse(chunk({"tool_calls": "get_weather"})), "tool_calls"),
    "tool-call-not-object": (sse(chunk({"tool_calls": ["x"]})), "tool call"),
    "tool-index-string": (sse(chunk({"tool_calls": [{"index": "0", "function": {"name": "f"}}]})), "index"),
    "function-string": (sse(chunk({"tool_calls": [{"index": 0, "function": "f"}]})), "function"),
    "choices-string": (sse({"id": "x", "choices": "nope"}), "choices"),
    "delta-list": (sse({"id": "x", "choices": [{"index": 0, "delta": ["hi"]}]}), "delta"),
    "finish-number": (
        sse({"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": 1}]}),
        "finish_reason",
    ),
    "refusal-number": (sse(chunk({"refusal": 7})), "refusal"),
    "reasoning-number": (sse(chunk({"reasoning_content": 7})), "reasoning"),
    "chunk-array": (b"data: [1, 2]\n\n", "JSON object"),
    "chunk-string": (b'data: "hello"\n\n', "JSON object"),
    "non-utf8": (b'data: {"choices": [{"index": 0, "delta": {"content": "\xff\xfe"}}]}\n\n', "utf-8"),
}


@pytest.mark.parametrize("case", sorted(BAD_FRAMES))
def test_sec1_wrong_shapes_give_a_clear_error(leaks: LeakCheck, spy: AttemptSpy, case: str) -> None:
    bad, named = BAD_FRAMES[case]
    good = text_frames("Some ", "text")
    leaks.emulator.script(Scenario(raw=(good[0], good[1], bad, *good[2:])), Scenario.build("Next one works."))
    session = fsm_agent.Session(backoff=INSTANT)
    client = leaks.client()
    got = Collect()
    with pytest.raises(fsm_agent.FsmAgentError) as caught:
        session.stream(client, params(), **got.callbacks())
    assert named.lower() in str(caught.value).lower(), str(caught.value)
    assert len(leaks.emulator.requests) == 1
    assert got.statuses == []
    spy.assert_each_closed_once(1)
    # the session (and the client) stay usable
    assert (session.streaming_disabled, session.stream_options_unsupported, session.stale_streak) == (
        False,
        False,
        0,
    )
    assert session.stream(client, params()).content == "Next one works."
    leaks.assert_clean()


# -- SEC-2: the per-request byte cap -------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["text", "tool-arguments", "one-huge-frame"])
def test_sec2_byte_cap(leaks: LeakCheck, spy: AttemptSpy, shape: str) -> None:
    big = "x" * 20_000
    scenario = {
        "text": Scenario.build(big, chunk_size=100),
        "tool-arguments": Scenario.build(
            "Writing.", tool_calls=[ToolCall("w", f'{{"t": "{big}"}}', arg_fragment=200)]
        ),
        "one-huge-frame": Scenario(raw=(sse(chunk({"content": big})), DONE)),
    }[shape]
    leaks.emulator.script(scenario, Scenario.build("Small answer."))
    session = fsm_agent.Session(backoff=INSTANT, max_bytes=4096)
    client = leaks.client()
    with pytest.raises(fsm_agent.FsmAgentError) as caught:
        session.stream(client, params())
    assert isinstance(caught.value, fsm_agent.StreamLimitError)
    assert "4096" in str(caught.value)
    assert len(leaks.emulator.requests) == 1
    spy.assert_each_closed_once(1)
    assert session.stream(client, params()).content == "Small answer."
    leaks.assert_clean()


def test_sec2_cap_is_per_request_not_per_session(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("y" * 1500, chunk_size=100))
    session = fsm_agent.Session(backoff=INSTANT, max_bytes=8192)
    client = leaks.client()
    for _ in range(4):  # 4 x ~3.5 KB through one session
        assert session.stream(client, params()).content == "y" * 1500
    leaks.assert_clean()


# -- FSM-5: every transition is one structlog record ---------------------------------------------------


def test_fsm5_every_transition_logged_with_its_fields(leaks: LeakCheck) -> None:
    cut = Scenario.build("Writing.", tool_calls=[WRITE], faults=[DropMidFrame(2, kind="tool_args")])
    leaks.emulator.script(cut, Scenario.build("Writing.", tool_calls=[WRITE]))
    with structlog.testing.capture_logs() as logs:
        result = fsm_agent.Session(backoff=INSTANT).stream(leaks.client(), params())
    transitions = [entry for entry in logs if entry.get("event") == "transition"]
    assert len(transitions) == len(result.records) >= 8
    for entry, record in zip(transitions, result.records, strict=True):
        for name in FSM5_FIELDS:
            assert name in entry, f"{name} missing from {entry}"
            assert entry[name] == getattr(record, name)
        assert isinstance(entry["guards"], dict)
    assert len({entry["request_id"] for entry in transitions}) == 1
    assert [entry["seq"] for entry in transitions] == list(range(len(transitions)))
    assert [entry["t"] for entry in transitions] == sorted(entry["t"] for entry in transitions)
    path = [(entry["source"], entry["dest"]) for entry in transitions]
    assert ("streaming_tool", "retrying") in path and path[-1][1] == "done"
    assert {entry["attempt"] for entry in transitions} == {0, 1, 2}  # 0: idle → connecting
    retry = next(entry for entry in transitions if entry["dest"] == "retrying")
    assert retry["guards"].get("tool_in_flight") is True and retry["tools_in_flight"] == 1
    assert retry["visible_chars"] == len("Writing.")
    leaks.assert_clean()


def test_fsm5_token_deltas_are_counted_not_logged(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("z" * 300, chunk_size=1, chat=ChatShape(sparse=True)))
    with structlog.testing.capture_logs() as logs:
        result = fsm_agent.Session(backoff=INSTANT).stream(leaks.client(), params())
    assert result.content == "z" * 300
    transitions = [entry for entry in logs if entry.get("event") == "transition"]
    assert len(transitions) == len(result.records) <= 5
    assert transitions[-1]["visible_chars"] == 300
    leaks.assert_clean()


def test_keepalives_between_every_frame_do_not_disturb_a_stream(leaks: LeakCheck) -> None:
    faults = [Keepalives("comment"), Keepalives("data"), Keepalives("event")]
    leaks.emulator.script(Scenario.build("Steady text.", tool_calls=[WRITE], faults=faults))
    got = Collect()
    result = fsm_agent.Session(backoff=INSTANT).stream(leaks.client(), params(), **got.callbacks())
    assert result.content == "Steady text." and result.tool_calls[0].arguments == WRITE.arguments
    assert got.statuses == []
    leaks.assert_clean()


def test_concurrent_requests_share_a_session_and_a_client(leaks: LeakCheck) -> None:
    import threading

    leaks.emulator.script(Scenario.build("Shared answer with several words.", tool_calls=[WRITE]))
    session = fsm_agent.Session(backoff=INSTANT)
    client = leaks.client()
    results: dict[str, Any] = {}

    def worker(n: int) -> None:
        for k in range(3):
            model = f"model-{n}-{k}"
            results[model] = session.stream(client, params(model))

    threads = [threading.Thread(target=worker, args=(n,), name=f"test-worker-{n}") for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(results) == 12
    for model, result in results.items():
        assert result.model == model
        assert result.content == "Shared answer with several words."
        assert [c.arguments for c in result.tool_calls] == [WRITE.arguments]
    assert len({r.records[0].request_id for r in results.values()}) == 12
    leaks.assert_clean()


def test_a_timeout_in_the_params_is_honoured_not_an_error(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("Hi there."))
    request = {**params(), "timeout": 30}
    result = fsm_agent.Session(backoff=INSTANT).stream(leaks.client(), request)
    assert result.content == "Hi there." and request["timeout"] == 30
    leaks.assert_clean()
