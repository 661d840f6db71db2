"""SDK model objects built cheaply: what pydantic's `model_construct` builds, without its per-call work.

The SDKs' own path from a payload to an object (`construct_type`) walks every field's type and
costs several times the rest of a chunk's work; pydantic's `model_construct` costs a third of
that. A chunk of streamed text is the same few objects with one field changed, so `Builder` keeps
each class's defaults once and makes an instance as `model_construct` does: the fields' values,
which fields were set, the extra and private slots. At the first build a `Builder` checks itself
against `model_construct` on the same values; if pydantic ever lays its objects out otherwise,
it uses `model_construct` from then on (slower, still equal). Never performs I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

__all__ = ["Builder"]

_set = object.__setattr__
_IMMUTABLE = (type(None), str, int, float, bool, tuple, frozenset)


def _pydantic_construct(cls: type[Any]) -> Callable[..., Any]:
    """pydantic's own `model_construct` (the SDKs' base classes override it with a slower one),
    found on the class itself: pydantic comes with each SDK, not with fsm_agent."""
    for base in cls.__mro__:
        if base.__name__ == "BaseModel" and base.__module__.startswith("pydantic"):
            construct: Callable[..., Any] = base.__dict__["model_construct"].__func__
            return construct
    raise TypeError(f"{cls.__name__} is not a pydantic model")


def _layout(obj: Any) -> tuple[Any, ...]:
    return (obj.__dict__, obj.__pydantic_fields_set__, obj.__pydantic_extra__, obj.__pydantic_private__)


class Builder:
    """Builds instances of one pydantic model class, as `model_construct(**values)` would."""

    __slots__ = (
        "_checked",
        "_cls",
        "_construct",
        "_defaults",
        "_extra",
        "_fields",
        "_mutable",
        "_private",
        "fast",
    )

    def __init__(self, cls: type[Any]) -> None:
        self._cls = cls
        self._construct = _pydantic_construct(cls)
        probe = self._construct(cls)
        self._defaults: dict[str, Any] = dict(probe.__dict__)
        self._mutable = tuple(k for k, v in self._defaults.items() if not isinstance(v, _IMMUTABLE))
        self._extra = probe.__pydantic_extra__  # None: the model keeps no extra fields
        self._private = probe.__pydantic_private__
        self._fields = frozenset(cls.model_fields)
        self._checked = False
        self.fast = True

    def __call__(self, **values: Any) -> Any:
        if not self._checked:
            return self._first(values)
        if not self.fast:
            return self._construct(self._cls, **values)
        return self._build(values)

    def _build(self, values: dict[str, Any]) -> Any:
        obj = object.__new__(self._cls)
        fields = self._defaults.copy()
        for key in self._mutable:
            fields[key] = copy.copy(fields[key])
        extra: dict[str, Any] | None = None if self._extra is None else {}
        if values.keys() <= self._fields:
            fields.update(values)
        else:
            for key, value in values.items():
                if key in self._fields:
                    fields[key] = value
                elif extra is not None:
                    extra[key] = value
        _set(obj, "__dict__", fields)
        _set(obj, "__pydantic_fields_set__", set(values))
        _set(obj, "__pydantic_extra__", extra)
        _set(obj, "__pydantic_private__", None if self._private is None else dict(self._private))
        return obj

    def _first(self, values: dict[str, Any]) -> Any:
        self._checked = True
        expected = self._construct(self._cls, **values)
        try:
            built = self._build(values)
            self.fast = _layout(built) == _layout(expected) and built == expected
        except Exception:
            self.fast = False
        return expected
