"""The cost and waste ledger of a request (COST-1): what each attempt was billed, what faults wasted.

The machine keeps one `AttemptTally` per attempt (`effects.open_attempt` and `_hand_over`): its
route, the model that answered it, its usage (the provider's, else the RC-10 estimate) and whether
its output stayed in the answer. `ledger()` turns the tallies into a `RequestCost`:

- billed: the provider's usage; when a cut attempt never sent one, its output is estimated from
  the text it delivered (RC-10) and its input from the request's size (`estimate_prompt_tokens`),
  and the attempt is marked `estimated`.
- discarded: output tokens of an attempt whose output is not in the answer (a lost attempt that
  was retried, restarted or switched from); an attempt whose text was kept (a stub, a continuation's
  prefill, a resumed stream) discards nothing.
- regenerated: output tokens of a later attempt that produce again what earlier attempts
  discarded: the smaller of its output and the discarded tokens not yet regenerated.
- price: from the user's table (`Session(prices=...)`) when given, else from `genai-prices` when
  it is installed, else none. No price is written in this code.
- wasted: the price (and tokens) of what did not reach the answer: every attempt that did not
  answer, less the output of it that stayed in the answer.

Pure: no I/O, no clock. `genai-prices` is imported on first use only, and only when no table is given.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .frozen import Frozen, set_field
from .result import Usage

__all__ = [
    "AttemptCost",
    "AttemptTally",
    "PriceTable",
    "RequestCost",
    "cost_from_dict",
    "cost_summary",
    "estimate_prompt_tokens",
    "estimate_text_tokens",
    "ledger",
    "resolve_prices",
]

# The estimate of tokens from characters (RC-10, CAP-2): about four characters a token, the
# providers' own rule of thumb for English text and code.
CHARS_PER_TOKEN = 4

# genai-prices names providers by these ids; the API a route speaks says which one it is when the
# base URL does not (an OpenAI-compatible host is looked up by its URL first).
_PROVIDER_IDS = {
    "chat_completions": "openai",
    "responses": "openai",
    "anthropic_messages": "anthropic",
    "bedrock_converse": "aws",
    "gemini_generate_content": "google",
}

# A user's table: model -> (USD per million input tokens, USD per million output tokens), or a
# function (model, usage) -> USD (None: unknown).
PriceTable = Mapping[str, Sequence[float]] | Callable[[str, Usage], float | None]


def estimate_text_tokens(chars: int) -> int:
    """Tokens of `chars` characters of text (at least 1 for any text)."""
    return (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def _text_chars(value: Any, depth: int = 0) -> int:
    """The characters of the text in a request's messages, whatever their shape (strings in dicts
    and lists: content parts, tool results, system blocks); keys and structure do not count.
    Walked once per request and route, over the whole prompt: the JSON types (str, dict, list)
    are told by their exact type first, and a string inside a container is counted in place."""
    if depth > 32:
        return 0
    kind = type(value)
    if kind is str:
        return len(value)
    if kind is dict or (kind is not list and isinstance(value, Mapping)):
        items: Iterable[Any] = (item for key, item in value.items() if key not in _NOT_TEXT)
    elif kind is list or isinstance(value, (list, tuple)):
        items = value
    else:
        return len(value) if isinstance(value, str) else 0
    total = 0
    deeper = depth + 1
    for item in items:
        total += len(item) if type(item) is str and deeper <= 32 else _text_chars(item, deeper)
    return total


# Keys whose values are not text the model reads (ids, roles, types, binary payloads).
_NOT_TEXT = frozenset({"role", "type", "id", "tool_call_id", "tool_use_id", "bytes", "image_url", "source"})
# The request's text: the messages and the system prompt in each API's spelling, and the tools.
_PROMPT_KEYS = ("messages", "input", "instructions", "system", "contents", "config", "tools", "toolConfig")
# The request's own bound on its output, in each API's spelling.
_OUTPUT_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "maxTokens", "maxOutputTokens")


def estimate_prompt_tokens(params: Mapping[str, Any]) -> int:
    """CAP-2, COST-1: the tokens of a request's prompt before it is sent: its text (messages,
    system, tools) at four characters a token. Reconciled with the provider's usage afterwards."""
    chars = 0
    for key in _PROMPT_KEYS:
        value = params.get(key)
        if value is not None:
            chars += _text_chars(value)
    return estimate_text_tokens(chars)


