"""Provider emulator for tests and demos (EMU-1).

A real HTTP server on 127.0.0.1 that answers the OpenAI Chat Completions, OpenAI Responses,
Anthropic Messages, Bedrock Converse(Stream) and Gemini `generateContent` APIs in their genuine
wire formats, driven by declarative `Scenario` objects with faults (`DropAfter`, `Stall`,
`HttpError`, ...). Point the real SDK client at one of its base URLs:

```python
import openai

from fsm_agent.testing import DropMidFrame, Emulator, Scenario, ScriptedToolCall

call = ScriptedToolCall("read", '{"path": "a.txt"}')
with Emulator() as emu:
    emu.script(
        Scenario.build("Let me check.", tool_calls=[call], faults=[DropMidFrame(0, kind="tool_args")]),
        Scenario.build("Let me check.", tool_calls=[call]),
    )
    client = openai.OpenAI(base_url=emu.openai_base_url, api_key="test")
    ...
```

In pytest, the `emulator` fixture gives each test a started one (see `pytest_plugin`).
"""

from __future__ import annotations

from fsm_agent.testing import real_streams
from fsm_agent.testing.faults import (
    BedrockAccessDenied,
    ContextTooLong,
    CorruptCrc,
    DropAfter,
    DropAfterBytes,
    DropMidFrame,
    EmptyBody,
    EndAfter,
    ExpireResume,
    Fault,
    Flapping,
    HttpError,
    KeepaliveOnly,
    Keepalives,
    MalformedFrame,
    NeverAnswers,
    NoBlockStop,
    NoHeaders,
    NonStreamingBody,
    RefusePrefill,
    RejectStreamOptions,
    Stall,
    StreamError,
    StreamingUnsupported,
)
from fsm_agent.testing.rate_limit import RateLimit
from fsm_agent.testing.registry import (
    DEMOS,
    SCENARIOS,
    Demo,
    get_demo,
    get_scenarios,
    scenario_names,
    serve_forever,
)
from fsm_agent.testing.scenario import (
    ChatShape,
    Reasoning,
    Refusal,
    Scenario,
    ScriptedToolCall,
    ScriptedUsage,
    Step,
    Text,
)

# ToolCall and Usage are the older names of ScriptedToolCall and ScriptedUsage: importable, so that
# existing tests keep working, but not in __all__ (fsm_agent.ToolCall and fsm_agent.Usage are).
from fsm_agent.testing.scenario import ToolCall as ToolCall
from fsm_agent.testing.scenario import Usage as Usage
from fsm_agent.testing.server import THREAD_PREFIX, Emulator, Request

__all__ = [
    "DEMOS",
    "SCENARIOS",
    "THREAD_PREFIX",
    "BedrockAccessDenied",
    "ChatShape",
    "ContextTooLong",
    "CorruptCrc",
    "Demo",
    "DropAfter",
    "DropAfterBytes",
    "DropMidFrame",
    "EmptyBody",
    "Emulator",
    "EndAfter",
    "ExpireResume",
    "Fault",
    "Flapping",
    "HttpError",
    "KeepaliveOnly",
    "Keepalives",
    "MalformedFrame",
    "NeverAnswers",
    "NoBlockStop",
    "NoHeaders",
    "NonStreamingBody",
    "RateLimit",
    "Reasoning",
    "Refusal",
    "RefusePrefill",
    "RejectStreamOptions",
    "Request",
    "Scenario",
    "ScriptedToolCall",
    "ScriptedUsage",
    "Stall",
    "Step",
    "StreamError",
    "StreamingUnsupported",
    "Text",
    "get_demo",
    "get_scenarios",
    "real_streams",
    "scenario_names",
    "serve_forever",
]
