"""The per-event paths under near-miss input, as properties (SEC-4, WIRE-1).

Each payload has one parser: its declared `Shape`, checked by the compiled check, then the one
translation (no hand-written fast path beside them). For generated inputs (common per-token
payloads with one field replaced by an arbitrary JSON value, removed, or joined by another):
- Chat Completions and Anthropic: the translator gives events or the malformed-chunk error (a
  `ProviderStreamError`), never a plain-Python error; and the common payloads give their events;
- `parse_json` on text (`JSONDecoder.raw_decode` first) vs on the same bytes (always
  `JSONDecoder.decode`): the same value or the same error; and with the first step made to fail
  (as if `raw_decode` were gone or raised), the same again;
- `SSEDecoder.feed` of whole blocks vs the same bytes fed one at a time: same frames, same state,
  same error at the same offset;
- every declared `Shape` of every provider: its compiled check (with the one-field shortcut) and
  its `read` say what the declaration read field by field says (the same first wrong field, or
  nothing), and `read` returns the top-level values the payload holds.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsm_agent._internal.errors import ProviderStreamError
from fsm_agent._internal.events import ResponseMeta, TextDelta, ToolCallDelta
from fsm_agent._internal.providers import (
    anthropic_events,
    bedrock,
    gemini_events,
    openai_chat,
    openai_responses,
)
from fsm_agent._internal.providers.anthropic_events import AnthropicTranslator
from fsm_agent._internal.providers.openai_chat import ChatTranslator
from fsm_agent._internal.wire import shapes
from fsm_agent._internal.wire.shapes import DICT, LIST, Shape, parse_json
from fsm_agent._internal.wire.sse import SSEDecodeError, SSEDecoder

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


def _checked(translator: Any, payload: Any) -> tuple[str, Any]:
    """The translation's outcome; any error but the malformed-chunk error fails the test."""
    try:
        return "events", translator.payload(copy.deepcopy(payload))
    except ProviderStreamError as exc:  # the malformed-chunk error, or an error the stream carried
        return "error", exc.code


@settings(max_examples=600, deadline=None)
@given(first=st.sampled_from([*CHAT, None]), payload=mutated(CHAT))
def test_chat_near_misses_are_events_or_the_malformed_error(first: Any, payload: Any) -> None:
    translator = ChatTranslator()
    if first is not None:  # a chunk before: the response identity already reported, or not
        translator.payload(copy.deepcopy(first))
    _checked(translator, payload)
    assert _checked(translator, CHAT[0])[0] == "events"  # the translator still reads the next chunk


def test_chat_every_single_edit() -> None:
    for payload in single_edits(CHAT):
        for first in (None, CHAT[0]):
            translator = ChatTranslator()
            if first is not None:
                translator.payload(copy.deepcopy(first))
            _checked(translator, payload)


def test_chat_common_chunks_give_their_events() -> None:
    translator = ChatTranslator()
    assert translator.payload(copy.deepcopy(CHAT[0])) == [
        ResponseMeta(id="chatcmpl-1", model="m"),
        TextDelta("w "),
    ]
    assert translator.payload(copy.deepcopy(CHAT[0])) == [TextDelta("w ")]  # the identity once
    assert translator.payload(copy.deepcopy(CHAT[1])) == []
    assert translator.payload(copy.deepcopy(CHAT[2])) == [ToolCallDelta(index=0, arguments='{"a"')]


# -- Anthropic -------------------------------------------------------------------------------------
def _started() -> AnthropicTranslator:
    translator = AnthropicTranslator()
    translator.payload(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    )
    start = {"type": "tool_use", "id": "t", "name": "f", "input": {}}
    translator.payload({"type": "content_block_start", "index": 1, "content_block": start})
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
def test_anthropic_near_misses_are_events_or_the_malformed_error(payload: Any) -> None:
    translator = _started()
    _checked(translator, payload)


def test_anthropic_every_single_edit() -> None:
    for payload in single_edits(ANTHROPIC):
        _checked(_started(), payload)


def test_anthropic_per_token_deltas_give_their_events() -> None:
    translator = _started()
    assert translator.payload(copy.deepcopy(ANTHROPIC[0])) == [TextDelta("w ")]
    assert translator.payload(copy.deepcopy(ANTHROPIC[1])) == [ToolCallDelta(0, arguments='{"a')]
    assert translator.payload(copy.deepcopy(ANTHROPIC[2])) == []
    assert _blocks(translator) == {0: ("text", -1, ["w "]), 1: ("tool_use", 0, ['{"a', ""])}


