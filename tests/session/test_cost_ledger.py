"""COST-1: the cost and waste ledger of a request (`StreamResult.cost`), through the real openai
client against the emulator: a first attempt cut at half its answer, restarted on a second route
with another model; the ledger's lines, its prices (a user's table, genai-prices when installed),
its OpenTelemetry events, its trace line and the replay's "what the faults cost"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from otel_support import Otel, otel

import fsm_agent
from fsm_agent._internal.cost import cost_summary, ledger, resolve_prices
from fsm_agent._internal.trace.replay import replay
from fsm_agent._internal.trace.sinks import MemorySink
from fsm_agent.testing import DropAfter, Emulator, Scenario, ScriptedUsage

ANSWER = "The service listens on port 8080 and keeps its request logs for fourteen days in all."
PROMPT = [{"role": "user", "content": "Where does the service listen, and for how long are logs kept?"}]
PRICES = {"emulator-small": (1.0, 4.0), "emulator-large": (10.0, 40.0)}
__all__ = ["otel"]  # the fixture

GOLDEN = Path(__file__).resolve().parent.parent / "trace" / "golden_cost"


def _script(emu: Emulator) -> None:
    whole = Scenario.build(ANSWER, usage=ScriptedUsage(input_tokens=18, output_tokens=22))
    cut = Scenario.build(ANSWER, faults=[DropAfter(4)])  # the role frame and 3 of the 6 text chunks
    emu.script(cut, whole)


def _routes(client: Any) -> list[fsm_agent.Route]:
    return [
        fsm_agent.Route(client, {"model": "emulator-small", "messages": PROMPT}, retries=0),
        fsm_agent.Route(client, {"model": "emulator-large", "messages": PROMPT}),
    ]


def _run(emulator: Emulator, **session: Any) -> fsm_agent.StreamResult:
    _script(emulator)
    client = openai.OpenAI(base_url=emulator.openai_base_url, api_key="sk-test", max_retries=0)
    try:
        settings: dict[str, Any] = {
            "backoff": fsm_agent.Backoff(base=0),
            "recovery": fsm_agent.Recovery(restart=True),
            **session,
        }
        shown: list[str] = []
        result = fsm_agent.Session(**settings).stream(_routes(client), on_text=shown.append)
    finally:
        client.close()
    return result


def test_cut_at_half_then_restarted_on_another_model(emulator: Emulator) -> None:
    result = _run(emulator, prices=PRICES)
    assert result.content == ANSWER and result.attempts == 2
    cost = result.cost
    first, second = cost.attempts
    # the cut attempt: no usage came, so it is the estimate, marked as such, at its own model
    assert (first.attempt, first.outcome, first.model, first.estimated) == (1, "lost", "emulator-small", True)
    assert first.route == "chat_completions:emulator-small"
    assert 0 < first.output_tokens < len(ANSWER) // 4  # about half of the answer was delivered
    assert first.input_tokens == (len(PROMPT[0]["content"]) + 3) // 4  # the prompt's estimate
    assert first.discarded_tokens == first.output_tokens and first.regenerated_tokens == 0
    # the restart: the provider's usage, at the other model, regenerating what was discarded
    assert (second.outcome, second.model, second.estimated) == ("answered", "emulator-large", False)
    assert (second.input_tokens, second.output_tokens) == (18, 22)
    assert second.regenerated_tokens == first.discarded_tokens and second.discarded_tokens == 0
    # each attempt priced at its own model's rates, from the user's table
    assert first.price == pytest.approx((first.input_tokens * 1.0 + first.output_tokens * 4.0) / 1e6)
    assert second.price == pytest.approx((18 * 10.0 + 22 * 40.0) / 1e6)
    assert first.price_source == second.price_source == "table"
    assert cost.price == pytest.approx(first.price + second.price)
    assert cost.wasted_price == pytest.approx(first.price)  # all of the lost attempt was waste
    assert cost.wasted_tokens == first.input_tokens + first.output_tokens
    assert cost.estimated
    # RC-10 still holds beside it
    assert result.attempt_usage[0].estimated and result.usage.output_tokens == 22


def test_no_table_uses_genai_prices_when_installed(emulator: Emulator) -> None:
    genai_prices = pytest.importorskip("genai_prices")
    lines = ledger(
        [_tally(1, "gpt-4o-mini", 1000, 500, answered=True)],
        resolve_prices(None),
        route_apis={"r": ("chat_completions", "")},
    ).attempts
    expected = genai_prices.calc_price(
        genai_prices.Usage(input_tokens=1000, output_tokens=500), "gpt-4o-mini", provider_id="openai"
    )
    assert (
        lines[0].price == pytest.approx(float(expected.total_price))
        and lines[0].price_source == "genai-prices"
    )
    # a model genai-prices does not know is left unpriced, never guessed
    result = _run(emulator)
    assert all(line.price is None for line in result.cost.attempts) and result.cost.price is None


def test_prices_false_and_bad_tables() -> None:
    assert ledger([_tally(1, "gpt-4o-mini", 10, 5, answered=True)], resolve_prices(False)).price is None
    with pytest.raises(ValueError, match="prices"):
        fsm_agent.Session(prices={"m": (1.0,)})
    with pytest.raises(TypeError, match="prices"):
        fsm_agent.Session(prices=3)


def _tally(attempt: int, model: str, prompt: int, output: int, *, answered: bool) -> Any:
    from fsm_agent._internal.cost import AttemptTally

    usage = fsm_agent.Usage(input_tokens=prompt, output_tokens=output, total_tokens=prompt + output)
    return AttemptTally(attempt, "r", model, usage, answered, answered)


def test_the_spans_carry_each_attempts_cost(emulator: Emulator, otel: Otel) -> None:
    result = _run(emulator, prices=PRICES)
    (span,) = [span for span in otel.spans() if span.name.startswith("chat")]
    events = [event for event in span.events if event.name == "fsm_agent.attempt.cost"]
    assert [event.attributes["fsm_agent.attempt"] for event in events] == [1, 2]
    lost, answered = (dict(event.attributes) for event in events)
    assert lost["fsm_agent.attempt.outcome"] == "lost" and lost["fsm_agent.usage.estimated"] is True
    assert (
        lost["gen_ai.response.model"] == "emulator-small"
        and answered["gen_ai.response.model"] == "emulator-large"
    )
    assert lost["fsm_agent.cost.discarded_tokens"] == result.cost.attempts[0].discarded_tokens
    assert answered["fsm_agent.cost.regenerated_tokens"] == result.cost.attempts[0].discarded_tokens
    assert answered["gen_ai.usage.output_tokens"] == 22
    assert lost["fsm_agent.cost.usd"] == pytest.approx(result.cost.attempts[0].price)
    assert span.attributes["fsm_agent.cost.usd"] == pytest.approx(result.cost.price)
    assert span.attributes["fsm_agent.cost.wasted_usd"] == pytest.approx(result.cost.wasted_price)


def test_the_trace_keeps_the_ledger_and_replay_prints_it(emulator: Emulator) -> None:
    sink = MemorySink(record_wire=True)
    result = _run(emulator, prices=PRICES, trace=sink)
    (line,) = [json.loads(text) for text in sink.lines if json.loads(text)["type"] == "cost"]
    assert line["cost"] == result.cost.as_dict()
    report = replay(sink)
    assert report.requests[0].cost == result.cost
    assert "what the faults cost:" in str(report)
    # re-priced by another table, as `fsm-agent replay --prices FILE` does
    cheaper = replay(sink, prices={"emulator-small": (0.0, 0.0), "emulator-large": (1.0, 1.0)})
    assert cheaper.requests[0].cost.wasted_price == 0.0


def test_golden_cost_summary() -> None:
    """The replay's "what the faults cost" for a recorded trace. To re-record:
    `PYTHONPATH=tests .venv/bin/python -m tests.session.test_cost_ledger`."""
    report = replay(GOLDEN / "restart-on-another-model.jsonl")
    (request,) = report.requests
    got = "\n".join(cost_summary(request.cost)) + "\n"
    assert got == (GOLDEN / "restart-on-another-model.txt").read_text()
    assert report.matched


def record_golden() -> None:  # pragma: no cover - run by hand to re-record
    import tempfile

    with Emulator() as emu, tempfile.TemporaryDirectory() as where:
        path = Path(where) / "trace.jsonl"
        result = _run(emu, prices=PRICES, trace=str(path), record_wire=True)
        text = path.read_text()
    (GOLDEN / "restart-on-another-model.jsonl").write_text(text)
    (GOLDEN / "restart-on-another-model.txt").write_text("\n".join(cost_summary(result.cost)) + "\n")


if __name__ == "__main__":  # pragma: no cover
    record_golden()


def test_the_prompt_estimate_counts_the_text_of_every_shape() -> None:
    """CAP-2, COST-1: the prompt's text in each API's spelling, content parts and tool results
    included, ids, roles, types and binary parts not; mappings and sequences of any class count
    as the JSON objects and lists they stand for; nesting past 32 levels is not walked."""
    from collections import UserDict

    from fsm_agent._internal.cost import estimate_prompt_tokens

    chat = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "abcd" * 10},  # 40
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "x" * 20},
                    {"type": "image_url", "image_url": {"url": "u" * 99}},
                ],
            },
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "y" * 16},
        ],
        "tools": ({"type": "function", "function": {"name": "g", "description": "d" * 21}},),
    }
    # 40 + 20 + ("f" + "{}") + 16 + ("g" + 21) = 101 characters: 26 tokens at four a token
    assert estimate_prompt_tokens(chat) == 26
    assert estimate_prompt_tokens({**chat, "messages": [UserDict(m) for m in chat["messages"]]}) == 26
    assert estimate_prompt_tokens({"system": [{"text": "s" * 8}], "messages": [], "contents": "c" * 4}) == 3
    deep: Any = "z" * 400
    for _ in range(40):
        deep = [deep]
    assert estimate_prompt_tokens({"input": deep}) == estimate_prompt_tokens({"input": []})
    assert estimate_prompt_tokens({"model": "m"}) == estimate_prompt_tokens({"input": None})
