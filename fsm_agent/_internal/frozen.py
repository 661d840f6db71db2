"""`Frozen`: the base of the small immutable value classes (events, actions, token counts).

A `Frozen` subclass annotates its fields (their order is the fields' order), lists them in
`__slots__`, and writes its own `__init__`, which sets each field through `object.__setattr__`.
The base gives what a `@dataclass(frozen=True, slots=True)` gives and the code relies on:
equality between instances of the same class field by field, a hash of the fields, the dataclass `repr`
(`TextDelta(text='x')`), `__match_args__`, assignment and deletion refused with
`dataclasses.FrozenInstanceError`, and copying and pickling by the fields. Type checkers read a
subclass as a frozen dataclass (`dataclass_transform`), so assigning a field is a type error too.

Why not `@dataclass`: defining such a class costs about 0.4-0.9 ms at import (six generated
methods compiled with `exec`, the class built twice for its slots, `inspect.signature` for a
missing docstring), and `from fsm_agent import Session` defines some thirty of them; a `Frozen`
subclass costs what any small class costs. Constructing one costs the same as the dataclass it
replaces (the same `object.__setattr__` per field).

The public value classes are dataclasses by contract (`dataclasses.fields`, `replace` and
`asdict` work on them): `Backoff`, `Timeouts`, `Recovery`, `Route` and `TransitionRecord` are
`Frozen` subclasses, the mutable results `ToolCall`, `Choice` and `StreamResult` subclasses of
`Record`; each declares its fields with their defaults, as a dataclass does, and writes its
`__init__`, and `as_dataclass` registers the fields without generating any code (~0.1 ms instead
of ~0.7 ms a class). `tests/machine/test_frozen_values.py` checks that each one's `__init__`
takes exactly its fields, in order, with their defaults.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import FrozenInstanceError, dataclass
from operator import attrgetter
from typing import Any, ClassVar, TypeVar, dataclass_transform, overload

__all__ = ["Frozen", "Record", "as_dataclass", "replace"]

_F = TypeVar("_F", bound="Frozen")
_V = TypeVar("_V", bound="_Fields")

set_field = object.__setattr__  # what a subclass's __init__ sets its fields with


def _getter(fields: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A function of an instance returning its field values as a tuple."""
    if len(fields) > 1:
        return attrgetter(*fields)
    if fields:
        one = attrgetter(fields[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


class _Fields:
    """What `Frozen` and `Record` share: the fields are the class's own annotations, in order
    (`__match_args__`), and two instances of the same class are equal when their fields are."""

    __slots__ = ()
    __match_args__: ClassVar[tuple[str, ...]] = ()
    _values: ClassVar[Callable[..., tuple[Any, ...]]] = staticmethod(_getter(()))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # The class's own annotations, in the order they are declared (`inspect.get_annotations`
        # would import `inspect`, the very cost this base avoids).
        fields = tuple(cls.__dict__.get("__annotations__", ()))  # noqa: RUF063
        cls.__match_args__ = fields  # type: ignore[misc]  # the base declares it read-only
        cls._values = staticmethod(_getter(fields))  # called as `self._values(self)`

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return bool(self._values(self) == self._values(other))
        return NotImplemented


class Record(_Fields):
    """The mutable counterpart of `Frozen` (`ToolCall`, `Choice`, `StreamResult`): equal by class
    and fields and unhashable, as a mutable dataclass; each subclass writes its `__init__` and its
    `__repr__`."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]  # equal by mutable fields


@dataclass_transform(frozen_default=True)
class Frozen(_Fields):
    """Immutable, slotted, compared and hashed by its fields (see the module's docstring)."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __hash__(self) -> int:
        return hash(self._values(self))

    def __repr__(self) -> str:
        pairs = zip(self.__match_args__, self._values(self), strict=True)
        fields = ", ".join(f"{name}={value!r}" for name, value in pairs)
        return f"{type(self).__qualname__}({fields})"

    def __reduce__(self) -> tuple[Any, ...]:  # copy, deepcopy and pickle: rebuilt through __init__
        return (type(self), self._values(self))


def replace(obj: _F, **changes: Any) -> _F:
    """A copy of `obj` with `changes` to its fields, as `dataclasses.replace` (its `__init__` takes
    every field by its name)."""
    values = dict(zip(obj.__match_args__, obj._values(obj), strict=True))
    return type(obj)(**{**values, **changes})


@overload
def as_dataclass(cls: type[_V], /) -> type[_V]: ...
@overload
def as_dataclass(*, slots: bool) -> Callable[[type[_V]], type[_V]]: ...
def as_dataclass(cls: type[_V] | None = None, /, *, slots: bool = True) -> Any:
    """`cls`, a `Frozen` or `Record` subclass with its own `__init__` (and no `__slots__` of its
    own), made a dataclass of the fields it declares, their defaults included, with no generated
    code: its `__init__` is its own, and equality, hash, repr and immutability are its base's.
    Slotted unless `slots=False` (a class with descriptor fields keeps a `__dict__`). A `Frozen`
    one reads as a frozen dataclass (`__dataclass_params__`), so that a frozen dataclass may
    inherit from it, as from the frozen dataclass it was.

    A field with a `default_factory` is given to `__init__` as None for "a new one"."""

    def register(cls: type[_V]) -> type[_V]:
        made = dataclass(init=False, repr=False, eq=False, slots=slots)(cls)
        if issubclass(made, Frozen):
            # What `dataclasses` reads to let a frozen dataclass inherit it: the parameters of one
            # frozen dataclass, made once (generating `__setattr__` and `__delattr__` for each
            # class cost ~0.3 ms). An undocumented attribute: test_frozen_values subclasses each.
            made.__dataclass_params__ = _frozen_params()  # type: ignore[attr-defined]
        return made

    return register if cls is None else register(cls)


@functools.cache
def _frozen_params() -> Any:
    @dataclass(init=False, repr=False, eq=False, frozen=True)
    class FrozenParams:
        """(A docstring, or `dataclass` would build one with `inspect.signature`.)"""

    return FrozenParams.__dataclass_params__  # type: ignore[attr-defined]
