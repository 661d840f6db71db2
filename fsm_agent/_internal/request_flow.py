"""One request from the caller's call to its result, written once for `stream()` and `astream()`.

`request_steps` is the whole course of a request: check the callbacks, register it for
`Session.interrupt()`, make its plan, read its endpoint's health, run the driver inside its
telemetry span, and settle every route's health however it ended. Where that needs I/O it yields
a step (`Step`: make the factories' clients, read or settle a health link, run the driver), and
the caller's side performs it: `perform` calls each step, `aperform` awaits each. An error a step
raises is thrown back in at its `yield`, as `contextlib` does with a generator's context manager,
so the one `try` in `request_steps` sees it whichever side ran the step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from .drivers.callbacks import Callbacks, check_callbacks
from .drivers.source import ClientSource
from .endpoint import EndpointLink, StartFacts
from .frozen import replace
from .request_plan import RequestPlan, plan_request
from .result import StreamResult
from .routes import Route, is_route_list

if TYPE_CHECKING:
    from .session import Session

__all__ = ["Call", "Kind", "aperform", "perform", "request_steps"]

log = logging.getLogger("fsm_agent")

_UNPLANNED = 180.0  # a watchdog's stale timeout until the request is planned (it is not armed before)


class Call:
    """What the caller asked for: `stream()`'s and `astream()`'s arguments."""

    __slots__ = (
        "api",
        "callbacks",
        "interrupt",
        "on_library_text",
        "on_machine",
        "params",
        "plain",
        "target",
    )

    def __init__(
        self,
        target: Any,  # a client, a factory, or a list of routes
        params: dict[str, Any] | None,
        api: str | None,
        callbacks: tuple[Callable[..., Any] | None, ...],  # in `Callbacks`' order
        interrupt: Any,
    ) -> None:
        self.target, self.params, self.api = target, params, api
        self.callbacks, self.interrupt = callbacks, interrupt
        # WR-3 (the iterator API): the library's own text told apart, and the request's machine
        # shown to the iterator (it reads the response's id and model for the wrapper's objects).
        self.on_library_text: Callable[[str], Any] | None = None
        self.on_machine: Callable[[Any], Any] | None = None
        # WR-1: a wrapped client's call without streaming (every attempt the plain request)
        self.plain = False


class Kind:
    """Which side runs the request: its watchdog and driver classes."""

    __slots__ = ("driver", "in_async", "watchdog")

    def __init__(self, watchdog: Callable[..., Any], driver: Callable[..., Any], *, in_async: bool) -> None:
        self.watchdog, self.driver, self.in_async = watchdog, driver, in_async


# The steps: plain classes (a request makes five or so; none is compared, hashed or printed).
class Step:
    """One piece of a request's I/O, performed by `call()` in stream() or `acall()` in astream()."""

    __slots__ = ()

    def call(self) -> Any:
        raise NotImplementedError

    async def acall(self) -> Any:
        raise NotImplementedError


class MakeClients(Step):
    """The caller's target with each factory's first client made: by astream() without blocking
    the loop (a coroutine function awaited, a plain one in a worker thread); stream() makes it
    while planning, as it does every attempt's. Every source whose factory ran is added to
    `made`, so a request that never starts can close them."""

    __slots__ = ("made", "target")

    def __init__(self, target: Any, made: list[ClientSource]) -> None:
        self.target, self.made = target, made

    def call(self) -> Any:
        return self.target

    async def acall(self) -> Any:
        from .drivers.aio import make_client

        async def source_of(client_or_factory: Any) -> ClientSource:
            source = ClientSource(client_or_factory)
            if source.factory is not None:
                self.made.append(source)
                source.adopt(await make_client(source.factory))
            return source

        if not is_route_list(self.target):
            return await source_of(self.target)
        return [
            replace(route, client_or_factory=await source_of(route.client_or_factory))
            if isinstance(route, Route)
            else route
            for route in self.target
        ]


