"""SEC-4 / SEC-1 as a property, per API (issue 12): take a valid answer, put an arbitrary JSON value
at any field of any event (or in place of the event), send the bytes split anywhere, through the
real SDK client over loopback — the only exceptions that leave `stream()` / `astream()` are
`FsmAgentError`s or the SDK's own error types; nothing hangs; nothing is left open."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hardening_kit import KITS, ApiKit, allowed_error
from helpers import assert_emulator_and_threads_idle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fsm_agent
from fsm_agent.testing import Emulator

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON value a field can be replaced: keys of objects, items of lists."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield (*prefix, index)
            yield from _paths(item, (*prefix, index))


def _replace(events: list[Any], index: int, path: tuple[Any, ...], value: Any) -> list[Any]:
    if not path:
        events[index] = value
        return events
    target = events[index]
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return events


@st.composite
def hostile(draw: st.DrawFn, kit: ApiKit) -> tuple[bytes, list[int]]:
    events = kit.mutable()
    index = draw(st.integers(0, len(events) - 1))
    paths = [(), *_paths(events[index])]
    path = draw(st.sampled_from(paths))
    body = kit.body(_replace(events, index, path, draw(JSON)))
    cuts = sorted(draw(st.lists(st.integers(1, max(1, len(body) - 1)), max_size=4, unique=True)))
    return body, cuts


def _pieces(body: bytes, cuts: list[int]) -> list[bytes]:
    edges = [0, *cuts, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(edges) if b > a]


@pytest.fixture(params=sorted(KITS))
def kit(request: pytest.FixtureRequest) -> ApiKit:
    return KITS[request.param]


_SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def test_any_value_anywhere_sync(emulator: Emulator, kit: ApiKit) -> None:
    before = set(threading.enumerate())
    client = kit.client(emulator)
    session = fsm_agent.Session(retries=0, stale_timeout=3)

    @_SETTINGS
    @given(case=hostile(kit))
    def run(case: tuple[bytes, list[int]]) -> None:
        body, cuts = case
        emulator.script(kit.scenario(_pieces(body, cuts)))
        started = time.monotonic()
        try:
            session.stream(client, kit.params, **kit.api, on_text=lambda _: None)
        except Exception as exc:
            assert allowed_error(kit, exc), f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
        assert time.monotonic() - started < 5

    try:
        run()
    finally:
        kit.close(client)
    assert_emulator_and_threads_idle(emulator, before, 3.0)


def test_any_value_anywhere_async(emulator: Emulator, kit: ApiKit) -> None:
    before = set(threading.enumerate())
    session = fsm_agent.Session(retries=0, stale_timeout=3)

    @settings(_SETTINGS, max_examples=10)
    @given(case=hostile(kit))
    def run(case: tuple[bytes, list[int]]) -> None:
        body, cuts = case
        emulator.script(kit.scenario(_pieces(body, cuts)))

        async def main() -> None:
            client = kit.async_client(emulator)
            try:
                await session.astream(client, kit.params, **kit.api, on_text=lambda _: None)
            except Exception as exc:
                assert allowed_error(kit, exc), f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
            finally:
                await kit.aclose(client)

        asyncio.run(asyncio.wait_for(main(), 5))

    run()
    assert_emulator_and_threads_idle(emulator, before, 3.0)
