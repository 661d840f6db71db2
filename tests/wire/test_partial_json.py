"""The incremental partial-JSON reader (ACC-11): for every split of a valid JSON text the values only
grow and the last equals json.loads; invalid text raises at the first character that cannot lead
to JSON; every character is read a bounded number of times."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsm_agent._internal.partial_json import PartialJson, PartialJsonError

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=25,
)


def grows(before: Any, after: Any) -> bool:
    """`after` extends `before`: strings by a suffix, containers by more entries, nothing replaced."""
    if isinstance(before, str):
        return isinstance(after, str) and after.startswith(before)
    if isinstance(before, dict):
        return isinstance(after, dict) and all(k in after and grows(v, after[k]) for k, v in before.items())
    if isinstance(before, list):
        return (
            isinstance(after, list)
            and len(before) <= len(after)
            and all(grows(b, a) for b, a in zip(before, after, strict=False))
        )
    return type(before) is type(after) and before == after


def read_in_pieces(text: str, cuts: list[int]) -> tuple[list[Any], PartialJson]:
    reader = PartialJson()
    shown: list[Any] = []
    start = 0
    for cut in [*sorted(set(cuts)), len(text)]:
        if reader.feed(text[start:cut]):
            shown.append(json.loads(json.dumps(reader.value())))  # a deep copy that keeps the types
        start = cut
    if reader.end():
        shown.append(reader.value())
    return shown, reader


def splits(text_strategy: st.SearchStrategy[str]) -> st.SearchStrategy[tuple[str, list[int]]]:
    return text_strategy.flatmap(
        lambda text: st.tuples(st.just(text), st.lists(st.integers(0, len(text)), max_size=30))
    )


json_texts = st.tuples(values, st.booleans(), st.sampled_from(["", " ", "\n  "])).map(
    lambda args: json.dumps(args[0], ensure_ascii=args[1], indent=1 if args[2] else None) + args[2]
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(splits(json_texts))
def test_values_only_grow_and_the_last_is_json_loads(case: tuple[str, list[int]]) -> None:
    text, cuts = case
    shown, reader = read_in_pieces(text, cuts)
    expected = json.loads(text)
    assert reader.complete
    assert shown, "a complete value is always shown"
    assert shown[-1] == expected
    assert reader.value() == expected
    for before, after in itertools.pairwise(shown):
        assert grows(before, after), (before, after)


@settings(max_examples=100, deadline=None)
@given(values)
def test_one_character_at_a_time(value: Any) -> None:
    text = json.dumps(value, ensure_ascii=False)
    shown, _reader = read_in_pieces(text, list(range(len(text))))
    assert shown[-1] == json.loads(text)


def test_what_a_partial_value_shows() -> None:
    steps = [  # (piece, the value after it)
        ('{"pa', {}),  # an object shows as soon as it opens; a key still arriving is absent
        ('th": ', {}),  # a key without a value yet is absent
        ('"src/a', {"path": "src/a"}),  # an open string, as far as it came
        ('.py", "n": 12', {"path": "src/a.py"}),  # a number only once complete
        ('3, "ok": tr', {"path": "src/a.py", "n": 123}),  # a literal only once complete
        ('ue, "s": "a\\', {"path": "src/a.py", "n": 123, "ok": True, "s": "a"}),  # a cut escape waits
        ('u00e9", "l": [', {"path": "src/a.py", "n": 123, "ok": True, "s": "a\u00e9", "l": []}),
        ("1, {", {"path": "src/a.py", "n": 123, "ok": True, "s": "a\u00e9", "l": [1, {}]}),
        ("}]}", {"path": "src/a.py", "n": 123, "ok": True, "s": "a\u00e9", "l": [1, {}]}),
    ]
    reader = PartialJson()
    for piece, expected in steps:
        reader.feed(piece)
        assert reader.value() == expected, piece
    assert reader.complete


def test_a_surrogate_pair_cut_anywhere() -> None:
    """An escaped pair (\\ud83d\\ude00) or a raw pair cut between pieces becomes one character."""
    for text in ('["\\ud83d\\ude00 x"]', '["\ud83d\ude00 x"]'):
        for cut in range(len(text) + 1):
            shown, reader = read_in_pieces(text, [cut])
            assert reader.value() == ["😀 x"], (text, cut)
            assert all("\ud83d" not in value[0] for value in shown if value)


def test_a_lone_high_surrogate_escape_stays_as_json_loads_reads_it() -> None:
    text = '["\\ud83d!"]'
    for cut in range(len(text) + 1):
        _, reader = read_in_pieces(text, [cut])
        assert reader.value() == json.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"a" 1}',
        '{"a": tru}',
        "[1,]",
        '{"a": "\x01"}',
        "{} x",
        "[01]",
        '{"a": "\\x"}',
        '["\\u12g4"]',
        "{,}",
        "]",
    ],
)
def test_invalid_json_raises_where_it_stops_being_json(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    reader = PartialJson()
    with pytest.raises(PartialJsonError):
        for char in text:
            reader.feed(char)
        reader.end()
    assert reader.failed
    with pytest.raises(PartialJsonError):
        reader.feed("1")


@pytest.mark.parametrize("text", ['{"a": 1', '{"a": "x', "[1, 2", "12", "tru", '"ab'])
def test_a_text_cut_short(text: str) -> None:
    reader = PartialJson()
    reader.feed(text)
    assert not reader.complete
    if text in ("12",):  # a root number ends with the text
        assert reader.end() and reader.value() == 12
        return
    with pytest.raises(PartialJsonError, match="ends early"):
        reader.end()


def test_whitespace_closing_quotes_and_brackets_are_no_news() -> None:
    reader = PartialJson()
    assert reader.feed('{"a": [1, {"b": "c')
    assert not reader.feed('"   ')
    assert not reader.feed("}")  # the inner object was already shown whole
    assert not reader.feed("]")
    assert not reader.feed("}")  # the root closing completes the value but shows nothing new
    assert reader.complete
    assert reader.value() == {"a": [1, {"b": "c"}]}


def test_each_character_is_read_a_bounded_number_of_times() -> None:
    """The state between pieces is bounded: what is held back never grows with the text."""
    body = json.dumps({"content": "x\\y\n" * 5000, "n": list(range(500)), "t": [True, None, False] * 100})
    reader = PartialJson()
    longest_hold = 0
    for start in range(0, len(body), 3):
        reader.feed(body[start : start + 3])
        longest_hold = max(longest_hold, len(reader._hold))
    assert reader.complete and reader.value() == json.loads(body)
    assert longest_hold <= 12


def test_nesting_deeper_than_max_depth_is_refused() -> None:
    """An adversarial `[[[[…` cannot make every value() cost its depth: refused like invalid JSON."""
    from fsm_agent._internal.partial_json import MAX_DEPTH

    reader = PartialJson()
    reader.feed("[" * MAX_DEPTH + "1" + "]" * MAX_DEPTH)
    assert reader.complete
    deep = PartialJson()
    with pytest.raises(PartialJsonError, match="nested deeper"):
        deep.feed("[" * (MAX_DEPTH + 1))
