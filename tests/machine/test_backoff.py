"""The wait policy and its inputs, without I/O (BO-1..BO-5): `Backoff`, the server's hint, full
jitter from the request's seed, BO-1's transient set, the machine's `waiting` rows, and the
per-endpoint health link (cooldown, the breaker's one probe)."""

from __future__ import annotations

import math
from email.utils import formatdate
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

import fsm_agent
from fsm_agent._internal import actions as act
from fsm_agent._internal.backoff import Backoff, backoff_draw, retry_hint, should_retry_header, wait_before
from fsm_agent._internal.context import RequestContext
from fsm_agent._internal.endpoint import EndpointLink, HealthSettings, base_url_of, endpoint_key
from fsm_agent._internal.errors import ErrorKind, ProviderStreamError, classify
from fsm_agent._internal.events import AttemptClosed, AttemptFailed, Interrupt, Start, WaitOver
from fsm_agent._internal.health import EndpointKey, HealthChange, MemoryHealth
from fsm_agent._internal.request import RequestMachine


# -- Backoff ------------------------------------------------------------------------------------------------
def test_backoff_defaults_and_validation() -> None:
    assert Backoff() == Backoff(base=0.5, cap=8.0, max_wait=None)
    # BO-3's default: 60 s while another route remains, 120 s (the bare openai SDK's) on the last
    assert (Backoff().switch_wait, Backoff().alone_wait) == (60.0, 120.0)
    assert (Backoff(max_wait=5).switch_wait, Backoff(max_wait=5).alone_wait) == (5, 5)
    assert fsm_agent.Backoff is Backoff
    for bad in (-1, math.inf, math.nan):
        with pytest.raises(ValueError, match="finite number >= 0"):
            Backoff(base=bad)
    with pytest.raises(TypeError):
        Backoff(cap="8")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Backoff(max_wait=True)
    with pytest.raises(AttributeError):
        Backoff().base = 1.0  # type: ignore[misc]


def test_ceiling_doubles_up_to_the_cap() -> None:
    backoff = Backoff(base=0.5, cap=8.0)
    assert [backoff.ceiling(n) for n in range(1, 8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert Backoff(base=0).ceiling(3) == 0.0
    assert backoff.ceiling(10_000) == 8.0  # no overflow


def test_full_jitter_is_uniform_below_the_ceiling_for_a_fixed_seed_set() -> None:
    """BO-2: uniform(0, min(cap, base*2**(n-1))). 20,000 seeds, fixed: the draws stay below the
    ceiling, their mean is half of it, and each tenth of the range holds a tenth of them."""
    backoff = Backoff(base=0.5, cap=8.0)
    for retry in (1, 3, 6):
        ceiling = backoff.ceiling(retry)
        waits = [wait_before(retry, None, None, backoff, seed)[0] for seed in range(20_000)]
        assert all(0.0 <= wait < ceiling for wait in waits)
        assert abs(sum(waits) / len(waits) - ceiling / 2) < ceiling * 0.01
        deciles = [0] * 10
        for wait in waits:
            deciles[int(wait / ceiling * 10)] += 1
        # chi-square with 9 degrees of freedom; 27.9 is its 0.999 quantile
        chi2 = sum((count - 2000) ** 2 / 2000 for count in deciles)
        assert chi2 < 27.9, deciles


def test_the_draw_depends_on_the_seed_and_the_retry_only() -> None:
    assert backoff_draw(7, 2) == backoff_draw(7, 2)
    assert backoff_draw(7, 2) != backoff_draw(7, 3) != backoff_draw(8, 2)
    # a what-if that changes base rescales the same draw (BO-5)
    small = wait_before(2, None, None, Backoff(base=0.1), seed=42)[0]
    large = wait_before(2, None, None, Backoff(base=1.0), seed=42)[0]
    assert large == pytest.approx(small * 10)


def test_a_hint_wins_over_back_off_even_at_base_zero() -> None:
    assert wait_before(1, 0.3, "retry-after", Backoff(base=0), seed=1) == (0.3, "retry-after")
    assert wait_before(2, 1.5, "retry-after-ms", Backoff(), seed=1) == (1.5, "retry-after-ms")
    assert wait_before(1, None, None, Backoff(base=0), seed=1) == (0.0, "backoff")


# -- the server's hint --------------------------------------------------------------------------------------
def _status_error(status: int, headers: dict[str, str]) -> Exception:
    request = httpx.Request("POST", "http://x/v1/chat/completions")
    response = httpx.Response(status, headers=headers, request=request)
    error = Exception("status error")
    error.response = response  # type: ignore[attr-defined]
    error.status_code = status  # type: ignore[attr-defined]
    return error


def _client_error(code: str, status: int, headers: dict[str, str]) -> Exception:
    """Shaped like botocore's ClientError (its `response` dict)."""
    error = Exception(code)
    error.response = {  # type: ignore[attr-defined]
        "Error": {"Code": code, "Message": "m"},
        "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": headers},
    }
    return error


NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "300"}, (0.3, "retry-after-ms")),
        ({"retry-after-ms": "250", "retry-after": "9"}, (0.25, "retry-after-ms")),  # ms first
        ({"retry-after": "2"}, (2.0, "retry-after")),
        ({"retry-after": " 0.5 "}, (0.5, "retry-after")),
        ({"Retry-After": formatdate(NOW + 3, usegmt=True)}, (3.0, "retry-after")),
        ({"retry-after": formatdate(NOW - 10, usegmt=True)}, (0.0, "retry-after")),  # in the past
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-1"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after-ms": "inf"}, None),
        ({"retry-after": "1" + "0" * 400}, None),  # BO-2: out of bounds is no hint, never OverflowError
        ({"retry-after-ms": "9" * 4000}, None),
        ({"retry-after": "31622401"}, None),  # a year and a day
        ({"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"}, None),
        ({}, None),
    ],
)
def test_retry_hint_forms(headers: dict[str, str], expected: tuple[float, str] | None) -> None:
    got = retry_hint(_status_error(429, headers), NOW)
    if expected is None:
        assert got is None
    else:
        assert got is not None and got[1] == expected[1] and got[0] == pytest.approx(expected[0])


