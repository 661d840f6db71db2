"""The items of an `events` line (TR-2) into events, with consecutive text deltas kept as runs.

An item is `[t, kind]`, `[t, kind, payload]`, or a run of text (reasoning) deltas
`[t, kind, [text, …], [t, …]]` (docs/trace-format.md). Consecutive deltas of one kind, in either
form, become one `DeltaRun`: their texts and times as plain lists (straight from the JSON decoder
for a run), with no object per delta, which is what makes reading a wire recording cheap. Every
value is checked and only copied into `fsm_agent._internal.events` dataclasses; a defect raises
`CodecError` naming the item. Never performs I/O, never imports or evaluates anything it reads.
"""

from __future__ import annotations

from typing import Any

from ..events import ReasoningDelta, ResponseMeta, TextDelta
from .codec import CodecError, decode_event

__all__ = ["DeltaRun", "decode_items"]

# The deltas that consecutive ones make a run (`DeltaRun`), on disk and once read.
_RUN_KINDS: dict[str, type[TextDelta] | type[ReasoningDelta]] = {
    "TextDelta": TextDelta,
    "ReasoningDelta": ReasoningDelta,
}


class DeltaRun:
    """Consecutive text (or reasoning) deltas of one `events` line, kept as their texts and times.

    The bulk of a wire recording. Held as two plain lists (straight from the JSON decoder when the
    line has the run form) instead of one event object per delta; `deltas()` builds those objects
    for whoever needs them one by one (the what-if simulation)."""

    __slots__ = ("kind", "texts", "times")

    def __init__(
        self, kind: type[TextDelta] | type[ReasoningDelta], texts: list[str], times: list[float]
    ) -> None:
        self.kind = kind
        self.texts = texts
        self.times = times

    def __len__(self) -> int:
        return len(self.texts)

    def deltas(self) -> list[object]:
        kind = self.kind
        return [kind(text) for text in self.texts]

    def __repr__(self) -> str:
        return f"DeltaRun({self.kind.__name__}, {len(self.texts)} deltas)"


def decode_items(items: list[Any]) -> tuple[list[float], list[object]]:
    """The items of an `events` line into times and events; consecutive text (reasoning) deltas,
    whether recorded one by one or as runs, become one `DeltaRun` without an object per delta."""
    times: list[float] = []
    events: list[object] = []
    add_time, add_event = times.append, events.append
    run: DeltaRun | None = None  # the run a next delta of the same kind extends
    cls: Any
    for number, item in enumerate(items):
        if type(item) is list:
            size = len(item)
            if size == 3:  # [t, kind, payload]: the bulk of a recording in the one-by-one form
                t, kind, payload = item
                if type(t) is float and type(payload) is str:
                    cls = _RUN_KINDS.get(kind) if type(kind) is str else None
                    if cls is not None:
                        if run is not None and run.kind is cls:
                            run.texts.append(payload)
                            run.times.append(t)
                        else:
                            run = DeltaRun(cls, [payload], [t])
                            add_time(t)
                            add_event(run)
                        continue
                elif (
                    type(t) is float
                    and kind == "ResponseMeta"
                    and type(payload) is dict
                    and len(payload) == 2
                ):
                    response_id, model = payload.get("id"), payload.get("model")
                    if type(response_id) is str and type(model) is str:
                        run = None
                        add_time(t)
                        add_event(ResponseMeta(response_id, model))
                        continue
            elif size == 4:  # [t, kind, [text, ...], [t, ...]]: a run of deltas
                t, kind, texts, run_times = item
                cls = _RUN_KINDS.get(kind) if type(kind) is str else None
                if cls is None:
                    raise CodecError(f"event {number}: only TextDelta and ReasoningDelta have a run form")
                run_times = _check_run(number, t, texts, run_times)
                if run is not None and run.kind is cls:
                    run.texts.extend(texts)
                    run.times.extend(run_times)
                else:
                    run = DeltaRun(cls, texts, run_times)
                    add_time(run_times[0])
                    add_event(run)
                continue
        run = None
        t, event = _decode_item(item, number)
        add_time(t)
        add_event(event)
    return times, events


def _check_run(number: int, t: Any, texts: Any, run_times: Any) -> list[float]:
    """A run's texts and times checked (times as floats)."""
    if type(texts) is not list or type(run_times) is not list or not texts or len(texts) != len(run_times):
        raise CodecError(f"event {number}: a run needs as many times as texts, and at least one")
    if set(map(type, texts)) != {str}:
        raise CodecError(f"event {number}: the texts of a run must be strings")
    kinds = set(map(type, run_times))
    if kinds != {float}:
        if not kinds <= {float, int}:
            raise CodecError(f"event {number}: the times of a run must be numbers")
        run_times = [float(value) for value in run_times]
    if (type(t) is not float and type(t) is not int) or t != run_times[0]:
        raise CodecError(f"event {number}: t must be the time of the run's first delta")
    return run_times  # type: ignore[no-any-return]


def _decode_item(item: Any, number: int) -> tuple[float, object]:
    if type(item) is not list or not 2 <= len(item) <= 3:
        raise CodecError(f"event {number}: must be [t, kind], [t, kind, payload] or a run of deltas")
    t = item[0]
    if type(t) is not float and type(t) is not int:
        raise CodecError(f"event {number}: t must be a number")
    payload = item[2] if len(item) == 3 else {}
    if type(payload) is str:
        payload = {"text": payload}
    elif type(payload) is not dict:
        raise CodecError(f"event {number}: the payload must be an object or a string")
    try:
        return float(t), decode_event({**payload, "kind": item[1]})
    except CodecError as exc:
        raise CodecError(f"event {number}: {exc}") from None
