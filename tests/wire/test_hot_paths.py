"""The per-event fast paths (issue 13) against the general paths they stand in for, as properties.

Each fast path takes only inputs the general path accepts, and for those must give exactly what it
gives; anything else goes to the general path. So, for generated inputs (valid hot-case payloads
with one field replaced by an arbitrary JSON value, removed, or joined by another), both must give
the same events, the same translator state and the same error (type, message, code):
- Chat Completions: `ChatTranslator.payload` (hot path first) vs `payload_checked` (CHUNK.check, then
  the general translation);
- Anthropic: `AnthropicTranslator.payload` vs `payload_checked` (EVENT.check, then `_delta`);
- `parse_json` on text (the scanner first) vs on the same bytes (always `JSONDecoder.decode`);
- `SSEDecoder.feed` of a whole one-block read vs the same bytes fed one at a time (never the
  one-block path): same frames, same state, same error at the same offset.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fsm_agent.providers.anthropic_events import AnthropicTranslator
from fsm_agent.providers.openai_chat import ChatTranslator
from fsm_agent.wire.shapes import parse_json
from fsm_agent.wire.sse import SSEDecodeError, SSEDecoder

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=5), inner, max_size=2),
    max_leaves=4,
)
# The values the hot paths test for, so that near misses are generated often.
EDGE_VALUES: list[Any] = [
    None,
    0,
    1,
    -1,
    True,
    False,
    0.0,
    1.5,
    "",
    "x",
    "text_delta",
    [],
    {},
    [{}],
    {"text": "x"},
]
EDGES = st.sampled_from(EDGE_VALUES).map(
    copy.deepcopy  # never the shared constant itself: edits must not leak between examples
)
VALUE = st.one_of(EDGES, EDGES, EDGES, JSON)  # near misses three times in four


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    paths: list[tuple[Any, ...]] = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            paths += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            paths += _paths(item, (*prefix, index))
    return paths


@st.composite
def mutated(draw: st.DrawFn, templates: list[dict[str, Any]]) -> Any:
    """A hot-case template with up to two edits: a value replaced, a key removed or added."""
    payload: Any = copy.deepcopy(draw(st.sampled_from(templates)))
    for _ in range(draw(st.sampled_from([1, 1, 1, 0, 2]))):
        path = draw(st.sampled_from(_paths(payload)))
        if not path:
            payload = draw(VALUE)
            continue
        parent = payload
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "replace", "replace", "remove", "add"]))
        if action == "replace" or isinstance(parent, list):
            parent[path[-1]] = draw(VALUE)
        elif action == "remove":
            del parent[path[-1]]
        else:
            target = parent[path[-1]]
            if isinstance(target, dict):
                key = draw(
                    st.sampled_from(
                        ["content", "tool_calls", "refusal", "reasoning", "id", "name", "extra", "text"]
                    )
                )
                target[key] = draw(VALUE)
    return payload


def single_edits(templates: list[dict[str, Any]]) -> list[Any]:
    """Every template with one field (or the whole payload) replaced by each edge value, or removed."""
    out: list[Any] = []
    for template in templates:
        for path in _paths(template):
            for value in [*EDGE_VALUES, KeyError]:  # KeyError: remove the field
                if not path:
                    if value is not KeyError:
                        out.append(copy.deepcopy(value))
                    continue
                payload = copy.deepcopy(template)
                parent = payload
                for step in path[:-1]:
                    parent = parent[step]
                if value is KeyError:
                    if isinstance(parent, list):
                        continue
                    del parent[path[-1]]
                else:
                    parent[path[-1]] = copy.deepcopy(value)
                out.append(payload)
    return out


def _outcome(fn: Any, payload: Any) -> tuple[str, Any]:
    try:
        return "events", fn(copy.deepcopy(payload))
    except Exception as exc:  # the comparison is the test: every error must be the same
        return "error", (type(exc).__name__, str(exc), getattr(exc, "code", None))


# -- Chat Completions --------------------------------------------------------------------------------
def _chat(delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m", "choices": [choice], **extra}


CHAT = [
    _chat({"content": "w "}),
    _chat({"role": "assistant", "content": "", "refusal": None}),
    _chat({"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]}),
    _chat(
        {
            "tool_calls": [
                {"index": 1, "id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}
            ]
        }
    ),
    _chat({"content": "x"}, usage=None),
]


@settings(max_examples=600, deadline=None)
@given(first=st.sampled_from([*CHAT, None]), payload=mutated(CHAT))
def test_chat_hot_path_is_the_full_check_and_translation(first: Any, payload: Any) -> None:
    fast, full = ChatTranslator(), ChatTranslator()
    if first is not None:  # a chunk before: the response identity already reported, or not
        assert fast.payload(copy.deepcopy(first)) == full.payload_checked(copy.deepcopy(first))
    assert _outcome(fast.payload, payload) == _outcome(full.payload_checked, payload)
    assert _outcome(fast.payload, CHAT[0]) == _outcome(full.payload_checked, CHAT[0])  # same state after


def test_chat_hot_path_every_single_edit() -> None:
    for payload in single_edits(CHAT):
        for first in (None, CHAT[0]):
            fast, full = ChatTranslator(), ChatTranslator()
            if first is not None:
                fast.payload(copy.deepcopy(first))
                full.payload_checked(copy.deepcopy(first))
            assert _outcome(fast.payload, payload) == _outcome(full.payload_checked, payload), payload


def test_chat_hot_path_takes_the_common_chunks() -> None:
    """The fast path is not vacuous: the common chunks never reach the full check."""
    translator = ChatTranslator()
    translator.payload(CHAT[0])
    for chunk in (CHAT[0], CHAT[1], CHAT[2]):
        assert translator._hot(copy.deepcopy(chunk)) is not None


# -- Anthropic -------------------------------------------------------------------------------------
def _started() -> AnthropicTranslator:
    translator = AnthropicTranslator()
    translator.payload_checked(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    )
    start = {"type": "tool_use", "id": "t", "name": "f", "input": {}}
    translator.payload_checked({"type": "content_block_start", "index": 1, "content_block": start})
    return translator


ANTHROPIC = [
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "w "}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"a'}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "w "}},
]


def _blocks(translator: AnthropicTranslator) -> dict[int, tuple[Any, ...]]:
    return {i: (b.type, b.tool_index, list(b.parts)) for i, b in translator._blocks.items()}


@settings(max_examples=400, deadline=None)
@given(payload=mutated(ANTHROPIC))
def test_anthropic_hot_path_is_the_full_check_and_translation(payload: Any) -> None:
    fast, full = _started(), _started()
    assert _outcome(fast.payload, payload) == _outcome(full.payload_checked, payload)
    assert _blocks(fast) == _blocks(full)


def test_anthropic_hot_path_every_single_edit() -> None:
    for payload in single_edits(ANTHROPIC):
        fast, full = _started(), _started()
        assert _outcome(fast.payload, payload) == _outcome(full.payload_checked, payload), payload
        assert _blocks(fast) == _blocks(full)


def test_anthropic_hot_path_takes_the_per_token_deltas() -> None:
    translator = _started()
    for event in ANTHROPIC[:3]:
        assert translator._hot(copy.deepcopy(event)) is not None


# -- JSON text -----------------------------------------------------------------------------------------
TEXT = st.one_of(
    JSON.map(lambda v: json.dumps(v, separators=(",", ":"))),
    st.tuples(st.sampled_from(["", " ", "\n", "x"]), JSON, st.sampled_from(["", " ", "\t", "}", "x"])).map(
        lambda t: t[0] + json.dumps(t[1]) + t[2]
    ),
    st.sampled_from(["NaN", '{"a":Infinity}', '{"a":1e999}', "[" * 5000 + "]" * 5000, "", '{"a":-1e400}']),
    st.text(max_size=12),
)


@settings(max_examples=300, deadline=None)
@given(text=TEXT)
def test_parse_json_scanner_first_is_decode(text: str) -> None:
    def parse(data: str | bytes) -> Any:
        return parse_json(data, "stream frame")

    assert _outcome(parse, text) == _outcome(parse, text.encode("utf-8", "surrogatepass"))


# -- SSE: one block per read ------------------------------------------------------------------------
PIECE = st.sampled_from(
    [b"", b"x", b"{}", b" ", b":", b"\r", b"\n", b"\xff", b"\xc3\xa9", b"\xe2\x82", b"\x00"]
)
LINE = st.lists(PIECE, max_size=4).map(b"".join)


@st.composite
def one_block(draw: st.DrawFn) -> bytes:
    event = draw(st.none() | LINE)
    head = b"" if event is None else b"event: " + event + b"\n"
    data = draw(st.sampled_from([b"data: ", b"data:", b"data: data: "])) + draw(LINE)
    return (
        draw(st.sampled_from([b"", b"\xef\xbb\xbf"]))
        + head
        + data
        + draw(st.sampled_from([b"\n\n", b"\n\n", b"\r\n\r\n", b"\n", b"\n\n\n"]))
    )


def _decode(reads: list[bytes], max_line: int | None) -> tuple[Any, ...]:
    decoder = SSEDecoder(max_line_bytes=max_line)
    frames: list[Any] = []
    error = None
    try:
        for read in reads:
            frames += decoder.feed(read)
        decoder.flush()
    except SSEDecodeError as exc:
        error = (str(exc), exc.raw, exc.offset)
    return frames, error, decoder.pending, decoder.last_event_id


@settings(max_examples=400, deadline=None)
@given(
    blocks=st.lists(one_block(), min_size=1, max_size=3),
    max_line=st.sampled_from([None, 4, 12, 64]),
)
def test_sse_one_block_read_is_the_general_decoding(blocks: list[bytes], max_line: int | None) -> None:
    whole = _decode(blocks, max_line)  # each block one read: the one-block path when it applies
    by_byte = _decode([bytes([b]) for block in blocks for b in block], max_line)
    assert whole == by_byte


def test_sse_one_block_reads_are_decoded() -> None:
    decoder = SSEDecoder(max_line_bytes=64)
    assert decoder._one_block(b"data: {}\n\n") is not None
    assert decoder._one_block(b"event: delta\ndata: {}\n\n") is not None
