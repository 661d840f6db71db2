"""`python -m fsm_agent`: the same entry point as the `fsm-agent` console script.

This module runs only as a program, so it may set the process's SIGINT handler: until `console()`
takes over, Ctrl-C simply ends the process with status 130 (nothing has started that needs closing),
instead of a KeyboardInterrupt traceback from the middle of an import.
"""

from __future__ import annotations

import os
import signal

signal.signal(signal.SIGINT, lambda signum, frame: os._exit(130))

from ._internal.cli.__main__ import console  # noqa: E402  (after the handler, on purpose)

console()
