"""The HTTP library under the installed openai and anthropic SDKs, for tests that name its errors.

openai 3.x and anthropic 2.x run on httpx2, the older generation (openai 1.x, anthropic 0.x) on
httpx; CI runs the provider tests under both (`make test-old-sdks`). A test that expects the
transport's own exception writes `OPENAI_HTTP.RemoteProtocolError`, and holds in either.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import anthropic
import openai

__all__ = ["ANTHROPIC_HTTP", "OPENAI_HTTP"]


def _library_under(client_class: Any) -> ModuleType:
    client = client_class(api_key="unused")
    try:
        for cls in type(client._client).__mro__:  # the SDK wraps the library's Client in its own class
            root = cls.__module__.split(".")[0]
            if root in ("httpx", "httpx2"):
                return importlib.import_module(root)
    finally:
        client.close()
    raise RuntimeError(f"{client_class.__module__}: no httpx or httpx2 client under it")


OPENAI_HTTP = _library_under(openai.OpenAI)
ANTHROPIC_HTTP = _library_under(anthropic.Anthropic)
