"""pytest plugin: the ``emulator`` fixture (a running `Emulator`, fresh script and request
log for every test).

Installing fsm_agent registers it with pytest through the ``pytest11`` entry point, so a user's
tests get ``emulator`` and ``emulator_factory`` with no conftest line (``-p
no:fsm_agent.testing.pytest_plugin`` turns it off). Naming it in ``pytest_plugins`` still works.

Each test gets its own server (starting one costs about a millisecond), so a test may stop it,
count its connections or its threads without seeing other tests' clients. ``emulator_factory``
starts extra emulators that are stopped at the end of the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fsm_agent.testing.server import Emulator


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    """A started emulator on 127.0.0.1; stopped (all threads and sockets closed) after the test."""
    emu = Emulator().start()
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture
def emulator_factory() -> Iterator[Callable[..., Emulator]]:
    """Call with `Emulator` arguments to get more started emulators."""
    made: list[Emulator] = []

    def make(*args: Any, **kwargs: Any) -> Emulator:
        emu = Emulator(*args, **kwargs).start()
        made.append(emu)
        return emu

    try:
        yield make
    finally:
        for emu in made:
            emu.stop()
