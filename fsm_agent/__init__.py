"""fsm_agent: streaming LLM requests run as an explicit, logged, replayable finite-state machine.

    session = fsm_agent.Session(retries=2)
    result = session.stream(openai.OpenAI(), {"model": "gpt-4.1", "messages": [...]},
                            on_text=print)
"""

from __future__ import annotations

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
from .result import Choice, StreamResult, ToolCall, Usage
from .session import Session
from .trace.replay import replay
from .trace.report import ReplayReport
from .trace.sinks import JsonlSink, MemorySink

__all__ = [
    "Choice",
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
