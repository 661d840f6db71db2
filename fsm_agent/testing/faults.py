"""Fault descriptions for emulator scenarios: frozen dataclasses, no behaviour.

Positions count the wire frames the scenario renders for the request (keepalives and other
injected frames excluded), 0-based. With ``kind`` set, only frames of that kind are counted
(``start``, ``block``, ``reasoning``, ``signature``, ``text``, ``refusal``, ``tool_start``,
``tool_args``, ``tool_end``, ``finish``, ``usage``, ``end``, ``ping``; ``raw`` for raw frames):
``DropAfter(2, kind="tool_args")`` drops the connection right after the second argument fragment,
``DropMidFrame(1, kind="tool_args")`` cuts the second argument fragment in half. Positions past the
end are clamped to the end.

Frame faults (drops, stalls, keepalives, malformed frames, stream errors, CRC) shape streamed
answers. A non-streaming answer honours ``HttpError`` and ``Stall`` (it waits before the body, and a
``then="drop"`` stall closes the connection without an answer); the other frame faults ignore it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

KeepaliveKind = Literal["comment", "data", "event", "ping"]


@dataclass(frozen=True)
class DropAfter:
    """Close the connection abruptly after ``frames`` frames (of ``kind``, when given)."""

    frames: int = 0
    kind: str | None = None


@dataclass(frozen=True)
class DropMidFrame:
    """Send half of frame number ``frame`` (0-based, of ``kind`` when given), then close abruptly."""

    frame: int = 0
    kind: str | None = None


@dataclass(frozen=True)
class DropAfterBytes:
    """Close the connection abruptly once ``nbytes`` body bytes have been sent."""

    nbytes: int


@dataclass(frozen=True)
class Stall:
    """Go silent for ``seconds`` after ``frames`` frames; then continue, or drop (``then="drop"``).

    A stall ends early when the server stops or the client closes the connection.
    """

    frames: int = 0
    seconds: float = 1.0
    kind: str | None = None
    then: Literal["continue", "drop"] = "continue"


@dataclass(frozen=True)
class Keepalives:
    """Interleave keepalive frames: ``count`` of ``kind`` before every ``every``-th frame.

    ``comment`` is ``: ping``; ``data`` is a bare ``data:``; ``event`` is ``event: ping`` with no
    data; ``ping`` is Anthropic's ``event: ping`` with a ``{"type": "ping"}`` payload.
    Ignored by Bedrock (the event stream has no keepalive).
    """

    kind: KeepaliveKind = "comment"
    every: int = 1
    count: int = 1


@dataclass(frozen=True)
class KeepaliveOnly:
    """Answer 200 with only ``count`` keepalive frames (``interval`` s apart), then a clean EOF.
    On Bedrock, which has no keepalive, the body is empty."""

    count: int = 3
    kind: KeepaliveKind = "comment"
    interval: float = 0.0


@dataclass(frozen=True)
class MalformedFrame:
    """Insert a data frame whose payload is not JSON after ``frames`` frames (stream continues)."""

    frames: int = 0
    payload: str = "{this is not json"
    kind: str | None = None


@dataclass(frozen=True)
class StreamError:
    """An error carried inside a 200 stream after ``frames`` frames; the stream then ends.

    Chat: ``data: {"error": {...}}``; Anthropic: ``event: error``; Responses: ``response.failed``
    (or an ``error`` event with ``responses_event="error"``); Bedrock: an exception message of type
    ``bedrock_exception``.
    """

    frames: int = 0
    message: str = "The server had an error while processing your request."
    code: str = "server_error"
    error_type: str = "api_error"
    kind: str | None = None
    responses_event: Literal["response.failed", "error"] = "response.failed"
    bedrock_exception: str = "internalServerException"


RetryAfterForm = Literal["seconds", "ms", "http-date"]


@dataclass(frozen=True)
class HttpError:
    """Answer with HTTP ``status`` and a JSON error body in the wire's format.

    ``body`` overrides the whole body (a mapping is sent as JSON, ``str``/``bytes`` verbatim).
    ``stream_only`` limits the error to streaming requests.

    ``retry_after`` adds the server's hint (BO-2) in the form ``retry_after_form`` says:
    ``"seconds"`` (``retry-after: 0.3``), ``"ms"`` (``retry-after-ms: 300``) or ``"http-date"``
    (``retry-after: <the HTTP date retry_after seconds after the answer is sent>``; HTTP dates have
    whole seconds, so the date is the next whole second at or after that moment).
    ``should_retry`` adds ``x-should-retry: true|false``.
    """

    status: int = 500
    message: str | None = None
    body: Mapping[str, Any] | str | bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    stream_only: bool = False
    retry_after: float | None = None
    retry_after_form: RetryAfterForm = "seconds"
    should_retry: bool | None = None


@dataclass(frozen=True)
class RejectStreamOptions:
    """When the request body contains ``stream_options``: 400 (OpenAI style) or 422 (pydantic
    "extra inputs" style) naming it as unrecognized. Requests without it are served normally."""

    status: int = 400


@dataclass(frozen=True)
class StreamingUnsupported:
    """Streaming requests get 400 "streaming is not supported"; non-streaming ones are served."""

    status: int = 400
    message: str = "Streaming is not supported for this model. Retry with stream=false."


@dataclass(frozen=True)
class NonStreamingBody:
    """Answer a ``stream: true`` request with the finished, non-streaming JSON body."""


@dataclass(frozen=True)
class EmptyBody:
    """Answer 200 with the streaming content type and no frames at all."""


@dataclass(frozen=True)
class EndAfter:
    """End the body cleanly (no abort) after ``frames`` frames (of ``kind``, when given): the
    stream just stops, e.g. before Anthropic's ``message_start`` or in the middle of a tool call."""

    frames: int = 0
    kind: str | None = None


