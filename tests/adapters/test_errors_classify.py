"""`errors.classify` over real exception instances of httpx, httpx2, httpcore, httpcore2, openai,
anthropic, the builtins and our own tree: the kinds the machine's guards decide on (RES-1, RES-7,
RES-8, RES-9, RES-10, PRV-A3, ACC-9/10)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import anthropic
import httpcore
import httpcore2
import httpx
import httpx2
import openai
import pytest

from fsm_agent._internal.errors import (
    EmptyStreamError,
    ErrorKind,
    IncompleteStreamError,
    MachineError,
    ProviderStreamError,
    StreamingUnsupportedError,
    StreamLimitError,
    StreamStalledError,
    ToolInputError,
    classify,
    sdk_native,
)

T, P, F = ErrorKind.TRANSIENT, ErrorKind.PERMANENT, ErrorKind.FATAL
SO, SU, INT = ErrorKind.STREAM_OPTIONS_REJECTED, ErrorKind.STREAMING_UNSUPPORTED, ErrorKind.INTERRUPT

URL = "https://api.example.test/v1/chat/completions"
REQ2 = httpx2.Request("POST", URL)
REQ1 = httpx.Request("POST", URL)

OPENAI_SO_400 = {
    "error": {
        "message": "Unrecognized request argument supplied: stream_options",
        "type": "invalid_request_error",
        "param": "stream_options",
        "code": None,
    }
}
PYDANTIC_SO_422 = {
    "detail": [
        {
            "type": "extra_forbidden",
            "loc": ["body", "stream_options"],
            "msg": "Extra inputs are not permitted",
            "input": {"include_usage": True},
        }
    ]
}
NO_STREAMING_400 = {
    "error": {"message": "Streaming is not supported for this model.", "type": "invalid_request_error"}
}
PLAIN_400 = {"error": {"message": "Invalid value for 'temperature'.", "type": "invalid_request_error"}}
STREAM_OPTIONS_TYPE_400 = {"error": {"message": "stream_options.include_usage must be a boolean."}}


def openai_status(cls: type[openai.APIStatusError], status: int, body: Any, message: str = "error") -> Any:
    def make() -> openai.APIStatusError:
        response = httpx2.Response(status, request=REQ2, json=body)
        return cls(f"Error code: {status} - {body}", response=response, body=body)

    return make


def anthropic_status(cls: type[anthropic.APIStatusError], status: int, body: Any) -> Any:
    def make() -> anthropic.APIStatusError:
        response = httpx2.Response(status, request=REQ2, json=body)
        return cls(f"Error code: {status} - {body}", response=response, body=body)

    return make


def httpx_status(module: Any, request: Any, status: int) -> Callable[[], BaseException]:
    def make() -> BaseException:
        response = module.Response(status, request=request)
        return module.HTTPStatusError(f"status {status}", request=request, response=response)  # type: ignore[no-any-return]

    return make


ANTHROPIC_OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
ANTHROPIC_BAD = {
    "type": "error",
    "error": {"type": "invalid_request_error", "message": "max_tokens: required"},
}

CASES: dict[str, tuple[Callable[[], BaseException], ErrorKind]] = {
    # httpx and httpx2 transport errors, and their status errors
    **{
        f"{mod.__name__}.{name}": (
            lambda mod=mod, name=name, req=req: getattr(mod, name)("boom", request=req),
            T,
        )
        for mod, req in ((httpx, REQ1), (httpx2, REQ2))
        for name in (
            "ReadTimeout",
            "ConnectTimeout",
            "WriteTimeout",
            "PoolTimeout",
            "ConnectError",
            "ReadError",
            "WriteError",
            "RemoteProtocolError",
            "LocalProtocolError",
        )
    },
    "httpx.UnsupportedProtocol": (lambda: httpx.UnsupportedProtocol("ftp", request=REQ1), P),
    "httpx2.UnsupportedProtocol": (lambda: httpx2.UnsupportedProtocol("ftp", request=REQ2), P),
    "httpx.HTTPStatusError-503": (httpx_status(httpx, REQ1, 503), T),
    "httpx.HTTPStatusError-400": (httpx_status(httpx, REQ1, 400), P),
    "httpx2.HTTPStatusError-502": (httpx_status(httpx2, REQ2, 502), T),
    "httpx2.HTTPStatusError-404": (httpx_status(httpx2, REQ2, 404), P),
    # httpcore and httpcore2
    **{
        f"{mod.__name__}.{name}": (lambda mod=mod, name=name: getattr(mod, name)("boom"), T)
        for mod in (httpcore, httpcore2)
        for name in ("ReadTimeout", "ConnectError", "ReadError", "RemoteProtocolError", "PoolTimeout")
    },
    # openai
    "openai.APIConnectionError": (lambda: openai.APIConnectionError(request=REQ2), T),
    "openai.APITimeoutError": (lambda: openai.APITimeoutError(request=REQ2), T),
    "openai.400-stream_options": (openai_status(openai.BadRequestError, 400, OPENAI_SO_400), SO),
    "openai.422-stream_options": (openai_status(openai.UnprocessableEntityError, 422, PYDANTIC_SO_422), SO),
    "openai.400-streaming-unsupported": (openai_status(openai.BadRequestError, 400, NO_STREAMING_400), SU),
    "openai.400-plain": (openai_status(openai.BadRequestError, 400, PLAIN_400), P),
    "openai.400-stream_options-bad-type": (
        openai_status(openai.BadRequestError, 400, STREAM_OPTIONS_TYPE_400),
        P,
    ),
    "openai.422-plain": (
        openai_status(openai.UnprocessableEntityError, 422, {"detail": [{"msg": "field required"}]}),
        P,
    ),
    "openai.401": (openai_status(openai.AuthenticationError, 401, {"error": {"message": "bad key"}}), P),
    "openai.403": (openai_status(openai.PermissionDeniedError, 403, {"error": {"message": "no"}}), P),
    "openai.404": (openai_status(openai.NotFoundError, 404, {"error": {"message": "no model"}}), P),
    "openai.500": (openai_status(openai.InternalServerError, 500, {"error": {"message": "oops"}}), T),
    "openai.503": (openai_status(openai.APIStatusError, 503, {"error": {"message": "unavailable"}}), T),
    "openai.APIError-connection-reset": (
        lambda: openai.APIError("Connection reset by peer", REQ2, body=None),
        T,
    ),
    "openai.APIError-peer-closed": (
        lambda: openai.APIError(
            "peer closed connection without sending complete message body", REQ2, body=None
        ),
        T,
    ),
    "openai.APIError-network-error": (lambda: openai.APIError("network error", REQ2, body=None), T),
    "openai.APIError-broken-pipe": (lambda: openai.APIError("Broken pipe", REQ2, body=None), T),
    "openai.APIError-terminated": (lambda: openai.APIError("Connection terminated", REQ2, body=None), T),
    "openai.APIError-other": (
        lambda: openai.APIError("The model produced invalid content.", REQ2, body=None),
        P,
    ),
    # anthropic
    "anthropic.APIConnectionError": (lambda: anthropic.APIConnectionError(request=REQ2), T),
    "anthropic.APITimeoutError": (lambda: anthropic.APITimeoutError(request=REQ2), T),
    "anthropic.529-overloaded": (anthropic_status(anthropic.APIStatusError, 529, ANTHROPIC_OVERLOADED), T),
    "anthropic.500": (anthropic_status(anthropic.InternalServerError, 500, ANTHROPIC_OVERLOADED), T),
    "anthropic.400": (anthropic_status(anthropic.BadRequestError, 400, ANTHROPIC_BAD), P),
    "anthropic.401": (anthropic_status(anthropic.AuthenticationError, 401, ANTHROPIC_BAD), P),
    "anthropic.APIError-connection-closed": (
        lambda: anthropic.APIError("Connection closed while reading", REQ2, body=None),
        T,
    ),
    "anthropic.APIError-other": (lambda: anthropic.APIError("Bad tool schema", REQ2, body=None), P),
    # builtins
    "ConnectionResetError": (lambda: ConnectionResetError(104, "Connection reset by peer"), T),
    "ConnectionRefusedError": (lambda: ConnectionRefusedError(111, "Connection refused"), T),
    "ConnectionAbortedError": (ConnectionAbortedError, T),
    "BrokenPipeError": (BrokenPipeError, T),
    "TimeoutError": (TimeoutError, T),
    "InterruptedError": (InterruptedError, INT),
    "ValueError": (lambda: ValueError("bad request parameter"), P),
    "ValueError-expected-ident": (lambda: ValueError("expected ident at line 1 column 2"), T),
    "ValueError-expected-value": (lambda: ValueError("expected value at line 1 column 12"), T),
    "ValueError-eof": (lambda: ValueError("EOF while parsing a string at line 1 column 40"), T),
    "ValueError-trailing-comma": (lambda: ValueError("trailing comma at line 3 column 5"), T),
    "TypeError": (lambda: TypeError("create() missing 1 required keyword-only argument: 'model'"), P),
    "KeyError": (lambda: KeyError("choices"), P),
    "RuntimeError": (lambda: RuntimeError("something else"), P),
    # ours
    "StreamStalledError": (lambda: StreamStalledError("no provider event for 0.5 s"), T),
    "EmptyStreamError": (lambda: EmptyStreamError("empty"), T),
    "IncompleteStreamError": (lambda: IncompleteStreamError("cut mid tool-call"), T),
    "ToolInputError": (lambda: ToolInputError("tool input is not JSON", raw_text="{"), T),
    "StreamingUnsupportedError": (lambda: StreamingUnsupportedError("keepalives only"), SU),
    "StreamLimitError": (lambda: StreamLimitError("cap"), F),
    "MachineError": (lambda: MachineError("no row"), F),
    **{
        f"ProviderStreamError-{code}": (lambda code=code: ProviderStreamError("bad frame", code=code), F)
        for code in (
            "provider_stream_non_json_data",
            "provider_stream_malformed_chunk",
            "provider_stream_invalid_utf8",
            "provider_stream_frame_too_large",
        )
    },
    **{
        f"ProviderStreamError-{code}": (
            lambda code=code: ProviderStreamError("in-stream error", code=code),
            T,
        )
        for code in ("server_error", "overloaded_error", "api_error", "internal_server_error")
    },
    "ProviderStreamError-connection-lost": (
        lambda: ProviderStreamError("the provider reported: connection lost", code="stream_error"),
        T,
    ),
    "ProviderStreamError-streaming-unsupported": (
        lambda: ProviderStreamError(
            "Streaming is not supported for this model", code="invalid_request_error"
        ),
        SU,
    ),
    "ProviderStreamError-transient-flag": (lambda: ProviderStreamError("x", code="odd", transient=True), T),
    "ProviderStreamError-content-policy": (
        lambda: ProviderStreamError("Your prompt was flagged.", code="content_policy_violation"),
        P,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_classify(case: str) -> None:
    make, expected = CASES[case]
    exc = make()
    assert classify(exc) is expected, f"{case}: {type(exc).__module__}.{type(exc).__name__}: {exc}"


def test_classify_sees_the_sdk_exception_not_its_cause() -> None:
    """openai wraps transport errors; the wrapper alone decides (its cause is not needed)."""
    try:
        try:
            raise httpx2.ConnectError("refused", request=REQ2)
        except httpx2.ConnectError as inner:
            raise openai.APIConnectionError(request=REQ2) from inner
    except openai.APIConnectionError as exc:
        assert classify(exc) is T
        exc.__cause__ = None
        assert classify(exc) is T


def test_classify_never_raises_on_odd_exceptions() -> None:
    class Weird(Exception):
        status_code = "not a number"
        body = object()
        response: ClassVar[dict[str, Any]] = {"ResponseMetadata": {"HTTPStatusCode": "x"}}

    assert classify(Weird("?")) is P


@pytest.mark.parametrize("sdk", [openai, anthropic], ids=lambda m: m.__name__)
@pytest.mark.parametrize("cause", ["transport", "stall"])
def test_rc5_incomplete_error_joins_the_sdk_connection_family(sdk: Any, cause: str) -> None:
    """RC-5: `Recovery(final="raise")`'s error is also the SDK's `APIConnectionError`, whether a
    transport error (which carries the real request) or one of ours (a stall: a request is made
    up for the endpoint) lost the text; the request is always a real one (openai 3.60 reads its
    headers)."""
    request = httpx2.Request("POST", "http://host.test/v1/chat/completions")
    if cause == "transport":
        lost: BaseException = httpx2.RemoteProtocolError("peer closed connection", request=request)
    else:
        lost = StreamStalledError("no bytes for 30.0 s")
    error = IncompleteStreamError("the answer was lost", partial="Hello", result=object())
    error.__cause__ = lost
    native = sdk_native(error, sdk, "http://host.test/v1")
    assert isinstance(native, sdk.APIConnectionError) and isinstance(native, IncompleteStreamError)
    assert native.partial == "Hello" and native.__cause__ is lost
    assert (
        native.request is request
        if cause == "transport"
        else str(native.request.url).startswith("http://host.test/v1")
    )
