"""Declarative scenarios for the provider emulator: what one response (one attempt) contains.

A `Scenario` is a frozen description of one answer — content steps (text, reasoning,
refusal, tool calls), finish reason, usage, Chat-Completions shape options, faults and timing — that
every wire renderer (Chat Completions, Responses, Anthropic Messages, Bedrock ConverseStream) turns
into the same content in its own format. `Scenario.blocks` expands the steps into neutral
blocks of chunks, so every wire splits text and arguments identically.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fsm_agent.testing.faults import Fault

BlockKind = Literal["reasoning", "text", "refusal", "tool"]


@dataclass(frozen=True)
class Text:
    """Visible answer text, streamed in chunks (``chunk_size`` chars; None → a few words)."""

    text: str
    chunk_size: int | None = None


@dataclass(frozen=True)
class Reasoning:
    """Reasoning / thinking text; ``signature`` is sent where the wire carries one."""

    text: str
    signature: str = "emu-signature"
    chunk_size: int | None = None


@dataclass(frozen=True)
class Refusal:
    """A refusal message (Chat ``delta.refusal``, Responses refusal part; text elsewhere)."""

    text: str
    chunk_size: int | None = None


@dataclass(frozen=True)
class ScriptedToolCall:
    """One tool call the emulator sends (not the result's `fsm_agent.ToolCall`).

    ``arguments`` is the exact JSON text the model emits (it may be invalid).

    ``id`` defaults to a generated id (``call_…``, ``toolu_…``, ``tooluse_…``); an ``int`` id is
    sent as a JSON number by Chat Completions and as a string by the other wires.
    ``extra_content`` is attached to the Chat tool-call delta (Gemini thought signatures).
    ``arg_fragment`` overrides the scenario's fragment size for this call.
    """

    name: str
    arguments: str = "{}"
    id: str | int | None = None
    extra_content: Mapping[str, Any] | None = None
    arg_fragment: int | None = None


# The short names predate the Scripted* ones and stay importable from fsm_agent.testing, so
# existing tests keep working; they are not exported, so they never clash with fsm_agent's own.
ToolCall = ScriptedToolCall

Step = Text | Reasoning | Refusal | ScriptedToolCall


@dataclass(frozen=True)
class ScriptedUsage:
    """Token usage the emulator reports (not the result's `fsm_agent.Usage`).

    In OpenAI terms: ``input_tokens`` includes ``cached_tokens``.
    """

    input_tokens: int = 10
    output_tokens: int = 20
    cached_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


Usage = ScriptedUsage


@dataclass(frozen=True)
class ChatShape:
    """Chat-Completions-only variations seen from OpenAI-compatible hosts.

    - ``content_blocks``: ``delta.content`` is ``[{"type": "text", "text": ...}]``.
    - ``sparse``: omit optional keys (role, null finish_reason, logprobs, tool ``type``...).
    - ``args_before_name``: the first tool-call delta carries an argument fragment, the name follows.
    - ``integer_tool_ids``: tool-call ids are JSON integers (the call's position when no int id given).
    - ``no_tool_index``: tool-call deltas carry no ``index`` (Gemini style).
    - ``reasoning_field``: delta key that carries reasoning (``reasoning_content`` or ``reasoning``).
    """

    content_blocks: bool = False
    sparse: bool = False
    args_before_name: bool = False
    integer_tool_ids: bool = False
    no_tool_index: bool = False
    reasoning_field: str = "reasoning_content"
    system_fingerprint: str | None = "fp_emulator"


@dataclass(frozen=True)
class Block:
    """A neutral content block: its kind, its chunks, and the step it came from."""

    kind: BlockKind
    chunks: tuple[str, ...]
    step: Step
    tool_index: int = -1

    @property
    def text(self) -> str:
        return "".join(self.chunks)


def split_words(text: str, words: int = 3) -> tuple[str, ...]:
    """Split ``text`` into pieces of ``words`` words, spaces kept attached; exact round trip."""
    pieces: list[str] = []
    current = ""
    count = 0
    in_space = False
    for ch in text:
        is_space = ch.isspace()
        if in_space and not is_space:
            count += 1
            if count >= words:
                pieces.append(current)
                current, count = "", 0
        current += ch
        in_space = is_space
    if current:
        pieces.append(current)
    return tuple(pieces)


def split_chars(text: str, size: int) -> tuple[str, ...]:
    """Split ``text`` into pieces of ``size`` characters (at least one char each)."""
    size = max(1, size)
    return tuple(text[i : i + size] for i in range(0, len(text), size))


@dataclass(frozen=True)
class Scenario:
    """One scripted response: what the emulator sends for one request (one attempt). Every field
    is optional; `Scenario.build()` is the short way to make one.

    ``steps`` are rendered in order. ``finish_reason`` is in Chat Completions terms (``stop``,
    ``tool_calls``, ``length``, ``content_filter``; other values pass through); None derives it:
    ``tool_calls`` when the scenario has tool calls, else ``stop``. ``usage=None`` sends no usage.
    ``model=None`` echoes the request's model. ``raw`` replaces the rendered frames with verbatim
    frames (``bytes`` or ``str``), each counted as one frame by faults, sent with ``raw_content_type``
    whatever the request. ``frame_delay`` (seconds) overrides the emulator's default pause between
    frames. ``faults`` says what goes wrong on the wire (`DropAfter`, `Stall`, `HttpError`, ...:
    the fault classes of `fsm_agent.testing`, whose positions count the frames rendered).
    """

    steps: tuple[Step, ...] = ()
    finish_reason: str | None = None
    usage: Usage | None = field(default_factory=Usage)
    model: str | None = None
    id: str | None = None
    chunk_size: int | None = None
    arg_fragment: int = 16
    chat: ChatShape = field(default_factory=ChatShape)
    faults: tuple[Fault, ...] = ()
    raw: tuple[bytes | str, ...] | None = None
    raw_content_type: str = "text/event-stream"
    frame_delay: float | None = None
    name: str = ""
    # RC-3: the scenario's text is the whole answer; a request that carries a prefill of its start
    # is sent only the rest (with the prefill's last `seam_overlap` characters repeated first)
    continues: bool = False
    seam_overlap: int = 0

    @classmethod
    def build(
        cls,
        text: str | None = None,
        *,
        reasoning: str | None = None,
        refusal: str | None = None,
        tool_calls: tuple[ToolCall, ...] | list[ToolCall] = (),
        faults: tuple[Fault, ...] | list[Fault] = (),
        **options: Any,
    ) -> Scenario:
        """Shortcut: reasoning, then text, then refusal, then tool calls; other fields by keyword."""
        steps: list[Step] = []
        if reasoning is not None:
            steps.append(Reasoning(reasoning))
        if text is not None:
            steps.append(Text(text))
        if refusal is not None:
            steps.append(Refusal(refusal))
        steps.extend(tool_calls)
        return cls(steps=tuple(steps), faults=tuple(faults), **options)

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(s for s in self.steps if isinstance(s, ToolCall))

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.steps if isinstance(s, Text))

    @property
    def reasoning(self) -> str:
        return "".join(s.text for s in self.steps if isinstance(s, Reasoning))

    @property
    def refusal(self) -> str:
        return "".join(s.text for s in self.steps if isinstance(s, Refusal))

    def resolved_finish_reason(self) -> str:
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"

    def fault(self, kind: type[Any]) -> Any:
        """The first fault of the given class, or None."""
        for f in self.faults:
            if isinstance(f, kind):
                return f
        return None

    def faults_of(self, kind: type[Any]) -> list[Any]:
        return [f for f in self.faults if isinstance(f, kind)]

    def _chunks(self, text: str, size: int | None) -> tuple[str, ...]:
        size = size if size is not None else self.chunk_size
        if not text:
            return ()
        return split_chars(text, size) if size is not None else split_words(text)

    def blocks(self) -> list[Block]:
        """Expand the steps into neutral blocks of chunks (tool blocks: argument fragments)."""
        out: list[Block] = []
        tool_index = 0
        for step in self.steps:
            if isinstance(step, ToolCall):
                size = step.arg_fragment if step.arg_fragment is not None else self.arg_fragment
                frags = split_chars(step.arguments, size) if step.arguments else ()
                out.append(Block("tool", frags, step, tool_index))
                tool_index += 1
            elif isinstance(step, Reasoning):
                out.append(Block("reasoning", self._chunks(step.text, step.chunk_size), step))
            elif isinstance(step, Refusal):
                out.append(Block("refusal", self._chunks(step.text, step.chunk_size), step))
            else:
                out.append(Block("text", self._chunks(step.text, step.chunk_size), step))
        return out


def prefill_of(api: str, body: Any) -> str | None:
    """The assistant prefill a request ends with (RC-3), or None: Anthropic and Bedrock, a last
    message of role assistant; Chat Completions, one marked `"prefix": true`."""
    messages = body.get("messages") if isinstance(body, Mapping) else None
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], Mapping):
        return None
    last = messages[-1]
    if last.get("role") != "assistant":
        return None
    if api == "chat_completions" and last.get("prefix") is not True:
        return None
    if api not in ("chat_completions", "anthropic_messages", "bedrock_converse"):
        return None
    content = last.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return None


def continued(scenario: Scenario, prefill: str) -> Scenario:
    """RC-3: what a `continues` scenario sends for a request carrying `prefill`: the rest of its
    text after the prefill (the whole text when the prefill is not its start)."""
    from dataclasses import replace

    whole = scenario.text
    rest = whole[len(prefill) :] if whole.startswith(prefill) else whole
    if scenario.seam_overlap and whole.startswith(prefill):
        rest = prefill[len(prefill) - scenario.seam_overlap :] + rest
    return replace(scenario, steps=(Text(rest),) if rest else (), continues=False)
