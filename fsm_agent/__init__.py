"""fsm_agent: streaming LLM requests run as an explicit, logged, replayable finite-state machine.

    session = fsm_agent.Session(retries=2)
    result = session.stream(openai.OpenAI(), {"model": "gpt-4.1", "messages": [...]},
                            on_text=print)

The public names are the ones in ``__all__``; everything else is private. The behaviour they promise,
rule by rule, is docs/behaviour.md.

Importing the package is cheap and has no side effect: each public name is imported from its
module when first used (so `fsm-agent` can take Ctrl-C from its first millisecond, and
`import fsm_agent` costs nothing until a name is used); not even `logging` is imported before the
`python -m fsm_agent` entry point has taken over Ctrl-C. The ``NullHandler`` on the package's own
``fsm_agent`` logger (the library convention: nothing is printed unless the application configures
logging) is added by `fsm_agent._internal.logs`, which every request imports.
"""

from __future__ import annotations

import importlib as _importlib

# Not `from typing import TYPE_CHECKING`: importing typing would cost `fsm-agent` its quick start.
TYPE_CHECKING = False
if TYPE_CHECKING:  # what the lazy table below resolves to, for type checkers and doc tools
    from typing import Any

    from ._internal.backoff import Backoff
    from ._internal.cost import AttemptCost, RequestCost
    from ._internal.deadlines import Timeouts
    from ._internal.errors import (
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
    from ._internal.health import MemoryHealth
    from ._internal.health_redis import RedisHealth
    from ._internal.iterate.events import (
        FinalEvent,
        MarkerEvent,
        ReasoningEvent,
        ResetEvent,
        StatusEvent,
        StreamEvent,
        TextEvent,
        ToolArgsEvent,
        ToolCallStartedEvent,
    )
    from ._internal.recovery import Recovery
    from ._internal.result import Choice, StreamResult, ToolCall, Usage
    from ._internal.routes import Route
    from ._internal.session import Session
    from ._internal.trace.replay import replay
    from ._internal.trace.report import ReplayReport
    from ._internal.trace.sinks import JsonlSink, MemorySink
    from ._internal.wrap.api import wrap

# Public name -> the module that defines it. One line per name: adding a name is adding a line here,
# one under TYPE_CHECKING above, and one in __all__.
_WHERE: dict[str, str] = {
    "Backoff": "._internal.backoff",
    "Choice": "._internal.result",
    "EmptyStreamError": "._internal.errors",
    "FsmAgentError": "._internal.errors",
    "IncompleteStreamError": "._internal.errors",
    "JsonlSink": "._internal.trace.sinks",
    "MachineError": "._internal.errors",
    "MemoryHealth": "._internal.health",
    "MemorySink": "._internal.trace.sinks",
    "ProviderStreamError": "._internal.errors",
    "ProviderUnresponsiveError": "._internal.errors",
    "ReplayMismatch": "._internal.errors",
    "Recovery": "._internal.recovery",
    "RedisHealth": "._internal.health_redis",
    "ReplayReport": "._internal.trace.report",
    "Route": "._internal.routes",
    "Session": "._internal.session",
    "StreamLimitError": "._internal.errors",
    "StreamResult": "._internal.result",
    "StreamStalledError": "._internal.errors",
    "StreamingUnsupportedError": "._internal.errors",
    "Timeouts": "._internal.deadlines",
    "ToolCall": "._internal.result",
    "ToolInputError": "._internal.errors",
    "TraceFormatError": "._internal.errors",
    "Usage": "._internal.result",
    # issue 29 (COST-1): the cost ledger on StreamResult.cost
    "AttemptCost": "._internal.cost",
    "RequestCost": "._internal.cost",
    "replay": "._internal.trace.replay",
    # issue 27 (WR-): the drop-in client and the iterator API's events
    "wrap": "._internal.wrap.api",
    "StreamEvent": "._internal.iterate.events",
    "TextEvent": "._internal.iterate.events",
    "ReasoningEvent": "._internal.iterate.events",
    "ToolCallStartedEvent": "._internal.iterate.events",
    "ToolArgsEvent": "._internal.iterate.events",
    "MarkerEvent": "._internal.iterate.events",
    "ResetEvent": "._internal.iterate.events",
    "StatusEvent": "._internal.iterate.events",
    "FinalEvent": "._internal.iterate.events",
}

if TYPE_CHECKING:
    from ._internal.trace.replay import replay
    from ._internal.trace.report import ReplayReport

__all__ = [
    "AttemptCost",
    "Backoff",
    "Choice",
    "EmptyStreamError",
    "FinalEvent",
    "FsmAgentError",
    "IncompleteStreamError",
    "JsonlSink",
    "MachineError",
    "MarkerEvent",
    "MemoryHealth",
    "MemorySink",
    "ProviderStreamError",
    "ProviderUnresponsiveError",
    "ReasoningEvent",
    "Recovery",
    "RedisHealth",
    "ReplayMismatch",
    "ReplayReport",
    "RequestCost",
    "ResetEvent",
    "Route",
    "Session",
    "StatusEvent",
    "StreamEvent",
    "StreamLimitError",
    "StreamResult",
    "StreamStalledError",
    "StreamingUnsupportedError",
    "TextEvent",
    "Timeouts",
    "ToolArgsEvent",
    "ToolCall",
    "ToolCallStartedEvent",
    "ToolInputError",
    "TraceFormatError",
    "Usage",
    "replay",
    "wrap",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use, then keep it as a module attribute."""
    if name == "__version__":
        value: Any = _installed_version()
    elif name in _WHERE:
        value = getattr(_importlib.import_module(_WHERE[name], __name__), name)
    else:
        raise AttributeError(f"module 'fsm_agent' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names and the module's dunders: not its helpers (`TYPE_CHECKING`, `_WHERE`)."""
    return sorted({*__all__, "__version__", *(name for name in globals() if name.startswith("__"))})


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fsm_agent")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0.1.0"