# -- JSON text -----------------------------------------------------------------------------------------
TEXT = st.one_of(
    JSON.map(lambda v: json.dumps(v, separators=(",", ":"))),
    st.tuples(st.sampled_from(["", " ", "\n", "x"]), JSON, st.sampled_from(["", " ", "\t", "}", "x"])).map(
        lambda t: t[0] + json.dumps(t[1]) + t[2]
    ),
    st.sampled_from(["NaN", '{"a":Infinity}', '{"a":1e999}', "[" * 5000 + "]" * 5000, "", '{"a":-1e400}']),
    st.text(max_size=12),
)


def _parse(data: str | bytes) -> Any:
    return parse_json(data, "stream frame")


@settings(max_examples=300, deadline=None)
@given(text=TEXT)
def test_parse_json_raw_decode_first_is_decode(text: str) -> None:
    assert _outcome(_parse, text) == _outcome(_parse, text.encode("utf-8", "surrogatepass"))


def _no_raw_decode(text: str) -> Any:
    raise AttributeError("raw_decode")  # as if the decoder had no such method, or it failed


@settings(max_examples=300, deadline=None)
@given(text=TEXT)
def test_parse_json_without_raw_decode_is_the_same(text: str) -> None:
    """The fallback: with the first step failing, every text gives what it gave with it."""
    with_it = _outcome(_parse, text)
    saved = shapes._raw_decode
    shapes._raw_decode = _no_raw_decode
    try:
        assert _outcome(_parse, text) == with_it
    finally:
        shapes._raw_decode = saved


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


LF_LINE = st.sampled_from(
    [b"data: {}", b"data: x", b"data:x", b"data: ", b"data: data: y", b"event: delta", b"event: ",
     b"event:  two", b": ping", b"id: 7", b"retry: 10", b"", b"data: \xc3\xa9", b"x: y", b"data: \xff"]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    lines=st.lists(LF_LINE, max_size=16),
    tail=st.sampled_from([b"", b"\n", b"data: open", b"event: x\n"]),
    cut=st.integers(0, 400),
    max_line=st.sampled_from([None, 8, 64]),
)
def test_sse_many_blocks_in_one_read_are_the_general_decoding(
    lines: list[bytes], tail: bytes, cut: int, max_line: int | None
) -> None:
    """LF-ended lines of every kind, many blocks in one read (the line rules, whose common
    `data: ` and `event: ` lines are read without `partition()`), or in two reads cut anywhere:
    the same frames, error and state as the stream read a byte at a time."""
    stream = b"".join(line + b"\n" for line in lines) + tail
    by_byte = _decode([bytes([b]) for b in stream], max_line)
    assert _decode([stream], max_line) == by_byte
    assert _decode([stream[:cut], stream[cut:]], max_line) == by_byte


def test_sse_one_block_reads_are_decoded() -> None:
    decoder = SSEDecoder(max_line_bytes=64)
    assert decoder._one_block(b"data: {}\n\n") is not None
    assert decoder._one_block(b"event: delta\ndata: {}\n\n") is not None


# -- the compiled checks and `Shape.read`, against the declarations read as they stand ------------------
SHAPES: list[tuple[str, Shape]] = sorted(
    {
        (f"{module.__name__.rsplit('.', 1)[-1]}.{name}", value)
        for module in (openai_chat, openai_responses, anthropic_events, bedrock, gemini_events)
        for name, value in vars(module).items()
        if isinstance(value, Shape)
    },
    key=lambda pair: pair[0],
)


def _declared(shape: Shape, payload: object, path: tuple[str | int, ...] = ()) -> None:
    """The declaration read field by field, as its docstring says (no compiled code, no shortcut):
    raises `shapes._Wrong` at the first field of the wrong shape, in the declared order."""
    if type(payload) is not dict:
        raise shapes._Wrong(path, f"a JSON object ({shape.name})", payload)
    for key, spec in shape.fields.items():
        value = payload.get(key)
        optional = key not in shape.required
        kinds = DICT if isinstance(spec, Shape) else LIST if isinstance(spec, list) else tuple(spec)
        names = [shapes._JSON_NAMES[kind] for kind in kinds] + (["null"] if optional else [])
        if value is None:
            if optional:
                continue
            raise shapes._Wrong((*path, key), " or ".join(names), value)
        if type(value) not in kinds:
            raise shapes._Wrong((*path, key), " or ".join(names), value)
        if isinstance(spec, Shape):
            _declared(spec, value, (*path, key))
        elif isinstance(spec, list):
            for index, item in enumerate(value):
                _declared(spec[0], item, (*path, key, index))
    if shape.by is not None:
        kind = payload.get(shape.by)
        case = shape.cases.get(kind) if type(kind) is str else None
        if case is not None:
            _declared(case, payload, path)


