"""The request machine's states and its one transition table (the model is `request.RequestMachine`).

Theory of operation. One `RequestMachine` runs one request. The driver feeds it normalized events
(wire events from an adapter, timer events from the watchdog, control events); the machine updates
its context and accumulator, translates the event into one trigger of the table, and returns what
the driver must do (deliver a delta, open or close an attempt, fall back, finish, raise). Token
deltas that do not change the phase are accumulated and counted without firing anything.

The table is the whole machine. Each row of `TABLE` is `(state, trigger) -> (effects, next
state)` under named guards: the rows of a trigger from a state are tried in order, the first whose
guards hold is taken, its destination is entered and its effects run, in their order. To know what
`error` does in `streaming_tool`, read the `error` rows whose source holds `streaming_tool`.

Rules:
- Every state change is a row of `TABLE`, handed to `transitions.Machine` (one per process, see
  `engine`). Nothing else sets a state.
- Every (state, trigger) pair is either in a row, or listed in `IGNORED` (a delta that changes no
  phase there: nothing fires, nothing is recorded), or listed in `INVALID`; firing an invalid
  pair raises `MachineError` (FSM-2). tests/test_table_complete.py checks the three cover every
  pair exactly once.
- Guards are the named predicates of `guards.GUARDS`; each evaluated value is written into the
  record. Effects are the named functions of `effects.EFFECTS`; the names run are written into the
  record. Which message, marker or wait applies is decided by a row's guards, never inside an
  effect.
- The machine never performs I/O, reads no clock (time arrives with each event) and holds no lock.
- Every transition yields one `TransitionRecord`, logged through structlog and handed to the sinks.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .effects import EFFECTS
from .guards import GUARDS

if TYPE_CHECKING:
    from transitions import Machine

__all__ = [
    "IGNORED",
    "INITIAL",
    "INVALID",
    "LIVE",
    "MACHINE_NAME",
    "NON_TERMINAL",
    "TABLE",
    "TERMINAL",
    "TRIGGERS",
    "TRIGGER_ALIASES",
    "State",
    "engine",
    "fire",
]


class State(enum.Enum):
    IDLE = "idle"
    CONNECTING = "connecting"
    STREAMING_TEXT = "streaming_text"
    STREAMING_TOOL = "streaming_tool"
    FINISHING = "finishing"
    STALLED = "stalled"
    RETRYING = "retrying"
    WAITING = "waiting"
    STUBBING = "stubbing"
    FALLBACK = "fallback"
    SWITCHING = "switching"
    DONE = "done"
    FAILED = "failed"

    # A member is its own singleton and compares by identity, so the identity hash is consistent
    # with equality. Enum's own `__hash__` is a Python function (the hash of the name): the request
    # asks `state in <set>` once per delta, where that call was the costliest single step.
    __hash__ = object.__hash__


S = State

# States in which an attempt's stream is open and the watchdog is armed.
LIVE = (S.CONNECTING, S.STREAMING_TEXT, S.STREAMING_TOOL, S.FINISHING)
TERMINAL = (S.DONE, S.FAILED)
NON_TERMINAL = tuple(state for state in State if state not in TERMINAL)

Row = dict[str, Any]


def _row(
    trigger: str,
    source: State | Sequence[State],
    dest: State | None,
    conditions: Sequence[str] = (),
    unless: Sequence[str] = (),
    effects: Sequence[str] = (),
) -> Row:
    """One row: from `source`, `trigger` moves to `dest` (None: stays, an internal transition) when
    every guard of `conditions` holds and none of `unless` does; then `effects` run, in order."""
    sources = [source] if isinstance(source, State) else list(source)
    row: Row = {"trigger": trigger, "source": sources, "dest": dest}
    if conditions:
        row["conditions"] = list(conditions)
    if unless:
        row["unless"] = list(unless)
    row["effects"] = list(effects)
    return row


# The effects that recur, spelled the same way every time (see effects.py for each):
#   done:    build_result, close, remember_success, finish       (the answer is handed over)
#   failed:  close, [remember_no_streaming | give_up_* ], raise_error
#   retry:   count_retry, [marker_reconnect], say_retrying, close_then_closed
#   switch:  [marker_switch], say_switching[_hint], close, load_next_route
#   stub:    keep_stub, [warn_dropped_tools], say_kept, close_then_closed

TABLE: list[Row] = [
    # -- a request (IDLE) or a route after a switch (SWITCHING, RT-2) begins -----------------------
    # One trigger for both: a route begins as a request does. The breaker (WD-3, BO-7), the
    # endpoint's cooldown (BO-6) and the learned streaming_disabled (RES-9) decide; a route whose
    # breaker is open, or whose cooldown is longer than max_wait, is skipped at once, without a
    # request (RT-1).
    # A route with nothing against it connects at once. Each row below needs one of these guards to
    # hold, so this row decides as they would (the same guards, read in the same order); it comes
    # first so that the common start tries one row, not nine (~70 k instructions a request).
    _row("start", (S.IDLE, S.SWITCHING), S.CONNECTING,
         unless=["breaker_tripped", "cooldown_too_long", "capacity_too_long", "capacity_short",
                 "cooling_down", "plain_request", "streaming_disabled"],
         effects=["open_attempt"]),
    _row("start", (S.IDLE, S.SWITCHING), S.SWITCHING, ["breaker_tripped", "route_left"],
         effects=["say_skip_breaker", "load_next_route"]),
    _row("start", (S.IDLE, S.SWITCHING), S.FAILED, ["breaker_tripped"],
         effects=["breaker_error", "close", "raise_error"]),
    _row("start", (S.IDLE, S.SWITCHING), S.SWITCHING, ["cooldown_too_long", "route_left"],
         effects=["say_skip_cooldown", "load_next_route"]),
    # -- issue 29: capacity (CAP-1..CAP-3) ----------------------------------------------------------
    # The endpoint's capacity, learned from the provider's rate-limit headers and 429s (shared by
    # the fleet through RedisHealth), has no room for this request now: it waits for its slot (a
    # reservation made when the route's health was read) instead of being sent to get a 429, or,
    # when the slot is further than max_wait, leaves for the next route. With no route left, the
    # rows below send it anyway: the provider's own answer decides (BO-3).
    _row("start", (S.IDLE, S.SWITCHING), S.SWITCHING, ["capacity_too_long", "route_left"],
         effects=["say_skip_capacity", "load_next_route"]),
    _row("start", (S.IDLE, S.SWITCHING), S.WAITING, ["capacity_short"], ["streaming_disabled"],
         effects=["say_capacity_wait", "wait"]),
    # -- end of issue 29 -------------------------------------------------------------------------------
    _row("start", (S.IDLE, S.SWITCHING), S.WAITING, ["cooling_down"],
         effects=["say_cooldown_wait", "wait"]),
    # -- issue 27: plain requests --------------------------------------------------------------------
    # WR-1: a wrapped client's call without streaming. Every attempt is the non-streaming request
    # (the state `fallback`, counted as an attempt), once the breaker and the cooldown above have
    # had their say. It fails as a stream does before its first byte, and goes on as one does:
    # a transient error while this route's retries last is retried after the wait the policy
    # decides (RES-2, BO-2; a hint over max_wait is not waited out, BO-3); a failure that opened
    # the breaker leaves for the next route (RC-9); a stall leaves at once when a route remains
    # (as RC-8), else is retried. With the retries spent, the fallback's rows below switch (RT-2)
    # or raise, as they do for a fallback.
    _row("start", (S.IDLE, S.SWITCHING), S.FALLBACK, ["plain_request"],
         effects=["open_plain", "run_fallback"]),
    _row("error", S.FALLBACK, S.SWITCHING,
         ["plain_request", "route_left", "is_transient", "breaker_now_open"],
         effects=["say_switching_breaker", "close", "load_next_route"]),
    _row("error", S.FALLBACK, S.RETRYING, ["plain_request", "is_transient", "budget_left"], ["hint_too_long"],
         effects=["count_retry", "say_retrying", "close_then_closed"]),
    _row("stale", S.FALLBACK, S.RETRYING, ["plain_request", "is_transient", "budget_left"], ["route_left"],
         effects=["say_stalled", "count_retry", "say_retrying", "close_then_closed"]),
    _row("closed", S.RETRYING, S.FALLBACK, ["plain_request"], ["must_wait"],
         effects=["open_plain", "run_fallback"]),
    _row("waited", S.WAITING, S.FALLBACK, ["plain_request"], effects=["open_plain", "run_fallback"]),
    # -- end of issue 27 --------------------------------------------------------------------------------
    _row("start", (S.IDLE, S.SWITCHING), S.FALLBACK, ["streaming_disabled", "fallback_allowed"],
         effects=["run_fallback"]),
    # (Also reached with a guard above holding but no row of it applying: a too-long cooldown or
    # capacity wait with no route left is sent anyway, BO-3; a learned streaming_disabled without
    # a fallback allowed streams again.)
    _row("start", (S.IDLE, S.SWITCHING), S.CONNECTING, effects=["open_attempt"]),
    # -- phase changes of a healthy stream ---------------------------------------------------------
    _row("text", S.CONNECTING, S.STREAMING_TEXT),
    _row("tool_start", (S.CONNECTING, S.STREAMING_TEXT), S.STREAMING_TOOL),
    _row("tool_start", S.STREAMING_TOOL, None),
    _row("finish", (S.CONNECTING, S.STREAMING_TEXT, S.STREAMING_TOOL), S.FINISHING),
    _row("end", (S.STREAMING_TEXT, S.FINISHING), S.DONE,
         effects=["build_result", "close", "remember_success", "finish"]),
    # -- issue 25a: route-owned errors, first-byte switch, breaker ----------------------------------
    # Before the rows below of the same trigger and state: they are tried first. Each leaves a
    # route that cannot serve while another remains; with none left, the rows below decide as
    # before (RC-7: the rejection is raised; RC-8, RC-9: the retries go on).
    # RC-7: the route rejected the request as its own (the prompt does not fit its model, its key
    # cannot use the model): the next route may take it (amends RT-2)
    _row("error", (S.CONNECTING, S.STREAMING_TEXT, S.STREAMING_TOOL, S.FALLBACK), S.SWITCHING,
         ["route_left", "route_owned"], ["has_visible_text"],
         effects=["say_switching_owned", "close", "load_next_route"]),
    # RC-8: the attempt stalled before its first byte: leave at once, not after its retries
    _row("closed", S.STALLED, S.SWITCHING, ["route_left", "first_byte_stall"],
         effects=["say_switching_first_byte", "close", "load_next_route"]),
    # RC-9: this failure opened the route's breaker (WD-3, BO-7): nothing visible yet, so leave
    # now rather than spend the rest of the retries on a dead endpoint
    _row("error", (S.CONNECTING, S.STREAMING_TEXT, S.STREAMING_TOOL), S.SWITCHING,
         ["route_left", "is_transient", "breaker_now_open"], ["has_visible_text"],
         effects=["say_switching_breaker", "close", "load_next_route"]),
    _row("end", S.CONNECTING, S.SWITCHING, ["route_left", "is_transient", "breaker_now_open"],
         ["has_visible_text"],
         effects=["say_switching_breaker", "close", "load_next_route"]),
    _row("closed", S.STALLED, S.SWITCHING, ["route_left", "is_transient", "breaker_now_open"],
         ["has_visible_text"],
         effects=["say_switching_breaker", "close", "load_next_route"]),
    # -- end of issue 25a ------------------------------------------------------------------------------
    # -- an end with nothing in it: empty (transient), or keepalives only (streaming unsupported) ---
    # (An end cut short of the finish reason is fed as an `error`: IncompleteStreamError.)
    _row("end", S.CONNECTING, S.FALLBACK, ["streaming_unsupported", "fallback_allowed"], ["has_visible_text"],
         effects=["remember_no_streaming", "say_falling_back", "close", "run_fallback"]),
    _row("end", S.CONNECTING, S.RETRYING, ["is_transient", "budget_left"],
         ["has_visible_text", "hint_too_long"],
         effects=["count_retry", "say_retrying", "close_then_closed"]),
    _row("end", S.CONNECTING, S.SWITCHING, ["route_left", "is_transient"],
         ["budget_left", "has_visible_text"],
         effects=["say_switching", "close", "load_next_route"]),
    _row("end", S.CONNECTING, S.SWITCHING, ["route_left", "streaming_unsupported"],
         ["fallback_allowed", "has_visible_text"],
         effects=["say_switching", "close", "load_next_route"]),
    _row("end", S.CONNECTING, S.FAILED, ["streaming_unsupported"],
         effects=["close", "remember_no_streaming", "raise_error"]),
    _row("end", S.CONNECTING, S.FAILED, ["is_transient", "has_retried"],
         effects=["close", "give_up_spent", "raise_error"]),
    _row("end", S.CONNECTING, S.FAILED, effects=["close", "raise_error"]),
    # -- WIRE-5 / RES-9: the client answered stream=True with a finished response ------------------
    _row("finished_response", S.CONNECTING, S.FALLBACK, ["fallback_allowed"],
         effects=["remember_no_streaming", "say_falling_back", "close", "run_fallback"]),
    _row("finished_response", S.CONNECTING, S.FAILED,
         effects=["close", "remember_no_streaming", "raise_error"]),
    # -- issue 25b: the recovery ladder (RC-1..RC-5) ------------------------------------------------
    # An attempt lost after visible text with no tool call in flight (a transient error while text
    # streams, or a stall) climbs the session's ladder (`Recovery`), in order: continue the shown
    # text as a prefill (RC-3) on this route while its retries last, else on the next route; restart
    # with a reset notice first (RC-4), here, else on the next route. With no step enabled or able
    # to serve, none of these rows applies and the stub of RES-4/RES-5 below is the final (RC-5).
    # First of all, resume (RC-2): a stored background response is read on after its last event.
    _row("error", S.STREAMING_TEXT, S.RETRYING,
         ["has_visible_text", "is_transient", "resume_here", "budget_left"], ["hint_too_long"],
         effects=["count_retry", "begin_resume", "say_resuming", "close_then_closed"]),
    _row("closed", S.STALLED, S.RETRYING,
         ["has_visible_text", "resume_here", "budget_left"], ["tool_in_flight", "finish_seen"],
         effects=["count_retry", "begin_resume", "say_resuming", "close_then_closed"]),
    _row("error", S.STREAMING_TEXT, S.RETRYING,
         ["has_visible_text", "is_transient", "continue_here", "budget_left"], ["hint_too_long"],
         effects=["count_retry", "begin_continue", "say_continuing", "close_then_closed"]),
    _row("error", S.STREAMING_TEXT, S.SWITCHING,
         ["has_visible_text", "is_transient", "route_left", "continue_next"],
         effects=["begin_continue", "say_switching", "close", "load_next_route"]),
    _row("error", S.STREAMING_TEXT, S.RETRYING,
         ["has_visible_text", "is_transient", "restart_allowed", "budget_left"], ["hint_too_long"],
         effects=["count_retry", "announce_reset", "say_restarting", "close_then_closed"]),
    _row("error", S.STREAMING_TEXT, S.SWITCHING,
         ["has_visible_text", "is_transient", "route_left", "restart_allowed"],
         effects=["announce_reset", "say_switching", "close", "load_next_route"]),
    _row("closed", S.STALLED, S.RETRYING,
         ["has_visible_text", "continue_here", "budget_left"], ["tool_in_flight", "finish_seen"],
         effects=["count_retry", "begin_continue", "say_continuing", "close_then_closed"]),
    _row("closed", S.STALLED, S.SWITCHING,
         ["has_visible_text", "route_left", "continue_next"], ["tool_in_flight", "finish_seen"],
         effects=["begin_continue", "say_switching", "close", "load_next_route"]),
    _row("closed", S.STALLED, S.RETRYING,
         ["has_visible_text", "restart_allowed", "budget_left"], ["tool_in_flight", "finish_seen"],
         effects=["count_retry", "announce_reset", "say_restarting", "close_then_closed"]),
    _row("closed", S.STALLED, S.SWITCHING,
         ["has_visible_text", "route_left", "restart_allowed"], ["tool_in_flight", "finish_seen"],
         effects=["announce_reset", "say_switching", "close", "load_next_route"]),
    # A resumed read refused (an expired cursor, an unknown response): the ladder goes on from the
    # shown text: continue on the next route, restart here or there (else the rows below keep it).
    _row("error", S.CONNECTING, S.SWITCHING, ["resuming", "route_left", "continue_next"],
         ["is_fatal", "is_transient"],
         effects=["end_resume", "say_switching", "close", "load_next_route"]),
    _row("error", S.CONNECTING, S.RETRYING, ["resuming", "restart_allowed", "budget_left"],
         ["is_fatal", "is_transient"],
         effects=["count_retry", "announce_reset", "say_restarting", "close_then_closed"]),
    _row("error", S.CONNECTING, S.SWITCHING, ["resuming", "route_left", "restart_allowed"],
         ["is_fatal", "is_transient"],
         effects=["announce_reset", "say_switching", "close", "load_next_route"]),
    # A continuation refused as malformed (400/422): the endpoint does not take the prefill. That is
    # learned (HL-1) and the ladder goes on: continue on the next route, restart, or the final stub,
    # which keeps the error that lost the text, not the refusal (RC-3).
    _row("error", S.CONNECTING, S.SWITCHING,
         ["continuing", "prefill_refused", "route_left", "continue_next"],
         effects=["remember_no_prefill", "say_switching", "close", "load_next_route"]),
    _row("error", S.CONNECTING, S.RETRYING,
         ["continuing", "prefill_refused", "restart_allowed", "budget_left"],
         effects=["remember_no_prefill", "count_retry", "announce_reset", "say_restarting",
                  "close_then_closed"]),
    _row("error", S.CONNECTING, S.SWITCHING,
         ["continuing", "prefill_refused", "route_left", "restart_allowed"],
         effects=["remember_no_prefill", "announce_reset", "say_switching", "close", "load_next_route"]),
    _row("error", S.CONNECTING, S.STUBBING, ["continuing", "prefill_refused"],
         effects=["remember_no_prefill", "keep_stub", "say_kept", "close_then_closed"]),
    # Any other failure of a continuation before its first text: retried silently by the rows below
    # while this route's retries last and no hint is too long; else a restart on the next route, or
    # the shown text kept (never raised over what the user read, never switched without a prefill).
    _row("error", S.CONNECTING, S.SWITCHING, ["continuing", "route_left", "restart_allowed"],
         ["is_fatal", "budget_left"],
         effects=["announce_reset", "say_switching", "close", "load_next_route"]),
    _row("error", S.CONNECTING, S.STUBBING, ["continuing", "hint_too_long"], ["is_fatal"],
         effects=["keep_stub", "say_kept", "close_then_closed"]),
    _row("error", S.CONNECTING, S.STUBBING, ["continuing"], ["is_fatal", "is_transient", "options_rejected"],
         effects=["keep_stub", "say_kept", "close_then_closed"]),
    _row("error", S.CONNECTING, S.STUBBING, ["continuing"], ["is_fatal", "budget_left"],
         effects=["keep_stub", "say_kept", "close_then_closed"]),
    _row("closed", S.STALLED, S.STUBBING, ["continuing"], ["budget_left", "finish_seen"],
         effects=["keep_stub", "say_kept", "close_then_closed"]),
    # RC-5: the final step: the stub handed over (the rows of STUBBING below), or raised
    _row("closed", S.STUBBING, S.FAILED, ["final_raises"],
         effects=["close", "remember_success", "incomplete_error", "raise_error"]),
    # -- end of issue 25b ---------------------------------------------------------------------------
    # -- an error before anything arrived (CONNECTING) ---------------------------------------------
    # interrupts, callback errors, malformed frames, the byte cap: raised, never retried
    _row("error", S.CONNECTING, S.FAILED, ["is_fatal"], effects=["close", "raise_error"]),
    # RES-8: retry at once without stream_options; spends no budget
    _row("error", S.CONNECTING, S.RETRYING, ["options_rejected"], ["has_visible_text"],
         effects=["retry_without_options", "close_then_closed"]),
    # RES-9: streaming unavailable
    _row("error", S.CONNECTING, S.FALLBACK, ["streaming_unsupported", "fallback_allowed"],
         ["has_visible_text"],
         effects=["remember_no_streaming", "say_falling_back", "close", "run_fallback"]),
    # RES-2 / RES-6: nothing visible yet, retry silently (BO-3: unless the server asks for more
    # than max_wait)
    _row("error", S.CONNECTING, S.RETRYING, ["is_transient", "budget_left"],
         ["has_visible_text", "hint_too_long"],
         effects=["count_retry", "say_retrying", "close_then_closed"]),
    # RT-2 / RT-3: this route cannot serve now and another remains: retries spent, a hint over
    # max_wait (said in the status), a key or model refused, streaming unsupported
    _row("error", S.CONNECTING, S.SWITCHING, ["route_left", "is_transient"],
         ["budget_left", "has_visible_text", "hint_too_long"],
         effects=["say_switching", "close", "load_next_route"]),
    _row("error", S.CONNECTING, S.SWITCHING, ["route_left", "is_transient", "hint_too_long"],
         ["has_visible_text"],
         effects=["say_switching_hint", "close", "load_next_route"]),
    _row("error", S.CONNECTING, S.SWITCHING, ["route_left", "route_refused"],
         ["has_visible_text", "hint_too_long"],
         effects=["say_switching", "close", "load_next_route"]),
    _row("error", S.CONNECTING, S.SWITCHING, ["route_left", "route_refused", "hint_too_long"],
         ["has_visible_text"],
         effects=["say_switching_hint", "close", "load_next_route"]),
    _row("error", S.CONNECTING, S.SWITCHING, ["route_left", "streaming_unsupported"],
         ["fallback_allowed", "has_visible_text", "hint_too_long"],
         effects=["say_switching", "close", "load_next_route"]),
    _row("error", S.CONNECTING, S.SWITCHING, ["route_left", "streaming_unsupported", "hint_too_long"],
         ["fallback_allowed", "has_visible_text"],
         effects=["say_switching_hint", "close", "load_next_route"]),
    # RES-6 / RES-7: nothing visible, no retry left (or not retryable): raise
    _row("error", S.CONNECTING, S.FAILED, ["streaming_unsupported"],
         effects=["close", "remember_no_streaming", "raise_error"]),
    _row("error", S.CONNECTING, S.FAILED, ["is_transient", "hint_too_long"],
         effects=["close", "give_up_hint", "raise_error"]),
    _row("error", S.CONNECTING, S.FAILED, ["is_transient", "has_retried"],
         effects=["close", "give_up_spent", "raise_error"]),
    _row("error", S.CONNECTING, S.FAILED, effects=["close", "raise_error"]),
    # -- an error while text streams (STREAMING_TEXT: no tool call in flight) ----------------------
    _row("error", S.STREAMING_TEXT, S.FAILED, ["is_fatal"], effects=["close", "raise_error"]),
    _row("error", S.STREAMING_TEXT, S.FALLBACK, ["streaming_unsupported", "fallback_allowed"],
         ["has_visible_text"],
         effects=["remember_no_streaming", "say_falling_back", "close", "run_fallback"]),
    _row("error", S.STREAMING_TEXT, S.RETRYING, ["is_transient", "budget_left"],
         ["has_visible_text", "hint_too_long"],
         effects=["count_retry", "say_retrying", "close_then_closed"]),
    _row("error", S.STREAMING_TEXT, S.SWITCHING, ["route_left", "is_transient"],
         ["budget_left", "has_visible_text", "hint_too_long"],
         effects=["say_switching", "close", "load_next_route"]),
    _row("error", S.STREAMING_TEXT, S.SWITCHING, ["route_left", "is_transient", "hint_too_long"],
         ["budget_left", "has_visible_text"],
         effects=["say_switching_hint", "close", "load_next_route"]),
    _row("error", S.STREAMING_TEXT, S.SWITCHING, ["route_left", "streaming_unsupported"],
         ["fallback_allowed", "has_visible_text", "hint_too_long"],
         effects=["say_switching", "close", "load_next_route"]),
    _row("error", S.STREAMING_TEXT, S.SWITCHING, ["route_left", "streaming_unsupported", "hint_too_long"],
         ["fallback_allowed", "has_visible_text"],
         effects=["say_switching_hint", "close", "load_next_route"]),
    # RES-4: keep what the user read; never retry over it
    _row("error", S.STREAMING_TEXT, S.STUBBING, ["has_visible_text"],
         effects=["keep_stub", "say_kept", "close_then_closed"]),
    _row("error", S.STREAMING_TEXT, S.FAILED, ["streaming_unsupported"],
         effects=["close", "remember_no_streaming", "raise_error"]),
    _row("error", S.STREAMING_TEXT, S.FAILED, ["is_transient", "hint_too_long"],
         effects=["close", "give_up_hint", "raise_error"]),
    _row("error", S.STREAMING_TEXT, S.FAILED, ["is_transient", "has_retried"],
         effects=["close", "give_up_spent", "raise_error"]),
    _row("error", S.STREAMING_TEXT, S.FAILED, effects=["close", "raise_error"]),
    # -- an error while a tool call streams (STREAMING_TOOL) ----------------------------------------
    _row("error", S.STREAMING_TOOL, S.FAILED, ["is_fatal"], effects=["close", "raise_error"]),
    _row("error", S.STREAMING_TOOL, S.FALLBACK, ["streaming_unsupported", "fallback_allowed"],
         ["has_visible_text"],
         effects=["remember_no_streaming", "say_falling_back", "close", "run_fallback"]),
    _row("error", S.STREAMING_TOOL, S.RETRYING, ["is_transient", "budget_left"],
         ["has_visible_text", "hint_too_long"],
         effects=["count_retry", "say_retrying", "close_then_closed"]),
    # RES-3: visible text and a tool call in flight: retry with a "reconnecting" marker
    _row("error", S.STREAMING_TOOL, S.RETRYING,
         ["is_transient", "budget_left", "has_visible_text", "tool_in_flight"],
         ["hint_too_long"],
         effects=["count_retry", "marker_reconnect", "say_retrying", "close_then_closed"]),
    _row("error", S.STREAMING_TOOL, S.SWITCHING, ["route_left", "is_transient"],
         ["budget_left", "has_visible_text", "hint_too_long"],
         effects=["say_switching", "close", "load_next_route"]),
    _row("error", S.STREAMING_TOOL, S.SWITCHING, ["route_left", "is_transient", "hint_too_long"],
         ["budget_left", "has_visible_text"],
         effects=["say_switching_hint", "close", "load_next_route"]),
    # RT-3: visible text and a tool call in flight, and no retry here (retries spent, or a hint
    # over max_wait): switch with a marker naming the route
    _row("error", S.STREAMING_TOOL, S.SWITCHING,
         ["route_left", "is_transient", "has_visible_text", "tool_in_flight"],
         ["hint_too_long"],
         effects=["marker_switch", "say_switching", "close", "load_next_route"]),
    _row("error", S.STREAMING_TOOL, S.SWITCHING,
         ["route_left", "is_transient", "has_visible_text", "tool_in_flight", "hint_too_long"],
         effects=["marker_switch", "say_switching_hint", "close", "load_next_route"]),
    # RES-5: keep what the user read and say which tool call was dropped
    _row("error", S.STREAMING_TOOL, S.STUBBING, ["has_visible_text"],
         effects=["keep_stub", "warn_dropped_tools", "say_kept", "close_then_closed"]),
    _row("error", S.STREAMING_TOOL, S.FAILED, ["streaming_unsupported"],
         effects=["close", "remember_no_streaming", "raise_error"]),
    _row("error", S.STREAMING_TOOL, S.FAILED, ["is_transient", "hint_too_long"],
         effects=["close", "give_up_hint", "raise_error"]),
    _row("error", S.STREAMING_TOOL, S.FAILED, ["is_transient", "has_retried"],
         effects=["close", "give_up_spent", "raise_error"]),
    _row("error", S.STREAMING_TOOL, S.FAILED, effects=["close", "raise_error"]),
    # -- after the finish reason the answer is whole: a lost usage chunk or end marker is no failure
    _row("error", S.FINISHING, S.FAILED, ["is_fatal"], effects=["close", "raise_error"]),
    _row("error", S.FINISHING, S.DONE,
         effects=["build_result", "keep_late_error", "close", "remember_success", "finish"]),
    # -- issue 26: phases and clocks (WD-5..WD-8) ----------------------------------------------------
    # Which deadline fired: the connect phase's (no response headers), or the liveness clock's (the
    # connection delivered nothing, keepalives included, whatever the phase); else the phase's
    # progress deadline, the WD-1 row below. Each is said as what it is; all go on as a stall.
    _row("stale", LIVE, S.STALLED, ["stalled_at_connect"], effects=["say_no_headers", "close_then_closed"]),
    _row("stale", LIVE, S.STALLED, ["stalled_dead"], effects=["say_connection_dead", "close_then_closed"]),
    # -- WD-1: the watchdog fired; the driver aborts the attempt, then the stall (transient) is decided
    _row("stale", LIVE, S.STALLED, effects=["say_stalled", "close_then_closed"]),
    _row("closed", S.STALLED, S.DONE, ["finish_seen"],
         effects=["build_result", "close", "remember_success", "finish"]),
    _row("closed", S.STALLED, S.RETRYING, ["is_transient", "budget_left"],
         ["has_visible_text", "hint_too_long"],
         effects=["count_retry", "say_retrying", "close_then_closed"]),
    _row("closed", S.STALLED, S.RETRYING,
         ["is_transient", "budget_left", "has_visible_text", "tool_in_flight"],
         ["hint_too_long"],
         effects=["count_retry", "marker_reconnect", "say_retrying", "close_then_closed"]),
    _row("closed", S.STALLED, S.SWITCHING, ["route_left", "is_transient"],
         ["budget_left", "has_visible_text"],
         effects=["say_switching", "close", "load_next_route"]),
    _row("closed", S.STALLED, S.SWITCHING,
         ["route_left", "is_transient", "has_visible_text", "tool_in_flight"],
         effects=["marker_switch", "say_switching", "close", "load_next_route"]),
    _row("closed", S.STALLED, S.STUBBING, ["has_visible_text", "tool_in_flight"],
         effects=["keep_stub", "warn_dropped_tools", "say_kept", "close_then_closed"]),
    _row("closed", S.STALLED, S.STUBBING, ["has_visible_text"],
         effects=["keep_stub", "say_kept", "close_then_closed"]),
    _row("closed", S.STALLED, S.FAILED, ["is_transient", "has_retried"],
         effects=["close", "give_up_spent", "raise_error"]),
    _row("closed", S.STALLED, S.FAILED, effects=["close", "raise_error"]),
    # -- BO-2: between a failed attempt and the next one, the wait the policy decided (if any) -----
    _row("closed", S.RETRYING, S.WAITING, ["must_wait"], effects=["say_backoff_wait", "wait"]),
    _row("closed", S.RETRYING, S.CONNECTING, effects=["open_attempt"]),
    _row("waited", S.WAITING, S.FALLBACK,
         ["streaming_disabled", "fallback_allowed"], effects=["run_fallback"]),
    _row("waited", S.WAITING, S.CONNECTING, effects=["open_attempt"]),
    _row("closed", S.STUBBING, S.DONE, effects=["close", "remember_success", "finish"]),
    # -- the non-streaming fallback: delivered, failed, or stalled (WD-3 counts it) ----------------
    # A plain request that cannot be served there either leaves for the next route (RT-2).
    _row("fallback_done", S.FALLBACK, S.DONE,
         effects=["build_result", "not_streamed", "close", "remember_success", "finish"]),
    _row("error", S.FALLBACK, S.FAILED, ["is_fatal"], effects=["close", "raise_error"]),
    _row("error", S.FALLBACK, S.SWITCHING, ["route_left", "is_transient"], ["hint_too_long"],
         effects=["say_switching", "close", "load_next_route"]),
    _row("error", S.FALLBACK, S.SWITCHING, ["route_left", "is_transient", "hint_too_long"],
         effects=["say_switching_hint", "close", "load_next_route"]),
    _row("error", S.FALLBACK, S.SWITCHING, ["route_left", "route_refused"], ["hint_too_long"],
         effects=["say_switching", "close", "load_next_route"]),
    _row("error", S.FALLBACK, S.SWITCHING, ["route_left", "route_refused", "hint_too_long"],
         effects=["say_switching_hint", "close", "load_next_route"]),
    _row("error", S.FALLBACK, S.FAILED, ["streaming_unsupported"],
         effects=["close", "remember_no_streaming", "raise_error"]),
    _row("error", S.FALLBACK, S.FAILED, ["is_transient", "hint_too_long"],
         effects=["close", "give_up_hint", "raise_error"]),
    _row("error", S.FALLBACK, S.FAILED, ["is_transient", "has_retried"],
         effects=["close", "give_up_spent", "raise_error"]),
    _row("error", S.FALLBACK, S.FAILED, effects=["close", "raise_error"]),
    _row("stale", S.FALLBACK, S.SWITCHING,
         ["route_left"], effects=["say_switching", "close", "load_next_route"]),
    _row("stale", S.FALLBACK, S.FAILED, ["is_transient", "has_retried"],
         effects=["close", "give_up_spent", "raise_error"]),
    _row("stale", S.FALLBACK, S.FAILED, effects=["close", "raise_error"]),
    # -- CB-6: the caller's on_text or on_status raised on the library's own text ------------------
    _row("error", (S.RETRYING, S.STUBBING, S.SWITCHING), S.FAILED, effects=["close", "raise_error"]),
    # -- RES-11: an interrupt ends the request from any state after the start, never retried -------
    _row("interrupt",
         (S.CONNECTING, S.STREAMING_TEXT, S.STREAMING_TOOL, S.FINISHING, S.STALLED, S.RETRYING, S.WAITING,
          S.STUBBING, S.FALLBACK, S.SWITCHING),
         S.FAILED, effects=["close", "raise_error"]),
]  # fmt: skip

# Pairs where a delta changes no phase: it is accumulated (and delivered) and nothing is fired, so
# nothing is recorded. Text, reasoning and refusal deltas fire `text`; a new tool call `tool_start`;
# a finish reason `finish` (the fallback's answer arrives as such events too).
IGNORED: dict[str, tuple[State, ...]] = {
    "text": (S.IDLE, S.STREAMING_TEXT, S.STREAMING_TOOL, S.FINISHING, S.STALLED, S.RETRYING, S.WAITING,
             S.STUBBING, S.FALLBACK, S.SWITCHING, S.DONE, S.FAILED),
    "tool_start": (S.IDLE, S.FINISHING, S.STALLED, S.RETRYING, S.WAITING, S.STUBBING, S.FALLBACK, S.SWITCHING,
                   S.DONE, S.FAILED),
    "finish": (S.IDLE, S.FINISHING, S.STALLED, S.RETRYING, S.WAITING, S.STUBBING, S.FALLBACK, S.SWITCHING,
               S.DONE, S.FAILED),
}  # fmt: skip

# Pairs that cannot happen in a correct driver: firing one raises MachineError (FSM-2).
INVALID: dict[str, tuple[State, ...]] = {
    "start": (S.CONNECTING, S.STREAMING_TEXT, S.STREAMING_TOOL, S.FINISHING, S.STALLED, S.RETRYING, S.WAITING,
              S.STUBBING, S.FALLBACK, S.DONE, S.FAILED),
    "end": (S.IDLE, S.STREAMING_TOOL, S.STALLED, S.RETRYING, S.WAITING, S.STUBBING, S.FALLBACK, S.SWITCHING,
            S.DONE, S.FAILED),
    "finished_response": (S.IDLE, S.STREAMING_TEXT, S.STREAMING_TOOL, S.FINISHING, S.STALLED, S.RETRYING,
                          S.WAITING, S.STUBBING, S.FALLBACK, S.SWITCHING, S.DONE, S.FAILED),
    "error": (S.IDLE, S.STALLED, S.WAITING, S.DONE, S.FAILED),
    "stale": (S.IDLE, S.STALLED, S.RETRYING, S.WAITING, S.STUBBING, S.SWITCHING, S.DONE, S.FAILED),
    "closed": (S.IDLE, S.CONNECTING, S.STREAMING_TEXT, S.STREAMING_TOOL, S.FINISHING, S.WAITING, S.FALLBACK,
               S.SWITCHING, S.DONE, S.FAILED),
    "waited": (S.IDLE, S.CONNECTING, S.STREAMING_TEXT, S.STREAMING_TOOL, S.FINISHING, S.STALLED, S.RETRYING,
               S.STUBBING, S.FALLBACK, S.SWITCHING, S.DONE, S.FAILED),
    "fallback_done": (S.IDLE, S.CONNECTING, S.STREAMING_TEXT, S.STREAMING_TOOL, S.FINISHING, S.STALLED,
                      S.RETRYING, S.WAITING, S.STUBBING, S.SWITCHING, S.DONE, S.FAILED),
    "interrupt": (S.IDLE, S.DONE, S.FAILED),
}  # fmt: skip

# Every trigger of the table: the only names a replayed trace may fire (SEC-7).
TRIGGERS = frozenset(row["trigger"] for row in TABLE)

# Trigger names of older traces, read as today's: a route's start was `route_ready` before it
# shared the rows of `start`.
TRIGGER_ALIASES = {"route_ready": "start"}

_IGNORED_SETS: dict[str, frozenset[State]] = {
    trigger: frozenset(states) for trigger, states in IGNORED.items()
}
_NOTHING: frozenset[State] = frozenset()


def ignored_in(trigger: str) -> frozenset[State]:
    """The states in which `trigger` is not fired (see `IGNORED`)."""
    return _IGNORED_SETS.get(trigger, _NOTHING)


# -- the engine: the table built into one `transitions.Machine` per process ------------------------
#
# Building a Machine costs far more than a short request's other work (hundreds of microseconds,
# tens of KiB, hundreds of cyclic objects), so the table is built once, on first use, and every
# request's model is driven by that one machine through transitions' public API:
# `machine.events[trigger].trigger(model, model)` reads the model's `state`, tries the trigger's
# rows from that state in order, sets the new state on the model and runs the row's `after`
# callbacks. The model itself is the one argument of the trigger, so each guard and effect is a
# plain function of it (`_guard`, `_effect`): nothing is looked up on the model by name.
# Models are never attached to the machine (`add_model` would bind a dozen partials to each,
# making cycles): nothing is registered per request, so nothing is left to release on any exit
# path. The machine keeps no per-model state and is not queued, so concurrent requests share it.
# `transitions` itself is imported with the first build (by the first request), not by
# `from fsm_agent import Session`.

MACHINE_NAME = "fsm_agent"
INITIAL = State.IDLE

_engine: Machine | None = None
_engine_lock = threading.Lock()
_no_row: type[Exception] = Exception  # transitions' MachineError, once the engine is built


class _OwnRoutineLines(logging.Filter):
    """Drops the `transitions` library's routine lines (DEBUG and INFO) about this machine (they are
    prefixed with its name), so that an application logging at DEBUG or INFO gets our one record
    per transition, not a dozen lines per trigger; other machines' lines and warnings pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        return not (
            record.levelno <= logging.INFO
            and isinstance(args, tuple)
            and args
            and args[0] == MACHINE_NAME + ": "
        )


