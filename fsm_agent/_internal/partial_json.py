"""An incremental reader of JSON text that arrives in pieces: the value so far, in linear time.

`PartialJson.feed(piece)` resumes where the last piece stopped (its state is a stack of the open
containers, the open string or number, and at most a dozen held-back characters), so every
character is read a bounded number of times whatever the fragmentation; `value()` is the value
parsed so far (ACC-11):

- a string is shown as far as it came (an escape cut in two waits for its second half);
- a key whose value has not started is absent; a key still arriving is absent;
- a number, `true`, `false` or `null` appears only once complete (the next delimiter, or `end()`);
- an object or array appears as soon as it opens.

So successive values only grow, and once the text is complete the value equals `json.loads` of it
(duplicate keys aside: the later one wins there too, replacing the earlier value).

Why not jiter's partial mode (what the SDKs use)? It re-parses the whole buffer on each call: with
fragments of a fixed size, the total cost is quadratic in the size of the text. jiter has no way
to resume a parse, so this module keeps its own state instead.

Cost of `value()`: a shallow copy of each open container (closed ones are shared, never copied
again) and the open string as it stands: a new `str` must be made for it, since the caller may
hold the previous one. (While no one else holds it, CPython can grow it in place.)
So reading costs linear time in the text; building a value costs the size of the open string
plus the entries of the open containers (small for tool arguments: a few keys and one growing
string; large for an array of many thousands of entries still open). Values share their finished
parts between calls: treat them as read-only. Nesting deeper than `MAX_DEPTH` is refused.

Never performs I/O, never logs; invalid JSON raises `PartialJsonError` and the reader stays failed.
"""

from __future__ import annotations

import json.decoder
import re
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_DEPTH", "PartialJson", "PartialJsonError"]

# Deeper nesting is refused (json.loads itself gives up near 1,000 levels): every value() copies
# each open container, so an adversarial `[[[[…` must not make each read cost its whole depth.
MAX_DEPTH = 256


class PartialJsonError(ValueError):
    """The text is not JSON (or not a prefix of JSON, while it is still arriving)."""


# What the reader expects next.
_VALUE = 0  # a value (the start, after ':' or ',' in an array)
_VALUE_OR_CLOSE = 1  # after '['
_STRING = 2  # inside a string (a key when `_in_key`)
_NUMBER = 3  # inside a number
_AFTER_VALUE = 4  # ',' or the container's close
_KEY_OR_CLOSE = 5  # after '{'
_KEY = 6  # after ',' in an object
_COLON = 7
_DONE = 8  # the root value is complete: whitespace only

# The reader's patterns, compiled when the first reader is made (`_compile_patterns`): a process
# whose requests carry no tool call never needs them, and importing the module compiles none.
_WS: re.Pattern[str]
_STR_BODY: re.Pattern[str]
_ESCAPE_START: re.Pattern[str]
_HIGH_ESCAPE: re.Pattern[str]
_NUM_RUN: re.Pattern[str]
_NUMBER_TEXT: re.Pattern[str]
_LOW_ESCAPE_PREFIX: re.Pattern[str]
_SURROGATE: re.Pattern[str]
_compiled = False


def _compile_patterns() -> None:
    global _WS, _STR_BODY, _ESCAPE_START, _HIGH_ESCAPE, _NUM_RUN, _NUMBER_TEXT, _LOW_ESCAPE_PREFIX
    global _SURROGATE, _compiled
    _WS = re.compile(r"[ \t\n\r]*")
    # The characters and whole escapes of a string (stops at its close, a cut escape or a bad one).
    _STR_BODY = re.compile(r'[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*')
    # What may still become an escape once more text arrives.
    _ESCAPE_START = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?")
    _HIGH_ESCAPE = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}")
    _NUM_RUN = re.compile(r"[0-9eE.+\-]*")
    _NUMBER_TEXT = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
    # What may still become a low-surrogate escape once more text arrives.
    _LOW_ESCAPE_PREFIX = re.compile(r"(?:\\(?:u(?:[dD](?:[c-fC-F][0-9a-fA-F]{0,2})?)?)?)?")
    _SURROGATE = re.compile("[\ud800-\udfff]")
    _compiled = True  # last: a reader made meanwhile in another thread compiles them again


# json's own string scanner (C), which json.loads uses: strict, surrogate pairs joined.
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_LITERALS: dict[str, tuple[str, Any]] = {"t": ("true", True), "f": ("false", False), "n": ("null", None)}