class Plan(Step):
    """The request planned (`plan_request`): a step of its own because it runs the caller's code
    (a factory, a client's attributes), whose errors the steps see as any step's."""

    __slots__ = ("asked", "in_async", "session", "target")

    def __init__(self, session: Session, asked: Call, target: Any, in_async: bool) -> None:
        self.session, self.asked, self.target, self.in_async = session, asked, target, in_async

    def call(self) -> RequestPlan:
        asked = self.asked
        watch_tool_args = asked.callbacks[5] is not None  # on_tool_args (ACC-11)
        return plan_request(
            self.session,
            self.target,
            asked.params,
            asked.api,
            in_async=self.in_async,
            watch_tool_args=watch_tool_args,
            plain=asked.plain,
        )

    async def acall(self) -> RequestPlan:
        return self.call()


class Release(Step):
    """A factory's client of a request that never started, closed."""

    __slots__ = ("source",)

    def __init__(self, source: ClientSource) -> None:
        self.source = source

    def call(self) -> None:
        self.source.release()

    async def acall(self) -> None:
        await self.source.arelease()


class Begin(Step):
    """The endpoint's health read as the request starts (HL-1, BO-7)."""

    __slots__ = ("link",)

    def __init__(self, link: EndpointLink) -> None:
        self.link = link

    def call(self) -> StartFacts:
        return self.link.begin()

    async def acall(self) -> StartFacts:
        return await self.link.abegin()


class Finish(Step):
    """A probe the route still holds settled by how the request ended (BO-7); the route that
    answered reconciles its capacity's token estimate with the usage (CAP-2)."""

    __slots__ = ("error", "link", "used")

    def __init__(self, link: EndpointLink, error: BaseException | None, used: int | None = None) -> None:
        self.link, self.error, self.used = link, error, used

    def call(self) -> None:
        self.link.finish(self.error, self.used)

    async def acall(self) -> None:
        await self.link.afinish(self.error, self.used)


class Drive(Step):
    """The driver run to the request's end."""

    __slots__ = ("driver",)

    def __init__(self, driver: Any) -> None:
        self.driver = driver

    def call(self) -> StreamResult:
        result: StreamResult = self.driver.run()
        return result

    async def acall(self) -> StreamResult:
        result: StreamResult = await self.driver.run()
        return result


if TYPE_CHECKING:
    Steps = Generator[Step, Any, StreamResult]


def request_steps(session: Session, call: Call, kind: Kind) -> Steps:
    """The course of one request of `session`, from the caller's `call` to its result."""
    # SEC-8: registered before any planning work (a factory, a lazy SDK import), so an interrupt
    # issued while the request is prepared is honoured before anything is sent.
    check_callbacks(call.callbacks, call.interrupt)
    watchdog = kind.watchdog(_UNPLANNED, call.interrupt)
    with session._in_flight.running(watchdog):
        plan = yield from _planned(session, call, kind.in_async)
        watchdog.deadlines = plan.routes[0].attempt_deadlines(len(plan.routes) > 1)  # WD-5
        plan.begin((yield Begin(plan.link)), session.trace)
        callbacks = Callbacks(*call.callbacks, on_library_text=call.on_library_text)
        driver = kind.driver(
            **plan.driver_args(callbacks, watchdog, session.max_bytes, in_async=kind.in_async)
        )
        if call.on_machine is not None:
            call.on_machine(driver.machine)
        try:
            if plan.telemetry is None:
                result: StreamResult = yield Drive(driver)
                plan.price(result, session.pricer)
            else:
                # OT-1, entered in the caller's thread or task: the request span is a child of the
                # caller's span; it never changes the outcome (OT-3).
                with plan.telemetry as observer:
                    result = yield Drive(driver)
                    plan.price(result, session.pricer)
                    observer.succeeded(result)
        except GeneratorExit:
            raise
        except BaseException as exc:
            yield from _settled(plan, exc)
            raise
        yield from _settled(plan, None, result)
        _write_cost(session.trace, plan, result)
        return result


