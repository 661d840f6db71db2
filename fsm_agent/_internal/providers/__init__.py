"""Provider adapters, one module per API; each imports its SDK only inside itself."""

from __future__ import annotations

import importlib
from typing import Any

from ..urls import is_botocore_client
from .base import ProviderAdapter

__all__ = ["APIS", "adapter_for", "infer_api"]

APIS = ("chat_completions", "responses", "anthropic_messages", "bedrock_converse", "gemini_generate_content")


def infer_api(client: Any, params: dict[str, Any] | None = None) -> str:
    """The API a client speaks, from its type; for OpenAI clients, Responses when the params are
    shaped for it (`input` and no `messages`), else Chat Completions."""
    if is_botocore_client(client) and hasattr(client, "converse_stream"):
        return "bedrock_converse"  # before the probes below: each miss is a botocore hook trip
    module = type(client).__module__
    if module.startswith("google.genai"):
        return "gemini_generate_content"  # PRV-N: genai.Client and its .aio
    package = module.split(".", 1)[0]
    if package == "anthropic":
        return "anthropic_messages"
    # An SDK's own client is told by its package; any other object by its shape. The shape probes
    # are not asked of an openai client: its `models` is a lazy resource, and reading it imports
    # and builds a module the request never uses (~15 ms of a process's first request).
    if package != "openai":
        if _is_genai_shaped(client):
            return "gemini_generate_content"
        if hasattr(client, "messages") and not hasattr(client, "chat"):
            return "anthropic_messages"
        if hasattr(client, "converse_stream"):
            return "bedrock_converse"
    if params and "input" in params and "messages" not in params and hasattr(client, "responses"):
        return "responses"
    return "chat_completions"


def _is_genai_shaped(client: Any) -> bool:
    """A client shaped like `google.genai.Client`: `models.generate_content_stream`, and none of
    the OpenAI/Anthropic surfaces."""
    models = getattr(client, "models", None)
    return hasattr(models, "generate_content_stream") and not hasattr(client, "chat")


_ADAPTERS = {
    "chat_completions": ("openai_chat", "ChatCompletionsAdapter"),
    "responses": ("openai_responses", "ResponsesAdapter"),
    "anthropic_messages": ("anthropic", "AnthropicAdapter"),
    "bedrock_converse": ("bedrock", "BedrockAdapter"),
    "gemini_generate_content": ("gemini", "GeminiAdapter"),
}


_adapter_classes: dict[str, Any] = {}  # api -> its adapter class, once its module is imported


def adapter_for(api: str) -> ProviderAdapter:
    """A fresh adapter for `api` (its module imported on first use only)."""
    cls = _adapter_classes.get(api)
    if cls is None:
        try:
            module_name, class_name = _ADAPTERS[api]
        except KeyError:
            raise ValueError(f"unknown api {api!r}; expected one of {', '.join(APIS)}") from None
        module = importlib.import_module(f"{__name__}.{module_name}")
        cls = _adapter_classes[api] = getattr(module, class_name)
    adapter: ProviderAdapter = cls()
    return adapter
