"""Where transition records are logged: structlog, as the application configured it.

An application that configured structlog gets every record through its processors. One that did
not gets them through the standard library logger "fsm_agent" (silent unless logging is set up),
instead of structlog's default of printing to stdout. Never formats content (TR-5).
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

from .trace.records import TransitionRecord

__all__ = ["log_record"]

_stdlib_logger = logging.getLogger("fsm_agent")
_stdlib_logger.addHandler(logging.NullHandler())  # silent unless the application sets up logging
_fallback = structlog.wrap_logger(
    _stdlib_logger,
    processors=[structlog.processors.TimeStamper(fmt="iso"), structlog.processors.JSONRenderer()],
    wrapper_class=structlog.stdlib.BoundLogger,
)


def _logger() -> Any:
    if structlog.is_configured():
        return structlog.get_logger("fsm_agent")
    return _fallback


def log_record(record: TransitionRecord) -> None:
    logger = _logger()
    if logger is _fallback and not _stdlib_logger.isEnabledFor(logging.INFO):
        return  # nothing would be written: skip building the event dict
    logger.info("transition", **record.as_dict())
