"""What an object the caller passed is: an SDK client, async or not, of which SDK, or a mistake.

`check_client` tells the near misses by name before anything is sent; `is_async_client` and
`looks_like_client` are asked per request, so their answers for the SDKs' own (fixed-shape)
classes are remembered per class. Never feeds the machine.
"""

from __future__ import annotations

import weakref
from typing import Any

__all__ = ["check_client", "is_async_client", "looks_like_client"]

_ASYNC_PROBES = (
    ("close",),
    ("chat", "completions", "create"),
    ("responses", "create"),
    ("messages", "create"),
    ("models", "generate_content_stream"),  # google-genai's AsyncClient (client.aio)
)


# The SDKs whose client classes have a fixed shape: what the probes below find on one of their
# clients, they find on every client of that class. Their answers are remembered per class (weakly:
# botocore makes a class per client it creates), since a probe that misses on a botocore client goes
# through its event system (~10 us each, several per request). Any other object is probed each time.
_FIXED_SHAPE_SDKS = frozenset({"openai", "anthropic", "botocore", "google"})
_async_by_class: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()
_client_classes: weakref.WeakSet[type] = weakref.WeakSet()


def _fixed_shape(cls: type) -> bool:
    return cls.__module__.split(".", 1)[0] in _FIXED_SHAPE_SDKS


def is_async_client(client: Any) -> bool:
    """An SDK client whose calls are coroutines (AsyncOpenAI, AsyncAnthropic, or shaped like them)."""
    cls = type(client)
    known = _async_by_class.get(cls)
    if known is not None:
        return known
    answer = _probe_async(client)
    if _fixed_shape(cls):
        _async_by_class[cls] = answer
    return answer


def _probe_async(client: Any) -> bool:
    cls = type(client)
    if cls.__name__.startswith("Async"):
        return True
    if _fixed_shape(cls):
        # The SDKs name every async client class Async*: their other classes are sync, told without
        # touching a resource (each is a lazy import: `client.responses` alone costs a Chat request
        # ~100 ms of pydantic models it never uses).
        return False
    from inspect import iscoroutinefunction  # (imported when a client of no known SDK is probed)

    for path in _ASYNC_PROBES:
        target = client
        for name in path:
            target = getattr(target, name, None)
            if target is None:
                break
        if target is not None and iscoroutinefunction(target):
            return True
    return False


# The APIs each SDK's clients speak, by the SDK's top-level package: a client of one of them named
# with another API is a mistake to tell at once (a custom client of any other package is not checked).
_SDK_APIS = {
    "openai": ("chat_completions", "responses"),
    "anthropic": ("anthropic_messages",),
    "botocore": ("bedrock_converse",),
    "google": ("gemini_generate_content",),
}
_SDK_RESOURCE_MODULES = ("openai.resources", "anthropic.resources", "google.genai.models")


def check_client(client: Any, *, in_async: bool, api: str | None = None) -> None:
    """Raise a TypeError that says what to do when `client` cannot serve this call.

    An async client cannot serve `stream()` (its calls are coroutines nobody would await); an
    object of no known SDK shape cannot serve anything, unless the caller named its `api` (a custom
    client). A sync client in `astream()` is fine: it runs in a worker thread. The near misses are
    told by name: an SDK's client class instead of a client, one of its resources
    (`client.chat.completions`) instead of the client, and an `api` the client's SDK does not speak.
    """
    kind = type(client).__name__
    if isinstance(client, type):
        raise TypeError(
            f"got the class {client.__module__.split('.')[0]}.{client.__name__}, not a client: pass an "
            f"instance ({client.__name__}(...)) or a factory (lambda: {client.__name__}(...))"
        )
    module = type(client).__module__
    if module.startswith(_SDK_RESOURCE_MODULES):
        raise TypeError(
            f"got the SDK resource {kind} ({module}), not a client: pass the client itself "
            "(e.g. openai.OpenAI(...), not client.chat.completions); fsm_agent makes the call"
        )
    spoken = _SDK_APIS.get(module.split(".", 1)[0], ())
    if api is not None and spoken and api not in spoken:
        raise TypeError(
            f"api={api!r} is not spoken by this {module.split('.', 1)[0]} client ({kind}); "
            f"it speaks {' or '.join(repr(name) for name in spoken)}"
        )
    if api is None and not looks_like_client(client):
        raise TypeError(
            f"{kind} is not an SDK client fsm_agent knows: pass openai.OpenAI / AsyncOpenAI, "
            "anthropic.Anthropic / AsyncAnthropic, a boto3 'bedrock-runtime' client, "
            "google.genai.Client (or its .aio), or a "
            "zero-argument callable that returns one"
        )
    if not in_async and is_async_client(client):
        raise TypeError(
            f"stream() got an async client ({kind}); use `await session.astream(...)` with it, "
            f"or pass the sync client ({kind.removeprefix('Async')}) to stream()"
        )


def looks_like_client(obj: Any) -> bool:
    """An SDK client (as opposed to a zero-argument factory that makes one)."""
    cls = type(obj)
    if cls in _client_classes:
        return True
    # The class first: an SDK's resources are lazy properties on it, seen there without being built
    # (building one imports its module); an object given its attributes one by one is seen on itself.
    names = ("chat", "messages", "responses", "converse_stream")
    found = any(hasattr(cls, name) for name in names) or any(hasattr(obj, name) for name in names)
    if not found:  # google.genai.Client
        found = hasattr(getattr(obj, "models", None), "generate_content_stream")
    if found and _fixed_shape(cls):
        _client_classes.add(cls)
    return found