def requested_output_tokens(params: Mapping[str, Any]) -> int:
    """The output bound a request asks for (`max_tokens` and its spellings), 0 when none is set;
    looked for in Gemini's `config` and Bedrock's `inferenceConfig` too."""
    for where in (
        params,
        params.get("config"),
        params.get("inferenceConfig"),
        params.get("generation_config"),
    ):
        if not isinstance(where, Mapping):
            where = getattr(where, "__dict__", None)
            if not isinstance(where, Mapping):
                continue
        for key in _OUTPUT_KEYS:
            value = where.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return 0


class AttemptTally(Frozen):
    """One attempt as the machine saw it: its route, the model that answered (None: unknown), its
    usage (RC-10), whether its output stayed in the answer, and whether it answered."""

    __slots__ = ("answered", "attempt", "kept", "model", "route", "usage")
    attempt: int
    route: str | None
    model: str | None
    usage: Usage
    kept: bool
    answered: bool

    def __init__(
        self, attempt: int, route: str | None, model: str | None, usage: Usage, kept: bool, answered: bool
    ) -> None:
        set_field(self, "attempt", attempt)
        set_field(self, "route", route)
        set_field(self, "model", model)
        set_field(self, "usage", usage)
        set_field(self, "kept", kept)
        set_field(self, "answered", answered)


class AttemptCost(Frozen):
    """One attempt's line of the ledger (COST-1).

    Attributes:
        attempt: The attempt's number (1 for the first).
        route: The route it went to (RT-1).
        model: The model it was billed at: the one the provider named, else the route's.
        outcome: "answered", "stub" (its shown text is the result), "kept" (its text was carried
            on by a continuation or a resumed stream), or "lost" (retried, restarted or left).
        input_tokens: Prompt tokens billed (estimated from the request's size when `estimated`
            and the provider sent no usage).
        output_tokens: Completion tokens billed (estimated from the delivered text when `estimated`).
        estimated: True when the provider sent no usage for the attempt and the counts are the
            library's estimate (RC-10).
        regenerated_tokens: Output tokens that produce again what earlier attempts discarded.
        discarded_tokens: Output tokens billed that are not in the answer.
        price: What the attempt cost in USD, from the price table (None: no price known).
        price_source: "table" (the session's `prices`), "genai-prices", or None.
    """

    __slots__ = (
        "attempt",
        "discarded_tokens",
        "estimated",
        "input_tokens",
        "model",
        "outcome",
        "output_tokens",
        "price",
        "price_source",
        "regenerated_tokens",
        "route",
    )
    attempt: int
    route: str | None
    model: str | None
    outcome: str
    input_tokens: int
    output_tokens: int
    estimated: bool
    regenerated_tokens: int
    discarded_tokens: int
    price: float | None
    price_source: str | None

    def __init__(
        self,
        attempt: int,
        route: str | None,
        model: str | None,
        outcome: str,
        input_tokens: int,
        output_tokens: int,
        estimated: bool,
        regenerated_tokens: int,
        discarded_tokens: int,
        price: float | None,
        price_source: str | None,
    ) -> None:
        set_field(self, "attempt", attempt)
        set_field(self, "route", route)
        set_field(self, "model", model)
        set_field(self, "outcome", outcome)
        set_field(self, "input_tokens", input_tokens)
        set_field(self, "output_tokens", output_tokens)
        set_field(self, "estimated", estimated)
        set_field(self, "regenerated_tokens", regenerated_tokens)
        set_field(self, "discarded_tokens", discarded_tokens)
        set_field(self, "price", price)
        set_field(self, "price_source", price_source)

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _ATTEMPT_FIELDS}


