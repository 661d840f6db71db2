"""The one error tree of fsm_agent, and the classification of foreign exceptions.

    FsmAgentError
    ├── ProviderStreamError          the provider's stream carried an error or could not be read
    │                                (code, raw_text, body); malformed frames, in-stream error events
    │   └── ToolInputError       a tool's streamed input is not valid JSON (transient, PRV-A4)
    ├── EmptyStreamError             the stream ended with nothing in it (retried like a transient error)
    ├── IncompleteStreamError        the stream ended cut short of its finish reason (transient)
    ├── StreamStalledError           no provider event for stale_timeout seconds (also a TimeoutError)
    ├── ProviderUnresponsiveError    the stale breaker is open (also a RuntimeError)
    ├── StreamingUnsupportedError    the endpoint cannot stream and fallback is off
    ├── StreamLimitError             an attempt's byte cap was reached
    ├── MachineError                 an event with no transition: a bug of the library (FSM-2)
    ├── ReplayMismatch               a replayed trace diverged from its recording
    └── TraceFormatError             a trace line could not be read

Interrupts raise the built-in InterruptedError. A transport error of the HTTP library under an
SDK that exhausts its retries is raised as that SDK's own connection error (`sdk_native`), with
the transport error as `__cause__`, so a caller's `except openai.APIConnectionError` keeps working.
This module never imports a provider SDK: foreign
exceptions are recognised by their class names along the MRO, so httpx and httpx2 (and the
SDKs built on either) classify alike.
"""

from __future__ import annotations

import enum
import re
from typing import Any

from .backoff import should_retry_header
from .redact import redact, redact_value

__all__ = [
    "EmptyStreamError",
    "ErrorKind",
    "FsmAgentError",
    "IncompleteStreamError",
    "MachineError",
    "ProviderStreamError",
    "ProviderUnresponsiveError",
    "ReplayMismatch",
    "StreamLimitError",
    "StreamStalledError",
    "StreamingUnsupportedError",
    "ToolInputError",
    "TraceFormatError",
    "classify",
    "is_parser_error",
    "is_transient_status",
    "sdk_native",
]


class FsmAgentError(Exception):
    """Root of every error fsm_agent raises itself."""


class ProviderStreamError(FsmAgentError):
    """The provider's stream carried an error, or bytes that are not a valid stream."""

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        raw_text: str | None = None,
        body: Any = None,
        transient: bool = False,
    ) -> None:
        # SEC-9: a provider may echo a key back in its error; our error texts never carry it.
        super().__init__(redact(message))
        self.code = code
        self.raw_text = redact(raw_text) if raw_text is not None else None
        self.body = redact_value(body)
        self.transient = transient
        # ACC-10: what the same payload carried beside the error (the usage of a chunk that also
        # holds the error), delivered before the error so it is not lost.
        self.events_before: tuple[Any, ...] = ()
        self.unless_at_limit = False


class ToolInputError(ProviderStreamError):
    """A tool call's streamed input is not valid JSON when its block stops (PRV-A4): transient."""

    def __init__(self, message: str, *, raw_text: str | None = None) -> None:
        super().__init__(message, code="tool_input_invalid", raw_text=raw_text, transient=True)
        # Unless the stream's next payload says the answer stopped at its output limit: then the
        # input was cut by that limit, and the answer is complete (docs/behaviour.md).
        self.unless_at_limit = True


class EmptyStreamError(FsmAgentError):
    """The stream ended with no finish reason, text, reasoning, refusal or tool call (ACC-9)."""


class IncompleteStreamError(FsmAgentError):
    """The stream ended with no finish reason, while a tool call was being built or without the
    provider's end marker: what arrived may be truncated (transient).

    Raised to the caller by `Recovery(final="raise")` (RC-5) when an answer was lost after
    visible text: `partial` is the text shown, `result` the stub `StreamResult` (incomplete);
    `__cause__` is the error that lost it. Both are None when it only ended one attempt.
    """

    def __init__(self, message: str, *, partial: str | None = None, result: Any = None) -> None:
        super().__init__(message)
        self.partial = partial
        self.result = result