def test_retry_hint_from_botocore_headers_and_from_nothing() -> None:
    error = _client_error("ThrottlingException", 429, {"retry-after": "1"})
    assert retry_hint(error, NOW) == (1.0, "retry-after")
    assert retry_hint(ValueError("no response"), NOW) is None
    weird = Exception()
    weird.response = SimpleNamespace(headers=object())  # type: ignore[attr-defined]
    assert retry_hint(weird, NOW) is None


# -- BO-1: the transient set --------------------------------------------------------------------------------
@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 529, 599])
def test_bo1_transient_statuses(status: int) -> None:
    assert classify(_status_error(status, {})) is ErrorKind.TRANSIENT


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_other_4xx_are_not_transient(status: int) -> None:
    assert classify(_status_error(status, {})) is ErrorKind.PERMANENT


def test_x_should_retry_overrides_the_status() -> None:
    assert should_retry_header(_status_error(503, {"x-should-retry": "false"})) is False
    assert classify(_status_error(503, {"x-should-retry": "false"})) is ErrorKind.PERMANENT
    assert classify(_status_error(400, {"x-should-retry": "true"})) is ErrorKind.TRANSIENT
    assert classify(_status_error(429, {"x-should-retry": "maybe"})) is ErrorKind.TRANSIENT


@pytest.mark.parametrize(
    "code",
    [
        "ThrottlingException",
        "ServiceUnavailableException",
        "ModelNotReadyException",
        "InternalServerException",
    ],
)
def test_bo1_bedrock_codes(code: str) -> None:
    assert classify(_client_error(code, 400, {})) is ErrorKind.TRANSIENT
    in_stream = ProviderStreamError("in the stream", code=code[0].lower() + code[1:])
    assert classify(in_stream) is ErrorKind.TRANSIENT


@pytest.mark.parametrize("code", ["overloaded_error", "rate_limit_error"])
def test_bo1_in_stream_error_events(code: str) -> None:
    assert classify(ProviderStreamError("event: error", code=code)) is ErrorKind.TRANSIENT


# -- the machine's waiting rows -----------------------------------------------------------------------------
def _machine(**settings: Any) -> RequestMachine:
    return RequestMachine(RequestContext(**settings), request_id="bo")


