"""The recovery ladder (RC-1..RC-6, RC-10, RC-11) over the provider x driver matrix, through the
real SDK clients on the emulator over loopback HTTP.

Every rescue path is held to one invariant (RC-11): the text delivered through on_text, with the
library's own markers removed and counted from the last reset notice, equals `result.content`;
no span is delivered twice unless a reset came first; every stream is closed exactly once and
nothing is left open. The fault matrix cuts a short answer after every frame, on every API, under
each ladder setting, and checks the invariant and the outcome each time.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from helpers import INSTANT, Collect
from lanes import APIS, Lane, lane, lane_params
from test_async_support import _as_coroutine

import fsm_agent
from fsm_agent._internal.effects import RECONNECT_MARKER
from fsm_agent._internal.recovery import RESTART_MARKER
from fsm_agent.testing import DropAfter, ExpireResume, RefusePrefill, Scenario, Stall
from fsm_agent.testing.frames import RequestContext
from fsm_agent.testing.handler import make_wires

__all__ = ["lane"]

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

WHOLE = "One two three four five six seven eight nine ten eleven twelve."
# Where the emulator's word chunks end: the text a cut after the n-th text frame has shown.
SHOWN_AFTER_2 = "One two three four five six "
PREFILL_APIS = ("chat", "anthropic", "bedrock")  # RC-3: the lanes whose endpoint takes a prefill


def lanes(*args: Any, **kwargs: Any) -> Any:
    return pytest.mark.parametrize("lane", lane_params(*args, **kwargs), indirect=True)


class Watch(Collect):
    """Collect, plus on_reset calls in the merged order."""

    def __init__(self, *, resets: bool = False) -> None:
        super().__init__()
        self.resets: list[str] = []
        self.with_reset = resets
        self.coroutines = False

    def on_reset(self, shown: str) -> None:
        self.resets.append(shown)
        self.order.append(("reset", shown))

    def callbacks(self, *, activity: bool = False) -> dict[str, Any]:
        out = super().callbacks(activity=activity)
        if self.with_reset:
            out["on_reset"] = self.on_reset
        if self.coroutines:  # every callback a coroutine function (awaited by astream())
            out = {name: _as_coroutine(fn) for name, fn in out.items()}
        return out

    def segments(self) -> list[str]:
        """The text on_text got, split at each reset (an on_reset call or the restart marker),
        with the library's other markers removed."""
        parts = [""]
        for kind, value in self.order:
            if kind == "reset" or (kind == "text" and value == RESTART_MARKER):
                parts.append("")
            elif kind == "text" and value != RECONNECT_MARKER:
                parts[-1] += value
        return parts


def assert_invariant(got: Watch, result: Any) -> None:
    """RC-11: what the user was last shown is the result, with nothing repeated in it."""
    last = got.segments()[-1]
    if result.stub:
        assert last.strip() == result.content
    else:
        assert last == result.content


def chat_params() -> dict[str, Any]:
    """Chat Completions at a DeepSeek-style host: its `prefix` flag takes a prefill (RC-3)."""
    return {"model": "deepseek-chat", "messages": [{"role": "user", "content": "hi"}]}


def background_params() -> dict[str, Any]:
    """Responses in background mode: the response is stored, and a lost stream can be read on (RC-2)."""
    return {"model": "gpt-5-mini", "input": "hi", "background": True}


def stream(lane: Lane, session: fsm_agent.Session, got: Watch, **kwargs: Any) -> Any:
    got.coroutines = lane.coroutine_callbacks
    if lane.api == "chat":
        kwargs.setdefault("params", chat_params())
    return lane.stream(session, got, **kwargs)


def cut(index: int = 2, *, also: tuple[Any, ...] = (), **options: Any) -> Scenario:
    return Scenario.build(WHOLE, faults=[DropAfter(index, kind="text"), *also], **options)


# -- RC-4: restart, announced first -------------------------------------------------------------------


