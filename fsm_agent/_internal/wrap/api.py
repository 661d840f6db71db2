"""`wrap()`: recognise the SDK client and build its stand-in (WR-1)."""

from __future__ import annotations

import inspect
from typing import Any

from ..routes import Route
from ..session import Session
from .clients import Runner

__all__ = ["wrap"]


def wrap(
    client: Any,
    session: Session | None = None,
    *,
    routes: list[Route] | None = None,
    markers: bool = True,
    **session_settings: Any,
) -> Any:
    """The client, with its streaming calls run through fsm_agent's machine (WR-1).

    ```python
    client = fsm_agent.wrap(openai.OpenAI())  # keep your code, add one line
    for chunk in client.chat.completions.create(model="gpt-4.1", messages=[...], stream=True):
        ...
    ```

    Takes `openai.OpenAI` / `AsyncOpenAI`, `anthropic.Anthropic` / `AsyncAnthropic`, a boto3
    `bedrock-runtime` client and a `google.genai.Client`, and returns an object with the
    client's interface: its streaming calls run through the session (retries, stall watchdog,
    stubs, routes, health) and hand back the SDK's own objects; its calls without streaming
    (`create()`, `converse()`, `generate_content()`) run through the session too (back-off,
    retry-after, routes, health) and return the SDK's own answer object; everything else is the
    client's own. A stream's `fsm_result` is its `StreamResult` once it has ended.

    Args:
        client: The SDK client to wrap (never closed by fsm_agent).
        session: The `Session` whose settings and memory the calls share; None makes one from
            `session_settings`.
        routes: `Route`s to go on on when the wrapped client cannot serve a request (RT-1); each
            route's params are laid over the call's (its `model`, say).
        markers: Pass the library's marker lines and warnings on as text deltas (WR-2); False
            leaves them out (they stay in `fsm_result` and the trace).
        **session_settings: `Session` keywords, when `session` is None.

    Raises:
        TypeError: A client of no known SDK, or both `session` and session settings.
    """
    if session is not None and session_settings:
        raise TypeError("give a session or session settings, not both")
    if session is None:
        session = Session(**session_settings)
    elif not isinstance(session, Session):
        raise TypeError(f"session must be a fsm_agent.Session, not {type(session).__name__}")
    kind = _kind(client)
    is_async = kind != "bedrock" and _is_async(client, kind)
    runner = Runner(session, list(routes) if routes else None, markers=markers, is_async=is_async)
    if kind == "openai":
        from .openai_client import WrappedOpenAI

        return WrappedOpenAI(client, runner)
    if kind == "anthropic":
        from .anthropic_client import WrappedAnthropic

        return WrappedAnthropic(client, runner)
    if kind == "bedrock":
        from .bedrock import WrappedBedrock

        return WrappedBedrock(client, runner)
    from .gemini import WrappedGemini

    return WrappedGemini(client, runner)


def _kind(client: Any) -> str:
    module = type(client).__module__.split(".")[0]
    if module == "openai" and hasattr(client, "chat"):
        return "openai"
    if module == "anthropic" and hasattr(client, "messages"):
        return "anthropic"
    service = getattr(getattr(getattr(client, "meta", None), "service_model", None), "service_name", None)
    if service == "bedrock-runtime":
        return "bedrock"
    if module == "google" and hasattr(client, "models"):
        return "gemini"
    raise TypeError(
        "fsm_agent.wrap takes an openai, anthropic, boto3 bedrock-runtime or google.genai client, "
        f"not {type(client).__name__}"
    )


def _is_async(client: Any, kind: str) -> bool:
    if kind == "gemini":
        return False  # genai's async calls live on `client.aio`, wrapped beside the sync ones
    return inspect.iscoroutinefunction(getattr(type(client), "post", None)) or type(
        client
    ).__name__.startswith("Async")
