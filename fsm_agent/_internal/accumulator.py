"""Builds one attempt's StreamResult from normalized wire events (ACC-1..8).

Knows nothing of retries, states or callbacks; never performs I/O. Text and argument fragments are
kept in lists and joined once at the end, so any fragmentation costs linear time (ACC-4). When the
caller watches tool arguments (ACC-11), each call's fragments also go through an incremental
`PartialJson` reader, and the calls whose value grew wait in `take_args()` for the driver; invalid
arguments stop that call's reader, never the request (the joined text stays the truth).
"""

from __future__ import annotations

import functools
import json
import logging
import re
from typing import Any

from .partial_json import PartialJson, PartialJsonError
from .result import Choice, StreamResult, ToolCall, Usage

__all__ = ["ARGS_PACE", "ARGS_PACED_FROM", "Accumulator", "Pieces", "ToolSlot"]

log = logging.getLogger("fsm_agent")

# ACC-11 pacing (see `Accumulator.take_args`): below this many characters of arguments every read
# that grows them delivers; above, at most one value per ARGS_PACE seconds of the stream's time.
ARGS_PACED_FROM = 65_536
ARGS_PACE = 0.01


@functools.cache
def _surrogate() -> re.Pattern[str]:
    # Compiled at the first text that is not ASCII (~0.15 ms here: its range is a big charset).
    return re.compile("[\ud800-\udfff]")


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
    if not text.isascii() and _surrogate().search(text):
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


class ToolSlot:
    """One tool call as its fragments arrive."""

    __slots__ = ("args_taken_at", "extra", "fragments", "id", "index", "name", "position", "reader", "type")

    def __init__(self, index: int, position: int = 0) -> None:
        self.index = index
        self.id = ""
        self.name = ""
        self.fragments = Pieces()
        self.extra: dict[str, Any] | None = None
        self.position = position  # where the call stands in the result's tool_calls (the callbacks' index)
        # ACC-11: the arguments' reader while they are watched; None once it failed (invalid JSON)
        self.reader: PartialJson | None = None
        self.args_taken_at = float("-inf")  # when a big call's value was last taken (`take_args`)
        self.type = "function"

    def to_tool_call(self, at_limit: bool = False) -> ToolCall:
        """The call; `at_limit`: the answer stopped at its output limit, so arguments that are not
        whole JSON were cut by it (`incomplete`)."""
        arguments = _join(self.fragments)
        return ToolCall(
            id=self.id,
            name=self.name,
            arguments=arguments,
            extra=self.extra,
            type=self.type,
            incomplete=at_limit and not _is_json(arguments),
        )


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _position(slot: ToolSlot) -> int:
    return slot.position


class Accumulator:
    """One attempt's text, reasoning, refusal, tool calls, finish reason, usage and identity."""

    __slots__ = (
        "_args_due",
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
        "watch_args",
    )

    def __init__(self, watch_args: bool = False) -> None:
        self.watch_args = watch_args
        self._args_due: dict[int, ToolSlot] = {}
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
        kind: str | None = None,
    ) -> tuple[ToolSlot, bool, bool]:
        """Apply one fragment. Returns (slot, opened a new slot, name became known)."""
        slot = self._by_index.get(index)
        opened = False
        if slot is None or (call_id and slot.id and call_id != slot.id):
            slot = ToolSlot(index=index, position=len(self.slots))
            if self.watch_args:
                slot.reader = PartialJson()
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
            if slot.reader is not None:
                self._read_args(slot, arguments)
        if extra:
            slot.extra = {**(slot.extra or {}), **extra}
        if kind:
            slot.type = kind
        return slot, opened, named

    def _read_args(self, slot: ToolSlot, arguments: str) -> None:
        reader = slot.reader
        assert reader is not None
        try:
            grew = reader.feed(arguments)
        except PartialJsonError as exc:
            # ACC-11: the raw arguments stay the truth; only the partial values stop for this call.
            log.info(
                "tool call %d (%s): arguments are not JSON (%s); on_tool_args stops",
                slot.position,
                slot.name,
                exc,
            )
            slot.reader = None
            self._args_due.pop(slot.position, None)
            return
        if grew:
            self._args_due[slot.position] = slot

    @property
    def args_due(self) -> bool:
        """Some call's arguments grew since the last `take_args()`."""
        return bool(self._args_due)

    def take_args(self, now: float | None = None) -> list[tuple[int, str, Any]]:
        """(position, name, value so far) of each call whose arguments grew since they were last
        taken, in the order of the calls; each value is built now, once.

        `now` (seconds, the time of the read) paces big calls: building a value copies its open
        string (a new `str`: the caller may hold the last one), so a call past `ARGS_PACED_FROM`
        characters is taken at most every `ARGS_PACE` seconds while it grows (a display needs no
        more), and always once complete. None takes every call that grew (before an event that may
        end the attempt, so the last value reaches the caller)."""
        due = self._args_due
        if not due:
            return []
        if now is not None:
            now = round(now, 6)  # as a trace records it, so that a replay paces alike
        slots = sorted(due.values(), key=_position) if len(due) > 1 else list(due.values())
        taken: list[tuple[int, str, Any]] = []
        for slot in slots:
            reader = slot.reader
            if reader is None:
                del due[slot.position]
                continue
            if now is not None and reader.size >= ARGS_PACED_FROM and not reader.complete:
                if now - slot.args_taken_at < ARGS_PACE:
                    continue  # stays due: taken by a later read, or before the attempt can end
                slot.args_taken_at = now
            del due[slot.position]
            taken.append((slot.position, slot.name, reader.value()))
        return taken

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
            tool_calls=[slot.to_tool_call(finish_reason == "length") for slot in self.slots],
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
