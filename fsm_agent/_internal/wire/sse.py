"""Incremental Server-Sent Events decoder: stream bytes in, frames out (WIRE-1..3).

Follows the WHATWG "event stream" parsing rules (strict UTF-8, one leading BOM stripped, lines
ended by CR, LF or CRLF, `data`/`event`/`id`/`retry` fields, `:` comments), with one deliberate
difference: every block that had at least one line yields a frame, even a comment-only one, so the
caller can count keepalives (WIRE-2, WIRE-3). A final block without its blank line is never
dispatched; `SSEDecoder.pending` says whether the stream was cut inside one.

Never performs I/O, reads no clock and takes no lock: one decoder belongs to one stream, fed from
one place at a time, and is shared by the sync and async drivers.

Theory of operation. CR and LF never occur inside a multi-byte UTF-8 sequence, so lines can be cut
on bytes: each `feed()` looks for the last line terminator in the new chunk only, decodes everything
before it in one call, and keeps the incomplete last line as bytes. Bytes are therefore scanned a
bounded number of times whatever the fragmentation (linear time, no quadratic re-joining). A CR
that ends a chunk is taken as a line end at once; a LF opening the next chunk is then dropped, so a
CRLF split between chunks is still one line end.
"""

from __future__ import annotations

from typing import Final, NamedTuple

__all__ = ["SSEDecodeError", "SSEDecoder", "SSEFrame"]

_BOM: Final = b"\xef\xbb\xbf"
_LF: Final = 0x0A
_CR: Final = 0x0D
_RAW_LIMIT: Final = 4096


class SSEDecodeError(ValueError):
    """The byte stream is not a valid event stream (bad UTF-8) or a line outgrew the limit.

    `raw` holds at most 4096 bytes of the offending line; `offset` is the stream byte offset of the
    problem (of the bad byte for UTF-8 errors, of the line's start for oversized lines).
    """

    def __init__(self, message: str, *, raw: bytes = b"", offset: int | None = None) -> None:
        super().__init__(message)
        self.raw = bytes(raw[:_RAW_LIMIT])
        self.offset = offset


class SSEFrame(NamedTuple):
    """One dispatched block of an event stream: an immutable named tuple (the cheapest value
    Python builds, one per event).

    `data` is None when the block had no `data` field at all, "" for a bare `data:`; several data
    lines are joined with "\\n". `event` is None when the block set no event type (or an empty one,
    which WHATWG also reads as the default "message"). `id` is the id set in this block, if any.
    """

    event: str | None = None
    data: str | None = None
    id: str | None = None
    retry: int | None = None

    @property
    def is_keepalive(self) -> bool:
        """True for a frame that carries no payload: comments, bare `data:`, a lone `event`/`id`."""
        return not self.data


# A frame built from its four values at once, without the generated `__new__`'s call (the
# one-block read builds one per event).
_new_frame = tuple.__new__