_ATTEMPT_FIELDS = (
    "attempt",
    "route",
    "model",
    "outcome",
    "input_tokens",
    "output_tokens",
    "estimated",
    "regenerated_tokens",
    "discarded_tokens",
    "price",
    "price_source",
)


class RequestCost(Frozen):
    """What one request cost, attempt by attempt, and what its faults wasted (`StreamResult.cost`).

    Attributes:
        attempts: One `AttemptCost` per attempt, in order.
        input_tokens / output_tokens: Billed over every attempt.
        regenerated_tokens / discarded_tokens: Summed over the attempts.
        wasted_tokens: Tokens billed that did not serve the answer: the prompts of the attempts
            that did not answer and their discarded output.
        price: The request's price in USD (None when an attempt that billed tokens has no price).
        wasted_price: The price of the wasted tokens (None as `price`).
        estimated: True when any attempt's counts are estimates.
    """

    __slots__ = (
        "attempts",
        "discarded_tokens",
        "estimated",
        "input_tokens",
        "output_tokens",
        "price",
        "regenerated_tokens",
        "wasted_price",
        "wasted_tokens",
    )
    attempts: tuple[AttemptCost, ...]
    input_tokens: int
    output_tokens: int
    regenerated_tokens: int
    discarded_tokens: int
    wasted_tokens: int
    price: float | None
    wasted_price: float | None
    estimated: bool

    def __init__(
        self, attempts: Iterable[AttemptCost], wasted_tokens: int, wasted_price: float | None
    ) -> None:
        lines = tuple(attempts)
        set_field(self, "attempts", lines)
        set_field(self, "input_tokens", sum(line.input_tokens for line in lines))
        set_field(self, "output_tokens", sum(line.output_tokens for line in lines))
        set_field(self, "regenerated_tokens", sum(line.regenerated_tokens for line in lines))
        set_field(self, "discarded_tokens", sum(line.discarded_tokens for line in lines))
        set_field(self, "wasted_tokens", wasted_tokens)
        billed = [line for line in lines if line.input_tokens or line.output_tokens]
        priced = all(line.price is not None for line in billed)
        total = math.fsum(line.price or 0.0 for line in lines) if priced else None
        set_field(self, "price", None if total is None else round(total, 10))
        set_field(self, "wasted_price", wasted_price if priced else None)
        set_field(self, "estimated", any(line.estimated for line in lines))

    def as_dict(self) -> dict[str, Any]:
        return {
            "attempts": [line.as_dict() for line in self.attempts],
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "regenerated_tokens": self.regenerated_tokens,
            "discarded_tokens": self.discarded_tokens,
            "wasted_tokens": self.wasted_tokens,
            "price": self.price,
            "wasted_price": self.wasted_price,
            "estimated": self.estimated,
        }


# -- prices ------------------------------------------------------------------------------------------
Pricer = Callable[[str | None, Usage, str, str], tuple[float | None, str | None]]


def _no_price(model: str | None, usage: Usage, api: str, base_url: str) -> tuple[float | None, str | None]:
    return None, None


def _table_pricer(table: PriceTable) -> Pricer:
    if callable(table):
        function = table

        def from_function(
            model: str | None, usage: Usage, api: str, base_url: str
        ) -> tuple[float | None, str | None]:
            if model is None:
                return None, None
            value = function(model, usage)
            return (
                (float(value), "table")
                if isinstance(value, (int, float)) and math.isfinite(value)
                else (None, None)
            )

        return from_function
    rates = {str(model): (float(pair[0]), float(pair[1])) for model, pair in table.items()}

    def from_table(
        model: str | None, usage: Usage, api: str, base_url: str
    ) -> tuple[float | None, str | None]:
        rate = rates.get(model) if model is not None else None
        if rate is None:
            return None, None
        price = ((usage.input_tokens or 0) * rate[0] + (usage.output_tokens or 0) * rate[1]) / 1e6
        return round(price, 10), "table"

    return from_table


