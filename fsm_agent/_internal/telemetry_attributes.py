"""A request and its result as OpenTelemetry GenAI convention attributes (plain data, OT-1).

Reads the SDK keyword arguments, the client's endpoint and the `StreamResult`; builds the
`gen_ai.*` attribute values, and — only when the application opted in to content capture — the
`gen_ai.input.messages` / `gen_ai.output.messages` / `gen_ai.system_instructions` JSON in the
conventions' shape (role + parts). Never imports OpenTelemetry, never performs I/O, never raises
on an odd payload shape (unknown parts pass through by type only).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from .result import StreamResult

__all__ = [
    "attempt_cost_attributes",
    "cost_attributes",
    "input_attributes",
    "output_messages",
    "request_attributes",
    "response_attributes",
    "server_of",
]

# An OpenAI-compatible host named by its own provider (Chat Completions speaks for many).
_HOST_PROVIDER = (
    ("generativelanguage.googleapis.com", "gcp.gemini"),
    ("openai.azure.com", "azure.ai.openai"),
    ("api.deepseek.com", "deepseek"),
    ("api.groq.com", "groq"),
    ("api.mistral.ai", "mistral_ai"),
    ("api.x.ai", "x_ai"),
    ("api.perplexity.ai", "perplexity"),
)


def request_attributes(params: Mapping[str, Any]) -> dict[str, Any]:
    """The request settings the conventions name, read from the SDK keyword arguments."""
    config = params.get("inferenceConfig")  # Bedrock keeps them apart
    source: Mapping[str, Any] = config if isinstance(config, Mapping) else params
    attributes: dict[str, Any] = {}
    for key, names in (
        (
            "gen_ai.request.max_tokens",
            ("max_tokens", "max_completion_tokens", "max_output_tokens", "maxTokens"),
        ),
        ("gen_ai.request.temperature", ("temperature",)),
        ("gen_ai.request.top_p", ("top_p", "topP")),
        ("gen_ai.request.top_k", ("top_k",)),
        ("gen_ai.request.seed", ("seed",)),
        ("gen_ai.request.frequency_penalty", ("frequency_penalty",)),
        ("gen_ai.request.presence_penalty", ("presence_penalty",)),
        ("gen_ai.request.choice.count", ("n",)),
    ):
        for name in names:
            value = source.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[key] = value
                break
    stop = source.get("stop", source.get("stop_sequences", source.get("stopSequences")))
    if isinstance(stop, str):
        attributes["gen_ai.request.stop_sequences"] = [stop]
    elif isinstance(stop, list | tuple) and all(isinstance(s, str) for s in stop):
        attributes["gen_ai.request.stop_sequences"] = list(stop)
    return attributes


def response_attributes(result: StreamResult) -> tuple[dict[str, Any], dict[str, int]]:
    """The response's convention attributes, and its token counts by `gen_ai.token.type`."""
    attributes: dict[str, Any] = {}
    if result.model:
        attributes["gen_ai.response.model"] = result.model
    if result.id:
        attributes["gen_ai.response.id"] = result.id
    tokens: dict[str, int] = {}
    if result.usage is not None:
        if result.usage.input_tokens is not None:
            tokens["input"] = result.usage.input_tokens
        if result.usage.output_tokens is not None:
            tokens["output"] = result.usage.output_tokens
    return attributes, tokens


def server_of(client: Any, api: str) -> dict[str, Any]:
    """server.address / server.port of the client's endpoint, and the provider a host implies."""
    url = getattr(client, "base_url", None)
    if url is None:
        url = getattr(getattr(client, "meta", None), "endpoint_url", None)
    return {} if url is None else dict(_server_of_url(str(url), api))


@functools.lru_cache(maxsize=64)  # a process talks to few endpoints; parsing each time is waste
def _server_of_url(url: str, api: str) -> tuple[tuple[str, Any], ...]:
    parts = urlsplit(url)
    if not parts.hostname:
        return ()
    attributes: dict[str, Any] = {"server.address": parts.hostname}
    try:
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    except ValueError:  # a port out of range: leave it out
        port = None
    if port:
        attributes["server.port"] = port
    if api == "chat_completions":
        for suffix, provider in _HOST_PROVIDER:
            if parts.hostname.endswith(suffix):
                attributes["gen_ai.provider.name"] = provider
                break
    return tuple(attributes.items())


# -- content (opt-in only) ---------------------------------------------------------------------------
def input_attributes(api: str, params: Mapping[str, Any]) -> dict[str, str]:
    """`gen_ai.input.messages` and `gen_ai.system_instructions` as JSON text (opt-in content)."""
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    if api == "responses":
        if isinstance(params.get("instructions"), str):
            system.append(_text_part(params["instructions"]))
        given = params.get("input")
        if isinstance(given, str):
            messages.append({"role": "user", "parts": [_text_part(given)]})
        elif isinstance(given, list):
            messages.extend(_message(item) for item in given if isinstance(item, Mapping))
    else:
        given_system = params.get("system")
        if isinstance(given_system, str):
            system.append(_text_part(given_system))
        elif isinstance(given_system, list):
            system.extend(_part(item) for item in given_system)
        for item in params.get("messages") or ():
            if not isinstance(item, Mapping):
                continue
            if item.get("role") in ("system", "developer"):
                system.extend(_message(item)["parts"])
            else:
                messages.append(_message(item))
    attributes = {"gen_ai.input.messages": _json(messages)}
    if system:
        attributes["gen_ai.system_instructions"] = _json(system)
    return attributes