class SSEDecoder:
    """Feed bytes as they arrive, get the frames each chunk completes.

    `max_line_bytes` (None: unlimited) bounds one line, terminator excluded: a longer line raises
    `SSEDecodeError("... frame too large ...")` as soon as its bytes exceed the limit, complete or not.

    Errors are raised at the first call that cannot return a frame before them: when a chunk
    completes frames and then hits a bad line, those frames are returned and the error is raised by
    the next `feed()` or `flush()`. So any fragmentation of a stream gives the same frames and the
    same error. After an error the decoder keeps raising it.
    """

    __slots__ = (
        "_after_cr",
        "_at_start",
        "_consumed",
        "_data",
        "_error",
        "_event",
        "_finished",
        "_id",
        "_in_block",
        "_last_event_id",
        "_max_line",
        "_more_data",
        "_partial",
        "_plain",
        "_retry",
    )

    def __init__(self, max_line_bytes: int | None = None) -> None:
        if max_line_bytes is not None and (isinstance(max_line_bytes, bool) or max_line_bytes < 1):
            raise ValueError(f"max_line_bytes must be a positive integer or None, got {max_line_bytes!r}")
        self._max_line = max_line_bytes
        self._partial = bytearray()  # the incomplete last line (no terminator inside)
        self._consumed = 0  # stream offset of _partial[0]
        self._at_start = True  # a BOM may still be arriving
        self._after_cr = False  # the last byte seen was a CR ending a line
        self._in_block = False  # the current block has had at least one line
        self._data: str | None = None
        self._more_data: list[str] | None = None
        self._event: str | None = None
        self._id: str | None = None
        self._retry: int | None = None
        self._last_event_id = ""
        self._error: SSEDecodeError | None = None
        self._finished = False
        # Between blocks, with nothing held back: no error, not flushed, past the BOM, no CR
        # waiting for its LF, no partial line, no block begun (what the one-block read needs).
        self._plain = False

    @property
    def pending(self) -> bool:
        """True when the stream so far ends inside a block (an unfinished line, or lines of a block
        whose blank line has not arrived): at EOF that block is cut off and was not dispatched.
        Also True once a decode error was found: the offending line is never dispatched."""
        return self._in_block or bool(self._partial) or self._error is not None

    @property
    def last_event_id(self) -> str:
        """The WHATWG "last event ID": the latest valid `id` field of the stream, kept across blocks."""
        return self._last_event_id

    def feed(self, chunk: bytes) -> list[SSEFrame]:
        """Take the next bytes of the stream; return the frames whose blank line they complete."""
        plain = self._plain
        if plain and chunk.endswith(b"\n\n"):
            one = self._one_block(chunk)  # (leaves the decoder between blocks, as it found it)
            if one is not None:
                return one
        try:
            return self._feed(chunk, plain)
        finally:
            self._plain = not (
                self._error is not None
                or self._finished
                or self._at_start
                or self._after_cr
                or self._partial
                or self._in_block
            )

    def _feed(self, chunk: bytes, tried: bool) -> list[SSEFrame]:
        """`feed`, past the one-block read (`tried`: already tried on this chunk, as it stands)."""
        if self._error is not None:
            raise self._error
        if self._finished:
            raise RuntimeError("SSEDecoder.feed() called after flush()")
        if not chunk:
            return []
        if self._at_start:
            chunk = self._strip_bom(chunk)
            if not chunk:
                return []
        if self._after_cr:
            self._after_cr = False
            if chunk[0] == _LF:  # the second half of a CRLF split between chunks
                self._consumed += 1
                chunk = chunk[1:]
                if not chunk:
                    return []
        if not tried and chunk.endswith(b"\n\n") and not self._partial and not self._in_block:
            one = self._one_block(chunk)  # (the first read, once the BOM or the CR was settled)
            if one is not None:
                return one
        last_lf = chunk.rfind(b"\n")
        cut = chunk.rfind(b"\r", last_lf + 1)
        if cut < 0:
            cut = last_lf
        if cut < 0:
            self._partial += chunk
            if self._max_line is not None and len(self._partial) > self._max_line:
                self._error = _too_large(bytes(self._partial), self._consumed, self._max_line)
                raise self._error
            return []
        end = cut + 1
        size = len(chunk)
        if self._partial:
            self._partial += chunk[:end]
            region = bytes(self._partial)
            self._partial = bytearray(chunk[end:])
        elif end < size:
            region = chunk[:end]
            self._partial = bytearray(chunk[end:])
        else:
            region = chunk
        if end == size and chunk[cut] == _CR:
            self._after_cr = True
        offset = self._consumed
        self._consumed = offset + len(region)
        max_line = self._max_line
        # No line of a region within the limit can exceed it: the common read goes straight to
        # the lines; the limit's checks and a decoding error's offset are `_decode_region`'s.
        if max_line is None or (len(region) <= max_line and len(self._partial) <= max_line):
            try:
                lines = _split_lines(region)
            except UnicodeDecodeError:
                return self._decode_region(region, offset)
            return self._parse_lines(lines)
        return self._decode_region(region, offset)

    def flush(self) -> list[SSEFrame]:
        """Signal EOF. Returns no frames: an unterminated final block is discarded, as WHATWG
        requires (check `pending` to tell a cut-off stream). Raises a deferred `SSEDecodeError`."""
        if self._error is not None:
            raise self._error
        self._finished = True
        self._plain = False
        return []

    # -- internals -------------------------------------------------------------------------------

    def _one_block(self, chunk: bytes) -> list[SSEFrame] | None:
        """The common read, decoded without the general line machinery: exactly one block
        `[event: NAME\n]data: TEXT\n\n`, starting a block, LF-terminated, valid UTF-8, no longer
        than the line limit, as its one frame. None for anything else (the general path then reads
        it, and gives the same frame and state for what this accepts)."""
        size = len(chunk)
        max_line = self._max_line
        if (max_line is not None and size - 2 > max_line) or b"\r" in chunk:
            return None
        first = chunk.find(b"\n")
        try:
            if first == size - 2:
                if not chunk.startswith(b"data: "):
                    return None
                event = None
                data = chunk[6:-2].decode("utf-8")
            elif (
                chunk.startswith(b"event: ")
                and chunk.find(b"\n", first + 1) == size - 2
                and chunk.startswith(b"data: ", first + 1)
            ):
                event = chunk[7:first].decode("utf-8") or None
                data = chunk[first + 7 : -2].decode("utf-8")
            else:
                return None
        except UnicodeDecodeError:
            return None
        self._consumed += size
        return [_new_frame(SSEFrame, (event, data, None, None))]

    def _strip_bom(self, chunk: bytes) -> bytes:
        self._partial += chunk
        if len(self._partial) < len(_BOM) and _BOM.startswith(self._partial):
            return b""  # still undecided
        self._at_start = False
        head = bytes(self._partial)
        self._partial = bytearray()
        if head.startswith(_BOM):
            self._consumed += len(_BOM)
            return head[len(_BOM) :]
        return head

    def _decode_region(self, region: bytes, offset: int) -> list[SSEFrame]:
        """Decode and parse complete lines (`region` ends with a terminator) at stream `offset`."""
        max_line = self._max_line
        stop = len(region)
        error: SSEDecodeError | None = None
        if max_line is not None and len(region) > max_line:
            found = _first_long_line(region, max_line)
            if found is not None:
                stop = found
                error = _too_large(region[found:], offset + found, max_line)
        complete = region if stop == len(region) else region[:stop]
        try:
            lines = _split_lines(complete)
        except UnicodeDecodeError:
            # Lines were normalized before decoding; decode the original bytes for the true offset.
            exc = _first_decode_error(complete)
            stop = _line_start(region, exc.start)
            error = _bad_utf8(region, exc, offset)
            lines = _split_lines(region[:stop])
        frames = self._parse_lines(lines) if lines else []
        if error is None and max_line is not None and len(self._partial) > max_line:
            error = _too_large(bytes(self._partial), self._consumed, max_line)
        if error is not None:
            self._error = error
            if not frames:
                raise error
        return frames

    def _parse_lines(self, lines: list[str]) -> list[SSEFrame]:
        """Apply the WHATWG line rules to complete lines (terminators removed)."""
        frames: list[SSEFrame] = []
        append = frames.append
        in_block = self._in_block
        data = self._data  # the first data line of the block
        more = self._more_data  # every data line, once there are two or more
        event = self._event
        id_ = self._id
        retry = self._retry
        for line in lines:
            if not line:  # blank line: dispatch
                if in_block:
                    joined = data if more is None else "\n".join(more)
                    append(_new_frame(SSEFrame, (event or None, joined, id_, retry)))
                    in_block = False
                    data = event = id_ = retry = more = None
                continue
            in_block = True
            if line.startswith("data: "):  # the common cases, without partition()
                name = "data"
                value = line[6:]
            elif line.startswith("event: "):
                event = line[7:]
                continue
            else:
                name, _, value = line.partition(":")
                if not name:
                    continue  # a comment line
                if value[:1] == " ":
                    value = value[1:]
            if name == "data":
                if data is None:
                    data = value
                elif more is None:
                    more = [data, value]
                else:
                    more.append(value)
            elif name == "event":
                event = value
            elif name == "id":
                if "\0" not in value:
                    id_ = self._last_event_id = value
            elif name == "retry" and value.isdigit() and value.isascii():
                retry = int(value)
        self._in_block = in_block
        self._data = data
        self._more_data = more
        self._event = event
        self._id = id_
        self._retry = retry
        return frames


