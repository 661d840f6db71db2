"""The `emulator` fixture reaches users' own tests through the `pytest11` entry point (issue 14).

The test runs pytest in a temporary directory with no conftest and no `pytest_plugins` line: the
fixture must come from the installed entry point. A checkout whose environment was installed
before the entry point existed (`pip install -e .` not re-run) names the plugin with `-p` instead,
and the declaration itself is checked from pyproject.toml; `make test` always reinstalls.
"""

from __future__ import annotations

import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE = "fsm_agent.testing.pytest_plugin"

USER_TEST = """
import openai
import fsm_agent
from fsm_agent.testing import Scenario


def test_my_agent_survives_a_cut(emulator):
    emulator.script(Scenario.build("Hello from my own test."))
    client = openai.OpenAI(base_url=emulator.openai_base_url, api_key="test")
    result = fsm_agent.Session().stream(client, {"model": "m", "messages": []})
    assert result.content == "Hello from my own test."


def test_more_emulators(emulator_factory):
    assert emulator_factory().base_url != emulator_factory().base_url
"""


def test_the_entry_point_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {MODULE: MODULE}


def test_a_users_test_gets_the_emulator_fixture_with_no_conftest(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TEST)
    assert not list(pytester.path.glob("conftest.py"))
    installed = [ep for ep in entry_points(group="pytest11") if ep.value == MODULE]
    extra = [] if installed else ["-p", MODULE]
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *extra)
    result.assert_outcomes(passed=2)