def output_messages(result: StreamResult) -> list[dict[str, Any]]:
    """The answer as the conventions' one output message (opt-in content)."""
    parts: list[dict[str, Any]] = []
    if result.reasoning:
        parts.append({"type": "reasoning", "content": result.reasoning})
    if result.content:
        parts.append(_text_part(result.content))
    if result.refusal:
        parts.append({"type": "refusal", "content": result.refusal})
    for call in result.tool_calls:
        parts.append(
            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": _arguments(call.arguments)}
        )
    return [{"role": "assistant", "parts": parts, "finish_reason": result.finish_reason or ""}]


def _message(item: Mapping[str, Any]) -> dict[str, Any]:
    role = item.get("role") or item.get("type") or "user"
    content = item.get("content")
    if isinstance(content, str):
        parts = [_text_part(content)]
    elif isinstance(content, list):
        parts = [_part(piece) for piece in content]
    else:
        parts = []
    for call in item.get("tool_calls") or ():  # Chat Completions' assistant tool calls
        if isinstance(call, Mapping):
            function = call.get("function") or {}
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": _arguments(function.get("arguments")),
                }
            )
    if role == "tool":  # Chat Completions' tool result
        parts = [{"type": "tool_call_response", "id": item.get("tool_call_id"), "response": content}]
    return {"role": str(role), "parts": parts}


def _part(piece: Any) -> dict[str, Any]:
    if isinstance(piece, str):
        return _text_part(piece)
    if not isinstance(piece, Mapping):
        return {"type": type(piece).__name__}
    text = piece.get("text")
    if isinstance(text, str):
        return _text_part(text)
    kind = piece.get("type")
    if kind == "tool_use":  # Anthropic
        return {
            "type": "tool_call",
            "id": piece.get("id"),
            "name": piece.get("name"),
            "arguments": piece.get("input"),
        }
    if kind == "tool_result":
        return {
            "type": "tool_call_response",
            "id": piece.get("tool_use_id"),
            "response": piece.get("content"),
        }
    if "toolUse" in piece:  # Bedrock
        use = piece["toolUse"]
        return {
            "type": "tool_call",
            "id": use.get("toolUseId"),
            "name": use.get("name"),
            "arguments": use.get("input"),
        }
    if "toolResult" in piece:
        done = piece["toolResult"]
        return {"type": "tool_call_response", "id": done.get("toolUseId"), "response": done.get("content")}
    # Images, documents, audio: their type only; the bytes are not telemetry.
    return {"type": str(kind or next(iter(piece), "unknown"))}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "content": text}


def _arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def cost_attributes(cost: Any) -> dict[str, Any]:
    """COST-1: the request's ledger totals as span attributes (`fsm_agent.cost.*`)."""
    attributes: dict[str, Any] = {
        "fsm_agent.cost.input_tokens": cost.input_tokens,
        "fsm_agent.cost.output_tokens": cost.output_tokens,
        "fsm_agent.cost.regenerated_tokens": cost.regenerated_tokens,
        "fsm_agent.cost.discarded_tokens": cost.discarded_tokens,
        "fsm_agent.cost.wasted_tokens": cost.wasted_tokens,
        "fsm_agent.cost.estimated": cost.estimated,
    }
    if cost.price is not None:
        attributes["fsm_agent.cost.usd"] = cost.price
    if cost.wasted_price is not None:
        attributes["fsm_agent.cost.wasted_usd"] = cost.wasted_price
    return attributes


def attempt_cost_attributes(line: Any) -> dict[str, Any]:
    """COST-1: one attempt's line of the ledger, as the attributes of its span event
    (`fsm_agent.attempt.cost`), with the GenAI names for its model and token counts."""
    attributes: dict[str, Any] = {
        "fsm_agent.attempt": line.attempt,
        "fsm_agent.attempt.outcome": line.outcome,
        "gen_ai.usage.input_tokens": line.input_tokens,
        "gen_ai.usage.output_tokens": line.output_tokens,
        "fsm_agent.usage.estimated": line.estimated,
        "fsm_agent.cost.regenerated_tokens": line.regenerated_tokens,
        "fsm_agent.cost.discarded_tokens": line.discarded_tokens,
    }
    if line.route is not None:
        attributes["fsm_agent.route"] = line.route
    if line.model is not None:
        attributes["gen_ai.response.model"] = line.model
    if line.price is not None:
        attributes["fsm_agent.cost.usd"] = line.price
    if line.price_source is not None:
        attributes["fsm_agent.cost.price_source"] = line.price_source
    return attributes
