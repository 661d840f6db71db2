"""fsm_agent: streaming LLM requests run as an explicit, logged, replayable finite-state machine.

    session = fsm_agent.Session(retries=2)
    result = session.stream(openai.OpenAI(), {"model": "gpt-4.1", "messages": [...]},
                            on_text=print)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
    TraceFormatError,
)
from .result import StreamResult, ToolCall, Usage
from .session import Session
from .trace.sinks import JsonlSink, MemorySink

if TYPE_CHECKING:
    from .trace.replay import replay
    from .trace.report import ReplayReport

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
    "TraceFormatError",
    "Usage",
    "replay",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Offline replay is not needed by a request: imported on first use, so `import fsm_agent`
    # stays light (`fsm_agent.replay` and `from fsm_agent import replay` work as before).
    value: Any
    if name == "replay":
        from .trace import replay as module

        value = module.replay
    elif name == "ReplayReport":
        from .trace import report

        value = report.ReplayReport
    else:
        raise AttributeError(f"module 'fsm_agent' has no attribute {name!r}")
    globals()[name] = value
    return value