def _kinds(outputs: tuple[object, ...]) -> list[type]:
    return [type(item) for item in outputs]


def test_a_hinted_retry_waits_in_waiting_and_the_records_carry_the_wait() -> None:
    m = _machine(backoff_base=0.0)
    m.feed(Start(), 0.0)
    error = _status_error(429, {})
    out = m.feed(AttemptFailed(error, hint=0.3, hint_source="retry-after"), 0.1)
    assert act.Remember("cooldown", 0.3) in out  # BO-6: the endpoint cools down for everyone
    out = m.feed(AttemptClosed(), 0.1)
    assert _kinds(out) == [act.Status, act.Wait]
    status, wait = out
    assert wait == act.Wait(0.3, "retry-after")
    assert status.message == "waiting 0.3 s before attempt 2: HTTP 429, retry-after"  # type: ignore[attr-defined]
    assert m.state.value == "waiting"
    assert _kinds(m.feed(WaitOver(), 0.4)) == [act.OpenAttempt]
    waiting = [r for r in m.records if r.dest == "waiting"]
    assert waiting[0].inputs["wait_s"] == 0.3 and waiting[0].inputs["wait_source"] == "retry-after"
    assert waiting[0].guards == {"plain_request": False, "must_wait": True}  # (issue 27 first)


def test_back_off_zero_retries_at_once_and_the_options_retry_never_waits() -> None:
    m = _machine(backoff_base=0.0)
    m.feed(Start(), 0.0)
    m.feed(AttemptFailed(httpx.ReadError("x")), 0.1)
    assert _kinds(m.feed(AttemptClosed(), 0.1)) == [act.OpenAttempt]
    m = _machine(backoff_base=5.0)
    m.feed(Start(), 0.0)
    m.feed(AttemptFailed(_status_error(400, {}), kind=ErrorKind.STREAM_OPTIONS_REJECTED), 0.1)
    assert _kinds(m.feed(AttemptClosed(), 0.1)) == [act.OpenAttempt]


def test_a_hint_above_max_wait_fails_at_once_and_says_why() -> None:
    m = _machine(max_wait_setting=1.0)
    m.feed(Start(), 0.0)
    out = m.feed(AttemptFailed(_status_error(429, {}), hint=5.0, hint_source="retry-after"), 0.1)
    assert m.state.value == "failed"
    record = m.records[-1]
    assert record.guards["hint_too_long"] is True and record.inputs["hint_s"] == 5.0
    messages = [item.message for item in out if isinstance(item, act.Status)]
    assert messages == ["giving up: the server asked to wait 5.0 s (retry-after), more than max_wait=1 s"]


def test_an_interrupt_ends_a_wait() -> None:
    m = _machine()
    m.feed(Start(), 0.0)
    m.feed(AttemptFailed(httpx.ReadError("x")), 0.1)
    m.feed(AttemptClosed(), 0.1)
    assert m.state.value == "waiting"
    out = m.feed(Interrupt(), 0.2)
    assert m.state.value == "failed" and isinstance(out[-1], act.Raise)
    assert isinstance(out[-1].error, InterruptedError)


def test_a_request_starting_in_a_cooldown_waits_it_out_first() -> None:
    m = _machine(cooldown_s=0.4)
    out = m.feed(Start(), 0.0)
    assert out[-1] == act.Wait(0.4, "cooldown")
    assert m.records[0].dest == "waiting" and m.records[0].inputs["wait_source"] == "cooldown"
    assert _kinds(m.feed(WaitOver(), 0.4)) == [act.OpenAttempt]
    # a cooldown beyond max_wait is not waited out: the request goes, and the server decides
    m = _machine(cooldown_s=100.0, max_wait_setting=60.0)
    assert _kinds(m.feed(Start(), 0.0)) == [act.OpenAttempt]


def test_the_breaker_refuses_unless_this_request_is_the_probe() -> None:
    m = _machine(stale_giveup=2, stale_streak=2, breaker_retry_at=123.0)
    out = m.feed(Start(), 0.0)
    error = out[-1].error  # type: ignore[attr-defined]
    assert isinstance(error, fsm_agent.ProviderUnresponsiveError) and error.retry_at == 123.0
    m = _machine(stale_giveup=2, stale_streak=2, breaker_probe=True)
    assert _kinds(m.feed(Start(), 0.0)) == [act.OpenAttempt]


