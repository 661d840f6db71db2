"""SEC-9 over every text the library writes itself: a provider (the emulator) that echoes every
known key shape and the client's own key in its error bodies and frames, on every path (an HTTP
error raised, retried, switched from; streaming refused then the fallback; an error inside the
stream; a frame that is not JSON), through the real openai, anthropic, google-genai and boto3
clients over loopback.
None of the secrets appears in an `on_status` notice, an OpenTelemetry span (its status, events,
attributes), a log record, the trace, a repr, or the error raised and its chain (`__cause__`,
`__context__`, `args`, `str`, text attributes)."""

from __future__ import annotations

import json
import logging
from typing import Any

import anthropic
import boto3
import botocore.config
import openai
import pytest
from google import genai
from hardening_kit import boto_close
from helpers import INSTANT
from otel_support import Otel, otel

import fsm_agent
from fsm_agent._internal.trace.sinks import MemorySink
from fsm_agent.testing import (
    Emulator,
    HttpError,
    MalformedFrame,
    Scenario,
    StreamError,
    StreamingUnsupported,
)

__all__ = ["otel"]

OWN_KEY = "own-client-key-of-no-known-shape-5d81c2"  # the client's own key: no shape would match it
SHAPES = (
    "sk-ant-api03-Zx9Q2mYbN4cVw7LrT1kP0sHdJfGaE3uIoB5nMqRtXyWz",
    "sk-proj-Ab3De5Gh7Jk9Lm1Np3Qr5St7Uv9Wx1Yz3Ab5Cd7Ef9",
    "gsk_Q1w2E3r4T5y6U7i8O9p0AaSsDdFfGgHh",
    "xai-Zz1Xx2Cc3Vv4Bb5Nn6Mm7Ll8Kk9Jj0Hh",
    "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    "AKIAIOSFODNN7EXAMPLE",
    "FwoGZXIvYXdzEJr//////////wEaDFakeSessionTokenFakeSessionTokenFakeSession0123456789+/=",
)
SECRETS = (OWN_KEY, *SHAPES)
# What a provider that echoes the request's headers back writes in its error.
ECHO = (
    f"echo: Authorization: Bearer {SHAPES[0]} x-api-key: {OWN_KEY} x-goog-api-key={SHAPES[4]} "
    f"x-amz-security-token: {SHAPES[6]} keys {SHAPES[1]} {SHAPES[2]} {SHAPES[3]} {SHAPES[5]} {OWN_KEY}"
)
NOT_JSON = "{not json " + ECHO
REFUSED = "Streaming is not supported. " + ECHO

PATHS: dict[str, tuple[Scenario, ...]] = {
    "401 raised": (Scenario.build("x", faults=[HttpError(401, message=ECHO)]),),
    "500 retried then raised": (
        Scenario.build("x", faults=[HttpError(500, message=ECHO)]),
        Scenario.build("x", faults=[HttpError(500, message=ECHO)]),
    ),
    "streaming refused, fallback": (
        Scenario.build("All fine.", faults=[StreamingUnsupported(message=REFUSED)]),
        Scenario.build("All fine.", faults=[StreamingUnsupported(message=REFUSED)]),
    ),
    "in-stream error": (Scenario.build("Some text. ", faults=[StreamError(frames=1, message=ECHO)]),),
    "in-stream error after the text, kept": (
        Scenario.build("Some text. ", faults=[StreamError(frames=3, message=ECHO)]),
    ),
    "non-JSON frame": (Scenario.build("Some text. ", faults=[MalformedFrame(1, payload=NOT_JSON)]),),
}


def _client(sdk: str, emulator: Emulator) -> tuple[Any, dict[str, Any]]:
    """The SDK's client holding OWN_KEY as its own key, and a request; with a secret header where
    the SDK takes extra headers per request."""
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    bearer = {"Authorization": f"Bearer {SHAPES[0]}"}
    if sdk == "openai":
        client: Any = openai.OpenAI(base_url=emulator.openai_base_url, api_key=OWN_KEY, max_retries=0)
        return client, {"model": "gpt-4.1-mini", "messages": messages, "extra_headers": bearer}
    if sdk == "anthropic":
        client = anthropic.Anthropic(base_url=emulator.anthropic_base_url, api_key=OWN_KEY, max_retries=0)
        request = {"model": "claude-sonnet-4-6", "max_tokens": 64, "messages": messages}
        return client, {**request, "extra_headers": bearer}
    if sdk == "google-genai":
        client = genai.Client(api_key=OWN_KEY, http_options={"base_url": emulator.gemini_base_url})
        return client, {"model": "gemini-2.5-flash", "contents": "hi"}
    client = boto3.client(
        "bedrock-runtime",
        endpoint_url=emulator.bedrock_endpoint_url,
        region_name="us-east-1",
        aws_access_key_id=SHAPES[5],
        aws_secret_access_key=OWN_KEY,
        aws_session_token=SHAPES[6],
        config=botocore.config.Config(retries={"total_max_attempts": 1}),
    )
    turn = [{"role": "user", "content": [{"text": "hi"}]}]
    return client, {"modelId": "us.anthropic.claude-sonnet-4-5-v1:0", "messages": turn}


