"""RC-3: the seam of a continuation: what of its first text repeats the shown text's end and is
dropped (`recovery.seam_overlap`), and the Recovery settings' checks (RC-1)."""

from __future__ import annotations

import pytest

import fsm_agent
from fsm_agent._internal.recovery import seam_overlap


@pytest.mark.parametrize(
    ("shown", "continuation", "dropped"),
    [
        ("One two ", " three", 1),  # the prefill's stripped space, sent back
        ("One two\n\n", "\n\nThree", 2),
        ("One two three ", "two three four", 10),  # an echo of the last words ("two three")
        ("One two three ", "ne two three four", 13),  # an echo that begins inside a word, too
        ("It was the", "the end", 0),  # a short repeat may be the answer's own ("the the")
        ("One two", " three", 0),
        ("abc", "abcdef", 0),  # a repeat that ends inside a word is not an echo
        ("", "text", 0),
    ],
)
def test_seam_overlap(shown: str, continuation: str, dropped: int) -> None:
    assert seam_overlap(shown, continuation) == dropped


def test_recovery_checks_its_settings() -> None:
    assert fsm_agent.Recovery() == fsm_agent.Recovery(
        resume=False, continue_=False, restart=False, final="stub"
    )
    with pytest.raises(ValueError, match="final"):
        fsm_agent.Recovery(final="retry")
    with pytest.raises(TypeError, match="restart"):
        fsm_agent.Recovery(restart=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="recovery"):
        fsm_agent.Session(recovery={"restart": True})  # type: ignore[arg-type]
