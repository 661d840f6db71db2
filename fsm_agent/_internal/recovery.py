"""`Recovery`: the ladder a session climbs when an attempt is lost after visible text (RC-1..RC-5).

Pure settings: which steps of the ladder a session may take (continue the shown text as an
assistant prefill, restart with a reset notice) and how it ends when none serves (`final`: a stub,
or `IncompleteStreamError`). The steps themselves are rows of the machine's table
(`machine.TABLE`, block "issue 25b"); this module never performs I/O and decides nothing.
"""

from __future__ import annotations

from .frozen import Frozen, as_dataclass, set_field

__all__ = ["FINALS", "RESTART_MARKER", "Recovery"]

FINALS = ("stub", "raise")


@as_dataclass
class Recovery(Frozen):
    """What an attempt lost after visible text becomes (RC-1). Tried in order: resume, continue,
    restart, then `final`.

    The default, `Recovery()`, is the library's behaviour before the ladder existed: a text-only
    cut ends in a stub (RES-4), a cut mid tool-call is retried with the "reconnecting" marker
    (RES-3, RT-3), then stubbed with the dropped-tool warning (RES-5).

    Args:
        resume: Read a lost OpenAI Responses stream on from after its last event, through the
            SDK's retrieve-stream call (`starting_after`): nothing regenerated, nothing repeated
            (RC-2). Only for requests you send with `background=True` in their params (a
            background response is stored at OpenAI, which is why this is yours to opt into).
        continue_: Ask the same route (while its retries last), else the next one, to continue the
            shown text as an assistant prefill, where the endpoint accepts one (Anthropic
            Messages; Bedrock Converse with Claude; DeepSeek and Mistral Chat Completions through
            their `prefix` flag) and no tool call is in flight (RC-3). Seamless: no marker, an
            overlap at the seam dropped.
        restart: Ask the same route (while its retries last), else the next one, for a whole new
            answer, announced first through `on_reset(shown_text)` or, without one, a marker line
            containing "restarting" sent to `on_text` (RC-4).
        final: `"stub"` (default) returns what was shown as a stub (`incomplete=True`);
            `"raise"` raises `IncompleteStreamError` carrying it (RC-5).

    The production setting for a session with a fallback route is
    `Recovery(continue_=True, restart=True)`.
    """

    resume: bool = False
    continue_: bool = False
    restart: bool = False
    final: str = "stub"

    def __init__(
        self, resume: bool = False, continue_: bool = False, restart: bool = False, final: str = "stub"
    ) -> None:
        for name, value in (("resume", resume), ("continue_", continue_), ("restart", restart)):
            if not isinstance(value, bool):
                raise TypeError(f"Recovery({name}=...) must be a bool, not {value!r}")
        if final not in FINALS:
            raise ValueError(f"Recovery(final=...) must be 'stub' or 'raise', not {final!r}")
        set_field(self, "resume", resume)
        set_field(self, "continue_", continue_)
        set_field(self, "restart", restart)
        set_field(self, "final", final)


# RC-4: the line on_text gets before a whole new answer when the caller gave no on_reset.
RESTART_MARKER = "\n\n[connection lost; restarting the answer…]\n\n"

# RC-3: the longest overlap looked for at a continuation's seam.
_SEAM_WINDOW = 200
# RC-3: a repeated span this long or longer is taken for the endpoint echoing the shown text;
# shorter ones only when they are whitespace (the prefill's trailing space, sent back).
_SEAM_MIN = 4


def seam_overlap(shown: str, continuation: str) -> int:
    """RC-3: how many leading characters of a continuation's first text repeat the end of the
    text already shown (0 when none): the longest such span, when it is whitespace or at least
    `_SEAM_MIN` characters long and ends on a word boundary of the continuation."""
    longest = min(len(shown), len(continuation), _SEAM_WINDOW)
    for size in range(longest, 0, -1):
        head = continuation[:size]
        if not shown.endswith(head):
            continue
        if head.isspace():
            return size
        boundary = size == len(continuation) or not continuation[size].isalnum() or not head[-1].isalnum()
        if size >= _SEAM_MIN and boundary:
            return size
    return 0