# -- the endpoint link (HL-1, BO-6, BO-7) -------------------------------------------------------------------
KEY = EndpointKey("chat_completions", "http://127.0.0.1:1/v1", "m")
SETTINGS = HealthSettings(stale_giveup=1, breaker_cooldown=0.2, probe_lease=30.0)


def test_only_one_request_takes_the_probe() -> None:
    store = MemoryHealth()
    store.update(KEY, HealthChange(stall=True, breaker_open_until=1.0))  # tripped long ago
    links = [EndpointLink(store, KEY, SETTINGS, f"r{i}") for i in range(5)]
    facts = [link.begin() for link in links]
    assert [f.breaker_probe for f in facts] == [True, False, False, False, False]
    assert all(f.breaker_retry_at is not None for f in facts[1:])
    links[0].remember(act.Remember("success"))  # the probe succeeded: closed
    assert store.get(KEY).stale_streak == 0 and store.get(KEY).breaker_open_until == 0.0
    assert not EndpointLink(store, KEY, SETTINGS, "r9").begin().breaker_probe  # closed: no probe needed


def test_a_probe_that_fails_re_trips_and_one_interrupted_frees_the_slot() -> None:
    store = MemoryHealth()
    store.update(KEY, HealthChange(stall=True, breaker_open_until=1.0))
    link = EndpointLink(store, KEY, SETTINGS, "a")
    assert link.begin().breaker_probe
    link.finish(httpx.ConnectError("refused"))
    health = store.get(KEY)
    assert health.breaker_open_until > 1.0 and health.probe_until == 0.0 and health.probe_owner == ""
    store.update(KEY, HealthChange(breaker_open_until=1.0))
    link = EndpointLink(store, KEY, SETTINGS, "b")
    assert link.begin().breaker_probe
    link.finish(InterruptedError())
    assert store.get(KEY).breaker_open_until == 1.0 and store.get(KEY).probe_until == 0.0


def test_a_stall_that_reaches_the_giveup_trips_the_breaker() -> None:
    store = MemoryHealth()
    link = EndpointLink(store, KEY, SETTINGS, "a")
    link.begin()
    link.remember(act.Remember("stall"))
    assert store.get(KEY).breaker_open_until > 0


def test_a_healthy_success_writes_nothing() -> None:
    writes: list[HealthChange] = []

    class Counting(MemoryHealth):
        def update(self, key: EndpointKey, change: HealthChange) -> Any:
            writes.append(change)
            return super().update(key, change)

    link = EndpointLink(Counting(), KEY, SETTINGS, "a")
    link.begin()
    link.remember(act.Remember("success"))
    link.finish(None)
    assert writes == []


def test_endpoint_keys_drop_credentials_and_tell_endpoints_apart() -> None:
    client = SimpleNamespace(base_url="https://user:secret@api.example.com:8443/v1/?key=x")
    assert base_url_of(client) == "https://api.example.com:8443/v1"
    boto = SimpleNamespace(
        meta=SimpleNamespace(endpoint_url="https://bedrock-runtime.us-east-1.amazonaws.com")
    )
    assert base_url_of(boto) == "https://bedrock-runtime.us-east-1.amazonaws.com"
    assert endpoint_key("responses", client, "gpt-5") != endpoint_key("responses", client, "gpt-4.1")
    assert base_url_of(object()) == ""


def test_session_arguments_are_checked() -> None:
    session = fsm_agent.Session()
    assert session.backoff == Backoff() and session.breaker_cooldown == 60.0
    assert isinstance(session.health, fsm_agent.MemoryHealth)
    assert session.stale_streak == 0 and session.streaming_disabled is False  # no request yet
    with pytest.raises(TypeError, match="Backoff"):
        fsm_agent.Session(backoff=0.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="breaker_cooldown"):
        fsm_agent.Session(breaker_cooldown=-1)
    with pytest.raises(TypeError, match="health"):
        fsm_agent.Session(health=object())  # type: ignore[arg-type]
