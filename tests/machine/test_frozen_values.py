"""The `Frozen` value classes (events, actions, Usage) behave as the frozen slotted dataclasses
they replaced: equality by class and fields, hash, repr, immutability, pattern matching, copying
and pickling; the SSE frame (a named tuple) matches and copies the same way."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from fsm_agent import Backoff, Recovery, Route, Timeouts
from fsm_agent._internal import actions
from fsm_agent._internal.events import AttemptFailed, Keepalive, ReasoningDelta, TextDelta, ToolCallDelta
from fsm_agent._internal.result import Choice, StreamResult, ToolCall, Usage
from fsm_agent._internal.trace.records import TransitionRecord
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


# -- the public value classes: `Frozen` classes registered as dataclasses (`frozen.as_dataclass`) ----
PUBLIC_VALUES = (
    (Backoff, {"base": 1.0}, {"cap": 2.0}),
    (Timeouts, {"connect": 5.0}, {"liveness": 9.0}),
    (Recovery, {"continue_": True}, {"final": "raise"}),
    (Route, {"client_or_factory": object, "params": {"model": "m"}, "name": "r"}, {"retries": 0}),
    (
        TransitionRecord,
        {
            **dict.fromkeys(("request_id", "trigger", "source", "dest"), "x"),
            **dict.fromkeys(("attempt", "seq", "t", "visible_chars", "tools_in_flight"), 1),
            "guards": {"g": True},
        },
        {"route": "r"},
    ),
)


# ... and the public mutable records: `Record` classes registered the same way
PUBLIC_RECORDS = (
    (ToolCall, {"id": "c1", "name": "f", "arguments": "{}"}, {"incomplete": True}),
    (Choice, {"index": 1}, {"content": "x"}),
    (StreamResult, {"content": "hi"}, {"attempts": 2}),
)


@pytest.mark.parametrize(
    ("cls", "given", "changed"), PUBLIC_VALUES + PUBLIC_RECORDS, ids=lambda v: getattr(v, "__name__", "")
)
def test_a_public_value_class_takes_exactly_its_declared_fields(
    cls: type, given: dict[str, Any], changed: dict[str, Any]
) -> None:
    """Its own `__init__` (no generated code) takes the dataclass fields it declares: the same
    names in the same order, each with its declared default (None for a `default_factory`)."""
    fields = dataclasses.fields(cls)
    parameters = list(inspect.signature(cls).parameters.values())
    assert [p.name for p in parameters] == [f.name for f in fields] == list(cls.__match_args__)
    for parameter, field in zip(parameters, fields, strict=True):
        if field.default_factory is not dataclasses.MISSING:
            assert parameter.default is None, field.name
            assert getattr(cls(**given), field.name) == field.default_factory()
        else:
            expected = inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default
            assert parameter.default == expected, field.name


@pytest.mark.parametrize(("cls", "given", "changed"), PUBLIC_VALUES, ids=lambda v: getattr(v, "__name__", ""))
def test_a_public_value_class_behaves_as_a_frozen_slotted_dataclass(
    cls: type, given: dict[str, Any], changed: dict[str, Any]
) -> None:
    value = cls(**given)
    first = cls.__match_args__[0]
    assert dataclasses.is_dataclass(value) and not hasattr(value, "__dict__")
    assert value == cls(**given) and value != dataclasses.replace(value, **changed)
    assert dataclasses.replace(value, **changed) == cls(**given, **changed)
    assert dataclasses.replace(value) == value and type(dataclasses.replace(value)) is cls
    assert dataclasses.asdict(value) == {name: getattr(value, name) for name in cls.__match_args__}
    assert copy.deepcopy(value) == value and pickle.loads(pickle.dumps(value)) == value
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, first, 1)
    with pytest.raises((TypeError, AttributeError)):  # as the frozen slotted dataclass raised on 3.11
        value.unknown = 1
    with pytest.raises(TypeError, match="frozen"):  # a frozen dataclass may inherit it, not a mutable one
        dataclasses.dataclass(type("Mutable", (cls,), {"__annotations__": {"extra": "int"}, "extra": 0}))
    inherited = dataclasses.dataclass(frozen=True)(type("Sub", (cls,), {}))(**given)
    assert dataclasses.astuple(inherited) == dataclasses.astuple(value)
    with pytest.raises(TypeError, match="unexpected keyword"):
        cls(**given, unknown=1)


@pytest.mark.parametrize(
    ("cls", "given", "changed"), PUBLIC_RECORDS, ids=lambda v: getattr(v, "__name__", "")
)
def test_a_public_record_behaves_as_a_mutable_dataclass(
    cls: type, given: dict[str, Any], changed: dict[str, Any]
) -> None:
    value = cls(**given)
    assert dataclasses.is_dataclass(value) and value == cls(**given) and value != 1
    assert dataclasses.replace(value, **changed) == cls(**given, **changed) != value
    assert dataclasses.asdict(value) == {name: getattr(value, name) for name in cls.__match_args__}
    assert copy.deepcopy(value) == value and pickle.loads(pickle.dumps(value)) == value
    with pytest.raises(TypeError, match="unhashable"):
        hash(value)
    name, new = next(iter(changed.items()))
    setattr(value, name, new)
    assert value == cls(**given, **changed)
    with pytest.raises(TypeError, match="unexpected keyword"):
        cls(**given, unknown=1)