# Every API on stream(); the async driver (plain and coroutine callbacks) on two of them: the
# ladder's rows are the same for both drivers, only the delivery of the reset differs.
SYNC_ALL_ASYNC_SOME = lane_params(APIS, ("sync",)) + lane_params(
    ("anthropic", "bedrock"), ("async",), coroutine_callbacks=True
)


@pytest.mark.parametrize("lane", SYNC_ALL_ASYNC_SOME, indirect=True)
def test_rc4_restart_with_marker_gives_the_whole_answer(lane: Lane) -> None:
    lane.emulator.script(cut(), then=Scenario.build(WHOLE))
    session = fsm_agent.Session(backoff=INSTANT, recovery=fsm_agent.Recovery(restart=True))
    got = Watch()
    result = stream(lane, session, got)
    assert (result.content, result.stub, result.incomplete, result.attempts) == (WHOLE, False, False, 2)
    assert got.texts.count(RESTART_MARKER) == 1
    assert got.segments() == [SHOWN_AFTER_2, WHOLE]
    assert any("restarting" in status for status in got.statuses)
    assert_invariant(got, result)
    # RC-10: the lost attempt's cost, apart from the answer's own usage
    assert len(result.attempt_usage) == 1 and result.usage is not None and not result.usage.estimated
    lost = result.attempt_usage[0]
    assert (
        lost.estimated and lost.output_tokens == (len(SHOWN_AFTER_2) + 3) // 4 and lost.input_tokens is None
    )
    lane.assert_closed_once(2)
    lane.assert_clean()


@lanes(("chat", "anthropic", "gemini"), coroutine_callbacks=True)
def test_rc4_restart_calls_on_reset_instead_of_a_marker(lane: Lane) -> None:
    lane.emulator.script(cut(), then=Scenario.build(WHOLE))
    session = fsm_agent.Session(backoff=INSTANT, recovery=fsm_agent.Recovery(restart=True))
    got = Watch(resets=True)
    result = stream(lane, session, got)
    assert result.content == WHOLE and got.resets == [SHOWN_AFTER_2]
    assert RESTART_MARKER not in got.texts
    # the reset came before the new answer's first byte
    reset_at = got.order.index(("reset", SHOWN_AFTER_2))
    assert "".join(v for k, v in got.order[reset_at:] if k == "text") == WHOLE
    lane.assert_closed_once(2)
    lane.assert_clean()


@lanes(APIS, ("sync",))
def test_rc4_restart_on_the_next_route_when_this_one_is_spent(lane: Lane) -> None:
    lane.emulator.script(cut(), then=Scenario.build(WHOLE))
    session = fsm_agent.Session(retries=0, backoff=INSTANT, recovery=fsm_agent.Recovery(restart=True))
    params = chat_params() if lane.api == "chat" else lane.params()
    api = "responses" if lane.api == "responses" else None
    routes = [
        fsm_agent.Route(lane.client(), params, api, "first"),
        fsm_agent.Route(lane.client(), params, api, "second"),
    ]
    got = Watch()
    result = session.stream(routes, **got.callbacks())
    assert (result.content, result.route, result.stub) == (WHOLE, "second", False)
    assert got.segments() == [SHOWN_AFTER_2, WHOLE]
    lane.assert_closed_once(2)
    lane.assert_clean()


# -- RC-5 / RC-6: the final step ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lane", lane_params(APIS, ("sync",)) + lane_params(("chat", "anthropic"), ("async",)), indirect=True
)
def test_rc5_final_raise_carries_the_shown_text_and_the_stub(lane: Lane) -> None:
    lane.emulator.script(cut(), then=Scenario.build("never"))
    session = fsm_agent.Session(backoff=INSTANT, recovery=fsm_agent.Recovery(final="raise"))
    got = Watch()
    with pytest.raises(fsm_agent.IncompleteStreamError) as caught:
        stream(lane, session, got)
    error = caught.value
    # also of the SDK's connection-error family, so a handler of a dropped stream still catches it
    family = {"chat": openai.APIConnectionError, "responses": openai.APIConnectionError}
    family["anthropic"] = anthropic.APIConnectionError
    if lane.api in family:
        assert isinstance(error, family[lane.api])
    assert error.partial == SHOWN_AFTER_2.strip() == error.result.content
    assert error.result.incomplete and error.result.stub_reason == "cut" and error.result.attempts == 1
    assert error.__cause__ is not None
    assert "".join(got.texts) == SHOWN_AFTER_2
    assert len(lane.emulator.requests) == 1
    lane.assert_closed_once(1)
    lane.assert_clean()


