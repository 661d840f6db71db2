"""SEC-5: the byte cap holds on every path of every API, through the real SDK clients over
loopback: a 20 MB answer under a 1 MiB cap raises `StreamLimitError`, streamed (SSE, Bedrock's
event stream), as a JSON body answered to the streaming request (WIRE-5), and as the answer of
the non-streaming fallback (RES-9). The memory each path peaks at is `bench/bench_caps.py`'s.

Bedrock has no JSON-body path: botocore reads any 200 answer of ConverseStream as an event stream,
so a JSON body there is a malformed stream (SEC-4), not a finished answer."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import boto3
import botocore.config
import openai
import pytest
from google import genai
from hardening_kit import boto_close
from helpers import assert_emulator_and_threads_idle

import fsm_agent
from fsm_agent.testing import BedrockAccessDenied, Emulator, NonStreamingBody, Scenario, StreamingUnsupported

CAP = 1024 * 1024
BIG = "x" * (20 * 1000 * 1000)  # 20 MB of answer text

PARAMS: dict[str, dict[str, Any]] = {
    "chat_completions": {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]},
    "responses": {"model": "gpt-4.1-mini", "input": "hi"},
    "anthropic_messages": {
        "model": "claude-sonnet-4-6",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
    },
    "bedrock_converse": {
        "modelId": "us.anthropic.claude-sonnet-4-5-v1:0",
        "messages": [{"role": "user", "content": [{"text": "hi"}]}],
    },
    "gemini_generate_content": {"model": "gemini-2.5-flash", "contents": "hi"},
}
PATHS = ("stream", "json body", "fallback")
CASES = [(api, path) for api in PARAMS for path in PATHS if (api, path) != ("bedrock_converse", "json body")]


def client_for(api: str, emu: Emulator, *, aio: bool = False) -> Any:
    if api in ("chat_completions", "responses"):
        kind = openai.AsyncOpenAI if aio else openai.OpenAI
        return kind(base_url=emu.openai_base_url, api_key="sk-test-key-12345", max_retries=0)
    if api == "anthropic_messages":
        maker = anthropic.AsyncAnthropic if aio else anthropic.Anthropic
        return maker(base_url=emu.anthropic_base_url, api_key="sk-ant-test-key", max_retries=0)
    if api == "gemini_generate_content":
        client = genai.Client(api_key="AIza-test", http_options={"base_url": emu.gemini_base_url})
        return client.aio if aio else client
    return boto3.client(
        "bedrock-runtime",
        endpoint_url=emu.bedrock_endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="AKIAEXAMPLEEXAMPLE00",
        aws_secret_access_key="bedrock-secret-for-tests",
        config=botocore.config.Config(retries={"total_max_attempts": 1}),
    )


def close_client(api: str, client: Any) -> None:
    if api == "bedrock_converse":
        boto_close(client)
    elif api != "gemini_generate_content":
        client.close()


def scenario_for(api: str, path: str) -> list[Scenario]:
    """The emulator's script: the big answer on `path` (the fallback's is its second request)."""
    if path == "stream":
        return [Scenario.build(BIG)]
    if path == "json body":
        return [Scenario.build(BIG, faults=[NonStreamingBody()])]
    refusal = BedrockAccessDenied() if api == "bedrock_converse" else StreamingUnsupported()
    return [Scenario.build(BIG, faults=[refusal]), Scenario.build(BIG, faults=[refusal])]


@pytest.fixture
def clean(emulator: Emulator) -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    assert_emulator_and_threads_idle(emulator, before, timeout=5.0)


@pytest.mark.parametrize(("api", "path"), CASES)
def test_a_20_mb_answer_under_a_1_mib_cap_raises_stream_limit_error(
    emulator: Emulator, clean: None, api: str, path: str
) -> None:
    emulator.script(*scenario_for(api, path))
    client = client_for(api, emulator)
    notices: list[str] = []
    try:
        with pytest.raises(fsm_agent.StreamLimitError):
            fsm_agent.Session(retries=0, max_bytes=CAP).stream(
                client, PARAMS[api], api=api, on_status=notices.append
            )
    finally:
        close_client(api, client)
    if path == "fallback":  # the cap ended the fallback's answer, not its refused stream
        assert len(emulator.requests) == 2 and any("falling back" in n for n in notices)
    else:
        assert len(emulator.requests) == 1


@pytest.mark.parametrize(("api", "path"), [case for case in CASES if case[1] != "stream"])
def test_async_the_cap_holds_on_json_bodies_and_the_fallback(
    emulator: Emulator, clean: None, api: str, path: str
) -> None:
    emulator.script(*scenario_for(api, path))

    async def main() -> None:
        client = client_for(api, emulator, aio=True)
        try:
            with pytest.raises(fsm_agent.StreamLimitError):
                await fsm_agent.Session(retries=0, max_bytes=CAP).astream(client, PARAMS[api], api=api)
        finally:
            if api == "bedrock_converse":
                boto_close(client)
            elif api == "gemini_generate_content":
                await client.aclose()
            else:
                await client.close()

    asyncio.run(main())


@pytest.mark.parametrize("api", list(PARAMS))
def test_the_fallback_under_the_cap_still_answers(emulator: Emulator, clean: None, api: str) -> None:
    """The capped plain request gives the same answer as before: the body read, then parsed."""
    refusal = BedrockAccessDenied() if api == "bedrock_converse" else StreamingUnsupported()
    answer = Scenario.build("All fine.", faults=[refusal])
    emulator.script(answer, answer)
    client = client_for(api, emulator)
    try:
        result = fsm_agent.Session(retries=0, max_bytes=CAP).stream(client, PARAMS[api], api=api)
    finally:
        close_client(api, client)
    assert (result.content, result.streamed) == ("All fine.", False)
