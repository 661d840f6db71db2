"""Declarative shapes of provider payloads, checked in one place before a translator reads them (SEC-4).

A provider's payload is input, not trusted code: valid JSON of the wrong shape (a list where a
string belongs, a string for a number, `true` for text, an object where an event list belongs)
must become `ProviderStreamError(code="provider_stream_malformed_chunk")` naming the field, never a
`TypeError` or `KeyError` deep inside a translator. Each API declares, per event type, the fields
its translator reads and the JSON types each may hold (`Shape`); `Shape.check(payload)` walks only
those fields, so its cost is a few dict lookups per event. Unknown fields are ignored (providers add
fields all the time); a field's absence is `None`, allowed unless the field is `required`.

`parse_json` is the one `json.loads` of provider text: NaN, Infinity and numbers that overflow to
infinity (`1e999`) are rejected, and nesting deep enough to exhaust the recursion limit is a
malformed payload, not a `RecursionError`. `guarded` is the last net around a translator: whatever
plain-Python error a payload still provokes becomes the same malformed-chunk error.

Pure: never performs I/O, never imports a provider SDK.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..errors import FsmAgentError, ProviderStreamError
from ..redact import redact, truncate

__all__ = [
    "BOOL",
    "DICT",
    "INT",
    "LIST",
    "NUMBER",
    "PAYLOAD_ERRORS",
    "STR",
    "Lone",
    "Shape",
    "as_malformed",
    "guarded",
    "malformed",
    "parse_json",
]

MALFORMED = "provider_stream_malformed_chunk"
_NONE = type(None)

# JSON types, as Python types. Type identity, not isinstance: `true` is no integer here.
STR: tuple[type, ...] = (str,)
INT: tuple[type, ...] = (int,)
NUMBER: tuple[type, ...] = (int, float)
BOOL: tuple[type, ...] = (bool,)
DICT: tuple[type, ...] = (dict,)
LIST: tuple[type, ...] = (list,)
_JSON_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    dict: "an object",
    list: "a list",
    _NONE: "null",
}


def malformed(payload: str, what: str, value: object) -> ProviderStreamError:
    """A payload of the wrong shape; `payload` says which ("Bedrock event", …), `what` the rule."""
    text = truncate(redact(_safe_repr(value)), 200)
    return ProviderStreamError(
        f"malformed {payload}: {what}, got {_json_name(value)} {text}",
        code=MALFORMED,
        raw_text=text,
    )


def _safe_repr(value: object) -> str:
    try:
        return repr(value)
    except (RecursionError, ValueError):  # a deeply nested value, or an int too long to print
        return f"<{type(value).__name__}>"


def _json_name(value: object) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


class _Wrong(Exception):
    """Raised inside `Shape.check`; its path grows as it unwinds through the nested shapes."""

    def __init__(self, path: tuple[str | int, ...], expected: str, value: object) -> None:
        super().__init__(expected)
        self.path: list[str | int] = list(path)
        self.expected = expected
        self.value = value


class Shape:
    """The fields of one JSON object a translator reads, and what each may hold.

    `fields` maps a key to its JSON types (`STR`, `INT`, … or a tuple of them), or to a nested
    `Shape` (an object), or to `[Shape]` (a list of such objects). `required` names the fields
    that may not be absent or null. `by` and `cases` pick a further shape by the value of a
    discriminating field (an event's `type`): `Shape(by="type", cases={"text_delta": …})`.

    The declaration is compiled into a straight-line checking function (as `dataclasses` writes
    `__init__`): on the hot path, one dict lookup and one type test per declared field. It is
    compiled at its first call, not at the declaration: a process pays only for the shapes its
    requests meet (a nested shape is usually inlined into its parent's function and never called
    itself), and importing a provider's module compiles nothing. `compiled()` compiles at once.

    `read(payload, what)` is the same check, generated from the same declaration, that also
    returns the values of the top-level fields, in their declared order (None for an absent one):
    a translator that reads them takes them from it instead of looking each up again.
    """

    __slots__ = ("_check", "by", "cases", "check", "fields", "name", "read", "required")

    def __init__(
        self,
        name: str,
        fields: Mapping[str, Any] | None = None,
        *,
        required: tuple[str, ...] = (),
        by: str | None = None,
        cases: Mapping[str, Shape] | None = None,
    ) -> None:
        self.name = name
        self.fields = dict(fields or {})
        self.required = required
        self.by = by
        self.cases = dict(cases or {})
        # Each replaced by its compiled function at its first call (the same function after it).
        self._check: Callable[[object], None] = self._first_check
        # check(payload, what): raise the malformed-chunk error naming the first field of the
        # wrong shape in `payload`; `what` names the payload ("Chat Completions chunk", …).
        self.check: Callable[[object, str], None] = self._first_call
        # read(payload, what): `check`, then the top-level fields' values as a tuple.
        self.read: Callable[[object, str], tuple[Any, ...]] = self._first_read

    def _first_check(self, payload: object) -> None:
        self.plain_check()(payload)

    def _first_call(self, payload: object, what: str) -> None:
        self.compiled()(payload, what)

    def _first_read(self, payload: object, what: str) -> tuple[Any, ...]:
        if self.read == self._first_read:
            self.read = _compile(self, wrapped=True, reads=True)
        return self.read(payload, what)

    def plain_check(self) -> Callable[[object], None]:
        """The compiled check that raises `_Wrong` (what a parent with many cases calls)."""
        if self._check == self._first_check:
            self._check = _compile(self, wrapped=False)
        return self._check

    def compiled(self) -> Callable[[object, str], None]:
        """`check`, compiled now if it was not yet (a declaration's mistake is raised here)."""
        if self.check == self._first_call:
            self.check = _compile(self, wrapped=True)
        return self.check


def _report(wrong: _Wrong, what: str) -> ProviderStreamError:
    path = "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in wrong.path)
    return malformed(what, f"{path.lstrip('.') or 'the payload'} must be {wrong.expected}", wrong.value)


def _compile(shape: Shape, *, wrapped: bool, reads: bool = False) -> Any:
    """Write `shape`'s checking function: nested objects, lists and up to 16 discriminated cases
    inlined (the first declared case tested first: declare the hot one first). `wrapped` adds the
    translation of a failure into the malformed-chunk error; `reads`, the return of the top-level
    fields' values (`Shape.read`). Keys and names come from our own declarations only."""
    env: dict[str, Any] = {"_Wrong": _Wrong, "_report": _report, "_at": _at}
    env.update(dict=dict, list=list, str=str, len=len)
    kept: list[str] | None = [] if reads else None
    if wrapped:
        lines = ["def check(o, what):", "    try:"]
        _emit(shape, "o", (), "        ", 0, lines, env, kept=kept)
        lines += ["    except _Wrong as w:", "        raise _report(w, what) from None"]
    else:
        lines = ["def check(o):"]
        _emit(shape, "o", (), "    ", 0, lines, env)
    if kept is not None:
        lines.append(f"    return ({''.join(f'{name}, ' for name in kept)})")
    exec("\n".join(lines), env)  # our own declarations only, compiled once, at first use
    return env["check"]


def _at(items: list[Any], item: object) -> int:
    """The index of `item` in `items` (the first time it occurs: the same object occurring again
    would have failed its check there first)."""
    return next(index for index, each in enumerate(items) if each is item)


def _path(path: tuple[str, ...]) -> str:
    return "(" + "".join(f"{part}, " for part in path) + ")"


def _emit(
    shape: Shape,
    var: str,
    path: tuple[str, ...],
    ind: str,
    depth: int,
    lines: list[str],
    env: dict[str, Any],
    known_dict: bool = False,
    kept: list[str] | None = None,
    get: str | None = None,
) -> None:
    """Lines checking the object in `var` (at `path`: key literals and index variables);
    `known_dict`: the parent's field check already made sure it is an object. `kept`: each
    field's value is left in a variable of its own, whose name is appended (for `Shape.read`).
    `get`: the name `var.get` is already bound to (a discriminated case reads its parent's object).

    An object of a shape whose fields are all optional, and which holds its first declared field
    and nothing else (a Chat delta of text alone), has every other declared field absent, which
    its shape allows: only that field is checked, when it holds JSON types (not an object or a
    list, whose checks would be written twice). The full check gives the same outcome for it."""
    if not known_dict:
        const = f"K{len(env)}"
        env[const] = f"a JSON object ({shape.name})"
        lines.append(f"{ind}if type({var}) is not dict: raise _Wrong({_path(path)}, {const}, {var})")
    if get is None:
        get = f"g{depth}"
        lines.append(f"{ind}{get} = {var}.get")
    kind = f"s{depth}"
    fields = list(shape.fields.items())
    names = [f"r{number}" if kept is not None else f"v{depth}" for number in range(len(fields))]
    if kept is not None:
        kept += names
    if len(fields) > 1 and shape.by is None and not shape.required and type(fields[0][1]) is tuple:
        key, spec = fields[0]
        value = names[0]
        lines.append(f"{ind}{value} = {get}({key!r})")
        lines.append(f"{ind}if {value} is not None and len({var}) == 1:")  # that field alone
        _typed(spec, value, (*path, repr(key)), True, ind + "    ", depth, lines, env)
        if kept is not None:
            lines.append(f"{ind}    {' = '.join(names[1:])} = None")
        lines.append(f"{ind}else:")
        ind += "    "
        lines.append(f"{ind}if {value} is not None:")
        _typed(spec, value, (*path, repr(key)), True, ind + "    ", depth, lines, env)
        fields, names = fields[1:], names[1:]
    for (key, spec), value in zip(fields, names, strict=True):
        here = (*path, repr(key))
        lines.append(f"{ind}{value} = {get}({key!r})")
        if key == shape.by:  # the discriminator is a declared field: its value is at hand
            lines.append(f"{ind}{kind} = {value}")
        if key not in shape.required:
            lines.append(f"{ind}if {value} is not None:")
            _typed(spec, value, here, True, ind + "    ", depth, lines, env)
        else:
            _typed(spec, value, here, False, ind, depth, lines, env)
    if shape.by is not None:
        if shape.by not in shape.fields:
            lines.append(f"{ind}{kind} = {get}({shape.by!r})")
        if len(shape.cases) <= 16:
            for number, (name, case) in enumerate(shape.cases.items()):
                lines.append(f"{ind}{'elif' if number else 'if'} {kind} == {name!r}:")
                _emit(case, var, path, ind + "    ", depth + 1, lines, env, known_dict=True, get=get)
        else:
            cases, found = f"CASES{len(env)}", f"c{depth}"
            env[cases] = {name: case.plain_check() for name, case in shape.cases.items()}
            lines += [
                f"{ind}if type({kind}) is str:",
                f"{ind}    {found} = {cases}.get({kind})",
                f"{ind}    if {found} is not None:",
                f"{ind}        try: {found}({var})",
                f"{ind}        except _Wrong as w: w.path[0:0] = {_path(path)}; raise",
            ]


def _typed(
    spec: Any,
    value: str,
    here: tuple[str, ...],
    optional: bool,
    ind: str,
    depth: int,
    lines: list[str],
    env: dict[str, Any],
) -> None:
    """Lines checking the value of one field, held in `value` (at `here`): for an `optional`
    field, written where the value is known not to be None (absent or null: allowed)."""
    nested = each = None
    if isinstance(spec, Shape):
        nested, kinds = spec, DICT
    elif isinstance(spec, list):
        each, kinds = spec[0], LIST
    else:
        kinds = tuple(spec)
    expected = f"E{len(env)}"
    env[expected] = " or ".join(_JSON_NAMES[kind] for kind in (*kinds, *((_NONE,) if optional else ())))
    types = f"T{len(env)}"
    env[types] = kinds[0] if len(kinds) == 1 else kinds
    wrong_type = f"type({value}) is not {types}" if len(kinds) == 1 else f"type({value}) not in {types}"
    raise_wrong = f"raise _Wrong({_path(here)}, {expected}, {value})"
    # A required field's null or absence fails its type test (no JSON type of a declaration is
    # null) with the same error: one test for both.
    lines.append(f"{ind}if {wrong_type}: {raise_wrong}")
    if nested is not None:
        _emit(nested, value, here, ind, depth + 1, lines, env, known_dict=True)
    elif each is not None:
        item = f"it{depth}"
        lines.append(f"{ind}for {item} in {value}:")  # its index is found only for an error
        _emit(each, item, (*here, f"_at({value}, {item})"), ind + "    ", depth + 1, lines, env)


# -- a payload's lone form: the common payload read in one pass ------------------------------------
class Lone:
    """The common form of a payload of `shape`, read in one generated pass (SEC-4's fast path).

    `path` names a chain of fields, from the payload down to one value (a field declared as a list
    of objects steps into its item, and must hold exactly one); `keep` names other fields of plain
    JSON types along the way, by their paths. A payload is in its lone form when each object on
    the path is an object, each list on it holds one item, the last field holds a value of `types`
    (a subset of its declared types; never null), each kept field holds a value of its declared
    types or null, and every other declared field on the path's objects is absent or null. For
    such a payload `read(payload)` returns the kept values, in `keep`'s order, then the path's
    value; for any other, None (it never raises), and the caller reads it the general way
    (`Shape.read`, which checks and names what is wrong).

    Generated from the declaration, as the check is, and at the first call: a payload `read`
    accepts passes the check, and what the translator makes of the returned values must equal what
    its general path makes of the payload (tests/wire/test_hot_paths.py holds it to that).
    """

    __slots__ = ("keep", "path", "read", "shape", "types")

    def __init__(
        self,
        shape: Shape,
        path: tuple[str | tuple[str, str], ...],
        *,
        keep: tuple[tuple[str, ...], ...] = (),
        types: tuple[type, ...],
    ) -> None:
        self.shape = shape
        self.path = path
        self.keep = keep
        self.types = types
        self.read: Callable[[object], tuple[Any, ...] | None] = self._first_read

    def _first_read(self, payload: object) -> tuple[Any, ...] | None:
        if self.read == self._first_read:
            self.read = _compile_lone(self)
        return self.read(payload)


def _compile_lone(lone: Lone) -> Any:
    """Write `lone.read` (see `Lone`); a declaration it cannot read is a ValueError here."""
    env: dict[str, Any] = {"dict": dict, "list": list, "len": len}
    lines = ["def read(o):", "    if type(o) is not dict: return None", "    g0 = o.get"]
    kept = {path: f"k{number}" for number, path in enumerate(lone.keep)}
    here: tuple[str, ...] = ()  # the field names stepped through so far (what `keep` names)
    shape, var, get, ind, depth = lone.shape, "o", "g0", "    ", 0
    fields, required, pinned = dict(shape.fields), set(shape.required), set()
    last = len(lone.path) - 1
    for step, key in enumerate(lone.path):
        if isinstance(key, tuple):  # a case of a discriminated object: its discriminator's value
            by, case = key
            if shape.by != by or case not in shape.cases:
                raise ValueError(f"{shape.name} has no case {by}={case!r}")
            lines.append(f"{ind}if {get}({by!r}) != {case!r}: return None")
            shape = shape.cases[case]
            fields.update(shape.fields)
            required.update(shape.required)
            pinned.add(by)
            continue
        if shape.by is not None and shape.by not in pinned:
            raise ValueError(f"{shape.name}: a discriminated object's lone form names its case")
        if key not in fields:
            raise ValueError(f"{shape.name} declares no field {key!r}")
        others = [name for name in fields if name != key and name not in pinned]
        absent = [name for name in others if (*here, name) not in kept]
        if len(absent) > 1 and len(absent) == len(others) and not pinned:
            # an object of one field holds none of the others
            lines.append(f"{ind}if len({var}) != 1:")
            lines += [f"{ind}    if {get}({name!r}) is not None: return None" for name in absent]
            absent = []
        for name in others:
            spec = fields[name]
            if (*here, name) in kept:
                if not isinstance(spec, tuple):
                    raise ValueError(f"{shape.name}.{name}: only a field of plain JSON types is kept")
                types = f"T{len(env)}"
                env[types] = spec if name in required else (*spec, _NONE)  # null: absent
                value = kept[(*here, name)]
                lines += [
                    f"{ind}{value} = {get}({name!r})",
                    f"{ind}if type({value}) not in {types}: return None",
                ]
            elif name in required:
                raise ValueError(f"{shape.name}.{name} is required: the payload has no lone form")
            elif name in absent:
                lines.append(f"{ind}if {get}({name!r}) is not None: return None")
        spec = fields[key]
        here = (*here, key)
        depth += 1
        if step == last:
            if not isinstance(spec, tuple) or not set(lone.types) <= set(spec):
                raise ValueError(
                    f"{shape.name}.{key}: the lone value's types must be among its declared ones"
                )
            types = f"T{len(env)}"
            env[types] = lone.types
            lines += [f"{ind}v = {get}({key!r})", f"{ind}if type(v) not in {types}: return None"]
            continue
        var, get = f"o{depth}", f"g{depth}"
        if isinstance(spec, Shape):
            lines.append(f"{ind}{var} = g{depth - 1}({key!r})")
            shape = spec
        elif isinstance(spec, list):
            lines += [
                f"{ind}{var} = g{depth - 1}({key!r})",
                f"{ind}if type({var}) is not list or len({var}) != 1: return None",
                f"{ind}{var} = {var}[0]",
            ]
            shape = spec[0]
        else:
            raise ValueError(f"{shape.name}.{key} holds no object to step into")
        lines += [f"{ind}if type({var}) is not dict: return None", f"{ind}{get} = {var}.get"]
        fields, required, pinned = dict(shape.fields), set(shape.required), set()
    if isinstance(lone.path[-1], tuple):
        raise ValueError("a lone form ends in a field")
    missing = [path for path in lone.keep if not _on_path(path, here)]
    if missing:
        raise ValueError(f"kept fields off the path: {missing}")
    lines.append(f"{ind}return ({''.join(f'{kept[path]}, ' for path in lone.keep)}v,)")
    exec("\n".join(lines), env)  # our own declarations only, compiled once, at first use
    return env["read"]


def _on_path(field: tuple[str, ...], path: tuple[str, ...]) -> bool:
    """Whether a kept field's path ends in a field of one of `path`'s objects (not the path's own)."""
    size = len(field)
    return size <= len(path) and field[:-1] == path[: size - 1] and field[-1] != path[size - 1]


# -- JSON text --------------------------------------------------------------------------------------
def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text[:40]} overflows a float")
    return value


_decoder = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)
_decode = _decoder.decode
# `raw_decode()` (documented: the value at the start of the text, and where it ended) is tried
# first: `decode()` wraps the same scan in two whitespace regex matches and a few calls (~0.8 µs a
# payload). A provider's payload has no surrounding whitespace, so the answer is taken only when
# the scan consumed the whole text; anything else (leading or trailing text, any error) goes
# through `decode()`, which raises exactly what it always raised.
_raw_decode = _decoder.raw_decode


