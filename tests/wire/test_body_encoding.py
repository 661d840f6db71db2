"""The stream's bytes, read raw or decoded (issue 13): without a Content-Encoding the driver reads
the HTTP library's raw bytes (the same bytes, fewer layers); with one, the decoded bytes.

A small HTTP server of the standard library stands in for a provider here only because the
emulator never compresses its answers: it serves one Chat Completions stream, gzip-compressed or
not, to the real `openai` clients (sync and async) over loopback.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai
import pytest

import fsm_agent

WORDS = [f"w{i} " for i in range(40)]


def _body() -> bytes:
    chunks = [{"content": word} for word in WORDS]
    frames = [
        {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        for delta in chunks
    ]
    frames.append({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return b"".join(b"data: " + json.dumps(f).encode() + b"\n\n" for f in frames) + b"data: [DONE]\n\n"


class _Handler(BaseHTTPRequestHandler):
    encoding: str | None = None

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        body = _body()
        if self.encoding == "gzip":
            body = gzip.compress(body)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        if self.encoding is not None:
            self.send_header("content-encoding", self.encoding)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        half = len(body) // 2
        self.wfile.write(body[:half])  # two writes: the client reads the body in pieces
        self.wfile.flush()
        self.wfile.write(body[half:])

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


@pytest.fixture(params=[None, "gzip"], ids=["plain", "gzip"])
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    handler = type("Handler", (_Handler,), {"encoding": request.param})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, name="encoding-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


PARAMS = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_sync_stream_reads_plain_and_encoded_bodies(server: str) -> None:
    texts: list[str] = []
    with openai.OpenAI(base_url=server, api_key="sk-test", max_retries=0) as client:
        result = fsm_agent.Session().stream(client, PARAMS, on_text=texts.append)
    assert result.content == "".join(WORDS)
    assert texts == WORDS
    assert result.finish_reason == "stop"


def test_async_stream_reads_plain_and_encoded_bodies(server: str) -> None:
    async def main() -> Any:
        async with openai.AsyncOpenAI(base_url=server, api_key="sk-test", max_retries=0) as client:
            return await fsm_agent.Session().astream(client, PARAMS)

    result = asyncio.run(main())
    assert result.content == "".join(WORDS)
    assert result.finish_reason == "stop"
