"""Builds one attempt's StreamResult from normalized wire events (ACC-1..8).

Knows nothing of retries, states or callbacks; never performs I/O. Text and argument fragments are
kept in lists and joined once at the end, so any fragmentation costs linear time (ACC-4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .result import Choice, StreamResult, ToolCall, Usage

__all__ = ["Accumulator", "Pieces", "ToolSlot"]

_SURROGATE = re.compile("[\ud800-\udfff]")


class Pieces:
    """Append-only text pieces, compacted in blocks so memory stays near the text's own size.

    A million one-character fragments held as a million `str` objects would cost ~50 bytes each;
    joining every 256 pieces into one block keeps the overhead small while each character is
    copied at most twice (ACC-4: linear time, SEC-2: bounded memory).
    """

    __slots__ = ("_blocks", "_pending")
    _BLOCK = 256

    def __init__(self) -> None:
        self._blocks: list[str] = []
        self._pending: list[str] = []

    def append(self, piece: str) -> None:
        pending = self._pending
        pending.append(piece)
        if len(pending) >= self._BLOCK:
            self._blocks.append("".join(pending))
            pending.clear()

    def __bool__(self) -> bool:
        return bool(self._pending or self._blocks)

    def join(self) -> str:
        if self._pending:
            self._blocks.append("".join(self._pending))
            self._pending.clear()
        if len(self._blocks) > 1:
            self._blocks[:] = ["".join(self._blocks)]
        return self._blocks[0] if self._blocks else ""


def _join(pieces: Pieces) -> str:
    text = pieces.join()
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
    fragments: Pieces = field(default_factory=Pieces)
    extra: dict[str, Any] | None = None

    def to_tool_call(self) -> ToolCall:
        return ToolCall(id=self.id, name=self.name, arguments=_join(self.fragments), extra=self.extra)


class Accumulator:
    """One attempt's text, reasoning, refusal, tool calls, finish reason, usage and identity."""

    __slots__ = (
        "_by_index",
        "extra",
        "finish_reason",
        "model",
        "provider_data",
        "raw",
        "reasoning_parts",
        "refusal_parts",
        "response_id",
        "slots",
        "text_parts",
        "usage",
    )

    def __init__(self) -> None:
        self.text_parts = Pieces()
        self.reasoning_parts = Pieces()
        self.refusal_parts = Pieces()
        self.slots: list[ToolSlot] = []
        self._by_index: dict[int, ToolSlot] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.model: str | None = None
        self.response_id: str | None = None
        self.provider_data: dict[str, Any] = {}
        self.raw: Any = None
        self.extra: dict[int, Accumulator] | None = None  # n>1: the other choices, by index

    def choice(self, index: int) -> Accumulator:
        """The accumulator of choice `index` > 0 (n>1)."""
        if self.extra is None:
            self.extra = {}
        found = self.extra.get(index)
        if found is None:
            found = self.extra[index] = Accumulator()
        return found

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

    def tools_in_flight(self) -> list[ToolSlot]:
        """Every tool call of a response that has not finished: a tool block the provider closed
        is still lost if the stream is cut before the finish reason."""
        return [] if self.finish_reason is not None else list(self.slots)

    # -- result ---------------------------------------------------------------------------------
    def text(self) -> str:
        return _join(self.text_parts)

    def build(self) -> StreamResult:
        content = self.text() if self.text_parts else None
        refusal = _join(self.refusal_parts) if self.refusal_parts else None
        finish_reason = self.finish_reason
        provider_data = dict(self.provider_data)
        if refusal is not None:
            if content:  # ACC-6: a refusal beside real content stays beside it
                provider_data["refusal"] = refusal
            else:
                content = refusal
                finish_reason = "content_filter"
        result = StreamResult(
            content=content,
            reasoning=_join(self.reasoning_parts) if self.reasoning_parts else None,
            refusal=refusal,
            tool_calls=[slot.to_tool_call() for slot in self.slots],
            finish_reason=finish_reason,
            usage=self.usage,
            model=self.model,
            id=self.response_id,
            provider_data=provider_data,
            raw=self.raw,
        )
        if self.extra:
            result.extra_choices = [self.extra[index].as_choice(index) for index in sorted(self.extra)]
        return result

    def as_choice(self, index: int) -> Choice:
        built = self.build()
        return Choice(
            index=index,
            content=built.content,
            reasoning=built.reasoning,
            refusal=built.refusal,
            tool_calls=built.tool_calls,
            finish_reason=built.finish_reason,
        )
