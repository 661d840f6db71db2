"""fsm_agent: streaming LLM requests run as an explicit, logged, replayable finite-state machine.

    session = fsm_agent.Session(retries=2)
    result = session.stream(openai.OpenAI(), {"model": "gpt-4.1", "messages": [...]},
                            on_text=print)

The public names are the ones in ``__all__``; everything else is private. The behaviour they promise,
rule by rule, is docs/behaviour.md. Importing the package changes no other library's settings: it
only gives its own ``fsm_agent`` logger a ``NullHandler`` (the library convention), so nothing is
printed unless the application configures logging.
"""

from __future__ import annotations

import logging as _logging
from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from .errors import (
    EmptyStreamError,
    FsmAgentError,
    IncompleteStreamError,
    MachineError,
    ProviderStreamError,
    ProviderUnresponsiveError,
    ReplayMismatch,
    StreamingUnsupportedError,
    StreamLimitError,
    StreamStalledError,
    ToolInputError,
    TraceFormatError,
)
from .result import StreamResult, ToolCall, Usage
from .session import Session
from .trace.replay import replay
from .trace.report import ReplayReport
from .trace.sinks import JsonlSink, MemorySink

__all__ = [
    "EmptyStreamError",
    "FsmAgentError",
    "IncompleteStreamError",
    "JsonlSink",
    "MachineError",
    "MemorySink",
    "ProviderStreamError",
    "ProviderUnresponsiveError",
    "ReplayMismatch",
    "ReplayReport",
    "Session",
    "StreamLimitError",
    "StreamResult",
    "StreamStalledError",
    "StreamingUnsupportedError",
    "ToolCall",
    "ToolInputError",
    "TraceFormatError",
    "Usage",
    "replay",
]

_logging.getLogger("fsm_agent").addHandler(_logging.NullHandler())

try:
    __version__ = _version("fsm_agent")
except _PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0.1.0"
