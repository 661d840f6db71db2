"""The SDK clients the tests build against the emulator, one place for every API (real clients over
loopback, the SDKs' own retries off), and how to close one of any kind."""

from __future__ import annotations

from typing import Any

import anthropic
import boto3
import botocore.config
import openai

from fsm_agent.testing import Emulator


def openai_client(emu: Emulator) -> Any:
    return openai.OpenAI(base_url=emu.openai_base_url, api_key="sk-test", max_retries=0)


def anthropic_client(emu: Emulator) -> Any:
    return anthropic.Anthropic(base_url=emu.anthropic_base_url, api_key="sk-ant-test", max_retries=0)


def bedrock_client(emu: Emulator) -> Any:
    return boto3.client(
        "bedrock-runtime",
        endpoint_url=emu.bedrock_endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=botocore.config.Config(retries={"max_attempts": 1}),
    )


def bedrock_client_without_retries(emu: Emulator) -> Any:
    """A boto3 `bedrock-runtime` client on `emu` that never retries by itself (one request per call)."""
    return boto3.client(
        "bedrock-runtime",
        endpoint_url=emu.bedrock_endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=botocore.config.Config(retries={"total_max_attempts": 1}),
    )


def close_client(client: Any) -> None:
    """Close a client of any API; boto3's idle pooled sockets too (its close() keeps them)."""
    manager = getattr(getattr(getattr(client, "_endpoint", None), "http_session", None), "_manager", None)
    if manager is not None:
        for key in list(manager.pools.keys()):
            manager.pools[key].close()
    client.close()


def genai_async_busy(client: Any) -> int:
    """Connections of a genai AsyncClient's pools (one per event loop) still serving a request."""
    outer = client._api_client._async_httpx_client
    return sum(
        1
        for inner in list(outer._loop_clients.values())
        for conn in inner._transport._pool.connections
        if not conn.is_idle() and not conn.is_closed()
    )


def boto_busy(client: Any) -> int:
    """Connections of a boto3 client's urllib3 pools handed out and never given back."""
    manager = client._endpoint.http_session._manager
    keys = list(manager.pools.keys())  # the container refuses plain iteration
    return sum(manager.pools[key].pool.maxsize - manager.pools[key].pool.qsize() for key in keys)