def _guard(name: str) -> Callable[[Any], bool]:
    """Guard `name` as the engine calls it: on the model, recording the value it decided with."""
    guard = GUARDS[name]

    def check(model: Any) -> bool:
        value = guard(model.ctx)
        model.guard_values[name] = value
        return value

    check.__name__ = name
    return check


def _effect(name: str) -> Callable[[Any], None]:
    """Effect `name` as the engine runs it (a row's `after` callback): its outputs are collected
    on the model, and its name is recorded."""
    effect = EFFECTS[name]

    def run(model: Any) -> None:
        model.effects_run.append(name)
        model.outputs.extend(effect(model))

    run.__name__ = name
    return run


def _engine_rows() -> list[dict[str, Any]]:
    """TABLE as transitions takes it: the guards and effects as callables, the effects as `after`."""
    guards = {name: _guard(name) for name in GUARDS}
    effects = {name: _effect(name) for name in EFFECTS}
    rows = []
    for row in TABLE:
        built: dict[str, Any] = {"trigger": row["trigger"], "source": row["source"], "dest": row["dest"]}
        built["conditions"] = [guards[name] for name in row.get("conditions", ())]
        built["unless"] = [guards[name] for name in row.get("unless", ())]
        built["after"] = [effects[name] for name in row["effects"]]
        rows.append(built)
    return rows