def _close(sdk: str, client: Any) -> None:
    if sdk == "boto3":
        boto_close(client)
    elif sdk != "google-genai":
        client.close()


def _texts_of_error(error: BaseException) -> list[str]:
    """Every text an error and its chain carry."""
    texts: list[str] = []
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        texts += [str(current), repr(current), repr(current.args)]
        for name, value in vars(current).items() if hasattr(current, "__dict__") else ():
            if isinstance(value, (str, dict, list)) and name != "response":
                texts.append(repr(value))
        pending += [current.__cause__, current.__context__]
    return texts


def _span_texts(otel: Otel) -> list[str]:
    texts: list[str] = []
    for span in otel.spans():
        texts.append(str(span.status.description))
        texts.append(json.dumps(dict(span.attributes or {}), default=str))
        for event in span.events:
            texts.append(event.name + json.dumps(dict(event.attributes or {}), default=str))
    return texts


def _assert_clean(texts: list[str], where: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"{secret[:12]}… in {where}: {text[:300]}"


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("sdk", ["openai", "anthropic", "google-genai", "boto3"])
def test_no_secret_in_any_text_the_library_writes(
    emulator: Emulator, otel: Otel, caplog: pytest.LogCaptureFixture, path: str, sdk: str
) -> None:
    emulator.script(*PATHS[path])
    client, params = _client(sdk, emulator)
    sink = MemorySink(record_wire=True)
    notices: list[str] = []
    route = fsm_agent.Route(client, params)
    caplog.set_level(logging.DEBUG, logger="fsm_agent")
    raised: BaseException | None = None
    result = None
    try:
        result = fsm_agent.Session(retries=1, backoff=INSTANT, trace=sink).stream(
            [route], on_status=notices.append
        )
    except Exception as exc:
        raised = exc
    finally:
        _close(sdk, client)
    if path in ("401 raised", "500 retried then raised"):
        assert raised is not None
    _assert_clean(notices, "on_status")
    _assert_clean(_span_texts(otel), "the spans")
    _assert_clean([record.getMessage() for record in caplog.records], "the log messages")
    _assert_clean([caplog.text], "the formatted log")
    _assert_clean([sink.text()], "the trace")
    _assert_clean([repr(route)], "repr(Route)")
    if result is not None:  # a stub keeps the provider's words (ACC-10): redacted too
        _assert_clean([repr(result), json.dumps(result.error, default=str)], "the result and its error")
    if raised is not None:
        _assert_clean(_texts_of_error(raised), "the error raised and its chain")
    quiet = ("401 raised", "in-stream error", "in-stream error after the text, kept", "non-JSON frame")
    assert notices or path in quiet  # the paths that notify


def test_route_repr_hides_secret_headers_and_keys() -> None:
    route = fsm_agent.Route(
        object(),
        {"model": "m", "extra_headers": {"Authorization": "Bearer opaque-token-123", "X-Api-Key": OWN_KEY}},
    )
    shown = repr(route)
    assert "opaque-token-123" not in shown and OWN_KEY not in shown and "[REDACTED]" in shown
    assert "'model': 'm'" in shown
    from fsm_agent._internal.routes import PreparedRoute

    prepared = PreparedRoute(0, "n", None, None, route.params, "chat_completions", "m", 1.0)  # type: ignore[arg-type]
    assert "opaque-token-123" not in repr(prepared) and OWN_KEY not in repr(prepared)


def test_a_json_decode_error_is_not_kept_under_the_malformed_frame_error() -> None:
    """The decoder's error held the whole raw frame (its `doc`) as the context of ours."""
    from fsm_agent._internal.wire.shapes import parse_json

    with pytest.raises(fsm_agent.ProviderStreamError) as caught:
        parse_json("{not json " + "x" * 10_000 + SHAPES[0], "stream frame")
    assert caught.value.__cause__ is None and caught.value.__context__ is None