@lanes(APIS, ("sync",))
def test_rc6_default_stub_is_marked_incomplete_with_an_estimated_usage(lane: Lane) -> None:
    lane.emulator.script(cut(usage=None))
    got = Watch()
    result = stream(lane, fsm_agent.Session(backoff=INSTANT), got)
    assert (result.stub, result.incomplete, result.stub_reason, result.finish_reason) == (
        True,
        True,
        "cut",
        "length",
    )
    assert result.content == SHOWN_AFTER_2.strip() and result.attempts == 1
    assert result.usage is not None and result.usage.estimated
    assert result.usage.output_tokens == (len(SHOWN_AFTER_2) + 3) // 4  # RC-10: ~4 chars a token
    assert_invariant(got, result)
    lane.assert_closed_once(1)
    lane.assert_clean()


@lanes(("chat",), ("sync",))
def test_rc6_a_stall_after_text_is_named_stalled(lane: Lane) -> None:
    lane.emulator.script(Scenario.build(WHOLE, faults=[Stall(2, seconds=10, kind="text")]))
    result = stream(lane, fsm_agent.Session(backoff=INSTANT, stale_timeout=0.2), Watch())
    assert (result.incomplete, result.stub_reason) == (True, "stalled")
    lane.assert_clean()


# -- RC-3: continue, seamlessly --------------------------------------------------------------------------


def _prefill_of(request: Any) -> Any:
    return request.body["messages"][-1]


@pytest.mark.parametrize(
    "lane",
    lane_params(PREFILL_APIS, ("sync",)) + lane_params(("anthropic",), ("async",), coroutine_callbacks=True),
    indirect=True,
)
def test_rc3_continue_delivers_the_rest_without_repeating_the_seam(lane: Lane) -> None:
    # the endpoint sends back the prefill's last six characters before the rest: dropped at the seam
    lane.emulator.script(cut(), then=Scenario.build(WHOLE, continues=True, seam_overlap=6))
    session = fsm_agent.Session(backoff=INSTANT, recovery=fsm_agent.Recovery(continue_=True, restart=True))
    got = Watch()
    result = stream(lane, session, got)
    assert (result.content, result.stub, result.attempts) == (WHOLE, False, 2)
    assert "".join(got.texts) == WHOLE  # no marker, no repeat
    assert got.segments() == [WHOLE]
    last = _prefill_of(lane.emulator.requests[1])
    assert last["role"] == "assistant"
    if lane.api == "chat":
        assert last["prefix"] is True and last["content"] == SHOWN_AFTER_2.rstrip()
    elif lane.api == "bedrock":
        assert last["content"] == [{"text": SHOWN_AFTER_2.rstrip()}]
    else:
        assert last["content"] == SHOWN_AFTER_2.rstrip()
    lane.assert_closed_once(2)
    lane.assert_clean()


@lanes(PREFILL_APIS, ("sync",))
def test_rc3_a_refused_prefill_moves_on_to_restart(lane: Lane) -> None:
    refusing = Scenario.build(WHOLE, continues=True, faults=[RefusePrefill()])
    lane.emulator.script(cut(), refusing, then=Scenario.build(WHOLE))
    session = fsm_agent.Session(backoff=INSTANT, recovery=fsm_agent.Recovery(continue_=True, restart=True))
    got = Watch()
    result = stream(lane, session, got)
    assert (result.content, result.attempts) == (WHOLE, 3)
    assert got.segments() == [SHOWN_AFTER_2, WHOLE]
    assert len(lane.emulator.requests) == 3
    lane.assert_closed_once(2)  # the refused request never opened a stream
    lane.assert_clean()


