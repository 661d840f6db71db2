"""Anthropic Messages (PRV-A1..A5): the adapter the drivers use for `anthropic.Anthropic`-shaped clients.

Opens the request through the SDK's raw streaming response (the SDK handles auth, base URL,
headers and HTTP status errors; opening, sync or async, is `base.SDKAdapter`'s); the bytes are
decoded by the wire pipeline and translated by `anthropic_events.AnthropicTranslator`. A client
without that interface, or one that answers with event objects or a finished Message, is read by
attribute (WIRE-5). Shapes each attempt's request (PRV-A4: `eager_input_streaming: False` once a
tool's input failed to parse) without ever mutating the caller's params. Imports `anthropic`
nowhere itself. Never decides policy.
"""

from __future__ import annotations

from typing import Any

from ..actions import OpenAttempt
from .anthropic_events import (
    FINISH_REASONS,
    AnthropicTranslator,
    build_message,
    is_finished_message,
    message_events,
)
from .base import SDKAdapter
from .rejections import RouteRejections

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


def _as_message(body: Any) -> Any:
    """WIRE-5: a JSON body answered to stream=True becomes the SDK's Message, as `raw` promises."""
    return build_message(body) if is_finished_message(body) else body


# RC-7: Anthropic answers an over-long prompt with a 400 `invalid_request_error` whose message says
# "prompt is too long: N tokens > M maximum", or, when the prompt fits but not with `max_tokens`,
# "input length and `max_tokens` exceed context limit"; a model this key cannot use is a 404.
ANTHROPIC_REJECTIONS = RouteRejections(
    statuses=frozenset({400}),
    codes=frozenset(),
    words=(
        r"(?i)prompt is too long|input length and `?max_tokens`? exceed context limit|"
        r"exceeds? (the )?context (limit|window)"
    ),
)


class AnthropicAdapter(SDKAdapter):
    api = "anthropic_messages"
    route_owned = staticmethod(ANTHROPIC_REJECTIONS.owns)
    is_finished = staticmethod(is_finished_message)
    as_finished = staticmethod(_as_message)

    def translator(self) -> AnthropicTranslator:
        return AnthropicTranslator()

    def stream_params(self, params: dict[str, Any], plan: OpenAttempt) -> dict[str, Any]:
        """The request of this attempt; the caller's dict and its tools are never mutated."""
        kwargs = dict(params)
        kwargs["stream"] = True
        if plan.buffer_tool_input and "tools" in kwargs:
            kwargs["tools"] = buffered_tools(kwargs["tools"])
        return kwargs

    def streaming_call(
        self, client: Any, params: dict[str, Any], plan: OpenAttempt
    ) -> tuple[Any, dict[str, Any]]:
        return client.messages, self.stream_params(params, plan)

    def plain_call(self, client: Any, params: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        kwargs = dict(params)
        kwargs.pop("stream", None)
        return client.messages, kwargs

    def finished_events(self, response: Any) -> list[Any]:
        return message_events(response)