def _check_table(table: Any) -> None:
    if callable(table):
        return
    if not isinstance(table, Mapping):
        raise TypeError(
            f"prices must be a mapping of model -> (input, output) USD per million tokens, not {table!r}"
        )
    for model, pair in table.items():
        if (
            not isinstance(pair, (list, tuple))
            or len(pair) != 2
            or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
                for v in pair
            )
        ):
            raise ValueError(
                f"prices[{model!r}] must be (input, output) USD per million tokens, "
                f"two numbers >= 0, not {pair!r}"
            )


_GENAI: Any = None  # the genai_prices module once imported; False when it is not installed


def _genai_pricer(
    model: str | None, usage: Usage, api: str, base_url: str
) -> tuple[float | None, str | None]:
    global _GENAI
    if _GENAI is None:
        try:
            import genai_prices
        except ImportError:
            _GENAI = False
        else:
            _GENAI = genai_prices
    if _GENAI is False or model is None:
        return None, None
    counts: dict[str, int] = {
        "input_tokens": usage.input_tokens or 0,
        "output_tokens": usage.output_tokens or 0,
    }
    if usage.cached_tokens:
        counts["cache_read_tokens"] = usage.cached_tokens
    tries: list[dict[str, str]] = []
    if base_url and "127.0.0.1" not in base_url and "localhost" not in base_url:
        tries.append({"provider_api_url": base_url})
    provider = _PROVIDER_IDS.get(api)
    if provider is not None:
        tries.append({"provider_id": provider})
    for where in tries:
        lookup = (model, *where.items())
        if lookup in _UNKNOWN:
            continue
        try:
            found = _GENAI.calc_price(_GENAI.Usage(**counts), model, **where)
        except Exception:  # an unknown model or provider: no price from this lookup
            if len(_UNKNOWN) < 1024:
                _UNKNOWN.add(lookup)  # not looked up again: an unknown model is unknown every time
            continue
        return round(float(found.total_price), 10), "genai-prices"
    return None, None


_UNKNOWN: set[tuple[Any, ...]] = set()  # lookups genai-prices had no price for


def resolve_prices(prices: Any) -> Pricer:
    """The session's pricer: a table (`Session(prices=...)`), `False` for none, or None for
    `genai-prices` when it is installed."""
    if prices is False:
        return _no_price
    if prices is None:
        return _genai_pricer
    _check_table(prices)
    return _table_pricer(prices)


# -- the ledger ---------------------------------------------------------------------------------------
def ledger(
    tallies: Sequence[AttemptTally],
    pricer: Pricer,
    *,
    route_models: Mapping[Any, str | None] | None = None,
    route_apis: Mapping[Any, tuple[str, str]] | None = None,
    prompt_tokens: Mapping[Any, int] | None = None,
) -> RequestCost:
    """The request's `RequestCost` from its attempts' tallies (see the module's text).

    `route_models` names each route's requested model (an attempt that never learned the
    provider's is billed at it), `route_apis` each route's (api, base URL) for the price lookup,
    `prompt_tokens` each route's prompt estimate (the input of an attempt with no usage).
    """
    lines: list[AttemptCost] = []
    outstanding = 0  # discarded output tokens not yet produced again
    wasted_tokens = 0
    wasted_price = 0.0
    for tally in tallies:
        usage = tally.usage
        estimated = usage.estimated or usage.output_tokens is None
        output = usage.output_tokens or 0
        if usage.input_tokens is not None:
            prompt = usage.input_tokens
        else:
            prompt = (prompt_tokens or {}).get(tally.route, 0) if output or tally.answered else 0
            estimated = estimated or bool(prompt)
        model = tally.model or (route_models or {}).get(tally.route)
        api, base_url = (route_apis or {}).get(tally.route, ("", ""))
        billed = Usage(input_tokens=prompt, output_tokens=output, cached_tokens=usage.cached_tokens)
        price, source = pricer(model, billed, api, base_url) if (prompt or output) else (0.0, None)
        regenerated = min(output, outstanding)
        outstanding -= regenerated
        if tally.answered:
            outcome, discarded = "answered", 0
        elif tally.kept:
            outcome, discarded = ("stub" if tally is tallies[-1] else "kept"), 0
        else:
            outcome, discarded = "lost", output
            outstanding += output
        if outcome in ("lost", "kept"):
            wasted_tokens += prompt + discarded
            if price is not None:
                share = (prompt + discarded) / (prompt + output) if prompt + output else 0.0
                wasted_price += price * share
        lines.append(
            AttemptCost(
                attempt=tally.attempt,
                route=tally.route,
                model=model,
                outcome=outcome,
                input_tokens=prompt,
                output_tokens=output,
                estimated=estimated and bool(prompt or output),
                regenerated_tokens=regenerated,
                discarded_tokens=discarded,
                price=price,
                price_source=source,
            )
        )
    return RequestCost(lines, wasted_tokens, round(wasted_price, 10))


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"a token count must be a whole number >= 0, not {value!r}")
    return value


