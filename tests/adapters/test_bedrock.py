"""PRV-B1..B3 (and WD-2 for Bedrock ids): the Bedrock ConverseStream adapter with a real boto3
`bedrock-runtime` client on the emulator over loopback HTTP — botocore's own event-stream parser
reads the binary framing. Content, reasoning and tool use; every in-stream exception; a corrupt
frame; AccessDenied for the streaming operation (fallback to converse()); stalls, the breaker,
interrupts and on_activity. Every test proves no thread, pool slot or socket was left behind."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import botocore.config
import botocore.eventstream
import pytest
import urllib3.exceptions
from helpers import INSTANT, PROMPTLY, Collect, threads_since, wait_until

import fsm_agent
from fsm_agent._internal.actions import OpenAttempt
from fsm_agent._internal.errors import ErrorKind, classify
from fsm_agent._internal.events import FinishReason, ToolCallDelta, ToolCallEnd
from fsm_agent._internal.providers import bedrock
from fsm_agent._internal.providers.base import Attempt
from fsm_agent._internal.timeouts import REASONING_FLOORS, reasoning_floor
from fsm_agent._internal.trace.sinks import MemorySink
from fsm_agent.testing import (
    BedrockAccessDenied,
    CorruptCrc,
    DropAfter,
    DropMidFrame,
    Emulator,
    HttpError,
    MalformedFrame,
    Scenario,
    Stall,
    StreamError,
    ToolCall,
    Usage,
)

MODEL = "us.anthropic.claude-sonnet-4-5-v1:0"
WRITE = ToolCall("write_file", '{"path": "notes/ä.txt", "text": "héllo 😀"}', arg_fragment=5)
FULL = Scenario.build(
    "The weather is sunny.",
    reasoning="User wants weather.",
    tool_calls=[WRITE, ToolCall("get_time", '{"tz": "UTC"}')],
    usage=Usage(input_tokens=50, output_tokens=30, cached_tokens=8),
)


def bparams(model: str = MODEL) -> dict[str, Any]:
    return {"modelId": model, "messages": [{"role": "user", "content": [{"text": "hi"}]}]}


def busy_slots(client: Any) -> int:
    """Connections of the client's urllib3 pools handed out and never given back."""
    manager = client._endpoint.http_session._manager
    keys = list(manager.pools.keys())  # the container refuses plain iteration
    return sum(manager.pools[key].pool.maxsize - manager.pools[key].pool.qsize() for key in keys)


@dataclass
class BedrockLeaks:
    emulator: Emulator
    clients: list[Any] = field(default_factory=list)
    threads_before: set[threading.Thread] = field(default_factory=lambda: set(threading.enumerate()))

    def client(self, botocore_retries: int = 1) -> Any:
        made = boto3.client(
            "bedrock-runtime",
            endpoint_url=self.emulator.bedrock_endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
            config=botocore.config.Config(retries={"max_attempts": botocore_retries}),
        )
        self.clients.append(made)
        return made

    def assert_clean(self, timeout: float = 2.0) -> None:
        for client in self.clients:
            assert busy_slots(client) == 0, "a response was never given back to the caller's pool"
            # boto3's close() drops its pools without closing their idle keep-alive sockets (they
            # go with the garbage collector); the caller closes them here, so any connection still
            # open on the emulator afterwards was leaked by the library.
            manager = client._endpoint.http_session._manager
            for key in list(manager.pools.keys()):
                manager.pools[key].close()
            client.close()
        assert self.emulator.wait_idle(timeout), f"{self.emulator.open_connections} connection(s) still open"
        deadline = time.monotonic() + timeout
        while self._extra() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not self._extra(), f"threads left running: {[t.name for t in self._extra()]}"

    def _extra(self) -> list[threading.Thread]:
        return threads_since(self.threads_before)


@pytest.fixture
def leaks(emulator: Emulator) -> Iterator[BedrockLeaks]:
    yield BedrockLeaks(emulator)


