"""fsm_agent: streaming LLM requests run as an explicit, logged, replayable finite-state machine.

    session = fsm_agent.Session(retries=2)
    result = session.stream(openai.OpenAI(), {"model": "gpt-4.1", "messages": [...]},
                            on_text=print)
"""

from __future__ import annotations

from .backoff import Backoff
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
from .health import MemoryHealth
from .health_redis import RedisHealth
from .result import StreamResult, ToolCall, Usage
from .routes import Route
from .session import Session
from .trace.replay import replay
from .trace.report import ReplayReport
from .trace.sinks import JsonlSink, MemorySink

__all__ = [
    "Backoff",
    "EmptyStreamError",
    "FsmAgentError",
    "IncompleteStreamError",
    "JsonlSink",
    "MachineError",
    "MemoryHealth",
    "MemorySink",
    "ProviderStreamError",
    "ProviderUnresponsiveError",
    "RedisHealth",
    "ReplayMismatch",
    "ReplayReport",
    "Route",
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