def _of_kinds(kinds: tuple[type, ...]) -> st.SearchStrategy[Any]:
    one = {
        str: st.text(max_size=3),
        int: st.integers(-3, 3),
        float: st.floats(-2, 2),
        bool: st.booleans(),
        dict: st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
        list: st.lists(st.integers(), max_size=1),
    }
    return st.one_of([one[kind] for kind in kinds])


@st.composite
def from_shape(draw: st.DrawFn, shape: Shape, depth: int = 0) -> Any:
    """An object of `shape` with near misses: each declared field present with a value of its
    types, or absent, null, of another JSON type; a discriminated case taken; extra fields."""
    if depth > 3 or draw(st.integers(0, 30)) == 0:
        return draw(EDGES)  # not an object at all, or nested too deep to go on
    out: dict[str, Any] = {}
    if shape.by is not None and shape.cases and draw(st.integers(0, 5)):
        name = draw(st.sampled_from(sorted(shape.cases)))
        out[shape.by] = name
        case = draw(from_shape(shape.cases[name], depth + 1))
        if type(case) is dict:
            out.update(case)
    for key, spec in shape.fields.items():
        if key == shape.by and key in out:
            continue
        choice = draw(st.sampled_from(["value", "value", "value", "absent", "null", "wrong"]))
        if choice == "absent":
            continue
        if choice == "null":
            out[key] = None
        elif choice == "wrong":
            out[key] = draw(VALUE)
        elif isinstance(spec, Shape):
            out[key] = draw(from_shape(spec, depth + 1))
        elif isinstance(spec, list):
            out[key] = draw(st.lists(from_shape(spec[0], depth + 1), max_size=2))
        else:
            out[key] = draw(_of_kinds(tuple(spec)))
    if draw(st.integers(0, 3)) == 0:  # an extra field, undeclared or of another case
        extra = [*shape.fields, *(key for case in shape.cases.values() for key in case.fields), "extra"]
        out[draw(st.sampled_from(extra))] = draw(VALUE)
    if out and draw(st.integers(0, 3)) == 0:  # only one of its fields (the one-field shortcut)
        key = draw(st.sampled_from(sorted(out)))
        out = {key: out[key]}
    return out


def _verdicts(shape: Shape, payload: Any) -> dict[str, Any]:
    """What the declaration, the compiled check (plain and wrapped) and `read` say of `payload`."""
    verdicts: dict[str, Any] = {}
    try:
        _declared(shape, payload)
        verdicts["declared"] = None
    except shapes._Wrong as wrong:
        verdicts["declared"] = str(shapes._report(wrong, "payload"))
    try:
        shape.plain_check()(payload)
        verdicts["plain"] = None
    except shapes._Wrong as wrong:
        verdicts["plain"] = str(shapes._report(wrong, "payload"))
    for name, call in (("check", shape.compiled()), ("read", shape.read)):
        try:
            returned = call(payload, "payload")
            verdicts[name] = None
            if name == "read":
                assert returned == tuple(payload.get(key) for key in shape.fields)
                assert all(
                    a is b for a, b in zip(returned, (payload.get(k) for k in shape.fields), strict=True)
                )
        except ProviderStreamError as exc:
            assert exc.code == "provider_stream_malformed_chunk"
            verdicts[name] = str(exc)
    return verdicts


def _agree(shape: Shape, payload: Any) -> None:
    verdicts = _verdicts(shape, payload)
    assert len(set(verdicts.values())) == 1, verdicts


@pytest.mark.parametrize(("name", "shape"), SHAPES, ids=[name for name, _ in SHAPES])
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_compiled_check_and_read_are_the_declaration(name: str, shape: Shape, data: st.DataObject) -> None:
    """Every declared shape of every provider: the compiled check (with its one-field shortcut)
    and `read` raise what the declaration says, for the same field, or `read` returns the
    top-level values as the payload holds them."""
    _agree(shape, data.draw(from_shape(shape)))