@pytest.fixture
def attempts(monkeypatch: pytest.MonkeyPatch) -> list[Attempt]:
    opened: list[Attempt] = []
    original = bedrock.BedrockAdapter.open

    def open_and_record(self: Any, *args: Any, **kwargs: Any) -> Attempt:
        attempt = original(self, *args, **kwargs)
        opened.append(attempt)
        return attempt

    monkeypatch.setattr(bedrock.BedrockAdapter, "open", open_and_record)
    return opened


def closed_once(opened: list[Attempt], count: int) -> bool:
    return len(opened) == count and all(a.closed and a.close_calls == 1 for a in opened)


def run(leaks: BedrockLeaks, session: fsm_agent.Session, got: Collect, **kwargs: Any) -> Any:
    client = kwargs.pop("client", None) or (leaks.clients[0] if leaks.clients else leaks.client())
    return session.stream(
        client, kwargs.pop("params", None) or bparams(), **got.callbacks(activity=True), **kwargs
    )


# -- PRV-B1: content, reasoning, tool use --------------------------------------------------------------------


def test_text_reasoning_tool_use_same_shape(leaks: BedrockLeaks, attempts: list[Attempt]) -> None:
    leaks.emulator.script(FULL)
    got = Collect()
    result = run(leaks, fsm_agent.Session(backoff=INSTANT), got)  # api inferred from the boto3 client
    assert (result.content, result.reasoning) == (FULL.text, FULL.reasoning)
    assert got.text == FULL.text and "".join(got.reasoning) == FULL.reasoning
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("tooluse_emu1_0", "write_file", WRITE.arguments),
        ("tooluse_emu1_1", "get_time", '{"tz": "UTC"}'),
    ]
    assert got.tools == [(0, "write_file"), (1, "get_time")]
    assert (result.finish_reason, result.stub, result.streamed, result.attempts) == (
        "tool_calls",
        False,
        True,
        1,
    )
    assert result.usage == fsm_agent.Usage(
        input_tokens=50, output_tokens=30, total_tokens=80, cached_tokens=8
    )
    assert (result.id, result.model) == ("00000000-0000-0000-0000-000000000001", MODEL)
    assert result.provider_data == {"reasoning_signature": "emu-signature"}
    message = result.to_chat_completion().choices[0].message
    assert message.content == FULL.text and message.tool_calls[1].function.name == "get_time"
    assert leaks.emulator.requests[0].path == "/model/us.anthropic.claude-sonnet-4-5-v1%3A0/converse-stream"
    assert closed_once(attempts, 1)
    leaks.assert_clean()


@pytest.mark.parametrize(
    ("scripted", "expected"), [("stop", "stop"), ("length", "length"), ("content_filter", "content_filter")]
)
def test_stop_reasons_over_the_wire(leaks: BedrockLeaks, scripted: str, expected: str) -> None:
    leaks.emulator.script(Scenario.build("Some text.", finish_reason=scripted))
    result = run(leaks, fsm_agent.Session(backoff=INSTANT), Collect())
    assert (result.content, result.finish_reason) == ("Some text.", expected)
    leaks.assert_clean()


@pytest.mark.parametrize(
    ("stop_reason", "expected"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("tool_use", "tool_calls"),
        ("max_tokens", "length"),
        ("guardrail_intervened", "content_filter"),
        ("content_filtered", "content_filter"),
        ("some_future_reason", "some_future_reason"),
    ],
)
def test_stop_reason_mapping(stop_reason: str, expected: str) -> None:
    events = bedrock.BedrockTranslator().payload({"messageStop": {"stopReason": stop_reason}})
    assert events == [FinishReason(expected)]