def engine() -> Machine:
    """The process's one machine running `TABLE` (built on first use; thread-safe)."""
    machine = _engine
    if machine is None:
        machine = _build_engine()
    return machine


def _build_engine() -> Machine:
    global _engine, _no_row
    with _engine_lock:
        if _engine is None:
            from transitions import Machine, MachineError

            _no_row = MachineError
            # Installed when the machine is built, never at import: a module does not touch
            # another library's logger just by being imported.
            # (The engine logs through its module's logger; a parent's filters never see it.)
            logging.getLogger(Machine.__module__).addFilter(_OwnRoutineLines())
            _engine = Machine(
                model=None,
                states=State,
                transitions=_engine_rows(),
                initial=INITIAL,
                auto_transitions=False,
                ignore_invalid_triggers=False,
                queued=False,
                name=MACHINE_NAME,
            )
        return _engine


def fire(model: Any, trigger: str) -> bool:
    """Fire `trigger` on `model` (which has `state`, `ctx`, `guard_values`, `effects_run` and
    `outputs`) through the engine.

    True when a row moved the model (its effects have run); False when no row of `trigger` starts
    from the model's state or none of them applies, or the table has no such trigger (FSM-2).
    """
    event = engine().events.get(trigger)  # (the build sets `_no_row`)
    if event is None:
        return False
    try:
        moved: bool = event.trigger(model, model)
    except _no_row:  # no row of the trigger starts from the model's state (MachineError)
        return False
    return moved