class StreamStalledError(FsmAgentError, TimeoutError):
    """No provider event arrived for stale_timeout seconds (WD-1)."""


class ProviderUnresponsiveError(FsmAgentError, RuntimeError):
    """Too many consecutive stalls: the endpoint's breaker is open (WD-3, BO-7).

    `retry_at` is when the next probe is allowed (wall-clock seconds, as `time.time()`), or None.
    """

    def __init__(self, message: str, *, retry_at: float | None = None) -> None:
        super().__init__(message)
        self.retry_at = retry_at


class StreamingUnsupportedError(FsmAgentError):
    """The endpoint cannot stream usable chunks and unsupported="raise" (RES-9)."""


class StreamLimitError(FsmAgentError):
    """An attempt's stream passed the cap on accumulated bytes (SEC-2; `Session(max_bytes=…)`)."""


class MachineError(FsmAgentError):
    """An event arrived that the transition table has no row for (FSM-2): a library bug."""


class ReplayMismatch(FsmAgentError):
    """A replayed trace took a different transition than the one recorded (TR-3)."""


class TraceFormatError(FsmAgentError):
    """A trace file line is corrupt, truncated, too large or of a future schema (TR-6)."""


class ErrorKind(enum.Enum):
    """How the machine's guards see an error."""

    TRANSIENT = "transient"
    FATAL = "fatal"  # raised at once, never retried, never stubbed
    PERMANENT = "permanent"  # not retried; stubbed only after visible text
    STREAM_OPTIONS_REJECTED = "stream_options_rejected"
    STREAMING_UNSUPPORTED = "streaming_unsupported"
    INTERRUPT = "interrupt"
    # RC-7: a rejection that belongs to the route's model or key (the prompt does not fit it, the
    # key cannot use it), recognised by the route's adapter: not retried; the next route may serve
    ROUTE_OWNED = "route_owned"


_TRANSIENT_CLASS_NAMES = frozenset(
    {
        # httpx / httpx2 / httpcore / httpcore2
        "TimeoutException",
        "NetworkError",
        "ProtocolError",
        "RemoteProtocolError",
        "ConnectError",
        "ReadError",
        "WriteError",
        "CloseError",
        "ReadTimeout",
        "ConnectTimeout",
        "WriteTimeout",
        "PoolTimeout",
        "IncompleteRead",
        # openai / anthropic
        "APIConnectionError",
        "APITimeoutError",
        # botocore
        "ReadTimeoutError",
        "ConnectTimeoutError",
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ResponseStreamingError",
    }
)
_TRANSIENT_MODULES = frozenset(
    {"httpx", "httpx2", "httpcore", "httpcore2", "openai", "anthropic", "botocore", "urllib3"}
)

