"""The text of a client's base URL, asked several times per request: converted once per URL object.

An SDK client's `base_url` is an `httpx.URL` (or `httpx2.URL`) whose `str()` rebuilds the text on
every call; the session asks for it to name the endpoint, to choose the SDK's native errors and to
decide on `stream_options`. Never parses or changes a URL.
"""

from __future__ import annotations

from typing import Any

__all__ = ["url_text"]

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