def _cuts_a_pair(text: str, start: int, end: int) -> bool:
    """The run text[start:end] ends with a high-surrogate escape (a real one: an odd number of
    backslashes) and the text ends where a low-surrogate escape could still follow."""
    at = end - 6
    if at < start or _HIGH_ESCAPE.fullmatch(text, at, end) is None:
        return False
    if _LOW_ESCAPE_PREFIX.fullmatch(text, end) is None:
        return False
    slashes = 0
    while at - slashes >= start and text[at - slashes] == "\\":
        slashes += 1
    return slashes % 2 == 1


class PartialJson:
    """One JSON text read piece by piece; `value()` is the value so far."""

    __slots__ = (
        "_hold",
        "_in_key",
        "_mode",
        "_number",
        "_offset",
        "_root",
        "_stack",
        "_text",
        "failed",
        "version",
    )

    def __init__(self) -> None:
        if not _compiled:
            _compile_patterns()
        self._mode = _VALUE
        # Open containers, outermost first: [dict, key of the value in progress] or [list, None].
        # A container joins its parent only when it closes, so the parents hold finished values.
        self._stack: list[list[Any]] = []
        self._text = ""  # the open string (or key): held once, so CPython can grow it in place
        self._in_key = False
        self._number = ""
        self._hold = ""  # characters that cannot be read until more arrive (a cut escape or word)
        self._root: Any = None
        self._offset = 0  # characters consumed before the current piece, for error messages
        self.failed = False
        # Bumped whenever value() would return something new; 0 while there is nothing to show.
        self.version = 0

    # -- input ------------------------------------------------------------------------------------
    def feed(self, piece: str) -> bool:
        """Read the next piece of the text; True when the value grew. Raises PartialJsonError."""
        if self.failed:
            raise PartialJsonError("the reader already failed")
        text = self._hold + piece if self._hold else piece
        self._hold = ""
        high = ""
        if text and "\ud800" <= text[-1] <= "\udbff":
            # A character outside the BMP decoded as a surrogate pair may be cut between pieces.
            high = text[-1]
            text = text[:-1]
        if _SURROGATE.search(text):  # re-paired as the accumulator does (lone halves: U+FFFD)
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        before = self.version
        try:
            self._scan(text)
        except PartialJsonError:
            self.failed = True
            raise
        self._offset += len(text) - len(self._hold)
        self._hold += high
        return self.version != before

    def end(self) -> bool:
        """The text is complete: a root number finishes here. Returns True when the value grew;
        raises PartialJsonError when the text stopped short of a whole JSON value."""
        if self.failed:
            raise PartialJsonError("the reader already failed")
        before = self.version
        if self._mode == _NUMBER and not self._stack and not self._hold:
            self._put(self._number_value())
        if self._mode != _DONE or self._hold:
            self.failed = True
            raise PartialJsonError(f"the JSON text ends early (after {self._offset} characters)")
        return self.version != before

    @property
    def size(self) -> int:
        """Characters of the text read so far."""
        return self._offset

    @property
    def complete(self) -> bool:
        return self._mode == _DONE and not self.failed

    # -- output -----------------------------------------------------------------------------------
    def value(self) -> Any:
        """The value so far (None while nothing is shown: check `version`)."""
        if self._mode == _DONE:
            return self._root
        tip: Any = None
        has_tip = self._mode == _STRING and not self._in_key
        if has_tip:
            tip = self._text
        for container, key in reversed(self._stack):
            snap = container.copy()
            if has_tip:
                if key is None:
                    snap.append(tip)
                else:
                    snap[key] = tip
            tip = snap
            has_tip = True
        return tip

    # -- the scanner ------------------------------------------------------------------------------
    def _fail(self, message: str, text: str, at: int) -> PartialJsonError:
        near = text[at : at + 20]
        return PartialJsonError(f"{message} at character {self._offset + at} (near {near!r})")

    def _number_value(self) -> int | float:
        text = self._number
        match = _NUMBER_TEXT.fullmatch(text)
        if match is None:
            raise PartialJsonError(f"bad number {text[:40]!r} before character {self._offset}")
        try:
            return float(text) if match.group(1) or match.group(2) else int(text)
        except ValueError as exc:  # more digits than int() converts
            raise PartialJsonError(f"bad number {text[:40]!r}: {exc}") from exc

    def _put(self, value: Any, shown: bool = False) -> None:
        """A value is complete: it joins its container (or becomes the root). `shown`: it was
        already part of the value (a string or container closing): no news, nothing to deliver."""
        stack = self._stack
        if not stack:
            self._root = value
            self._mode = _DONE
        else:
            frame = stack[-1]
            container = frame[0]
            if frame[1] is None:
                container.append(value)
            else:
                container[frame[1]] = value
                frame[1] = None
            self._mode = _AFTER_VALUE
        if not shown:
            self.version += 1

    def _close(self) -> None:
        container = self._stack.pop()[0]
        self._put(container, shown=True)

    def _scan(self, text: str) -> None:
        n = len(text)
        i = 0
        mode = self._mode
        # The open string lives in this local while it grows; `self._text` is emptied so that the
        # local holds the only reference and `+=` can extend it in place.
        string = self._text
        self._text = ""
        try:
            while i < n:
                if mode == _STRING:
                    # A run of characters and whole escapes, decoded at once by json's C scanner.
                    j = _STR_BODY.match(text, i).end()  # type: ignore[union-attr]
                    rest = text[j : j + 12]
                    ends = j == n or (rest[0] == "\\" and _ESCAPE_START.fullmatch(text, j) is not None)
                    if ends and _cuts_a_pair(text, i, j):
                        j -= 6  # a high surrogate whose low half may follow: keep the pair whole
                    if j > i:
                        run = text[i:j]
                        string += _scanstring(run + '"', 0)[0] if "\\" in run else run
                        if not self._in_key:
                            self.version += 1
                    if ends:  # what is left is an escape cut short: wait for the rest
                        self._hold = text[j:]
                        i = n
                        break
                    i = j
                    char = rest[0]
                    if char == '"':
                        i += 1
                        if self._in_key:
                            self._stack[-1][1] = string
                            mode = self._mode = _COLON
                        else:
                            self._put(string, shown=True)
                            mode = self._mode
                        string = ""
                    elif char == "\\":
                        raise self._fail("bad escape", text, i)
                    else:
                        raise self._fail("control character in a string", text, i)
                    continue
                if mode == _NUMBER:
                    j = _NUM_RUN.match(text, i).end()  # type: ignore[union-attr]
                    self._number += text[i:j]
                    i = j
                    if i == n:
                        break
                    self._put(self._number_value())
                    self._number = ""
                    mode = self._mode
                    continue
                i = _WS.match(text, i).end()  # type: ignore[union-attr]
                if i == n:
                    break
                char = text[i]
                if mode == _AFTER_VALUE:
                    frame = self._stack[-1]
                    in_object = type(frame[0]) is dict
                    if char == ",":
                        mode = self._mode = _KEY if in_object else _VALUE
                    elif char == ("}" if in_object else "]"):
                        self._close()
                        mode = self._mode
                    else:
                        raise self._fail("expected ',' or the container's close", text, i)
                    i += 1
                elif mode in (_VALUE, _VALUE_OR_CLOSE):
                    if char == '"':
                        mode = self._mode = _STRING
                        self._in_key = False
                        self.version += 1  # an empty string is already a value
                        i += 1
                    elif char == "{":
                        if len(self._stack) >= MAX_DEPTH:
                            raise self._fail(f"nested deeper than {MAX_DEPTH}", text, i)
                        self._stack.append([{}, None])
                        mode = self._mode = _KEY_OR_CLOSE
                        self.version += 1
                        i += 1
                    elif char == "[":
                        if len(self._stack) >= MAX_DEPTH:
                            raise self._fail(f"nested deeper than {MAX_DEPTH}", text, i)
                        self._stack.append([[], None])
                        mode = self._mode = _VALUE_OR_CLOSE
                        self.version += 1
                        i += 1
                    elif char in "-0123456789":
                        mode = self._mode = _NUMBER
                    elif char in _LITERALS:
                        word, literal = _LITERALS[char]
                        got = text[i : i + len(word)]
                        if got == word:
                            self._put(literal)
                            mode = self._mode
                            i += len(word)
                        elif i + len(got) == n and word.startswith(got):
                            self._hold = got
                            break
                        else:
                            raise self._fail("unexpected word", text, i)
                    elif char == "]" and mode == _VALUE_OR_CLOSE:
                        self._close()
                        mode = self._mode
                        i += 1
                    else:
                        raise self._fail("expected a value", text, i)
                elif mode in (_KEY_OR_CLOSE, _KEY):
                    if char == '"':
                        mode = self._mode = _STRING
                        self._in_key = True
                    elif char == "}" and mode == _KEY_OR_CLOSE:
                        self._close()
                        mode = self._mode
                    else:
                        raise self._fail("expected a key", text, i)
                    i += 1
                elif mode == _COLON:
                    if char != ":":
                        raise self._fail("expected ':'", text, i)
                    mode = self._mode = _VALUE
                    i += 1
                else:  # _DONE
                    raise self._fail("extra data after the JSON value", text, i)
        finally:
            self._text = string