@lanes(PREFILL_APIS, ("sync",))
def test_rc3_a_refused_prefill_never_masks_the_error_that_lost_the_text(lane: Lane) -> None:
    lane.emulator.script(cut(), then=Scenario.build(WHOLE, continues=True, faults=[RefusePrefill()]))
    session = fsm_agent.Session(backoff=INSTANT, recovery=fsm_agent.Recovery(continue_=True))
    got = Watch()
    result = stream(lane, session, got)
    assert (result.stub, result.stub_reason, result.content) == (True, "cut", SHOWN_AFTER_2.strip())
    assert result.error is not None and "400" not in str(result.error.get("message"))
    assert "".join(got.texts) == SHOWN_AFTER_2
    lane.assert_closed_once(1)  # the refused request never opened a stream
    lane.assert_clean()


@lanes(("responses", "gemini"), ("sync",))
def test_rc3_no_prefill_where_the_endpoint_takes_none(lane: Lane) -> None:
    lane.emulator.script(cut(), then=Scenario.build(WHOLE))
    session = fsm_agent.Session(backoff=INSTANT, recovery=fsm_agent.Recovery(continue_=True))
    result = stream(lane, session, Watch())
    assert result.stub and len(lane.emulator.requests) == 1  # no continuation, and no restart asked for
    lane.assert_clean()


def test_rc3_never_a_prefill_to_openai_itself() -> None:
    from fsm_agent._internal.prefill import accepts_prefill

    params = chat_params()
    assert not accepts_prefill("chat_completions", params, "https://api.openai.com/v1")
    assert not accepts_prefill("chat_completions", {**params, "model": "gpt-4.1"}, "http://127.0.0.1/v1")
    assert accepts_prefill("chat_completions", params, "https://api.deepseek.com")
    assert accepts_prefill(
        "bedrock_converse", {"modelId": "us.anthropic.claude-sonnet-4-5-v1:0", "messages": []}, ""
    )
    assert not accepts_prefill("bedrock_converse", {"modelId": "amazon.nova-pro-v1:0", "messages": []}, "")


# -- the fault matrix: a cut after every frame x every API x each ladder setting ------------------------

LADDERS = {
    "default": fsm_agent.Recovery(),
    "restart": fsm_agent.Recovery(restart=True),
    "everything": fsm_agent.Recovery(resume=True, continue_=True, restart=True),
    "resume-continue-raise": fsm_agent.Recovery(resume=True, continue_=True, final="raise"),
}
SHORT = "Alpha beta gamma delta epsilon zeta eta theta."  # three text frames


def _frame_count(api: str, scenario: Scenario, params: dict[str, Any]) -> int:
    wire = make_wires()[
        {
            "chat": "chat_completions",
            "responses": "responses",
            "anthropic": "anthropic_messages",
            "bedrock": "bedrock_converse",
            "gemini": "gemini_generate_content",
        }[api]
    ]
    return len(wire.stream_frames(scenario, RequestContext(wire.api, "/", params, 1, 0, True, "m")))


@pytest.mark.parametrize("ladder", list(LADDERS))
@lanes(APIS, ("sync",))
def test_fault_matrix_a_cut_after_every_frame(lane: Lane, ladder: str) -> None:
    recovery = LADDERS[ladder]
    params = {"chat": chat_params(), "responses": background_params()}.get(lane.api) or lane.params()
    frames = _frame_count(lane.api, Scenario.build(SHORT), params)
    opened = 0
    for index in range(frames):
        lane.emulator.script(
            Scenario.build(SHORT, faults=[DropAfter(index)]), then=Scenario.build(SHORT, continues=True)
        )
        session = fsm_agent.Session(backoff=INSTANT, retries=1, recovery=recovery)
        got = Watch()
        try:
            result = stream(lane, session, got, params=params)
        except fsm_agent.IncompleteStreamError as caught:
            assert recovery.final == "raise" and lane.api == "gemini", (index, caught)
            result = caught.result
        opened += result.attempts
        assert_invariant(got, result)
        could_serve = (
            recovery.restart
            or (recovery.continue_ and lane.api in PREFILL_APIS)
            or (recovery.resume and lane.api == "responses")
        )
        if could_serve or not result.stub:
            assert (result.content, result.incomplete) == (SHORT, False), (index, result)
        else:
            assert result.incomplete and SHORT.startswith(result.content or ""), (index, result)
    lane.assert_closed_once(opened)
    lane.assert_clean()


