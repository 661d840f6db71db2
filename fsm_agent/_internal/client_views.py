"""A caller's SDK client without the SDK's own retries (RES-1, RES-11), made once per client.

The retry budget is the session's: an SDK retrying inside an attempt would multiply it, and would
sleep between its tries where no interrupt reaches. `with_options(max_retries=0)` (openai,
anthropic) returns a copy sharing the caller's connection pool; the caller's client is left as it
is. boto3 clients keep their own retry configuration (documented).

Why a view is remembered: a copy costs 35-100 µs, and an openai or anthropic client holds its
resources (`client.chat`) in a reference cycle with itself, so a view made per attempt would leave
12-18 objects per request for the garbage collector. Why a remembered view is still right: it is
used only while the client's settings equal the view's own (`_Remembered.fits`): a setting
reassigned (`client.api_key = ...`, a new base URL) or a copied dict edited in place (the custom
headers) makes a fresh view, as a fresh copy would have seen it. The comparison is by the values
the view itself holds, never by `id()` (an id is reused once its object is collected).
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

__all__ = ["without_sdk_retries"]


def without_sdk_retries(client: Any) -> Any:
    """A view of `client` that makes no retries of its own, or the client itself when it makes
    none or cannot give one. Kept while the client lives (weakly: it never keeps a client alive)."""
    cls = type(client)
    if cls in _viewless_classes:
        return client
    with_options = getattr(client, "with_options", None)
    if not callable(with_options):
        # A boto3 client: no with_options on any client of its class, and asking costs a trip
        # through botocore's event system (its __getattr__) on every attempt; remembered per class.
        if _fixed_shape(cls):
            _viewless_classes.add(cls)
        return client
    if not getattr(client, "max_retries", 0):
        return client
    try:
        known = _views.get(client)
    except TypeError:  # not hashable or not weakly referenceable: no memory for it
        known = None
    if known is not None and known.fits(client):
        return known.view
    try:
        view = with_options(max_retries=0)
    except Exception:  # a custom client whose with_options differs: use it as it is
        return client
    with contextlib.suppress(TypeError):
        _views[client] = _Remembered(client, view)
    return view


class _Remembered:
    """A client's no-retries view, and the settings it was made from: those the copy took over as
    they were, as the view held them when made (the view's own may change as it is used: a lazily
    built middleware chain, a tracer). Nothing here is reachable from the client."""

    __slots__ = ("settings", "view")

    def __init__(self, client: Any, view: Any) -> None:
        self.view = view
        mine, theirs = _fields(client), _fields(view)
        # What the copy set itself (max_retries) is not compared.
        self.settings = tuple(
            (name, theirs[name])
            for name, value in mine.items()
            if name in theirs and _equal(value, theirs[name])
        )

    def fits(self, client: Any) -> bool:
        """The client's settings are still those the view was made from: a copy made now would be
        the same."""
        mine, missing = _fields(client), _Missing
        return all(_equal(mine.get(name, missing), value) for name, value in self.settings)


class _Missing:
    """A setting no longer present (`del client.attr`): equal to nothing but itself."""


def _fields(obj: Any) -> dict[str, Any]:
    fields = getattr(obj, "__dict__", None)
    return fields if isinstance(fields, dict) else {}


def _equal(one: Any, other: Any) -> bool:
    if one is other:
        return True
    try:
        return bool(one == other)
    except Exception:  # a value whose comparison fails counts as changed
        return False


def _fixed_shape(cls: type) -> bool:
    """A class of an SDK whose clients all have the attributes of their class (as the drivers'
    client probes count them: openai, anthropic, botocore, google)."""
    return cls.__module__.split(".", 1)[0] in {"openai", "anthropic", "botocore", "google"}


# client -> what is remembered of its no-retries view. The view shares the client's connection pool
# but holds no reference to the client itself, so the entry goes when the caller drops the client.
_views: weakref.WeakKeyDictionary[Any, _Remembered] = weakref.WeakKeyDictionary()
# SDK client classes (fixed shape) that have no `with_options`: their clients are used as they are.
_viewless_classes: weakref.WeakSet[type] = weakref.WeakSet()