# The texts that classify a failure, as patterns compiled at their first search (by `re`'s own
# cache): only a failed request reads them, so importing the module compiles none.
_CONNECTION_LOST = (
    r"(?i)connection (was |has been )?(lost|reset|closed|terminated|aborted|dropped)|peer closed|"
    r"broken pipe|network error|incomplete chunked read|server disconnected"
)
# PRV-A3: the Anthropic SDK's partial-JSON parser errors on a cut stream.
_PARSER_ERRORS = r"(?i)expected ident at line|expected value at line|eof while parsing|trailing comma at line"
_STREAM_OPTIONS_REJECTED = (
    r"(?is)stream_options.{0,80}(extra|unsupported|not supported|unrecognized|unrecognised|unknown|"
    r"not permitted|not allowed|invalid)|(extra|unsupported|unrecognized|unrecognised|unknown|"
    r"not permitted|invalid)[^.]{0,80}stream_options"
)
_STREAMING_UNSUPPORTED = (
    r"(?i)stream(ing)?( mode)? (is )?(not |un)(supported|available|enabled|allowed)|"
    r"does not support stream|doesn't support stream|streaming unsupported|"
    r"InvokeModelWithResponseStream"
)
_FATAL_STREAM_CODES = frozenset(
    {
        "provider_stream_non_json_data",
        "provider_stream_malformed_chunk",
        "provider_stream_invalid_utf8",
        "provider_stream_frame_too_large",
    }
)
# BO-1: 408, 409, 429 and every 5xx (529, Anthropic's "overloaded", included).
_TRANSIENT_4XX = frozenset({408, 409, 429})
_TRANSIENT_PROVIDER_CODES = frozenset(
    {
        "overloaded_error",
        "rate_limit_error",
        "rate_limit_exceeded",
        "api_error",
        "server_error",
        "internal_server_error",
        "service_unavailable",
        # Google's `google.rpc.Status` names (in-stream errors of the native Gemini API, PRV-N);
        # codes are compared in lower case
        "internal",
        "unavailable",
        "resource_exhausted",
        "deadline_exceeded",
    }
)
# botocore ClientError / EventStreamError codes (Bedrock, any case) that are worth another attempt.
_TRANSIENT_AWS_CODES = frozenset(
    {
        "internalserverexception",
        "modelstreamerrorexception",
        "throttlingexception",
        "serviceunavailableexception",
        "modelnotreadyexception",
    }
)


def _transient_in_stream(code: str | None, body: Any) -> bool:
    """BO-1 for an error inside a stream whose `code` is a number ("429", "503"): the error's
    `type` decides when it names a rate limit or an overload; else the number, read as a status."""
    if code is None or not code.isdigit() or len(code) > 3:
        return False
    error = body.get("error", body) if isinstance(body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    if isinstance(kind, str) and kind.lower() in _TRANSIENT_PROVIDER_CODES:
        return True
    return is_transient_status(int(code))


_RATE_LIMIT_CODES = frozenset(
    {"rate_limit_error", "rate_limit_exceeded", "resource_exhausted", "throttlingexception"}
)


def is_rate_limit(exc: BaseException) -> bool:
    """A rate limit or a busy server's request to hold off (408, 409, 429, or the provider's
    rate-limit code): the endpoint works, it asks for less (RC-9 does not count it)."""
    status = status_of(exc)
    if status in _TRANSIENT_4XX:
        return True
    code = getattr(exc, "code", None)
    if isinstance(code, str) and code.lower() in _RATE_LIMIT_CODES:
        return True
    kind = provider_error_type(exc)
    return (kind is not None and kind.lower() in _RATE_LIMIT_CODES) or (
        aws_error_code(exc).lower() in _RATE_LIMIT_CODES
    )


def is_transient_status(status: int) -> bool:
    """BO-1: an HTTP status worth another attempt."""
    return status in _TRANSIENT_4XX or 500 <= status <= 599


def _class_keys(exc: BaseException) -> set[tuple[str, str]]:
    return {(cls.__module__.split(".", 1)[0], cls.__name__) for cls in type(exc).__mro__}


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an SDK exception carries, if any."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status
    if is_google_api_error(exc):
        code = getattr(exc, "code", None)  # google-genai's APIError: the status as `code`
        if isinstance(code, int) and 100 <= code <= 599:
            return code
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int):
        return status
    meta = response.get("ResponseMetadata") if isinstance(response, dict) else None  # botocore
    status = meta.get("HTTPStatusCode") if isinstance(meta, dict) else None
    return status if isinstance(status, int) else None


def is_google_api_error(exc: BaseException) -> bool:
    """An `APIError` of google-genai (recognised by name: the SDK is never imported here)."""
    return any(
        cls.__name__ == "APIError" and cls.__module__.startswith("google.") for cls in type(exc).__mro__
    )


