"""Anthropic Messages (PRV-A1..A5): the adapter the drivers use for `anthropic.Anthropic`-shaped clients.

Opens the request through the SDK's raw streaming response (the SDK handles auth, base URL,
headers and HTTP status errors); the bytes are decoded by the wire pipeline and translated by
`anthropic_events.AnthropicTranslator`. A client without that interface, or one that answers with
event objects or a finished Message, is read by attribute (WIRE-5). Shapes each attempt's request
(PRV-A4: `eager_input_streaming: False` once a tool's input failed to parse) without ever mutating
the caller's params. Imports `anthropic` nowhere itself. Never decides policy.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

from ..actions import OpenAttempt
from .anthropic_events import (
    FINISH_REASONS,
    AnthropicTranslator,
    build_message,
    is_finished_message,
    message_events,
)
from .base import (
    AsyncAttempt,
    Attempt,
    aobject_attempt,
    aopen_streaming,
    socket_of,
    timeout_for,
)

__all__ = ["FINISH_REASONS", "AnthropicAdapter", "AnthropicTranslator", "buffered_tools", "message_events"]


def buffered_tools(tools: Any) -> Any:
    """PRV-A4: copies of the caller's custom tools with `eager_input_streaming: False`.

    Server tools (`bash_…`, `web_search_…`: a `type` other than "custom") take no such field and
    are sent unchanged.
    """
    if not isinstance(tools, (list, tuple)):
        return tools
    return [
        {**tool, "eager_input_streaming": False}
        if isinstance(tool, dict) and tool.get("type") in (None, "custom")
        else tool
        for tool in tools
    ]


class AnthropicAdapter:
    api = "anthropic_messages"

    def model_of(self, params: dict[str, Any]) -> str | None:
        model = params.get("model")
        return model if isinstance(model, str) else None

    def translator(self) -> AnthropicTranslator:
        return AnthropicTranslator()

    def stream_params(self, params: dict[str, Any], plan: OpenAttempt) -> dict[str, Any]:
        """The request of this attempt; the caller's dict and its tools are never mutated."""
        kwargs = dict(params)
        kwargs["stream"] = True
        if plan.buffer_tool_input and "tools" in kwargs:
            kwargs["tools"] = buffered_tools(kwargs["tools"])
        return kwargs

    def open(self, client: Any, params: dict[str, Any], plan: OpenAttempt, read_timeout: float) -> Attempt:
        kwargs = self.stream_params(params, plan)
        messages = client.messages
        raw_api = getattr(messages, "with_streaming_response", None)
        if raw_api is None:
            return _object_attempt(messages.create(**kwargs))
        manager = raw_api.create(**kwargs, timeout=timeout_for(client, read_timeout))
        response = manager.__enter__()
        http = response.http_response

        def closer() -> None:
            manager.__exit__(None, None, None)

        content_type = http.headers.get("content-type", "")
        if "json" in content_type and "event-stream" not in content_type:
            try:
                body = json.loads(http.read())
            finally:
                closer()
            return Attempt(finished=_as_message(body))
        return Attempt(chunks=http.iter_bytes(), closer=closer, sock=socket_of(http))

    def request_plain(self, client: Any, params: dict[str, Any]) -> Any:
        kwargs = dict(params)
        kwargs.pop("stream", None)
        return client.messages.create(**kwargs)

    def finished_events(self, response: Any) -> list[Any]:
        return message_events(response)

    # -- async clients (AsyncAnthropic and alike): the same request, awaited ---------------------------
    async def aopen(
        self, client: Any, params: dict[str, Any], plan: OpenAttempt, read_timeout: float
    ) -> AsyncAttempt:
        kwargs = self.stream_params(params, plan)
        messages = client.messages
        raw_api = getattr(messages, "with_streaming_response", None)
        if raw_api is None:
            return await aobject_attempt(messages.create(**kwargs), is_finished_message)
        manager = raw_api.create(**kwargs, timeout=timeout_for(client, read_timeout))
        attempt = await aopen_streaming(manager)
        if attempt.finished is not None:
            attempt.finished = _as_message(attempt.finished)
        return attempt

    async def arequest_plain(self, client: Any, params: dict[str, Any]) -> Any:
        response = self.request_plain(client, params)
        return await response if inspect.isawaitable(response) else response


def _as_message(body: Any) -> Any:
    """WIRE-5: a JSON body answered to stream=True becomes the SDK's Message, as `raw` promises."""
    return build_message(body) if is_finished_message(body) else body


def _object_attempt(returned: Any) -> Attempt:
    """WIRE-5: `create(stream=True)` returned event objects or a finished Message."""
    if is_finished_message(returned):
        return Attempt(finished=returned)
    close = getattr(returned, "close", None)
    return Attempt(objects=returned, closer=close if callable(close) else None)