@lanes(("anthropic",), ("sync",))
def test_a_rescued_request_replays_as_recorded(lane: Lane, tmp_path: Any) -> None:
    lane.emulator.script(
        cut(), Scenario.build(WHOLE, continues=True, faults=[RefusePrefill()]), then=Scenario.build(WHOLE)
    )
    path = tmp_path / "trace.jsonl"
    session = fsm_agent.Session(
        backoff=INSTANT, trace=str(path), recovery=fsm_agent.Recovery(continue_=True, restart=True)
    )
    result = stream(lane, session, Watch())
    assert result.content == WHOLE
    session.trace.close()
    report = fsm_agent.replay(str(path))
    assert report.matched, report.first_mismatch
    lane.assert_clean()


@lanes(("anthropic",), ("sync",))
def test_rc3_a_refused_prefill_is_learned_for_the_endpoint(lane: Lane) -> None:
    session = fsm_agent.Session(backoff=INSTANT, recovery=fsm_agent.Recovery(continue_=True, restart=True))
    lane.emulator.script(cut(), Scenario.build(WHOLE, faults=[RefusePrefill()]), then=Scenario.build(WHOLE))
    assert stream(lane, session, Watch()).content == WHOLE
    lane.emulator.script(cut(), then=Scenario.build(WHOLE))
    got = Watch()
    assert stream(lane, session, got).content == WHOLE
    later = lane.emulator.requests[3:]
    assert len(later) == 2 and _prefill_of(later[1])["role"] == "user"  # restarted, not asked to continue
    assert got.segments() == [SHOWN_AFTER_2, WHOLE]
    lane.assert_clean()


# -- RC-2: resume a background Responses stream -----------------------------------------------------


@lanes(("responses",), coroutine_callbacks=True)
def test_rc2_resume_reads_on_from_the_last_event(lane: Lane) -> None:
    lane.emulator.script(cut(), then=Scenario.build("never"))
    session = fsm_agent.Session(backoff=INSTANT, recovery=fsm_agent.Recovery(resume=True))
    got = Watch()
    result = stream(lane, session, got, params=background_params())
    assert (result.content, result.stub, result.attempts) == (WHOLE, False, 2)
    assert "".join(got.texts) == WHOLE and got.segments() == [WHOLE]  # nothing repeated, no marker
    post, get = lane.emulator.requests
    assert post.method == "POST" and post.body["background"] is True
    assert get.method == "GET" and "stream=true" in get.path and "starting_after=" in get.path
    assert result.id == post.scenario.id or result.id.startswith("resp_emu")
    assert any("resuming" in status for status in got.statuses)
    lane.assert_closed_once(2)
    lane.assert_clean()


@lanes(("responses",), ("sync",))
def test_rc2_an_expired_cursor_moves_on_to_restart(lane: Lane) -> None:
    lane.emulator.script(cut(also=(ExpireResume(),)), then=Scenario.build(WHOLE))
    session = fsm_agent.Session(backoff=INSTANT, recovery=fsm_agent.Recovery(resume=True, restart=True))
    got = Watch()
    result = stream(lane, session, got, params=background_params())
    assert (result.content, result.attempts) == (WHOLE, 3)
    assert got.segments() == [SHOWN_AFTER_2, WHOLE]
    assert [r.method for r in lane.emulator.requests] == ["POST", "GET", "POST"]
    lane.assert_closed_once(2)  # the refused read opened no stream
    lane.assert_clean()


