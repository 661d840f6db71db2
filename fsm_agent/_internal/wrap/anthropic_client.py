"""The stand-ins of `anthropic.Anthropic` and `anthropic.AsyncAnthropic` (WR-1).

`messages.create(stream=True)` runs through the session and returns a stream of the SDK's raw
events; `messages.stream()` returns the SDK's own `MessageStreamManager` (its `text_stream`,
`get_final_message()`, …) over that stream; `messages.create()` without `stream` runs through
the session too and returns the SDK's own `Message` (`plain.py`). Every other call and
attribute is the client's own. Never reads the wire.
"""

from __future__ import annotations

from typing import Any

from .anthropic import AnthropicBetaObjects, AnthropicObjects, AnthropicTranslator
from .clients import Forward, Runner, call_params

__all__ = ["WrappedAnthropic"]


class _Messages(Forward):
    objects: type = AnthropicObjects
    answer = "anthropic_messages"  # what a plain call returns (`plain.PLAIN`)

    def __init__(self, inner: Any, runner: Runner, client: Any) -> None:
        super().__init__(inner, runner)
        object.__setattr__(self, "_client", client)

    def _open(self, kwargs: dict[str, Any]) -> Any:
        client = object.__getattribute__(self, "_client")
        params = call_params(kwargs)
        params.pop("output_format", None)  # the helper's, not the API's
        return self._runner.stream(client, params, "anthropic_messages", AnthropicTranslator, self.objects)

    def create(self, **kwargs: Any) -> Any:
        if self._runner.is_async:
            return self._acreate(kwargs)
        if not kwargs.get("stream"):
            return self._plain(kwargs)
        return self._open(kwargs)

    async def _acreate(self, kwargs: dict[str, Any]) -> Any:
        if not kwargs.get("stream"):
            return await self._plain(kwargs)
        return self._open(kwargs)

    def _plain(self, kwargs: dict[str, Any]) -> Any:
        """WR-1: a call without streaming, run by the session; the SDK's own `Message` back."""
        client = object.__getattribute__(self, "_client")
        return self._runner.plain(client, call_params(kwargs), "anthropic_messages", self.answer)

    def stream(self, **kwargs: Any) -> Any:
        """The SDK's own `MessageStreamManager`, over this namespace's stream."""
        from anthropic import NOT_GIVEN
        from anthropic.lib.streaming import AsyncMessageStreamManager, MessageStreamManager

        extra: dict[str, Any] = {"output_format": kwargs.get("output_format", NOT_GIVEN)}
        if self._runner.is_async:

            async def request() -> Any:
                return self._open(kwargs)

            return AsyncMessageStreamManager(request(), **extra)
        return MessageStreamManager(lambda: self._open(kwargs), **extra)


class _BetaMessages(_Messages):
    objects = AnthropicBetaObjects
    answer = "anthropic_beta_messages"


class BetaClient(Forward):
    """The client as the session's adapter sees it for `client.beta.messages` calls: its
    `messages` are the beta ones (which take `betas=`), everything else the client's own."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner, None)  # type: ignore[arg-type]

    @property
    def messages(self) -> Any:
        return self._inner.beta.messages

    def with_options(self, **options: Any) -> Any:
        return type(self)(self._inner.with_options(**options))


class AsyncBetaClient(BetaClient):
    """`BetaClient` of an `AsyncAnthropic` (named Async*, as the SDKs name their async clients)."""


class _Beta(Forward):
    @property
    def messages(self) -> _BetaMessages:
        inner = object.__getattribute__(self, "_client")
        view = AsyncBetaClient(inner) if self._runner.is_async else BetaClient(inner)
        return _BetaMessages(self._inner.messages, self._runner, view)

    def __init__(self, inner: Any, runner: Runner, client: Any) -> None:
        super().__init__(inner, runner)
        object.__setattr__(self, "_client", client)


class WrappedAnthropic(Forward):
    """`anthropic.Anthropic` / `AsyncAnthropic` with its streaming calls run by a session."""

    @property
    def messages(self) -> _Messages:
        return _Messages(self._inner.messages, self._runner, self._inner)

    @property
    def beta(self) -> _Beta:
        return _Beta(self._inner.beta, self._runner, self._inner)

    def with_options(self, **options: Any) -> WrappedAnthropic:
        return WrappedAnthropic(self._inner.with_options(**options), self._runner)

    copy = with_options
