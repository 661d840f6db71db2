"""The stand-ins of `openai.OpenAI` and `openai.AsyncOpenAI` (WR-1).

`chat.completions.create(stream=True)` and `responses.create(stream=True)` run through the
session and return streams of the SDK's own chunk and event objects; without `stream` they run
through the session too and return the SDK's own `ChatCompletion` / `Response` (`plain.py`).
`chat.completions.stream()` and `responses.stream()` are the SDK's own helpers, run over those
streams (they call `create` on the namespace they are given, which is the stand-in's).
`with_streaming_response.create(stream=True)`, the form openai-agents uses, gives a raw-response
stand-in whose `parse()` is the stream. Every other call and attribute is the client's own.
Never reads the wire.
"""

from __future__ import annotations

from typing import Any

from .clients import Forward, Runner, call_params
from .openai_chat import ChatObjects, ChatTranslator
from .openai_responses import ResponsesObjects, ResponsesTranslator

__all__ = ["WrappedOpenAI"]


class _Streaming(Forward):
    """`….with_streaming_response`: `create(stream=True)` as a raw response whose `parse()` is
    the wrapped stream; anything else the SDK's own."""

    def __init__(self, inner: Any, runner: Runner, owner: Any) -> None:
        super().__init__(inner, runner)
        object.__setattr__(self, "_owner", owner)

    def create(self, **kwargs: Any) -> Any:
        if not kwargs.get("stream"):
            return self._inner.create(**kwargs)
        return _RawStream(self._owner, kwargs)


class _RawStream:
    """A raw streaming response stand-in: a (sync or async) context manager; `parse()` is the stream."""

    request_id = None
    headers: dict[str, str] = {}  # noqa: RUF012

    def __init__(self, owner: Any, kwargs: dict[str, Any]) -> None:
        self._owner, self._kwargs = owner, kwargs
        self._stream: Any = None

    def _open(self) -> Any:
        if self._stream is None:
            self._stream = self._owner._open(self._kwargs)
        return self._stream

    def parse(self) -> Any:
        if self._owner._runner.is_async:
            return self._aparse()
        return self._open()

    async def _aparse(self) -> Any:
        return self._open()

    def __enter__(self) -> _RawStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._stream is not None:
            self._stream.close()

    async def __aenter__(self) -> _RawStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._stream is not None:
            await self._stream.close()


class _Endpoint(Forward):
    """A namespace whose `create(stream=True)` streams through the session."""

    api = ""
    translator: type = object
    objects: type = object

    def _open(self, kwargs: dict[str, Any]) -> Any:
        runner: Runner = self._runner
        client = object.__getattribute__(self, "_client")
        return runner.stream(client, call_params(kwargs), self.api, self.translator, self.objects)

    def __init__(self, inner: Any, runner: Runner, client: Any) -> None:
        super().__init__(inner, runner)
        object.__setattr__(self, "_client", client)

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
        """WR-1: a call without streaming, run by the session; the SDK's own object back."""
        client = object.__getattribute__(self, "_client")
        return self._runner.plain(client, call_params(kwargs), self.api)

    def stream(self, **kwargs: Any) -> Any:
        """The SDK's own helper, calling this namespace's `create(stream=True)`."""
        return type(self._inner).stream(self, **kwargs)

    @property
    def with_streaming_response(self) -> _Streaming:
        return _Streaming(self._inner.with_streaming_response, self._runner, self)


class _ChatCompletions(_Endpoint):
    api = "chat_completions"
    translator = ChatTranslator
    objects = ChatObjects


class _Responses(_Endpoint):
    api = "responses"
    translator = ResponsesTranslator
    objects = ResponsesObjects


class _Chat(Forward):
    @property
    def completions(self) -> _ChatCompletions:
        return _ChatCompletions(
            self._inner.completions, self._runner, object.__getattribute__(self, "_client")
        )

    def __init__(self, inner: Any, runner: Runner, client: Any) -> None:
        super().__init__(inner, runner)
        object.__setattr__(self, "_client", client)


class WrappedOpenAI(Forward):
    """`openai.OpenAI` / `AsyncOpenAI` with its streaming calls run by a session."""

    @property
    def chat(self) -> _Chat:
        return _Chat(self._inner.chat, self._runner, self._inner)

    @property
    def responses(self) -> _Responses:
        return _Responses(self._inner.responses, self._runner, self._inner)

    def with_options(self, **options: Any) -> WrappedOpenAI:
        return WrappedOpenAI(self._inner.with_options(**options), self._runner)

    copy = with_options
