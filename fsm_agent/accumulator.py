"""Builds one attempt's StreamResult from normalized wire events (ACC-1..8).

Knows nothing of retries, states or callbacks; never performs I/O. Text and argument fragments are
kept in lists and joined once at the end, so any fragmentation costs linear time (ACC-4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .result import StreamResult, ToolCall, Usage

__all__ = ["Accumulator", "ToolSlot"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def _join(parts: list[str]) -> str:
    text = "".join(parts)
    # A character outside the BMP sent as a JSON \ud83d\ude00 escape may be split between two
    # fragments; each half decodes to a lone surrogate. Re-pair them so the text is byte-exact.
    if _SURROGATE.search(text):
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


@dataclass(slots=True)
class ToolSlot:
    index: int
    id: str = ""
    name: str = ""
    fragments: list[str] = field(default_factory=list)
    extra: dict[str, Any] | None = None
    finished: bool = False

    def to_tool_call(self) -> ToolCall:
        return ToolCall(id=self.id, name=self.name, arguments=_join(self.fragments), extra=self.extra)


class Accumulator:
    """One attempt's text, reasoning, refusal, tool calls, finish reason, usage and identity."""

    __slots__ = (
        "_by_index",
        "finish_reason",
        "model",
        "provider_data",
        "reasoning_parts",
        "refusal_parts",
        "response_id",
        "slots",
        "text_parts",
        "usage",
    )

    def __init__(self) -> None:
        self.text_parts: list[str] = []
        self.reasoning_parts: list[str] = []
        self.refusal_parts: list[str] = []
        self.slots: list[ToolSlot] = []
        self._by_index: dict[int, ToolSlot] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.model: str | None = None
        self.response_id: str | None = None
        self.provider_data: dict[str, Any] = {}

    # -- tool calls (ACC-3) -------------------------------------------------------------------
    def tool_delta(
        self,
        index: int,
        call_id: str | None,
        name: str | None,
        arguments: str | None,
        extra: dict[str, Any] | None,
    ) -> tuple[ToolSlot, bool, bool]:
        """Apply one fragment. Returns (slot, opened a new slot, name became known)."""
        slot = self._by_index.get(index)
        opened = False
        if slot is None or (call_id and slot.id and call_id != slot.id):
            slot = ToolSlot(index=index)
            self._by_index[index] = slot
            self.slots.append(slot)
            opened = True
        if call_id and not slot.id:
            slot.id = call_id
        named = False
        if name and not slot.name:
            slot.name = name
            named = True
        if arguments:
            slot.fragments.append(arguments)
        if extra:
            slot.extra = {**(slot.extra or {}), **extra}
        return slot, opened, named

    def tool_end(self, index: int) -> ToolSlot | None:
        slot = self._by_index.get(index)
        if slot is not None:
            slot.finished = True
        return slot

    def tools_in_flight(self) -> list[ToolSlot]:
        if self.finish_reason is not None:
            return []
        return [slot for slot in self.slots if not slot.finished]

    # -- result ---------------------------------------------------------------------------------
    @property
    def has_anything(self) -> bool:
        return bool(
            self.finish_reason is not None
            or self.text_parts
            or self.reasoning_parts
            or self.refusal_parts
            or self.slots
        )

    def text(self) -> str:
        return "".join(self.text_parts)

    def build(self) -> StreamResult:
        content = self.text() if self.text_parts else None
        refusal = "".join(self.refusal_parts) if self.refusal_parts else None
        finish_reason = self.finish_reason
        provider_data = dict(self.provider_data)
        if refusal is not None:
            if content:  # ACC-6: a refusal beside real content stays beside it
                provider_data["refusal"] = refusal
            else:
                content = refusal
                finish_reason = "content_filter"
        return StreamResult(
            content=content,
            reasoning="".join(self.reasoning_parts) if self.reasoning_parts else None,
            refusal=refusal,
            tool_calls=[slot.to_tool_call() for slot in self.slots],
            finish_reason=finish_reason,
            usage=self.usage,
            model=self.model,
            id=self.response_id,
            provider_data=provider_data,
        )
