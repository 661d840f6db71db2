"""The `Frozen` value classes (events, actions, Usage) behave as the frozen slotted dataclasses
they replaced: equality by class and fields, hash, repr, immutability, pattern matching, copying
and pickling; the SSE frame (a named tuple) matches and copies the same way."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from fsm_agent._internal import actions
from fsm_agent._internal.events import AttemptFailed, Keepalive, ReasoningDelta, TextDelta, ToolCallDelta
from fsm_agent._internal.result import Usage
from fsm_agent._internal.wire.sse import SSEFrame


def test_equality_is_by_class_and_fields() -> None:
    assert TextDelta("a") == TextDelta("a")
    assert TextDelta("a") != TextDelta("b")
    assert TextDelta("a") != ReasoningDelta("a")  # same fields, another class
    assert TextDelta("a") != ("a",) and TextDelta("a") != "a"
    assert Keepalive() == Keepalive()
    assert ToolCallDelta(1, arguments="x") == ToolCallDelta(index=1, id=None, name=None, arguments="x")
    usage = Usage(input_tokens=1, output_tokens=2, total_tokens=3, cached_tokens=0)
    assert hash(Usage(1, 2, 3, 0)) == hash(usage)
    assert len({TextDelta("a"), TextDelta("a"), ReasoningDelta("a")}) == 2


def test_repr_is_the_dataclass_repr() -> None:
    assert repr(TextDelta("x")) == "TextDelta(text='x')"
    assert repr(Keepalive()) == "Keepalive()"
    assert repr(Usage(1, cached_tokens=0)) == (
        "Usage(input_tokens=1, output_tokens=None, total_tokens=None, cached_tokens=0, estimated=False)"
    )
    assert repr(actions.Remember("stall")) == "Remember(fact='stall', seconds=0.0, reading=None)"


def test_fields_cannot_be_assigned_or_deleted() -> None:
    event = ToolCallDelta(0, name="f")
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.name = "g"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del event.name  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.other = 1  # type: ignore[attr-defined]
    assert event.name == "f" and not hasattr(event, "__dict__")


def test_match_args_are_the_fields_in_order() -> None:
    assert ToolCallDelta.__match_args__ == ("index", "id", "name", "arguments", "extra", "type")
    assert SSEFrame.__match_args__ == ("event", "data", "id", "retry")
    match actions.Wait(1.5, "backoff"):
        case actions.Wait(seconds, source):
            assert (seconds, source) == (1.5, "backoff")
        case _:  # pragma: no cover - the match above must take it
            pytest.fail("no match")


def test_copies_and_pickles_are_equal_values() -> None:
    error = ValueError("boom")
    for value in (
        TextDelta("x"),
        SSEFrame("e", "d", "1", 2),
        Usage(1, 2, 3, 4),
        actions.OpenAttempt(1, True, False),
        Keepalive(),
    ):
        assert copy.copy(value) == value and copy.deepcopy(value) == value
        assert pickle.loads(pickle.dumps(value)) == value
    failed = copy.deepcopy(AttemptFailed(error, hint=2.0))
    assert type(failed.error) is ValueError and failed.hint == 2.0
