"""Where transition records are logged: structlog, as the application configured it.

An application that configured structlog gets every record through its processors. One that did
not gets them through the standard library logger "fsm_agent" (silent unless logging is set up),
instead of structlog's default of printing to stdout. Never formats content (TR-5).

structlog is imported only when a record is to be written: an application that never imported
structlog cannot have configured it, and with the "fsm_agent" logger silent nothing is written,
so `import fsm_agent` and a request that logs nothing never pay for structlog (nor for the rich
and pygments its development module pulls in when they are installed).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from .redact import RedactingFilter
from .trace.records import TransitionRecord

__all__ = ["log_record"]

_stdlib_logger = logging.getLogger("fsm_agent")
_stdlib_logger.addHandler(logging.NullHandler())  # silent unless the application sets up logging
# SEC-9: what the library logs leaves redacted (a logger's filter does not see its children's
# records: the command line's logger gets its own)
for _name in ("fsm_agent", "fsm_agent.cli"):
    logging.getLogger(_name).addFilter(RedactingFilter())
del _name
_fallback: Any = None


def _fallback_logger() -> Any:
    """structlog over the "fsm_agent" stdlib logger, made on first use."""
    global _fallback
    if _fallback is None:
        import structlog

        _fallback = structlog.wrap_logger(
            _stdlib_logger,
            processors=[structlog.processors.TimeStamper(fmt="iso"), structlog.processors.JSONRenderer()],
            wrapper_class=structlog.stdlib.BoundLogger,
        )
    return _fallback


def _configured_structlog() -> Any:
    """The structlog module, if the application imported and configured it; else None."""
    structlog = sys.modules.get("structlog")
    if structlog is None or not structlog.is_configured():
        return None
    return structlog


def summary_line(record: TransitionRecord) -> str:
    """A transition in one short line: what a `logging.basicConfig(level=INFO)` user reads."""
    decided = ",".join(name for name, value in record.guards.items() if value is True)
    return (
        f"transition {record.source} -> {record.dest} on {record.trigger}"
        f" request={record.request_id} attempt={record.attempt} t={record.t:.3f}"
        f" route={record.route}" + (f" guards={decided}" if decided else "")
    )


def log_record(record: TransitionRecord) -> None:
    """Log one transition (FSM-5). To a configured structlog: the whole record, as its processors
    render it. To the standard library logger: one short line at INFO, and the whole record as JSON
    only at DEBUG, so that `basicConfig(level=INFO)` shows the machine's path, not ~1 KB a step."""
    structlog = _configured_structlog()
    if structlog is not None:
        structlog.get_logger("fsm_agent").info("transition", **record.as_dict())
        return
    if _stdlib_logger.isEnabledFor(logging.DEBUG):
        _fallback_logger().debug("transition", **record.as_dict())
    elif _stdlib_logger.isEnabledFor(logging.INFO):
        _stdlib_logger.info(summary_line(record))
    # else nothing would be written: no event dict is built (and structlog is not imported)
