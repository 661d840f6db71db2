"""`python -m fsm_agent`: the same entry point as the `fsm-agent` console script."""

from __future__ import annotations

from .cli.__main__ import console

console()
