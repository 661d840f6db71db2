"""The one action interpreter: the order a request's actions are carried out in, for every runner.

The machine answers each event with actions (open an attempt, close it, deliver, wait, switch
route, fall back, finish, raise). `ActionLoop.actions()` walks them in order and hands out, one at
a time, each action that needs the world — for the sync driver to perform blocking, the async
driver awaiting, and replay and what-if (`trace/whatif.py`, `trace/replay.py`) on a virtual clock
— and feeds the machine whatever needs no world: `AttemptClosed` after a close that asks for it,
an interrupt noticed before an action (it wins, and the rest of the old decision is void: SEC-8,
RES-11), and a delivery's decision replacing what was left of the old one (CB-6). A runner
subclasses it with how it feeds the machine (`_feed`: which clock) and how it learns of an
interrupt (`_interrupted`). Never performs I/O, never blocks, never decides policy.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from .. import actions as act
from ..errors import MachineError
from ..events import AttemptClosed, Interrupt, Start, WaitOver
from ..request import RequestMachine

__all__ = ["ActionLoop", "Decided", "Steps"]

Decided = tuple[Any, ...]  # what the machine returned: actions, and wire events to deliver
# Actions that wait on the world: an interrupt noticed before one of them wins over it (RES-11).
_IO_BOUND = (act.OpenAttempt, act.RunFallback, act.Wait, act.LoadRoute)


class ActionLoop:
    """One request's machine and the rules of carrying out its actions; runners subclass it."""

    machine: RequestMachine

    # -- what a runner gives ---------------------------------------------------------------------------
    def _feed(self, event: object) -> Decided:
        """Feed `event` to the machine at the runner's time now."""
        raise NotImplementedError

    @property
    def _interrupted(self) -> bool:
        """Whether an interrupt is pending (a runner without one: never)."""
        return False

    def _raised(self, error: BaseException) -> BaseException:
        """What the runner is handed for the machine's error (a driver: as the caller gets it)."""
        return error

    # -- the rules -------------------------------------------------------------------------------------
    def actions(self, *, first: Decided | None = None, raises: bool = True) -> Steps:
        """The request's actions that need the world, from its `Start` (or from the decision
        `first`, already made); with `raises`, the machine's error is raised from `Steps.send`
        rather than handed out as a `Raise`."""
        return Steps(self._steps(first), raises=raises)

    def _steps(self, first: Decided | None) -> Generator[Any, Decided | None, Any]:
        """Yield each action that needs the world; the runner performs it and sends back what the
        machine decided meanwhile (or nothing). Returns the result (None: the machine stopped
        without finishing); raises what the machine raises.

        The runner is sent: `OpenAttempt`, `CloseAttempt`, `RunFallback`, `Status`, `Wait` (it
        answers with `_waited()`), `Remember`, `LoadRoute`, `Raise` (it raises the error, or
        records it), and the deltas to deliver (`TextDelta`, `ReasoningDelta`, `ToolNamed`; the
        library's own text comes as a `LibraryText`, a `TextDelta`). A delivery's decision
        replaces what was left.
        """
        # A few at a time: a list is smaller than a deque.
        pending: list[Any] = list(self._feed(Start()) if first is None else first)
        while pending:
            action = pending.pop(0)
            kind = type(action)
            if kind is act.Finish:
                return action.result
            if kind is act.Raise:
                # Raised outside this generator (`Steps.send`): a StopIteration from the caller's
                # callback must reach the caller as itself (CB-6), not as PEP 479's RuntimeError.
                yield act.Raise(self._raised(action.error))
                raise MachineError("the runner did not raise the machine's error")
            if kind is act.Remember:
                yield action  # a store may need I/O (RedisHealth); nothing is decided meanwhile
                continue
            io_bound = kind in _IO_BOUND
            if kind is not act.CloseAttempt and self._interrupted and not self.machine.finished:
                # Noticed before an action: it wins, and the rest of the old decision is void (SEC-8).
                pending.clear()
                pending.extend(self._feed(Interrupt()))
                continue
            if kind is act.DeliverText:
                action = act.LibraryText(action.text)  # a TextDelta, told apart (WR-3)
            decided = yield action
            if kind is act.CloseAttempt:
                if action.then_feed_closed:
                    pending.extend(self._feed_control(AttemptClosed()))
            elif decided:
                if not io_bound:  # the caller's callback raised (CB-6): the rest of the old decision is void
                    pending.clear()
                pending.extend(decided)
        return None

    def _feed_control(self, event: object) -> Decided:
        """Feed a control event — unless an interrupt was noticed meanwhile, which wins."""
        if self._interrupted and not self.machine.finished:
            return self._feed(Interrupt())
        return self._feed(event)

    def _waited(self) -> Decided:
        """The wait is over, or was cut short by an interrupt (which wins, RES-11)."""
        return self._feed_control(WaitOver())

    def _interrupt_noticed(self) -> Decided | None:
        """The machine's decision on an interrupt noticed now, if there is one (it wins, SEC-8)."""
        if self._interrupted and not self.machine.finished:
            return self._feed(Interrupt())
        return None


class Steps:
    """The actions of one request, pulled one at a time: `send(what the last one decided)` gives
    the next; None once the machine has finished (`result`) or stopped without finishing."""

    __slots__ = ("_raises", "_steps", "finished", "result")

    def __init__(self, steps: Generator[Any, Decided | None, Any], *, raises: bool = True) -> None:
        self._steps = steps
        self._raises = raises
        self.finished = False
        self.result: Any = None

    def send(self, decided: Decided | None) -> Any:
        try:
            action = self._steps.send(decided)
        except StopIteration as done:
            self.finished = True
            self.result = done.value
            return None
        if self._raises and type(action) is act.Raise:
            error = action.error
            try:
                raise error
            finally:
                del error, action  # this frame, in the error's traceback, must not hold the error
        return action

    def close(self) -> None:
        """Done with (also on an error): the suspended walk, and what it holds, are let go."""
        self._steps.close()