def parse_json(data: str | bytes, what: str) -> Any:
    """Provider text as a JSON value: strict numbers, bounded nesting (SEC-4). A payload that is
    not JSON at all is RES-10's `provider_stream_non_json_data`; one that is JSON but of a kind no
    provider sends (NaN, 1e999, nesting past the recursion limit) is a malformed chunk."""
    if type(data) is str:
        try:
            value, end = _raw_decode(data)
        except Exception:  # raised again, as decode() raises it, just below
            pass
        else:
            if end == len(data):
                return value
    # Raised after the `except` blocks, not inside them: the decoder's error (a JSONDecodeError
    # holds the whole raw frame in `doc`) is neither the cause nor the context of ours (SEC-9).
    failure: ProviderStreamError
    try:
        return _decode(data if isinstance(data, str) else data.decode("utf-8"))
    except RecursionError:
        failure = ProviderStreamError(
            f"malformed {what}: nested too deeply to decode",
            code=MALFORMED,
            raw_text=truncate(redact(_head(data)), 200),
        )
    except ValueError as exc:
        text = _head(data)
        if "JSON number" in str(exc) or "overflows" in str(exc):
            failure = ProviderStreamError(
                f"malformed {what}: {exc}", code=MALFORMED, raw_text=truncate(redact(text), 200)
            )
        else:
            failure = ProviderStreamError(
                f"the provider sent a stream frame that is not JSON: {truncate(redact(text), 200)!r}",
                code="provider_stream_non_json_data",
                raw_text=truncate(redact(text)),
            )
    raise failure