def _write_cost(sink: Any, plan: RequestPlan, result: StreamResult) -> None:
    """COST-1: the request's ledger in its trace (a sink without `write_cost` is skipped; a
    failing one never changes the outcome, SEC-6)."""
    write = getattr(sink, "write_cost", None)
    if write is None or result.cost is None:
        return
    try:
        write(plan.machine.request_id, result.cost.as_dict())
    except Exception:
        log.warning("the trace sink failed writing a request's cost", exc_info=True)


def _planned(session: Session, call: Call, in_async: bool) -> Generator[Step, Any, RequestPlan]:
    made: list[ClientSource] = []
    try:
        target = yield MakeClients(call.target, made)
        plan: RequestPlan = yield Plan(session, call, target, in_async)
        return plan
    except GeneratorExit:
        raise
    except BaseException:
        for source in made:  # the factories' clients of a request that never started
            yield Release(source)
        raise


def _settled(
    plan: RequestPlan, error: BaseException | None, result: StreamResult | None = None
) -> Generator[Step, Any, None]:
    """Every route's probe settled (BO-7); one route's store failing does not keep the others
    from being settled. The answering route's real usage reconciles its capacity (CAP-2)."""
    usage = result.usage if result is not None else None
    used = (
        None if usage is None or usage.estimated else (usage.input_tokens or 0) + (usage.output_tokens or 0)
    )
    answered = result.route if result is not None else None
    for route in plan.routes:
        if route.link is not None:
            try:
                yield Finish(route.link, error, used if route.name == answered else None)
            except Exception:
                log.warning("settling the health of route %r failed", route.name, exc_info=True)


# -- the two sides: each step called, or awaited ------------------------------------------------
def perform(steps: Steps) -> StreamResult:
    """Run `steps` to the end, calling each step (stream())."""
    course = _Course(steps)
    while course.next():
        course.outcome(course.step.call)
    assert course.result is not None
    return course.result


async def aperform(steps: Steps) -> StreamResult:
    """Run `steps` to the end, awaiting each step (astream())."""
    course = _Course(steps)
    while course.next():
        try:
            course.value = await course.step.acall()
        except BaseException as exc:
            course.error = exc
    assert course.result is not None
    return course.result


class _Course:
    """The bookkeeping of running a request's steps: the step to perform, the last one's value or
    error (sent, or thrown back in, at the next), and the result once the steps return.

    Nothing here or in the performing frames holds an error or a step once it is resumed: an
    error raised to the caller keeps those frames in its traceback, and holding it (or a step
    holding it) there would make a reference cycle of the whole request."""

    __slots__ = ("_steps", "_stop", "error", "result", "step", "value")

    def __init__(self, steps: Steps) -> None:
        self._steps = steps
        self._stop: StopIteration | None = None
        self.step: Any = None
        self.value: Any = None
        self.error: BaseException | None = None
        self.result: StreamResult | None = None

    def outcome(self, call: Callable[[], Any]) -> None:
        try:
            self.value = call()
        except BaseException as exc:
            self.error = exc

    def next(self) -> bool:
        """Resume the steps with the last outcome; False once they have returned."""
        steps, error, value = self._steps, self.error, self.value
        self.step = self.error = self.value = None
        if isinstance(error, StopIteration):
            self._stop = error  # a caller's StopIteration (a callback's, a factory's), thrown in
        try:
            try:
                self.step = steps.send(value) if error is None else steps.throw(error)
                return True
            except StopIteration as done:
                self.result = done.value
                return False
            except RuntimeError as exc:
                stop, self._stop = self._stop, None
                if stop is None or exc.__cause__ is not stop:
                    raise
            # PEP 479 made the caller's StopIteration, re-raised by the steps, a RuntimeError: the
            # caller gets their own, as a function would have let it through.
            try:
                raise stop
            finally:
                del stop
        finally:
            del steps, error, value