@lanes(("responses",), ("sync",))
def test_rc2_an_expired_cursor_without_restart_keeps_what_was_shown(lane: Lane) -> None:
    lane.emulator.script(cut(also=(ExpireResume(),)))
    session = fsm_agent.Session(backoff=INSTANT, recovery=fsm_agent.Recovery(resume=True))
    got = Watch()
    result = stream(lane, session, got, params=background_params())
    assert (result.stub, result.content, result.stub_reason) == (True, SHOWN_AFTER_2.strip(), "cut")
    assert result.error is not None and "expired" not in str(result.error.get("message"))
    assert_invariant(got, result)
    lane.assert_clean()


@lanes(("responses",), ("sync",))
def test_rc2_no_resume_without_background_mode(lane: Lane) -> None:
    lane.emulator.script(cut())
    session = fsm_agent.Session(backoff=INSTANT, recovery=fsm_agent.Recovery(resume=True))
    result = stream(lane, session, Watch())
    assert result.stub and len(lane.emulator.requests) == 1
    lane.assert_clean()


def _counting_factory(lane: Lane, made: list[Any], closes: list[Any]) -> Any:
    """A factory of fresh SDK clients for the lane's API whose every close is counted."""
    emu = lane.emulator

    def new_client() -> Any:
        if lane.driver == "async":
            cls: Any = anthropic.AsyncAnthropic if lane.api == "anthropic" else openai.AsyncOpenAI
        else:
            cls = anthropic.Anthropic if lane.api == "anthropic" else openai.OpenAI
        base = emu.anthropic_base_url if lane.api == "anthropic" else emu.openai_base_url
        client = cls(base_url=base, api_key="sk-test", max_retries=0)
        original = client.close

        def close() -> Any:
            closes.append(client)
            return original()

        client.close = close
        made.append(client)
        return client

    return new_client


@lanes(("chat", "anthropic"))
def test_every_factory_client_of_a_rescue_is_closed_once(lane: Lane) -> None:
    lane.emulator.script(
        cut(), Scenario.build(WHOLE, continues=True, faults=[RefusePrefill()]), then=Scenario.build(WHOLE)
    )
    made: list[Any] = []
    closes: list[Any] = []
    factory = _counting_factory(lane, made, closes)
    session = fsm_agent.Session(backoff=INSTANT, recovery=fsm_agent.Recovery(continue_=True, restart=True))
    got = Watch()
    params = chat_params() if lane.api == "chat" else lane.params()
    if lane.driver == "async":
        import asyncio

        result = asyncio.run(session.astream(factory, params, **got.callbacks()))
    else:
        result = session.stream(factory, params, **got.callbacks())
    assert result.content == WHOLE and result.attempts == 3
    assert len(made) >= 3 and sorted(map(id, closes)) == sorted(map(id, made))  # each exactly once
    assert_invariant(got, result)
    lane.assert_closed_once(2)
    lane.assert_clean()


@lanes(("chat", "anthropic"), ("sync",))
def test_rc6_a_dropped_tool_call_is_named_and_keeps_its_rules(lane: Lane) -> None:
    from fsm_agent.testing import ToolCall

    write = ToolCall("write_file", '{"path": "a.txt", "text": "hello"}', arg_fragment=5)
    lane.emulator.script(
        Scenario.build("Writing it.", tool_calls=[write], faults=[DropAfter(2, kind="tool_args")])
    )
    session = fsm_agent.Session(retries=0, backoff=INSTANT, recovery=fsm_agent.Recovery(restart=True))
    got = Watch()
    result = stream(lane, session, got)
    # a cut mid tool-call keeps RES-5 whatever the ladder: no restart over a half-built call
    assert (result.stub, result.incomplete, result.stub_reason) == (True, True, "tool_dropped")
    assert result.dropped_tool_names == ["write_file"] and len(lane.emulator.requests) == 1
    lane.assert_clean()