def test_read_and_the_one_field_shortcut_on_chosen_payloads() -> None:
    delta = openai_chat._DELTA
    cases: list[tuple[Shape, Any]] = [
        # the one-field shortcut: its field valid, of the wrong type, null, or another field alone
        (delta, {"content": "w "}),
        (delta, {"content": ["a", {"text": "b"}]}),
        (delta, {"content": 5}),
        (delta, {"content": True}),
        (delta, {"content": None}),
        (delta, {"refusal": 5}),
        (delta, {"tool_calls": "x"}),
        (delta, {"extra": 1}),
        (delta, {}),
        (delta, {"content": "x", "refusal": 5}),
        (delta, {"content": "x", "extra": {}}),
        (delta, {"content": 5, "refusal": 5}),  # the first wrong field is named
        # the chunk read: missing fields, nulls, extra fields, wrong types deep inside
        (openai_chat.CHUNK, {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": "w"}}]}),
        (openai_chat.CHUNK, {"id": 7, "choices": [], "usage": None, "object": "chat.completion.chunk"}),
        (openai_chat.CHUNK, {"id": "c"}),
        (openai_chat.CHUNK, {"id": 1.5}),
        (openai_chat.CHUNK, {"model": None, "choices": None}),
        (openai_chat.CHUNK, {"choices": [{"delta": {"content": 1}}]}),
        (openai_chat.CHUNK, {"choices": [{"index": 0}, {"index": "1"}]}),
        (openai_chat.CHUNK, {"choices": [{"delta": {"tool_calls": [{"function": {"name": 3}}]}}]}),
        (openai_chat.CHUNK, {"usage": {"prompt_tokens_details": {"cached_tokens": "2"}}}),
        (openai_chat.CHUNK, []),
        (openai_chat.CHUNK, None),
        # a required field, a discriminated case
        (openai_responses.EVENT, {"type": "response.output_text.delta", "delta": "x"}),
        (openai_responses.EVENT, {"type": "response.output_text.delta"}),
        (openai_responses.EVENT, {"type": "response.output_text.delta", "delta": None}),
        (openai_responses.EVENT, {}),
        (openai_responses.EVENT, {"type": 3}),
        (anthropic_events.EVENT, {"type": "content_block_delta", "delta": {"type": "text_delta"}}),
        (bedrock._DELTA, {"text": 1}),
        (bedrock._DELTA, {"text": "x"}),
    ]
    outcomes = []
    for shape, payload in cases:
        _agree(shape, payload)
        outcomes.append(_verdicts(shape, payload)["read"])
    assert outcomes[0] is None and outcomes[2] == (
        "malformed payload: content must be a string or a list or null, got an integer 5"
    )
    assert outcomes[11] is not None and "content must be" in outcomes[11]
    assert openai_chat.CHUNK.read(cases[13][1], "payload") == (7, None, [], None)
    assert openai_chat._DELTA.read({"content": "w "}, "payload") == ("w ", None, None, None, None, None)


# -- the lone reads (`shapes.Lone`), against the general paths -----------------------------------------
def _same_translation(lone: shapes.Lone, shape: Shape, new: Any, firsts: list[Any], payload: Any) -> bool:
    """`lone`'s read of `payload` against the general path: a payload it reads passes `shape`'s
    declared check, and a translator (`new()`) gives the same outcome and keeps the same state
    from it as its general path (`_general`) does, after each of `firsts` (payloads translated
    before, or None). True when the lone read took the payload."""
    if lone.read(copy.deepcopy(payload)) is None:
        return False
    shape.check(copy.deepcopy(payload), "payload")  # raises if the lone read took a wrong payload
    for first in firsts:
        fast, general = new(), new()
        if first is not None:
            fast.payload(copy.deepcopy(first))
            general._general(copy.deepcopy(first))
        assert _outcome(fast.payload, payload) == _outcome(general._general, payload), payload
        state = [name for name in type(fast).__slots__ if name != "__weakref__"]
        assert [getattr(fast, n) for n in state] == [getattr(general, n) for n in state], payload
    return True


def _lone_agrees(payload: Any) -> bool:
    """The Chat chunk's lone read, fresh or after the response's identity was reported."""
    firsts = [None, CHAT[0], _chat({"content": "x"}, id="other"), _chat({"content": "x"}, id=7)]
    return _same_translation(openai_chat._LONE_TEXT, openai_chat.CHUNK, ChatTranslator, firsts, payload)


@settings(max_examples=600, deadline=None)
@given(payload=st.one_of(mutated(CHAT), from_shape(openai_chat.CHUNK)))
def test_chat_lone_read_is_the_general_path(payload: Any) -> None:
    _lone_agrees(payload)


def test_chat_lone_read_takes_the_common_chunks_and_no_other() -> None:
    taken = [_chat({"content": "w "}), _chat({"content": ""}), _chat({"content": "x"}, usage=None)]
    taken += [_chat({"content": "x", "role": "assistant"}), {"choices": [{"delta": {"content": "x"}}]}]
    taken += [_chat({"content": "x"}, id=7), _chat({"content": "x", "refusal": None})]
    assert all(_lone_agrees(payload) for payload in taken)
    general = [
        _chat({"content": ["a"]}),  # a list of blocks: flattened by the general path
        _chat({"content": "x", "refusal": "no"}),
        _chat({"content": "x", "tool_calls": []}),
        _chat({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}),
        _chat({"content": "x"}, usage={"prompt_tokens": 1}),
        _chat({"content": None}),
        _chat({"content": 5}),
        _chat({"content": "x"}, id=True),
        {
            **_chat({"content": "x"}),
            "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}],
        },
        {**_chat({"content": "x"}), "choices": [{"index": 1, "delta": {"content": "x"}}]},
        {**_chat({"content": "x"}), "choices": []},
        {**_chat({"content": "x"}), "choices": [{"delta": {"content": "x"}}, {"delta": {"content": "y"}}]},
        [],
    ]
    for payload in general:
        assert not _lone_agrees(payload) or payload["choices"][0].get("index") == 1, payload


def test_a_lone_form_is_declared_only_where_it_exists() -> None:
    text = Shape("delta", {"content": shapes.STR, "role": shapes.STR})
    for lone in (
        shapes.Lone(
            Shape("x", {"a": text, "b": shapes.STR}, required=("b",)), ("a", "content"), types=shapes.STR
        ),
        shapes.Lone(Shape("x", by="type", cases={"t": text}), ("content",), types=shapes.STR),
        shapes.Lone(text, ("content",), types=shapes.INT),
        shapes.Lone(Shape("x", {"a": text}), ("a", "content"), keep=(("a",),), types=shapes.STR),
        shapes.Lone(Shape("x", {"a": text, "n": text}), ("a", "content"), keep=(("n",),), types=shapes.STR),
        shapes.Lone(
            Shape("x", {"k": shapes.STR}, by="k", cases={"t": text}),
            (("k", "u"), "content"),
            types=shapes.STR,
        ),
        shapes.Lone(
            Shape("x", {"k": shapes.STR}, by="k", cases={"t": text}), (("k", "t"),), types=shapes.STR
        ),
    ):
        with pytest.raises(ValueError):
            lone.read({})


def _text_event(delta: Any = "w ", **extra: Any) -> dict[str, Any]:
    return {"type": "response.output_text.delta", "item_id": "m", "output_index": 0, "delta": delta, **extra}


RESPONSES = [_text_event(), _text_event(""), _text_event(sequence_number=4)]


def _responses_agree(payload: Any) -> bool:
    translator = openai_responses.ResponsesTranslator
    return _same_translation(
        openai_responses._LONE_TEXT, openai_responses.EVENT, translator, [None, RESPONSES[0]], payload
    )


@settings(max_examples=400, deadline=None)
@given(payload=st.one_of(mutated(RESPONSES), from_shape(openai_responses.EVENT)))
def test_responses_lone_read_is_the_general_path(payload: Any) -> None:
    _responses_agree(payload)


def test_responses_lone_read_takes_the_text_token_and_no_other() -> None:
    assert all(_responses_agree(payload) for payload in RESPONSES)
    for payload in (
        _text_event(None),
        _text_event(5),
        {**_text_event(), "type": "response.reasoning_text.delta"},
        {**_text_event(), "type": "response.function_call_arguments.delta"},
        {"delta": "w "},
        ["w "],
    ):
        assert not _responses_agree(payload), payload
