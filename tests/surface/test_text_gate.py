"""The wrapper's text gate (WR-2), fed bare values: what a wrapped stream passes on of the answer's
text and of the library's own text, for every API alike."""

from __future__ import annotations

from fsm_agent import MarkerEvent, ResetEvent
from fsm_agent._internal.wrap.text_gate import RESET_LINE, TextGate

MARKER = "\n\n[connection lost mid tool-call; reconnecting…]\n\n"


def passed(gate: TextGate, *items: object) -> str:
    out: list[str] = []
    for item in items:
        out += gate.text(item) if isinstance(item, str) else gate.library(item)
    return "".join(out)


def test_a_restarted_answer_that_repeats_what_was_shown_is_not_shown_twice() -> None:
    gate = TextGate()
    text = passed(gate, "Let me ", "check.", MarkerEvent(MARKER, True), "Let me", " check.", " Done.")
    assert text == "Let me check." + MARKER + " Done."


def test_a_restarted_answer_that_departs_is_shown_whole_from_the_restart() -> None:
    gate = TextGate()
    assert passed(gate, "Let me check.", MarkerEvent(MARKER, True), "Let me", " look.") == (
        "Let me check." + MARKER + "Let me look."
    )


def test_markers_off_leaves_the_librarys_text_out() -> None:
    gate = TextGate(markers=False)
    warning = MarkerEvent("\n\n⚠ Stream stalled mid tool-call (read)", False)
    assert passed(gate, "Half", MarkerEvent(MARKER, True), "Half", warning) == "Half"


def test_a_reset_is_said_once_and_the_new_answer_follows() -> None:
    gate = TextGate()
    assert passed(gate, "Old answer.", ResetEvent("Old answer."), "New answer.") == (
        "Old answer." + RESET_LINE + "New answer."
    )
    assert ResetEvent("x").kind == "reset" and ResetEvent("x").shown == "x"