def test_tool_indexes_follow_tool_blocks_not_content_blocks() -> None:
    t = bedrock.BedrockTranslator()
    start = {"contentBlockIndex": 3, "start": {"toolUse": {"toolUseId": "t1", "name": "a"}}}
    assert t.payload({"contentBlockStart": start}) == [ToolCallDelta(index=0, id="t1", name="a")]
    delta = {"contentBlockIndex": 3, "delta": {"toolUse": {"input": '{"k":'}}}
    assert t.payload({"contentBlockDelta": delta}) == [ToolCallDelta(index=0, arguments='{"k":')]
    assert t.payload({"contentBlockStop": {"contentBlockIndex": 2}}) == []  # a text block's stop
    assert t.payload({"contentBlockStop": {"contentBlockIndex": 3}}) == [ToolCallEnd(0)]
    second = {"contentBlockIndex": 5, "start": {"toolUse": {"toolUseId": "t2", "name": "b"}}}
    assert t.payload({"contentBlockStart": second})[0].index == 1


# -- in-stream exceptions ------------------------------------------------------------------------------------

TRANSIENT = [
    "internalServerException",
    "modelStreamErrorException",
    "throttlingException",
    "serviceUnavailableException",
]


@pytest.mark.parametrize("exception", TRANSIENT)
def test_transient_in_stream_exceptions_are_retried(
    leaks: BedrockLeaks, attempts: list[Attempt], exception: str
) -> None:
    fault = StreamError(1, message="try later", bedrock_exception=exception)
    leaks.emulator.script(Scenario.build("Hidden.", faults=[fault]), Scenario.build("Recovered."))
    got = Collect()
    result = run(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert (result.content, result.attempts) == ("Recovered.", 2) and got.text == "Recovered."
    assert closed_once(attempts, 2)
    # with no retry left, the same exception is raised as ours, with the provider's code and message
    leaks.emulator.script(Scenario.build("Hidden.", faults=[fault]))
    with pytest.raises(fsm_agent.ProviderStreamError) as caught:
        run(leaks, fsm_agent.Session(backoff=INSTANT, retries=0), Collect())
    assert caught.value.code == exception and "try later" in str(caught.value)
    assert classify(caught.value) is ErrorKind.TRANSIENT
    assert type(caught.value.__cause__).__name__ == "EventStreamError"
    leaks.assert_clean()


def test_validation_exception_is_raised_at_once(leaks: BedrockLeaks, attempts: list[Attempt]) -> None:
    fault = StreamError(1, message="Malformed input request", bedrock_exception="validationException")
    leaks.emulator.script(Scenario.build("x", faults=[fault]), Scenario.build("never"))
    got = Collect()
    with pytest.raises(fsm_agent.ProviderStreamError) as caught:
        run(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert caught.value.code == "validationException" and "Malformed input request" in str(caught.value)
    assert classify(caught.value) is ErrorKind.PERMANENT
    assert len(leaks.emulator.requests) == 1 and got.statuses == []
    assert closed_once(attempts, 1)
    leaks.assert_clean()


@pytest.mark.parametrize("exception", [*TRANSIENT, "validationException"])
def test_exception_as_event_key(exception: str) -> None:
    """A client that hands over the exception as a key of the event dict (no botocore raise)."""
    with pytest.raises(fsm_agent.ProviderStreamError) as caught:
        bedrock.BedrockTranslator().payload({exception: {"message": "said so"}})
    assert caught.value.code == exception and "said so" in str(caught.value)
    expected = ErrorKind.PERMANENT if exception == "validationException" else ErrorKind.TRANSIENT
    assert classify(caught.value) is expected


def test_corrupt_frame_is_a_clear_error(leaks: BedrockLeaks, attempts: list[Attempt]) -> None:
    leaks.emulator.script(
        Scenario.build("Checksums matter.", faults=[CorruptCrc(1)]), Scenario.build("never")
    )
    with pytest.raises(fsm_agent.ProviderStreamError) as caught:
        run(leaks, fsm_agent.Session(backoff=INSTANT), Collect())
    assert caught.value.code == "provider_stream_malformed_chunk"
    assert "corrupt" in str(caught.value) and "Checksum mismatch" in str(caught.value)
    assert isinstance(caught.value.__cause__, botocore.eventstream.ChecksumMismatch)  # botocore found it
    assert len(leaks.emulator.requests) == 1
    assert closed_once(attempts, 1)
    leaks.assert_clean()


def test_malformed_event_payload_is_a_clear_error(leaks: BedrockLeaks) -> None:
    leaks.emulator.script(
        Scenario.build("Some words here.", faults=[MalformedFrame(2)]), Scenario.build("never")
    )
    with pytest.raises(fsm_agent.ProviderStreamError) as caught:
        run(leaks, fsm_agent.Session(backoff=INSTANT), Collect())
    assert caught.value.code == "provider_stream_malformed_chunk" and "contentBlockDelta" in str(caught.value)
    assert len(leaks.emulator.requests) == 1
    leaks.assert_clean()


# -- transport errors ----------------------------------------------------------------------------------------


def test_drop_before_delivery_retried_then_original_error(
    leaks: BedrockLeaks, attempts: list[Attempt]
) -> None:
    leaks.emulator.script(Scenario.build("Hello.", faults=[DropAfter(1)]), Scenario.build("Hello again."))
    result = run(leaks, fsm_agent.Session(backoff=INSTANT), Collect())
    assert (result.content, result.attempts) == ("Hello again.", 2)
    leaks.emulator.script(Scenario.build("Hello.", faults=[DropMidFrame(1)]))
    with pytest.raises(urllib3.exceptions.ProtocolError):  # the original object, as urllib3 raised it
        run(leaks, fsm_agent.Session(backoff=INSTANT, retries=1), Collect())
    assert len(leaks.emulator.requests) == 4
    assert closed_once(attempts, 4)
    leaks.assert_clean()


@pytest.mark.parametrize("status", [429, 500, 503])
def test_http_throttling_and_server_errors_are_transient(leaks: BedrockLeaks, status: int) -> None:
    leaks.emulator.script(Scenario.build("x", faults=[HttpError(status)]), Scenario.build("Served."))
    client = leaks.client(botocore_retries=0)  # botocore's own retry would hide ours
    result = run(leaks, fsm_agent.Session(backoff=INSTANT), Collect(), client=client)
    assert (result.content, result.attempts) == ("Served.", 2)
    assert len(leaks.emulator.requests) == 2
    leaks.assert_clean()


def test_drop_mid_tool_call_after_text_reconnects(leaks: BedrockLeaks) -> None:
    cut = Scenario.build("Writing it.", tool_calls=[WRITE], faults=[DropMidFrame(2, kind="tool_args")])
    leaks.emulator.script(cut, Scenario.build("Writing it.", tool_calls=[WRITE]))
    got = Collect()
    result = run(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert sum("reconnecting" in t for t in got.texts) == 1
    assert [(c.id, c.arguments) for c in result.tool_calls] == [("tooluse_emu2_0", WRITE.arguments)]
    assert (result.content, result.attempts, result.stub) == ("Writing it.", 2, False)
    leaks.assert_clean()


# -- PRV-B2: AccessDenied for the streaming operation --------------------------------------------------------


def test_access_denied_falls_back_to_converse(leaks: BedrockLeaks) -> None:
    leaks.emulator.script(Scenario(steps=FULL.steps, usage=FULL.usage, faults=(BedrockAccessDenied(),)))
    session = fsm_agent.Session(backoff=INSTANT)
    got = Collect()
    result = run(leaks, session, got)
    assert got.texts == [FULL.text] and got.reasoning == [FULL.reasoning]  # delivered once
    assert got.tools == [(0, "write_file"), (1, "get_time")]
    assert (result.content, result.streamed, result.finish_reason) == (FULL.text, False, "tool_calls")
    assert [(c.name, c.arguments) for c in result.tool_calls] == [
        ("write_file", WRITE.arguments),
        ("get_time", '{"tz": "UTC"}'),
    ]
    assert result.usage is not None and result.usage.input_tokens == 50
    assert isinstance(result.raw, dict) and result.raw["stopReason"] == "tool_use"
    assert session.streaming_disabled is True
    assert any("falling back" in s for s in got.statuses)
    paths = [r.path.rsplit("/", 1)[-1] for r in leaks.emulator.requests]
    assert paths == ["converse-stream", "converse"]
    # later requests of the session go straight to converse()
    leaks.emulator.script(Scenario.build("Next."))
    assert run(leaks, session, Collect()).content == "Next."
    assert leaks.emulator.requests[-1].path.endswith("/converse")
    leaks.assert_clean()


def test_access_denied_with_raise_mode(leaks: BedrockLeaks) -> None:
    import botocore.exceptions

    leaks.emulator.script(Scenario.build("x", faults=[BedrockAccessDenied()]))
    session = fsm_agent.Session(backoff=INSTANT, unsupported="raise")
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        run(leaks, session, Collect())
    assert "InvokeModelWithResponseStream" in str(caught.value)
    assert len(leaks.emulator.requests) == 1 and session.streaming_disabled is True
    leaks.assert_clean()


# -- PRV-B3: the watchdog covers Bedrock ---------------------------------------------------------------------


def test_silent_stream_is_aborted_and_raises_when_not_retried(
    leaks: BedrockLeaks, attempts: list[Attempt]
) -> None:
    leaks.emulator.script(Scenario.build("Hello.", faults=[Stall(0, seconds=10)]))  # headers, then nothing
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.5, retries=0)
    stalled_at: list[float] = []
    client = leaks.client()
    started = time.monotonic()
    with pytest.raises(fsm_agent.StreamStalledError) as caught:
        session.stream(client, bparams(), on_status=lambda m: stalled_at.append(time.monotonic()))
    assert isinstance(caught.value, TimeoutError)
    assert stalled_at and 0.5 <= stalled_at[0] - started < 0.5 + PROMPTLY  # open time included; not the 10 s
    assert session.stale_streak == 1
    assert closed_once(attempts, 1)
    leaks.assert_clean()


def test_streak_breaker_and_reset(leaks: BedrockLeaks, attempts: list[Attempt]) -> None:
    stall = Scenario.build("Hello.", faults=[Stall(0, seconds=10)])
    leaks.emulator.script(stall, stall, Scenario.build("Back."))
    session = fsm_agent.Session(
        backoff=INSTANT, stale_timeout=0.3, stale_giveup=2, retries=0, breaker_cooldown=0.2
    )
    for streak in (1, 2):
        with pytest.raises(fsm_agent.StreamStalledError):
            run(leaks, session, Collect())
        assert session.stale_streak == streak
    seen = len(leaks.emulator.requests)
    with pytest.raises(fsm_agent.ProviderUnresponsiveError) as caught:
        run(leaks, session, Collect())
    assert "unresponsive" in str(caught.value)
    assert len(leaks.emulator.requests) == seen == 2  # converse_stream was never called
    assert len(attempts) == 2
    # BO-7: once breaker_cooldown has passed one probe goes through; its success resets the streak
    assert caught.value.retry_at is not None
    time.sleep(max(0.0, caught.value.retry_at - time.time()) + 0.02)
    assert run(leaks, session, Collect()).content == "Back."
    assert session.stale_streak == 0
    leaks.assert_clean()


def test_on_activity_fires_on_every_event_and_cannot_abort(leaks: BedrockLeaks) -> None:
    leaks.emulator.script(FULL)
    seen: list[str] = []

    def on_activity(kind: str) -> None:
        seen.append(kind)
        raise RuntimeError("a broken monitor")

    client = leaks.client()
    result = fsm_agent.Session(backoff=INSTANT).stream(client, bparams(), on_activity=on_activity)
    assert result.content == FULL.text and len(result.tool_calls) == 2
    # messageStart; per block its deltas and its stop; the reasoning signature; two tool starts;
    # messageStop; metadata
    expected = 1 + sum(len(b.chunks) + 1 for b in FULL.blocks()) + 1 + 2 + 2
    assert len(seen) == expected
    leaks.assert_clean()


def test_interrupt_while_bedrock_is_silent(leaks: BedrockLeaks, attempts: list[Attempt]) -> None:
    leaks.emulator.script(Scenario.build("Hello there.", faults=[Stall(2, seconds=10)]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=30)
    got = Collect()
    fired_at: list[float] = []

    def interrupter() -> None:
        if wait_until(lambda: bool(got.activity), 3.0):
            time.sleep(0.1)
            fired_at.append(time.monotonic())
            session.interrupt()

    thread = threading.Thread(target=interrupter, name="test-interrupter")
    thread.start()
    with pytest.raises(InterruptedError):
        run(leaks, session, got)
    raised_at = time.monotonic()
    thread.join()
    assert fired_at and raised_at - fired_at[0] < PROMPTLY
    assert len(leaks.emulator.requests) == 1 and closed_once(attempts, 1)
    leaks.emulator.script(Scenario.build("Still usable."))
    assert run(leaks, session, Collect()).content == "Still usable."
    leaks.assert_clean()


def test_attempt_abort_reaches_the_socket_under_botocore(leaks: BedrockLeaks) -> None:
    leaks.emulator.script(Scenario.build("Hello.", faults=[Stall(1, seconds=10)]))
    attempt = bedrock.BedrockAdapter().open(leaks.client(), bparams(), OpenAttempt(1, True, False), 30.0)
    assert isinstance(attempt._sock, socket.socket)
    assert attempt.objects is not None
    events = iter(attempt.objects)
    assert next(events) == {"messageStart": {"role": "assistant"}}
    timer = threading.Timer(0.1, attempt.abort)
    timer.start()
    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        next(events)
    assert time.monotonic() - started < 0.1 + PROMPTLY  # the blocked read woke up (not the 10 s stall)
    assert classify(caught.value) is ErrorKind.TRANSIENT
    timer.join()
    attempt.close()
    leaks.assert_clean()


# -- the async driver runs Bedrock in a worker thread --------------------------------------------------------


def test_astream_with_boto3(leaks: BedrockLeaks) -> None:
    leaks.emulator.script(FULL)
    got = Collect()
    result = asyncio.run(fsm_agent.Session().astream(leaks.client(), bparams(), **got.callbacks()))
    assert (result.content, result.reasoning, result.finish_reason) == (
        FULL.text,
        FULL.reasoning,
        "tool_calls",
    )
    assert [c.arguments for c in result.tool_calls] == [WRITE.arguments, '{"tz": "UTC"}']
    assert got.text == FULL.text
    leaks.assert_clean()


# -- WD-2 and traces -----------------------------------------------------------------------------------------


def test_bedrock_model_ids_resolve_to_reasoning_floors(leaks: BedrockLeaks) -> None:
    session = fsm_agent.Session(backoff=INSTANT)
    assert reasoning_floor(MODEL) == REASONING_FLOORS["claude-sonnet-4.5"]
    assert session.stale_timeout_for(MODEL) == REASONING_FLOORS["claude-sonnet-4.5"]
    # end to end: the session resolves the request's stale timeout from `modelId`
    opus = "eu.anthropic.claude-opus-4-1-20250805-v1:0"
    assert reasoning_floor(opus) == REASONING_FLOORS["claude-opus-4"] != 180.0
    sink = MemorySink(record_wire=True)
    leaks.emulator.script(Scenario.build("Floors.", tool_calls=[WRITE]))
    result = fsm_agent.Session(backoff=INSTANT, trace=sink).stream(leaks.client(), bparams(opus))
    assert result.content == "Floors."
    lines = [json.loads(line) for line in sink.text().splitlines()]
    header = next(line for line in lines if line["type"] == "request")
    assert header["settings"]["stale_timeout"] == REASONING_FLOORS["claude-opus-4"]
    assert header["api"] == "bedrock_converse" and header["model"] == opus
    assert fsm_agent.replay(sink).matched  # the recorded Bedrock events re-drive the machine alike
    leaks.assert_clean()
