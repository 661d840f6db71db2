"""A client's base URL as the session reads it, several times per request, cheaply.

An SDK client's `base_url` is an `httpx.URL` (or `httpx2.URL`) whose `str()` rebuilds the text on
every call; the session asks for it to name the endpoint, to choose the SDK's native errors and to
decide on `stream_options`. Never parses or changes a URL.
"""

from __future__ import annotations

from typing import Any

__all__ = ["is_botocore_client", "url_text"]

_MAX_REMEMBERED = 256
# id(url object) -> (the object, its text). The object is held so its id is never reused meanwhile.
_texts: dict[int, tuple[Any, str]] = {}


def url_text(raw: Any) -> str:
    """`str(raw)`, remembered per URL object (a string is returned as it is)."""
    if type(raw) is str:
        return raw
    entry = _texts.get(id(raw))
    if entry is not None and entry[0] is raw:
        return entry[1]
    text = str(raw)
    if len(_texts) >= _MAX_REMEMBERED:
        _texts.clear()  # many clients: start over rather than grow without bound
    _texts[id(raw)] = (raw, text)
    return text


def is_botocore_client(client: Any) -> bool:
    """A boto3/botocore client: its base URL is `meta.endpoint_url`, and asking it for an attribute
    it lacks (`base_url`, `api_key`) runs botocore's `__getattr__` hook chain (a few µs each)."""
    return type(client).__module__ == "botocore.client"