def aws_error_code(exc: BaseException) -> str:
    """The `Error.Code` of a botocore ClientError (or EventStreamError); "" for anything else."""
    response = getattr(exc, "response", None)
    error = response.get("Error") if isinstance(response, dict) else None
    code = error.get("Code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else ""


def is_parser_error(exc: BaseException) -> bool:
    """PRV-A3: one of the Anthropic SDK's stream-parser errors on a cut or garbled stream."""
    return isinstance(exc, ValueError) and re.search(_PARSER_ERRORS, str(exc)) is not None


def provider_error_type(exc: BaseException) -> str | None:
    """The `error.type` of a provider error body (`{"type": "error", "error": {"type": …}}`)."""
    body = getattr(exc, "body", None)
    error = body.get("error") if isinstance(body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else None


def error_text(exc: BaseException) -> str:
    """Message plus body text of an exception, for pattern checks."""
    parts = [str(exc)]
    body = getattr(exc, "body", None)
    if body is not None:
        parts.append(str(body))
    return " ".join(parts)


_HTTP_LIBRARIES = frozenset({"httpx", "httpx2", "httpcore", "httpcore2"})


def sdk_native(exc: BaseException, sdk: Any, base_url: str | None) -> BaseException:
    """The error the bare SDK (module `sdk`, e.g. `openai`) raises for transport error `exc`: its
    `APITimeoutError` for a timeout, its `APIConnectionError` for any other transport failure,
    with `exc` as `__cause__` (section 1). Anything else — our own errors, HTTP status errors,
    errors of an SDK without those classes — is returned unchanged."""
    if isinstance(exc, IncompleteStreamError) and exc.result is not None and sdk is not None:
        return _incomplete_native(exc, sdk, base_url)
    keys = _class_keys(exc)
    if sdk is None or not any(mod in _HTTP_LIBRARIES for mod, _ in keys):
        return exc
    if not any(mod in _HTTP_LIBRARIES and name in _TRANSIENT_CLASS_NAMES for mod, name in keys):
        return exc
    timeout = any(name.endswith("Timeout") or name == "TimeoutException" for _, name in keys)
    connection_error = getattr(sdk, "APIConnectionError", None)
    timeout_error = getattr(sdk, "APITimeoutError", None)
    request = _request_of(exc, base_url)
    try:
        if timeout and timeout_error is not None:
            native: BaseException = timeout_error(request=request)
        elif connection_error is not None:
            native = connection_error(message=f"Connection error: {exc}", request=request)
        else:
            return exc
    except Exception:  # an SDK whose constructors differ: the original stays the truth
        return exc
    native.__cause__ = exc
    return native


_INCOMPLETE_CLASSES: dict[type, type] = {}


def _incomplete_native(exc: IncompleteStreamError, sdk: Any, base_url: str | None) -> BaseException:
    """RC-5: `Recovery(final="raise")`'s error, also of the SDK's connection-error family (so an
    `except openai.APIConnectionError` that handled a dropped stream before still does): an
    `IncompleteStreamError` subclass of the SDK's `APIConnectionError`, with the same partial
    text, stub and cause. Unchanged for an SDK without that class."""
    connection_error = getattr(sdk, "APIConnectionError", None)
    if not isinstance(connection_error, type) or isinstance(exc, connection_error):
        return exc
    cls = _INCOMPLETE_CLASSES.get(connection_error)
    if cls is None:
        try:
            cls = type("IncompleteStreamError", (IncompleteStreamError, connection_error), {})
        except TypeError:  # an SDK class that cannot be combined: ours stays the truth
            return exc
        cls.__module__ = IncompleteStreamError.__module__
        _INCOMPLETE_CLASSES[connection_error] = cls
    try:
        native: Any = Exception.__new__(cls)
        connection_error.__init__(native, message=str(exc), request=_request_of(exc, base_url))  # type: ignore[misc]
    except Exception:  # an SDK whose constructor differs
        return exc
    native.partial, native.result = exc.partial, exc.result
    native.__cause__ = exc.__cause__
    made: BaseException = native
    return made


def _request_of(exc: BaseException, base_url: str | None) -> Any:
    """The request a transport error belongs to (for one of ours, the request of the transport
    error that caused it); else one made up for `base_url` with the error's HTTP library, or with
    httpx2's or httpx's, whichever is loaded (httpx raises on `.request` when no request was
    attached; openai 3.60 and later read the request's headers, so None will not do)."""
    import sys

    error: BaseException | None = exc
    while error is not None:
        try:
            request = error.request  # type: ignore[attr-defined]
        except Exception:
            request = None
        if request is not None:
            return request
        error = error.__cause__
    own = type(exc).__module__.split(".", 1)[0].replace("core", "x")
    for name in (own, "httpx2", "httpx"):
        make = getattr(sys.modules.get(name), "Request", None)
        if make is not None:
            try:
                return make("POST", base_url or "http://localhost/")
            except Exception:
                continue
    return None


def classify(exc: BaseException) -> ErrorKind:
    """Map any exception raised while streaming to the kind the guards decide on."""
    if isinstance(exc, InterruptedError):
        return ErrorKind.INTERRUPT
    if isinstance(exc, StreamingUnsupportedError):
        return ErrorKind.STREAMING_UNSUPPORTED
    if isinstance(exc, (StreamStalledError, EmptyStreamError, IncompleteStreamError)):
        return ErrorKind.TRANSIENT
    if isinstance(exc, (StreamLimitError, MachineError)):
        return ErrorKind.FATAL
    if isinstance(exc, ProviderStreamError):
        if exc.code in _FATAL_STREAM_CODES:
            return ErrorKind.FATAL
        code = exc.code.lower() if isinstance(exc.code, str) else None
        if exc.transient or code in _TRANSIENT_PROVIDER_CODES or code in _TRANSIENT_AWS_CODES:
            return ErrorKind.TRANSIENT
        if _transient_in_stream(code, exc.body):
            return ErrorKind.TRANSIENT
        if re.search(_CONNECTION_LOST, str(exc)):
            return ErrorKind.TRANSIENT
        if re.search(_STREAMING_UNSUPPORTED, str(exc)):
            return ErrorKind.STREAMING_UNSUPPORTED
        return ErrorKind.PERMANENT
    status = status_of(exc)
    text = error_text(exc)
    if provider_error_type(exc) in _TRANSIENT_PROVIDER_CODES and (status is None or status < 300):
        # An error event the SDK raised from inside a 200 stream (e.g. Anthropic overloaded_error).
        return ErrorKind.TRANSIENT
    if status in (400, 422) and re.search(_STREAM_OPTIONS_REJECTED, text):
        return ErrorKind.STREAM_OPTIONS_REJECTED
    if status is not None and 400 <= status < 500 and re.search(_STREAMING_UNSUPPORTED, text):
        return ErrorKind.STREAMING_UNSUPPORTED
    if status is not None:
        # BO-1: the server's own word, when it gives one, overrides the status.
        should_retry = should_retry_header(exc)
        if should_retry is not None:
            return ErrorKind.TRANSIENT if should_retry else ErrorKind.PERMANENT
    if aws_error_code(exc).lower() in _TRANSIENT_AWS_CODES:
        return ErrorKind.TRANSIENT
    if status is not None and is_transient_status(status):
        return ErrorKind.TRANSIENT
    if status is not None:
        return ErrorKind.PERMANENT
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return ErrorKind.TRANSIENT
    keys = _class_keys(exc)
    if any(mod in _TRANSIENT_MODULES and name in _TRANSIENT_CLASS_NAMES for mod, name in keys):
        return ErrorKind.TRANSIENT
    if any(mod in ("openai", "anthropic") and name == "APIError" for mod, name in keys):
        return ErrorKind.TRANSIENT if re.search(_CONNECTION_LOST, text) else ErrorKind.PERMANENT
    if is_parser_error(exc):
        return ErrorKind.TRANSIENT
    return ErrorKind.PERMANENT
