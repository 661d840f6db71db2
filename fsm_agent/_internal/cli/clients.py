"""SDK clients and request parameters for the command line, one shape per provider API.

Builds the client a subcommand streams through — for a real provider, with the key from the usual
environment variable (or AWS's credential chain), or for the built-in emulator — and the request
keyword arguments exactly as that SDK takes them (prompt, system prompt, tools). A missing key or
SDK is a `SetupError`: one line for the user, never a traceback. Never sends a request itself.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "API_KEY_VARIABLES",
    "EMULATOR_FALLBACK_MODELS",
    "EMULATOR_MODELS",
    "SetupError",
    "build_params",
    "check_adapter",
    "close_client",
    "emulator_client",
    "load_tools",
    "parse_fallback",
    "provider_client",
]

API_KEY_VARIABLES = {
    "chat_completions": "OPENAI_API_KEY",
    "responses": "OPENAI_API_KEY",
    "anthropic_messages": "ANTHROPIC_API_KEY",
    "gemini_generate_content": "GEMINI_API_KEY",
}
# Other variables that hold the same key, tried in order after the one above (google-genai reads both).
_KEY_FALLBACKS = {"gemini_generate_content": ("GOOGLE_API_KEY",)}
_SDKS = {
    "chat_completions": "openai",
    "responses": "openai",
    "anthropic_messages": "anthropic",
    "bedrock_converse": "boto3",
    "gemini_generate_content": "google.genai",
}
_EXTRAS = {"openai": "openai", "anthropic": "anthropic", "boto3": "bedrock", "google.genai": "gemini"}
EMULATOR_MODELS = {
    "chat_completions": "emulator-1",
    "responses": "emulator-1",
    "anthropic_messages": "claude-emulator-1",
    "bedrock_converse": "anthropic.claude-emulator-v1:0",
    "gemini_generate_content": "gemini-emulator-1",
}
# The model a fallback route asks the emulator for (RT-1), so that its route has a name of its own.
EMULATOR_FALLBACK_MODELS = {
    "chat_completions": "emulator-2",
    "responses": "emulator-2",
    "anthropic_messages": "claude-emulator-2",
    "bedrock_converse": "anthropic.claude-emulator-v2:0",
}
_EMULATOR_REGION = "us-east-1"


class SetupError(Exception):
    """A problem with the command line or the environment, told in one line (exit status 2)."""


def _sdk(api: str) -> Any:
    name = _SDKS[api]
    try:
        return importlib.import_module(name)
    except ImportError:
        raise SetupError(
            f"--api {api} needs the {name.replace('.', '-')} package: "
            f"pip install 'fsm_agent[{_EXTRAS[name]}]'"
        ) from None


def check_adapter(api: str) -> None:
    """The library's adapter for `api` imports (its SDK is installed); SetupError when not."""
    from ..providers import adapter_for

    try:
        adapter_for(api)
    except ImportError as exc:
        raise SetupError(f"--api {api} is not available here: {exc}") from None
    except ValueError as exc:
        raise SetupError(str(exc)) from None


def parse_fallback(text: str) -> tuple[str, str]:
    """`--fallback API:MODEL` as (api, model); a model may hold colons itself (Bedrock ids)."""
    from ..providers import APIS

    api, sep, model = text.partition(":")
    if not sep or not model.strip():
        raise SetupError(
            f"--fallback {text!r}: expected API:MODEL, e.g. anthropic_messages:claude-sonnet-4-5"
        )
    if api not in APIS:
        raise SetupError(f"--fallback {text!r}: unknown api {api!r}; expected one of {', '.join(APIS)}")
    return api, model.strip()


# -- clients ---------------------------------------------------------------------------------------------
def provider_client(api: str, base_url: str | None, env: Mapping[str, str] | None = None) -> Any:
    """A client for the real provider; SetupError names the variable to set when a key is missing."""
    env = os.environ if env is None else env
    if api == "bedrock_converse":
        return _bedrock_client(base_url, env)
    variable = API_KEY_VARIABLES[api]
    variables = (variable, *_KEY_FALLBACKS.get(api, ()))
    key = next((env.get(name, "").strip() for name in variables if env.get(name, "").strip()), "")
    if not key:
        wanted = " or ".join(variables)
        raise SetupError(f"set {wanted} to stream with --api {api} (or use --emulator SCENARIO)")
    sdk = _sdk(api)
    if api == "gemini_generate_content":
        return _gemini_client(sdk, key, base_url)
    # Retries are the session's policy (and visible in the trace), not the SDK's.
    if api == "anthropic_messages":
        return sdk.Anthropic(api_key=key, base_url=base_url, max_retries=0)
    return sdk.OpenAI(api_key=key, base_url=base_url, max_retries=0)


def _gemini_client(sdk: Any, key: str, base_url: str | None) -> Any:
    """google-genai makes no retries unless asked (`HttpOptions.retry_options`): none asked here."""
    http_options = {"base_url": base_url} if base_url else None
    return sdk.Client(api_key=key, http_options=http_options)