def _head(data: str | bytes, limit: int = 8192) -> str:
    head = data[:limit]
    return head if isinstance(head, str) else head.decode("utf-8", "backslashreplace")


# -- the last net -------------------------------------------------------------------------------------
# What a translator's plain-Python code raises on a payload no shape rule foresaw.
_PAYLOAD_ERRORS = (TypeError, KeyError, IndexError, AttributeError, ValueError, RecursionError, OverflowError)

R = TypeVar("R")


PAYLOAD_ERRORS = _PAYLOAD_ERRORS


def as_malformed(exc: BaseException, payload: object, what: str) -> ProviderStreamError:
    """The malformed-chunk error for a plain-Python error that `payload` provoked."""
    error = ProviderStreamError(
        f"malformed {what}: {type(exc).__name__}: {truncate(redact(_safe_str(exc)), 200)}",
        code=MALFORMED,
        raw_text=truncate(redact(_safe_repr(payload)), 200),
    )
    error.__cause__ = exc
    return error


def guarded(translate: Callable[[Any], R], payload: Any, what: str) -> R:
    """`translate(payload)`, with a plain-Python error the payload provoked turned into the
    malformed-chunk error (our own errors, ProviderStreamError included, pass unchanged)."""
    try:
        return translate(payload)
    except FsmAgentError:
        raise
    except _PAYLOAD_ERRORS as exc:
        raise as_malformed(exc, payload, what) from exc


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # pragma: no cover - an exception whose __str__ fails
        return type(exc).__name__
