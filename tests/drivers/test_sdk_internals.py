"""The private attributes of other libraries that fsm_agent relies on are still there (issue 14).

fsm_agent aborts a blocked read from another thread (a stall, an interrupt: WD-4, RES-11) by
shutting down the socket under the SDK's stream. Reaching that socket goes through attributes the
libraries do not promise: httpx/httpx2's `network_stream` response extension, and botocore's
`EventStream._raw_stream` over urllib3's response. If a new release renames one, stalls would be
detected but the blocked read could not be cut, so this test fails loudly, naming the library,
against the versions installed (it runs in both CI environments).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import anthropic
import boto3
import botocore
import openai

from fsm_agent._internal.providers.base import socket_of
from fsm_agent._internal.providers.bedrock import _socket_under
from fsm_agent.testing import Emulator, Scenario


def _explain(library: str, version: str, attribute: str) -> str:
    return (
        f"{library} {version} no longer exposes {attribute}: fsm_agent cannot reach the socket under "
        "a stream to abort a blocked read (WD-4, RES-11); update fsm_agent/providers for this release"
    )


def test_openai_and_anthropic_responses_expose_their_socket(emulator: Emulator) -> None:
    emulator.script(Scenario.build("one"), Scenario.build("two"))
    messages = [{"role": "user", "content": "hi"}]
    with openai.OpenAI(base_url=emulator.openai_base_url, api_key="k", max_retries=0) as client:
        raw = client.chat.completions.with_streaming_response.create(
            model="m", messages=messages, stream=True
        )
        with raw as response:
            http = response.http_response
            library = type(http).__module__.split(".")[0]  # httpx or httpx2, as the SDK uses
            assert isinstance(socket_of(http), socket.socket), _explain(
                library, openai.__version__, "extensions['network_stream'].get_extra_info('socket')"
            )
    with anthropic.Anthropic(base_url=emulator.anthropic_base_url, api_key="k", max_retries=0) as client:
        raw = client.messages.with_streaming_response.create(
            model="m", max_tokens=10, messages=messages, stream=True
        )
        with raw as response:
            http = response.http_response
            library = type(http).__module__.split(".")[0]
            assert isinstance(socket_of(http), socket.socket), _explain(
                library, anthropic.__version__, "extensions['network_stream'].get_extra_info('socket')"
            )


@contextlib.contextmanager
def _converse_stream(emulator: Emulator) -> Iterator[Any]:
    """A real boto3 ConverseStream answer's `EventStream` from the emulator, closed afterwards."""
    emulator.script(Scenario.build("one"))
    client = boto3.client(
        "bedrock-runtime",
        endpoint_url=emulator.bedrock_endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )
    try:
        answer = client.converse_stream(modelId="m", messages=[{"role": "user", "content": [{"text": "hi"}]}])
        stream = answer["stream"]
        try:
            yield stream
        finally:
            stream.close()
    finally:
        client.close()


def test_botocore_event_streams_expose_their_socket(emulator: Emulator) -> None:
    with _converse_stream(emulator) as stream:
        assert hasattr(stream, "_raw_stream"), _explain(
            "botocore", botocore.__version__, "EventStream._raw_stream"
        )
        assert isinstance(_socket_under(stream), socket.socket), _explain(
            "urllib3 (under botocore)",
            botocore.__version__,
            "HTTPResponse._connection.sock or _fp.fp.raw._sock",
        )


def test_botocore_event_streams_are_read_where_our_decoder_reads_them(emulator: Emulator) -> None:
    """WIRE-1: our decoder reads botocore's bytes through `EventStream._raw_stream.stream()` and
    raises botocore's own errors by name. A release that renames them still streams (the stream
    is then read by botocore's parser, or our own error stands in), but slower or with another
    cause: this says which."""
    import botocore.eventstream

    from fsm_agent._internal.providers.bedrock import _botocore_error, _raw_body

    with _converse_stream(emulator) as stream:
        assert _raw_body(stream) is not None, (
            f"botocore {botocore.__version__}: EventStream._raw_stream.stream() is gone; Bedrock "
            "streams fall back to botocore's own parser (WIRE-1)"
        )
    cls = botocore.eventstream.EventStream
    for name, args in (
        ("ChecksumMismatch", (1, 2)),
        ("InvalidHeadersLength", (1,)),
        ("InvalidPayloadLength", (1,)),
        ("DuplicateHeader", ("h",)),
        ("EventStreamError", ({"Error": {"Code": "c", "Message": "m"}}, "ConverseStream")),
    ):
        assert type(_botocore_error(cls, name, *args)).__name__ == name, (
            f"botocore {botocore.__version__} has no {name}({len(args)} arguments) beside its EventStream"
        )
