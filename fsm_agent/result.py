"""The result of one request: StreamResult, ToolCall, Usage, and the ChatCompletion-shaped view.

One type for every provider. Pure data: never performs I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

__all__ = ["StreamResult", "ToolCall", "Usage"]


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    extra: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cached_tokens: int | None = None


@dataclass(slots=True)
class StreamResult:
    content: str | None = None
    reasoning: str | None = None
    refusal: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None
    model: str | None = None
    id: str | None = None
    stub: bool = False
    dropped_tool_names: list[str] = field(default_factory=list)
    attempts: int = 0
    streamed: bool = True
    provider_data: dict[str, Any] = field(default_factory=dict)
    raw: Any = None
    records: list[Any] = field(default_factory=list)
    route: str | None = None  # RT-1: the name of the route that answered

    def to_chat_completion(self) -> SimpleNamespace:
        """An OpenAI ChatCompletion-shaped object (attribute access like the SDK's model)."""
        tool_calls = [
            SimpleNamespace(
                id=call.id,
                type="function",
                function=SimpleNamespace(name=call.name, arguments=call.arguments),
            )
            for call in self.tool_calls
        ]
        message = SimpleNamespace(
            role="assistant",
            content=self.content,
            tool_calls=tool_calls or None,
            reasoning_content=self.reasoning,
            refusal=self.refusal,
        )
        usage = None
        if self.usage is not None:
            usage = SimpleNamespace(
                prompt_tokens=self.usage.input_tokens,
                completion_tokens=self.usage.output_tokens,
                total_tokens=self.usage.total_tokens,
                prompt_tokens_details=SimpleNamespace(cached_tokens=self.usage.cached_tokens),
            )
        choice = SimpleNamespace(index=0, message=message, finish_reason=self.finish_reason)
        return SimpleNamespace(
            id=self.id,
            object="chat.completion",
            model=self.model,
            choices=[choice],
            usage=usage,
        )
