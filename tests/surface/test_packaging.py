"""Packaging: the dependencies are what the package imports, the metadata installs cleanly (issue 14)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# Distribution name -> the modules it provides, where they differ.
PROVIDES = {
    "boto3": {"boto3", "botocore"},
    "opentelemetry-api": {"opentelemetry"},
    "google-genai": {"google"},
    "prometheus-client": {"prometheus_client"},
    "genai-prices": {"genai_prices"},
}
# Imported only where the library that needs it is already running (pytest loads its plugin).
HOSTED = {"pytest"}
# Extras that are tools of the project, not parts of the library a user imports.
TOOLING = {"all", "dev", "docs", "frameworks"}  # frameworks: test dependencies (issue 27)


def _imported_roots() -> set[str]:
    roots: set[str] = set()
    for path in (ROOT / "fsm_agent").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                roots.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots.add(node.module.split(".")[0])
    return {root for root in roots if root not in sys.stdlib_module_names and root != "fsm_agent"}


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0] for requirement in requirements}


def _modules(distributions: set[str]) -> set[str]:
    return set().union(*(PROVIDES.get(name, {name}) for name in distributions))


def test_required_dependencies_are_exactly_what_every_install_imports() -> None:
    required = _names(PROJECT["dependencies"])
    extras = set().union(
        *(_names(reqs) for name, reqs in PROJECT["optional-dependencies"].items() if name not in TOOLING)
    )
    imported = _imported_roots()
    assert _modules(required) <= imported, "a required dependency the package never imports"
    assert imported - HOSTED <= _modules(required | extras), "an import no dependency or extra provides"
    assert "httpx" not in required and "httpx" not in imported


def test_extras_admit_both_sdk_generations_with_upper_bounds() -> None:
    extras = PROJECT["optional-dependencies"]
    assert extras["openai"] == ["openai>=1.40,<4"] and extras["anthropic"] == ["anthropic>=0.40,<3"]
    for name in set(extras) - TOOLING:
        assert all("<" in requirement for requirement in extras[name]), name


def test_the_license_is_an_spdx_string() -> None:
    assert PROJECT["license"] == "MIT"