def _bedrock_client(endpoint_url: str | None, env: Mapping[str, str]) -> Any:
    boto3 = _sdk("bedrock_converse")
    from botocore.config import Config

    # AWS_REGION is what the AWS SDKs and Lambda set; botocore itself reads AWS_DEFAULT_REGION.
    session = boto3.Session(region_name=env.get("AWS_REGION") or None)
    if session.get_credentials() is None:
        raise SetupError(
            "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(or AWS_PROFILE) to stream with --api bedrock_converse"
        )
    if not session.region_name:
        raise SetupError("set AWS_REGION (or AWS_DEFAULT_REGION) to stream with --api bedrock_converse")
    config = Config(retries={"total_max_attempts": 1, "mode": "standard"})
    return session.client("bedrock-runtime", endpoint_url=endpoint_url, config=config)


def emulator_client(api: str, emulator: Any) -> Any:
    """A client of the given API pointed at a running `fsm_agent.testing.Emulator`."""
    sdk = _sdk(api)
    if api == "gemini_generate_content":
        return _gemini_client(sdk, "AIza-emulator", emulator.gemini_base_url)
    if api == "anthropic_messages":
        return sdk.Anthropic(api_key="sk-ant-emulator", base_url=emulator.anthropic_base_url, max_retries=0)
    if api == "bedrock_converse":
        from botocore.config import Config

        return sdk.client(
            "bedrock-runtime",
            endpoint_url=emulator.bedrock_endpoint_url,
            region_name=_EMULATOR_REGION,
            aws_access_key_id="emulator",
            aws_secret_access_key="emulator",
            config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
        )
    return sdk.OpenAI(api_key="sk-emulator", base_url=emulator.openai_base_url, max_retries=0)


def close_client(client: Any) -> None:
    close = getattr(client, "close", None)
    if callable(close):
        close()


# -- tools -----------------------------------------------------------------------------------------------
def _neutral_tool(tool: Any) -> dict[str, Any]:
    """One tool in any provider's shape, as {name, description, parameters}."""
    if not isinstance(tool, dict):
        raise ValueError("each tool must be a JSON object")
    if isinstance(tool.get("function"), dict):  # Chat Completions
        tool = tool["function"]
    elif isinstance(tool.get("toolSpec"), dict):  # Bedrock
        spec = tool["toolSpec"]
        schema = spec.get("inputSchema", {})
        tool = {**spec, "parameters": schema.get("json", schema)}
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("each tool needs a name")
    parameters = tool.get("parameters", tool.get("input_schema", {"type": "object", "properties": {}}))
    return {"name": name, "description": str(tool.get("description", "")), "parameters": parameters}


def load_tools(path: str) -> list[dict[str, Any]]:
    """Tools from a JSON file: a list (or {"tools": [...]}) in any provider's shape."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise SetupError(f"cannot read the tools file {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise SetupError(f"the tools file {path} is not valid JSON: {exc}") from None
    if isinstance(document, dict) and isinstance(document.get("tools"), list):
        document = document["tools"]
    if not isinstance(document, list):
        raise SetupError(f"the tools file {path} must hold a JSON list of tools")
    try:
        return [_neutral_tool(tool) for tool in document]
    except ValueError as exc:
        raise SetupError(f"the tools file {path}: {exc}") from None


# -- request parameters ------------------------------------------------------------------------------------
def build_params(
    api: str,
    model: str,
    prompt: str,
    *,
    system: str | None = None,
    tools: Sequence[Mapping[str, Any]] = (),
    max_tokens: int = 4096,
) -> dict[str, Any]:
    """The request keyword arguments of `api`'s SDK for one user prompt."""
    if api == "chat_completions":
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": prompt})
        params: dict[str, Any] = {"model": model, "messages": messages}
        if tools:
            params["tools"] = [{"type": "function", "function": {**tool}} for tool in tools]
        return params
    if api == "responses":
        params = {"model": model, "input": [{"role": "user", "content": prompt}]}
        if system:
            params["instructions"] = system
        if tools:
            params["tools"] = [{"type": "function", **tool} for tool in tools]
        return params
    if api == "anthropic_messages":
        params = {"model": model, "max_tokens": max_tokens, "messages": [{"role": "user", "content": prompt}]}
        if system:
            params["system"] = system
        if tools:
            params["tools"] = [
                {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
                for t in tools
            ]
        return params
    if api == "bedrock_converse":
        params = {"modelId": model, "messages": [{"role": "user", "content": [{"text": prompt}]}]}
        if system:
            params["system"] = [{"text": system}]
        if tools:
            specs = [
                {
                    "toolSpec": {
                        "name": t["name"],
                        "description": t["description"] or t["name"],
                        "inputSchema": {"json": t["parameters"]},
                    }
                }
                for t in tools
            ]
            params["toolConfig"] = {"tools": specs}
        return params
    if api == "gemini_generate_content":
        config: dict[str, Any] = {"max_output_tokens": max_tokens}
        if system:
            config["system_instruction"] = system
        if tools:
            declarations = [
                {
                    "name": t["name"],
                    "description": t["description"],
                    "parameters_json_schema": t["parameters"],
                }
                for t in tools
            ]
            config["tools"] = [{"function_declarations": declarations}]
        return {"model": model, "contents": prompt, "config": config}
    raise SetupError(f"unknown api {api!r}")
