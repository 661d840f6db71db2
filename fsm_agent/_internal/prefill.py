"""RC-3: which endpoints take an assistant prefill, and a request's params carrying one.

A continuation asks the model to go on from the text already shown: the request's messages end
with an assistant message holding that text. Anthropic Messages and Bedrock Converse with Claude
models take one natively; DeepSeek and Mistral Chat Completions take it with `prefix: true` on the
last assistant message; OpenAI's own Chat Completions, Responses and Gemini are never sent one.
Pure: never performs I/O, never mutates the caller's params.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

__all__ = ["accepts_prefill", "prefilled"]

# Chat Completions models whose hosts document the `prefix` flag (DeepSeek, Mistral).
_PREFIX_MODELS = (
    "deepseek",
    "mistral",
    "codestral",
    "magistral",
    "devstral",
    "ministral",
    "pixtral",
    "open-mistral",
)


def accepts_prefill(api: str, params: dict[str, Any], base_url: str | None) -> bool:
    """Whether a route of `api` with `params` at `base_url` may be sent a prefill (RC-3)."""
    if api == "anthropic_messages":
        return isinstance(params.get("messages"), list)
    if api == "bedrock_converse":
        model = params.get("modelId")
        return (
            isinstance(model, str) and "claude" in model.lower() and isinstance(params.get("messages"), list)
        )
    if api == "chat_completions":
        model = params.get("model")
        host = urlsplit(base_url or "").hostname or ""
        if host == "api.openai.com" or host.endswith(".openai.azure.com"):
            return False
        return (
            isinstance(model, str)
            and model.lower().startswith(_PREFIX_MODELS)
            and isinstance(params.get("messages"), list)
        )
    return False


def prefilled(api: str, params: dict[str, Any], shown: str) -> dict[str, Any]:
    """A copy of `params` whose messages end with the assistant's `shown` text to continue.

    Trailing whitespace is left out (Anthropic refuses a prefill ending in it); the continuation
    sends it back, and the seam drops it (`recovery.seam_overlap`)."""
    text = shown.rstrip()
    messages = list(params.get("messages") or [])
    if api == "bedrock_converse":
        message: dict[str, Any] = {"role": "assistant", "content": [{"text": text}]}
    elif api == "chat_completions":
        message = {"role": "assistant", "content": text, "prefix": True}
    else:
        message = {"role": "assistant", "content": text}
    last = messages[-1] if messages else None
    if isinstance(last, dict) and last.get("role") == "assistant" and isinstance(last.get("content"), str):
        # the caller's own prefill: the shown text continues it
        message = {**last, **message, "content": last["content"] + text}
        messages[-1] = message
    else:
        messages.append(message)
    return {**params, "messages": messages}
