"""Where each attempt's client comes from: the caller's client, or a factory's (closed with it).

`ClientSource` hands each attempt a view of the client with the SDK's own retries off
(`without_sdk_retries`: the retry budget is the session's, RES-1) and closes a factory-made
client when its attempt ends (never the caller's). Never feeds the machine.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from ..client_views import without_sdk_retries
from ..errors import sdk_native
from ..urls import is_botocore_client, url_text
from .clients import looks_like_client

__all__ = ["ClientSource", "without_sdk_retries"]

log = logging.getLogger("fsm_agent")


class ClientSource:
    """The caller's client, or a factory giving each attempt its own client (closed with it)."""

    def __init__(self, client_or_factory: Any) -> None:
        self._factory: Callable[[], Any] | None = None
        self._client: Any = None
        if looks_like_client(client_or_factory) or not callable(client_or_factory):
            self._client = client_or_factory
        else:
            self._factory = client_or_factory
        self._made: Any = None
        self.sdk: Any = None  # the SDK module of the first client seen (SDK-native errors)
        self.base_url: str | None = None

    @property
    def factory(self) -> Callable[[], Any] | None:
        return self._factory

    @property
    def has_client(self) -> bool:
        """Whether the next attempt's client exists already (the caller's, or one made for it)."""
        return self._factory is None or self._made is not None

    def peek(self) -> Any:
        """A client to infer the API from; with a factory, the first attempt's own client."""
        if self._factory is None:
            client = self._client
        else:
            if self._made is None:
                self._made = self._factory()
            client = self._made
        if self.sdk is None:
            self._note(client)
        return client

    def adopt(self, made: Any) -> None:
        """A client the factory made elsewhere (astream awaits or threads the factory)."""
        self._made = made
        if self.sdk is None:
            self._note(made)

    def _note(self, client: Any) -> None:
        self.sdk = sys.modules.get(type(client).__module__.split(".", 1)[0])
        base_url = None if is_botocore_client(client) else getattr(client, "base_url", None)
        self.base_url = url_text(base_url) if base_url is not None else None

    def native(self, error: BaseException) -> BaseException:
        """The error to raise for `error`, as the client's SDK would raise it (section 1)."""
        return sdk_native(error, self.sdk, self.base_url)

    def client_for_attempt(self) -> Any:
        """The client for one attempt, with the SDK's own retries off (see `without_sdk_retries`)."""
        return without_sdk_retries(self.peek())

    def release(self) -> None:
        """The attempt is over: close the client a factory made for it (never the caller's)."""
        made, self._made = self._made, None
        if made is not None:
            _close_client(made)

    async def arelease(self) -> None:
        """`release()` for async clients, whose close() is a coroutine."""
        made, self._made = self._made, None
        if made is not None:
            await _aclose_client(made)


def _close_client(client: Any) -> None:
    close = getattr(client, "close", None)
    if callable(close):
        try:
            close()
        except Exception:
            log.debug("closing a factory-made client raised", exc_info=True)


async def _aclose_client(client: Any) -> None:
    # `aclose` where there is no `close` (google-genai's AsyncClient).
    close = getattr(client, "close", None) or getattr(client, "aclose", None)
    if callable(close):
        try:
            closing = close()
            from inspect import isawaitable  # (imported by the async paths only)

            if isawaitable(closing):
                await closing
        except Exception:
            log.debug("closing a factory-made client raised", exc_info=True)
