"""Shared fixtures: the emulator (fsm_agent.testing's pytest plugin) and leak checks.

The tests are laid out by layer (tests/machine, tests/wire, tests/adapters, ...; the list is in
docs/spec-notes.md, "House: tests by layer"). The shared helpers stay at the top (tests/helpers.py,
tests/virtual_time.py, ...), and a few test modules lend their harness to others
(`from test_async_support import aleaks`). So that every one of them imports by its plain name
whatever is collected first, or when one file is run alone, tests/ and each layer directory are put
on sys.path here, before any test module is imported. Test file names stay unique across the layers
(pytest's default `prepend` import mode needs it).
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_LAYERS = sorted(p for p in _HERE.iterdir() if p.is_dir() and any(p.glob("test_*.py")))
for _path in [_HERE, *_LAYERS]:
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

pytest_plugins = ["fsm_agent.testing.pytest_plugin", "pytester", "redis_server"]
