"""Shared fixtures: the emulator (fsm_agent.testing's pytest plugin) and leak checks."""

from __future__ import annotations

pytest_plugins = ["fsm_agent.testing.pytest_plugin", "pytester", "redis_server"]
