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
`Record`; each declares its fields with their defaults, as a dataclass does (`fresh(list)` for
`field(default_factory=list)`), and writes its `__init__`. `as_dataclass` makes the class slotted
and registers it as a dataclass without generating any code, and without importing `dataclasses`
(which imports `inspect`: ~40 M of the ~250 M instructions `from fsm_agent import Session` cost):
what a `dataclasses` function reads (`__dataclass_fields__`, `__dataclass_params__`) is made at
its first read, by `dataclasses` itself, from the class's declaration.
`tests/machine/test_frozen_values.py` checks that each one's `__init__` takes exactly its fields,
in order, with their defaults, and that it behaves as the dataclass it was.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, ClassVar, TypeVar, dataclass_transform, overload

__all__ = ["Frozen", "Record", "as_dataclass", "fresh", "replace"]

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
        from dataclasses import FrozenInstanceError  # (raised by mistakes only: imported then)

        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        from dataclasses import FrozenInstanceError

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


class _Fresh:
    """A field's default that is a new `factory()` for each instance (see `fresh`)."""

    __slots__ = ("factory",)

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.factory = factory


def fresh(factory: Callable[[], Any]) -> Any:
    """The declared default of a field that is a new `factory()` for each instance, as
    `dataclasses.field(default_factory=factory)` declares it (its `__init__` takes None for it)."""
    return _Fresh(factory)


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

    A field with a `default_factory` (declared `fresh(factory)`) is given to `__init__` as None
    for "a new one"."""

    def register(cls: type[_V]) -> type[_V]:
        names = cls.__match_args__
        declared = {name: cls.__dict__[name] for name in names if name in cls.__dict__}
        made = cls
        if slots:
            # The class again, its fields in `__slots__` and their defaults out of its namespace
            # (a slot and a class attribute cannot share a name), as `dataclass(slots=True)` does.
            skip = {*names, "__dict__", "__weakref__"}
            namespace = {key: value for key, value in cls.__dict__.items() if key not in skip}
            namespace["__slots__"] = names
            made = type(cls.__name__, cls.__bases__, namespace)
            made.__qualname__ = cls.__qualname__
        else:
            for name, default in declared.items():
                if type(default) is _Fresh:
                    delattr(made, name)  # as `dataclass` leaves it: each instance sets its own
        registration = _Registration(made, declared)
        type.__setattr__(made, "__dataclass_fields__", _Registered(registration, fields=True))
        type.__setattr__(made, "__dataclass_params__", _Registered(registration, fields=False))
        return made

    return register if cls is None else register(cls)


class _Registration:
    """What `dataclasses` reads of an `as_dataclass` class, made once, at the first read: a
    dataclass declared as the class is (its annotations and defaults; no code generated for it
    is kept) lends its fields, and, for a `Frozen` class, its parameters (frozen)."""

    __slots__ = ("declared", "owner")

    def __init__(self, owner: type, declared: dict[str, Any]) -> None:
        self.owner = owner
        self.declared = declared

    def install(self) -> None:
        import dataclasses

        owner = self.owner
        namespace: dict[str, Any] = {
            "__annotations__": dict(owner.__dict__.get("__annotations__", {})),  # noqa: RUF063
            "__module__": owner.__module__,
            "__qualname__": owner.__qualname__,
            "__doc__": owner.__doc__ or owner.__name__,  # (none: `dataclass` would call `inspect`)
        }
        for name, default in self.declared.items():
            fresh_default = type(default) is _Fresh
            namespace[name] = dataclasses.field(default_factory=default.factory) if fresh_default else default
        frozen = issubclass(owner, Frozen)
        shadow: Any = dataclasses.dataclass(init=False, repr=False, eq=False, frozen=frozen)(
            type(owner.__name__, (), namespace)
        )
        type.__setattr__(owner, "__dataclass_fields__", shadow.__dataclass_fields__)
        type.__setattr__(owner, "__dataclass_params__", shadow.__dataclass_params__)


class _Registered:
    """`__dataclass_fields__` (`fields=True`) or `__dataclass_params__` of an `as_dataclass`
    class until its first read, which puts the real ones in their place (on the class that
    declared them, whichever subclass was asked)."""

    __slots__ = ("fields", "registration")

    def __init__(self, registration: _Registration, *, fields: bool) -> None:
        self.registration = registration
        self.fields = fields

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        registration = self.registration
        registration.install()
        name = "__dataclass_fields__" if self.fields else "__dataclass_params__"
        return getattr(registration.owner, name)
