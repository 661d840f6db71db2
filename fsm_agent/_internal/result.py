"""The result of one request: StreamResult, ToolCall, Usage, and the ChatCompletion-shaped view.

One type for every provider. Pure data: never performs I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from .frozen import Frozen, Record, as_dataclass, fresh, set_field
from .reprs import brief_text, fields_repr
from .trace.records import TransitionRecord

__all__ = ["Choice", "Deferred", "StreamResult", "ToolCall", "Usage", "built"]


class Deferred:
    """An SDK object to build from a payload only when someone reads it (`StreamResult.raw`).

    Building an SDK's pydantic model of the final response (an Anthropic `Message`, a Responses
    `Response`) costs more than the rest of a short request's own work, and most callers never
    read it; the translator hands over the payload and the builder instead, and the first read of
    `raw` builds it, once.
    """

    __slots__ = ("_build", "_payload")

    def __init__(self, build: Callable[[Any], Any], payload: Any) -> None:
        self._build = build
        self._payload = payload

    def __call__(self) -> Any:
        return self._build(self._payload)

    def __eq__(self, other: object) -> bool:  # equal when they would build equal objects
        if type(other) is not Deferred:
            return NotImplemented
        return self._build is other._build and self._payload == other._payload

    __hash__ = None  # type: ignore[assignment]  # equal by payload, which is mutable

    def __repr__(self) -> str:
        return f"<deferred {getattr(self._build, '__name__', 'build')}(...)>"


def built(value: Any) -> Any:
    """`value`, or what it builds when it is `Deferred`."""
    return value() if type(value) is Deferred else value


class _DeferredField:
    """A field of `StreamResult` stored as given, a `Deferred` built on first read (then kept):
    `raw` (the SDK's final object, 0.4-0.9 ms to build) and `cost` (the ledger, priced on first
    read: a request whose cost nobody reads never looks a price up; genai-prices costs ~0.1 ms a
    lookup)."""

    def __set_name__(self, owner: Any, name: str) -> None:
        self._key = "_" + name

    def __get__(self, result: Any, owner: Any = None) -> Any:
        if result is None:
            return None  # the dataclass field's default
        value = result.__dict__.get(self._key)
        if type(value) is Deferred:
            value = result.__dict__[self._key] = value()
        return value

    def __set__(self, result: Any, value: Any) -> None:
        result.__dict__[self._key] = value


@as_dataclass
class ToolCall(Record):
    """One tool call the model asked for, as it was accumulated (ACC-3, ACC-4).

    Attributes:
        id: The provider's id for the call (an integer id is turned into a string).
        name: The tool's name ("" if the stream never said it).
        arguments: The arguments exactly as the model sent them: a JSON text, byte-exact.
        extra: Provider extras kept with the call (e.g. Gemini's `extra_content` or
            `thoughtSignature`), to send back with the next request; None when there are none.
        type: "function" for a function call; otherwise the provider's own name of the action it
            waits for the client to perform (a Responses `apply_patch_call`, `shell_call`,
            `computer_call`, `custom_tool_call`, `mcp_approval_request`, …), whose input is in
            `arguments` as JSON text (docs/behaviour.md, "Shapes of real streams").
        incomplete: True when the answer ended inside the call's arguments because it reached its
            output limit (`finish_reason == "length"`): `arguments` is what was sent, not whole JSON.
    """

    id: str
    name: str
    arguments: str
    extra: dict[str, Any] | None = None
    type: str = "function"
    incomplete: bool = False

    def __init__(
        self,
        id: str,
        name: str,
        arguments: str,
        extra: dict[str, Any] | None = None,
        type: str = "function",
        incomplete: bool = False,
    ) -> None:
        self.id = id
        self.name = name
        self.arguments = arguments
        self.extra = extra
        self.type = type
        self.incomplete = incomplete

    def __repr__(self) -> str:
        return fields_repr(
            "ToolCall",
            [("id", repr(self.id)), ("name", repr(self.name)), ("arguments", brief_text(self.arguments))]
            + ([("extra", f"<{len(self.extra)} keys>")] if self.extra else [])
            + ([("type", repr(self.type))] if self.type != "function" else [])
            + ([("incomplete", "True")] if self.incomplete else []),
        )


class Usage(Frozen):
    """Token counts of one request, in the same terms for every provider.

    Attributes:
        input_tokens: Prompt tokens, cached ones included.
        output_tokens: Completion tokens, reasoning included.
        total_tokens: Their sum, as the provider reported it.
        cached_tokens: Prompt tokens served from the provider's cache.
        estimated: True when the provider sent no usage for a cut attempt and `output_tokens`
            is estimated from the text and reasoning it delivered (RC-10); the input side is
            then unknown (None).
    """

    __slots__ = ("cached_tokens", "estimated", "input_tokens", "output_tokens", "total_tokens")
    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    cached_tokens: int | None
    estimated: bool

    def __init__(
        self,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        total_tokens: int | None = None,
        cached_tokens: int | None = None,
        estimated: bool = False,
    ) -> None:
        set_field(self, "input_tokens", input_tokens)
        set_field(self, "output_tokens", output_tokens)
        set_field(self, "total_tokens", total_tokens)
        set_field(self, "cached_tokens", cached_tokens)
        set_field(self, "estimated", estimated)


@as_dataclass
class Choice(Record):
    """A choice other than the first of a request that asked for several (`n>1`)."""

    index: int
    content: str | None = None
    reasoning: str | None = None
    refusal: str | None = None
    tool_calls: list[ToolCall] = fresh(list)
    finish_reason: str | None = None

    def __init__(
        self,
        index: int,
        content: str | None = None,
        reasoning: str | None = None,
        refusal: str | None = None,
        tool_calls: list[ToolCall] | None = None,
        finish_reason: str | None = None,
    ) -> None:
        self.index = index
        self.content = content
        self.reasoning = reasoning
        self.refusal = refusal
        self.tool_calls = [] if tool_calls is None else tool_calls
        self.finish_reason = finish_reason

    def __repr__(self) -> str:
        return fields_repr(
            "Choice",
            [
                ("index", str(self.index)),
                ("content", brief_text(self.content)),
                ("tool_calls", f"<{len(self.tool_calls)}>" if self.tool_calls else None),
                ("finish_reason", repr(self.finish_reason)),
            ],
        )


@as_dataclass(slots=False)  # no slots: `raw` and `cost` are descriptors (built on first read)
class StreamResult(Record):
    """The answer of one request, one type for every provider (see docs/behaviour.md, section 1).

    Attributes:
        content: The answer's text (None when the stream had none; ACC-1). For a stub, the text the
            user saw, plus the warning of RES-5 when a tool call was dropped.
        reasoning: The reasoning / thinking text (ACC-5), or None.
        refusal: The refusal text (ACC-6), or None.
        tool_calls: The tool calls, in index order (ACC-3); empty for a stub.
        finish_reason: Why the answer ended, in Chat Completions terms (`stop`, `tool_calls`,
            `length`, `content_filter`); `length` for a stub.
        usage: Token counts, when the provider sent them.
        model: The model that answered, as the provider named it.
        id: The provider's id of the (first) response.
        stub: True when the stream was cut after visible text and the result is what was shown
            (RES-4, RES-5).
        dropped_tool_names: Tools whose calls were cut off and not returned (RES-5).
        attempts: How many attempts the request took (1 when the first one answered).
        streamed: False when a non-streaming fallback served the answer (RES-9).
        provider_data: Provider-specific extras (e.g. a refusal beside content, ACC-6).
        error: The error that ended the stream when the result is kept anyway (a stub, or an
            error after the finish reason): `type`, `code` and `message`, and the provider's
            `body` when it sent one (ACC-10); None when the stream ended cleanly.
        raw: The provider-native final object where the SDK builds one (a Response, a Message),
            built the first time it is read.
        records: This request's transition records (FSM-5), in order: one `TransitionRecord`
            per state change, each naming its route, attempt, trigger and guard values.
        extra_choices: The choices after the first, as `Choice` objects in index order, when the
            request asked for several (`n>1` on Chat Completions); empty otherwise. The fields
            above describe the first choice.
        route: The name of the route that answered (RT-1): the `Route`'s `name`, or
            `"<api>:<model>"` by default (also for the one-client form of `stream()`); None only
            for a result built by hand.
        incomplete: True when the result is not a whole answer: a stub (RC-6). A caller that
            must tell "the provider broke" from "the answer was long" reads this, not
            `finish_reason`.
        stub_reason: Why a stub was returned (RC-6): "cut" (the stream was lost), "stalled"
            (the provider went silent), "tool_dropped" (a tool call was cut off, RES-5) or
            "provider_error" (the provider's stream carried an error); None for a whole answer.
        attempt_usage: What each attempt that did not answer cost, in order (RC-10): the
            provider's usage when it sent one, else an estimate (`Usage.estimated`). `usage`
            stays the answering attempt's own.
        cost: What the request cost and what its faults wasted, attempt by attempt (COST-1): a
            `RequestCost` (tokens billed, estimated or not, regenerated and discarded, the model
            and route of each attempt, and its price when a price table is known); None for a
            result built by hand.
    """

    content: str | None = None
    reasoning: str | None = None
    refusal: str | None = None
    tool_calls: list[ToolCall] = fresh(list)
    finish_reason: str | None = None
    usage: Usage | None = None
    model: str | None = None
    id: str | None = None
    stub: bool = False
    dropped_tool_names: list[str] = fresh(list)
    attempts: int = 0
    streamed: bool = True
    provider_data: dict[str, Any] = fresh(dict)
    raw: Any = _DeferredField()
    records: list[TransitionRecord] = fresh(list)
    extra_choices: list[Choice] = fresh(list)
    route: str | None = None  # RT-1: the name of the route that answered
    error: dict[str, Any] | None = None  # ACC-10: what ended a stream whose answer was kept
    incomplete: bool = False  # RC-6
    stub_reason: str | None = None  # RC-6
    attempt_usage: list[Usage] = fresh(list)  # RC-10
    cost: Any = _DeferredField()  # COST-1: a `cost.RequestCost`, made on first read

    def __init__(
        self,
        content: str | None = None,
        reasoning: str | None = None,
        refusal: str | None = None,
        tool_calls: list[ToolCall] | None = None,
        finish_reason: str | None = None,
        usage: Usage | None = None,
        model: str | None = None,
        id: str | None = None,
        stub: bool = False,
        dropped_tool_names: list[str] | None = None,
        attempts: int = 0,
        streamed: bool = True,
        provider_data: dict[str, Any] | None = None,
        raw: Any = None,
        records: list[TransitionRecord] | None = None,
        extra_choices: list[Choice] | None = None,
        route: str | None = None,
        error: dict[str, Any] | None = None,
        incomplete: bool = False,
        stub_reason: str | None = None,
        attempt_usage: list[Usage] | None = None,
        cost: Any = None,
    ) -> None:
        self.content = content
        self.reasoning = reasoning
        self.refusal = refusal
        self.tool_calls = [] if tool_calls is None else tool_calls
        self.finish_reason = finish_reason
        self.usage = usage
        self.model = model
        self.id = id
        self.stub = stub
        self.dropped_tool_names = [] if dropped_tool_names is None else dropped_tool_names
        self.attempts = attempts
        self.streamed = streamed
        self.provider_data = {} if provider_data is None else provider_data
        self.raw = raw
        self.records = [] if records is None else records
        self.extra_choices = [] if extra_choices is None else extra_choices
        self.route = route
        self.error = error
        self.incomplete = incomplete
        self.stub_reason = stub_reason
        self.attempt_usage = [] if attempt_usage is None else attempt_usage
        self.cost = cost

    def __repr__(self) -> str:
        usage = self.usage
        tokens = None if usage is None else f"{usage.input_tokens}/{usage.output_tokens}"
        names = ", ".join(brief_text(call.name, 20) for call in self.tool_calls[:3])
        more = f" +{len(self.tool_calls) - 3}" if len(self.tool_calls) > 3 else ""
        return fields_repr(
            "StreamResult",
            [
                ("content", brief_text(self.content)),
                ("reasoning", brief_text(self.reasoning) if self.reasoning else None),
                ("refusal", brief_text(self.refusal) if self.refusal else None),
                ("tool_calls", f"[{names}{more}]" if self.tool_calls else None),
                ("finish_reason", repr(self.finish_reason)),
                ("tokens_in_out", tokens),
                ("stub", "True" if self.stub else None),
                ("stub_reason", repr(self.stub_reason) if self.stub_reason else None),
                ("error", repr(self.error.get("code")) if self.error else None),
                ("dropped_tools", str(len(self.dropped_tool_names)) if self.dropped_tool_names else None),
                ("streamed", "False" if not self.streamed else None),
                ("attempts", str(self.attempts)),
                ("route", repr(self.route) if self.route else None),
                ("records", str(len(self.records))),
            ],
        )

    def to_chat_completion(self) -> SimpleNamespace:
        """An OpenAI ChatCompletion-shaped object (attribute access like the SDK's model)."""
        tool_calls = [
            SimpleNamespace(
                id=call.id,
                type="function",
                function=SimpleNamespace(name=call.name, arguments=call.arguments),
            )
            for call in self.tool_calls
        ]
        message = SimpleNamespace(
            role="assistant",
            content=self.content,
            tool_calls=tool_calls or None,
            reasoning_content=self.reasoning,
            refusal=self.refusal,
        )
        usage = None
        if self.usage is not None:
            usage = SimpleNamespace(
                prompt_tokens=self.usage.input_tokens,
                completion_tokens=self.usage.output_tokens,
                total_tokens=self.usage.total_tokens,
                prompt_tokens_details=SimpleNamespace(cached_tokens=self.usage.cached_tokens),
            )
        choice = SimpleNamespace(index=0, message=message, finish_reason=self.finish_reason)
        return SimpleNamespace(
            id=self.id,
            object="chat.completion",
            model=self.model,
            choices=[choice],
            usage=usage,
        )
