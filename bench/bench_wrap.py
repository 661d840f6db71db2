"""`fsm_agent.wrap()` benchmark (issue 27): per-chunk cost of iterating a wrapped client divided by
the bare client's, on the same bytes (goal <= 1.0).

Both loops read every chunk's text, as a caller does. The wrapped client runs the request through
the machine (its own parser, ~10x cheaper than the SDK's per event) and builds the SDK's objects
from the machine's events; the bare one decodes and builds them itself. Chat Completions sync and
async, Responses and Anthropic Messages sync. Run: .venv/bin/python bench/bench_wrap.py. Medians
of 5 interleaved runs, [min..max] over the runs; nothing asserts on time.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import anthropic
import httpx2
import openai
from _common import chat_body, interleaved_times, memory_openai_client, ratios, split_bytes, spread
from bench_anthropic import anthropic_body, memory_anthropic_client

import fsm_agent

CHAT = {"model": "bench-model", "messages": [{"role": "user", "content": "hi"}]}
CLAUDE = {"model": "bench-model", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
TEXT_CHUNKS = 4000


def session() -> fsm_agent.Session:
    return fsm_agent.Session(telemetry=False)


def chat_texts(stream: Any) -> str:
    texts = []
    for chunk in stream:
        if chunk.choices:
            content = chunk.choices[0].delta.content
            if content:
                texts.append(content)
    return "".join(texts)


def chat_sync() -> None:
    body, text, _ = chat_body(text_chunks=TEXT_CHUNKS, args_total=200, arg_fragment=20)
    chunks = body.count(b"\n\n")
    bare = memory_openai_client(body)
    wrapped = fsm_agent.wrap(bare, session(), markers=False)

    def run_wrapped() -> None:
        assert chat_texts(wrapped.chat.completions.create(**CHAT, stream=True)) == text

    def run_bare() -> None:
        assert chat_texts(bare.chat.completions.create(**CHAT, stream=True)) == text

    a, b = interleaved_times(run_wrapped, run_bare)
    print(f"Chat Completions, sync, {chunks} chunks")
    print(f"  (a) wrapped client  {spread(a, chunks)} us/chunk")
    print(f"  (b) bare client     {spread(b, chunks)} us/chunk")
    print(f"  a/b = {ratios(a, b)}  (goal <= 1.0)")


class _AsyncBody(httpx2.AsyncByteStream):  # type: ignore[misc]
    def __init__(self, body: bytes) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in split_bytes(self._body):
            yield piece

    async def aclose(self) -> None:
        pass


def memory_async_openai_client(body: bytes) -> openai.AsyncOpenAI:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=_AsyncBody(body))

    return openai.AsyncOpenAI(
        base_url="http://bench.invalid/v1",
        api_key="sk-bench",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )


def chat_async() -> None:
    body, text, _ = chat_body(text_chunks=TEXT_CHUNKS, args_total=200, arg_fragment=20)
    chunks = body.count(b"\n\n")
    bare = memory_async_openai_client(body)
    wrapped = fsm_agent.wrap(bare, session(), markers=False)
    loop = asyncio.new_event_loop()

    async def texts(client: Any) -> str:
        out = []
        async for chunk in await client.chat.completions.create(**CHAT, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                out.append(chunk.choices[0].delta.content)
        return "".join(out)

    def run_wrapped() -> None:
        assert loop.run_until_complete(texts(wrapped)) == text

    def run_bare() -> None:
        assert loop.run_until_complete(texts(bare)) == text

    a, b = interleaved_times(run_wrapped, run_bare)
    loop.run_until_complete(loop.shutdown_asyncgens())  # the bare SDK leaves one pending
    loop.close()
    print(f"Chat Completions, async, {chunks} chunks")
    print(f"  (a) wrapped client  {spread(a, chunks)} us/chunk")
    print(f"  (b) bare client     {spread(b, chunks)} us/chunk")
    print(f"  a/b = {ratios(a, b)}  (goal <= 1.0)")


def responses_body(text_events: int) -> tuple[bytes, str]:
    def sse(payload: dict[str, Any]) -> bytes:
        return f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n".encode()

    response = {
        "id": "resp_b",
        "object": "response",
        "created_at": 1,
        "status": "in_progress",
        "model": "bench-model",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    pieces = [f"word{i % 97} " for i in range(text_events)]
    text = "".join(pieces)
    where = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    item = {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []}
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    events = [
        {"type": "response.created", "response": response},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.content_part.added", **where, "part": part},
        *(
            {"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
            for piece in pieces
        ),
        {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **where, "part": {**part, "text": text}},
    ]
    done_item = {**item, "status": "completed", "content": [{**part, "text": text}]}
    events.append({"type": "response.output_item.done", "output_index": 0, "item": done_item})
    usage = {
        "input_tokens": 1,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 2,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 3,
    }
    final = {**response, "status": "completed", "output": [done_item], "usage": usage}
    events.append({"type": "response.completed", "response": final})
    body = b"".join(sse({**event, "sequence_number": n}) for n, event in enumerate(events))
    return body, text


def responses_sync() -> None:
    body, text = responses_body(TEXT_CHUNKS)
    events = body.count(b"\n\n")
    bare = memory_openai_client(body)
    wrapped = fsm_agent.wrap(bare, session(), markers=False)

    def texts(client: Any) -> str:
        stream = client.responses.create(model="bench-model", input="hi", stream=True)
        return "".join(event.delta for event in stream if event.type == "response.output_text.delta")

    def run_wrapped() -> None:
        assert texts(wrapped) == text

    def run_bare() -> None:
        assert texts(bare) == text

    a, b = interleaved_times(run_wrapped, run_bare)
    print(f"Responses, sync, {events} events")
    print(f"  (a) wrapped client  {spread(a, events)} us/event")
    print(f"  (b) bare client     {spread(b, events)} us/event")
    print(f"  a/b = {ratios(a, b)}  (goal <= 1.0)")


def anthropic_sync() -> None:
    body, text, _ = anthropic_body(text_events=TEXT_CHUNKS, args_total=200, fragments=10)
    events = body.count(b"\n\n")
    bare: anthropic.Anthropic = memory_anthropic_client(body)
    wrapped = fsm_agent.wrap(bare, session(), markers=False)

    def texts(client: Any) -> str:
        out = []
        for event in client.messages.create(**CLAUDE, stream=True):
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                out.append(event.delta.text)
        return "".join(out)

    def run_wrapped() -> None:
        assert texts(wrapped) == text

    def run_bare() -> None:
        assert texts(bare) == text

    a, b = interleaved_times(run_wrapped, run_bare)
    print(f"Anthropic Messages, sync, {events} events")
    print(f"  (a) wrapped client  {spread(a, events)} us/event")
    print(f"  (b) bare client     {spread(b, events)} us/event")
    print(f"  a/b = {ratios(a, b)}  (goal <= 1.0)")


if __name__ == "__main__":
    chat_sync()
    chat_async()
    responses_sync()
    anthropic_sync()