@dataclass(frozen=True)
class NoBlockStop:
    """Anthropic only: never send ``content_block_stop`` for blocks of ``kind`` (``tool``,
    ``text``, ``reasoning``): the block stays open while the message goes on to its end."""

    kind: str = "tool"


@dataclass(frozen=True)
class BedrockAccessDenied:
    """Bedrock only: HTTP 403 AccessDeniedException for ``converse-stream`` (naming
    ``bedrock:InvokeModelWithResponseStream``); ``converse`` is served normally."""


@dataclass(frozen=True)
class CorruptCrc:
    """Bedrock only: flip the message CRC of frame ``frame`` (0-based, of ``kind`` when given)."""

    frame: int = 0
    kind: str | None = None


@dataclass(frozen=True)
class RefusePrefill:
    """A request that ends with an assistant prefill (Anthropic and Bedrock: a last message of
    role ``assistant``; Chat Completions: one marked ``"prefix": true``) gets HTTP ``status``
    with the wire's error body, for the models in ``models`` (None: every model). Requests
    without a prefill are served normally (RC-3)."""

    models: tuple[str, ...] | None = None
    status: int = 400
    message: str = "This model does not support assistant message prefill."


@dataclass(frozen=True)
class ExpireResume:
    """Responses background mode (RC-2): the stored response of this request cannot be read on
    any more: `GET /v1/responses/{id}?stream=true&starting_after=N` gets HTTP ``status`` (an
    expired cursor). Without it, a background response stays readable from any cursor."""

    status: int = 400
    message: str = "The stream cursor has expired; the response can no longer be streamed from it."


# -- issue 25a: a route's own rejection, a route that never answers, a flapping route -------------
ChatHost = Literal["openai", "vllm", "deepseek"]


@dataclass(frozen=True)
class ContextTooLong:
    """Answer HTTP 400 saying the prompt does not fit the model, with the API's own error body:
    Chat Completions ``context_length_exceeded`` ("This model's maximum context length is ..."),
    Responses ``context_length_exceeded`` ("Your input exceeds the context window ..."), Anthropic
    ``invalid_request_error`` "prompt is too long: N tokens > M maximum", Bedrock
    ``ValidationException`` "Input is too long for requested model.", Gemini ``INVALID_ARGUMENT``
    "The input token count (N) exceeds the maximum number of tokens allowed (M).".

    ``host`` picks whose words a Chat Completions answer has: OpenAI's, or those of the
    OpenAI-compatible servers vLLM (``{"object": "error", ...}``, ``code: 400``) and DeepSeek.
    Streaming and non-streaming requests alike."""

    tokens: int = 215_000
    limit: int = 200_000
    host: ChatHost = "openai"


@dataclass(frozen=True)
class NeverAnswers:
    """Read the request, then send nothing at all (no status line, no headers) for ``seconds``,
    then close the connection: a provider that accepts connections and never answers. Ends early
    when the client leaves or the server stops."""

    seconds: float = 3600.0


@dataclass(frozen=True)
class Flapping:
    """A route that comes and goes: of every ``down + up`` requests the emulator receives (counted
    from its start or last ``reset()``), the first ``down`` are answered HTTP ``status`` with the
    API's error body, the next ``up`` get the scenario."""

    status: int = 503
    down: int = 1
    up: int = 1


Fault = (
    DropAfter
    | DropMidFrame
    | DropAfterBytes
    | Stall
    | Keepalives
    | KeepaliveOnly
    | MalformedFrame
    | StreamError
    | HttpError
    | RejectStreamOptions
    | StreamingUnsupported
    | NonStreamingBody
    | EmptyBody
    | EndAfter
    | NoBlockStop
    | BedrockAccessDenied
    | CorruptCrc
    | RefusePrefill
    | ExpireResume
    | ContextTooLong
    | NeverAnswers
    | Flapping
)