def _split_lines(complete: bytes) -> list[str]:
    """Decode strictly a run of complete lines and split it, terminators removed."""
    if not complete:
        return []
    if b"\r" in complete:
        # bytes.splitlines() knows exactly CR, LF and CRLF (str.splitlines() knows more, wrongly
        # for SSE) and is cheaper than replacing CRLF and CR in the decoded text.
        return b"\n".join(complete.splitlines()).decode("utf-8").split("\n")
    lines = complete.decode("utf-8").split("\n")
    lines.pop()  # the empty string after the final terminator
    return lines


def _first_decode_error(invalid: bytes) -> UnicodeDecodeError:
    try:
        invalid.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc
    raise AssertionError("normalizing line ends cannot make UTF-8 invalid")


def _first_long_line(region: bytes, max_line: int) -> int | None:
    """Offset of the first line of `region` longer than `max_line` bytes, terminator excluded."""
    start = 0
    for line in region.splitlines(keepends=True):
        if len(line.rstrip(b"\r\n")) > max_line:
            return start
        start += len(line)
    return None


def _line_start(region: bytes, position: int) -> int:
    return max(region.rfind(b"\n", 0, position), region.rfind(b"\r", 0, position)) + 1


def _line_at(region: bytes, start: int) -> bytes:
    """The line of `region` that begins at `start`, without its terminator, cut to the raw limit."""
    window = region[start : start + _RAW_LIMIT]
    return window.splitlines()[0] if window else b""


def _too_large(line: bytes, offset: int, max_line: int) -> SSEDecodeError:
    # The raw excerpt is cut where an incremental feed would have noticed, so that every
    # fragmentation of the stream reports the same bytes.
    raw = _line_at(line, 0)[: max_line + 1]
    return SSEDecodeError(
        f"SSE frame too large: a line exceeds max_line_bytes={max_line} (line starts at byte offset "
        f"{offset})",
        raw=raw,
        offset=offset,
    )


def _bad_utf8(region: bytes, exc: UnicodeDecodeError, offset: int) -> SSEDecodeError:
    bad = exc.object[exc.start : exc.end]
    return SSEDecodeError(
        f"SSE stream is not valid UTF-8: {exc.reason} (byte {bad!r}) at byte offset {offset + exc.start}",
        raw=_line_at(region, _line_start(region, exc.start)),
        offset=offset + exc.start,
    )