def _name(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 256:
        raise ValueError("a route or model name must be a short string")
    return value


def _usd(value: Any) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(f"a price must be a finite number >= 0, not {value!r}")
    return float(value)


_OUTCOMES = frozenset({"answered", "stub", "kept", "lost"})


def cost_from_dict(data: Mapping[str, Any], pricer: Pricer | None = None) -> RequestCost:
    """A `RequestCost` read back from a trace's `cost` line (`RequestCost.as_dict()`), every field
    checked (SEC-7); with `pricer`, each attempt priced again at its model."""
    lines: list[AttemptCost] = []
    wasted_tokens = 0
    wasted_price = 0.0
    for item in data["attempts"]:
        if not isinstance(item, Mapping):
            raise ValueError("an attempt of a cost line must be an object")
        outcome = item.get("outcome")
        if outcome not in _OUTCOMES:
            raise ValueError(f"unknown attempt outcome {outcome!r}")
        model = _name(item.get("model"))
        prompt, output = _count(item.get("input_tokens")), _count(item.get("output_tokens"))
        discarded = _count(item.get("discarded_tokens"))
        price, source = _usd(item.get("price")), _name(item.get("price_source"))
        if pricer is not None:
            price, source = (
                pricer(model, Usage(input_tokens=prompt, output_tokens=output), "", "")
                if prompt or output
                else (0.0, None)
            )
        if outcome in ("lost", "kept"):
            wasted_tokens += prompt + discarded
            if price is not None and prompt + output:
                wasted_price += price * (prompt + discarded) / (prompt + output)
        lines.append(
            AttemptCost(
                attempt=_count(item.get("attempt")),
                route=_name(item.get("route")),
                model=model,
                outcome=outcome,
                input_tokens=prompt,
                output_tokens=output,
                estimated=item.get("estimated") is True,
                regenerated_tokens=_count(item.get("regenerated_tokens")),
                discarded_tokens=discarded,
                price=price,
                price_source=source,
            )
        )
    return RequestCost(lines, wasted_tokens, round(wasted_price, 10))


def _money(value: float | None) -> str:
    return "no price" if value is None else f"${value:.8f}"


def cost_summary(cost: RequestCost) -> list[str]:
    """COST-1: the lines of "what the faults cost" (`fsm-agent replay`): one per attempt, then
    the totals. `~` marks an estimated count."""
    lines = []
    for line in cost.attempts:
        mark = "~" if line.estimated else ""
        extra = ""
        if line.regenerated_tokens:
            extra += f", {line.regenerated_tokens} regenerated"
        if line.discarded_tokens:
            extra += f", {line.discarded_tokens} discarded"
        lines.append(
            f"attempt {line.attempt} {line.outcome:<8} {line.route or '-'} ({line.model or '?'}): "
            f"in {mark}{line.input_tokens}, out {mark}{line.output_tokens}{extra}; {_money(line.price)}"
        )
    lines.append(
        f"total: in {cost.input_tokens}, out {cost.output_tokens}; {_money(cost.price)}"
        + (" (estimated in part)" if cost.estimated else "")
    )
    lines.append(
        f"the faults cost: {cost.wasted_tokens} tokens ({cost.discarded_tokens} discarded, "
        f"{cost.regenerated_tokens} regenerated); {_money(cost.wasted_price)}"
    )
    return lines
