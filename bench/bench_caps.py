"""The byte cap on every path of every API (SEC-5): peak traced memory of the client.

Run: python bench/bench_caps.py. For each of the five APIs (the real SDK clients) and each path
(stream; a JSON body answered to the streaming request, WIRE-5; the non-streaming fallback, RES-9),
a 20 MB answer under `max_bytes` of 1 MiB must end in `StreamLimitError`; the peak memory the
client traced while reading it is printed as a multiple of the cap. The emulator runs in a child
process, so its own 20 MB bodies are not counted; each row runs once untraced first, so the SDKs'
lazy imports of their first request are not counted either. Goal: every row raises, every peak < 2x the cap.
Bedrock has no JSON-body path (botocore reads any ConverseStream answer as an event stream).
"""

from __future__ import annotations

import gc
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

_TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(_TESTS), str(_TESTS / "hardening")]  # test_byte_caps and the helpers it imports

from test_byte_caps import PARAMS, client_for, close_client  # noqa: E402

import fsm_agent  # noqa: E402

CAP = 1024 * 1024
APIS = ("chat_completions", "responses", "anthropic_messages", "bedrock_converse", "gemini_generate_content")
PATHS = ("stream", "json body", "fallback")

_EMULATOR = """
import sys
from fsm_agent.testing import BedrockAccessDenied, Emulator, NonStreamingBody, Scenario, StreamingUnsupported
path = sys.argv[1]
faults = {"stream": [], "json body": [NonStreamingBody()],
          "fallback": [BedrockAccessDenied(), StreamingUnsupported()]}[path]
with Emulator() as emu:
    emu.script(Scenario.build("x" * 20_000_000, faults=faults), cycle=True)
    print(emu.base_url, flush=True)
    sys.stdin.read()
"""


class _Urls:
    """What the client factories of the tests read off an emulator: its URLs."""

    def __init__(self, base: str) -> None:
        self.openai_base_url = f"{base}/v1"
        self.anthropic_base_url = base
        self.bedrock_endpoint_url = base
        self.gemini_base_url = base


def _one(api: str, urls: Any, traced: bool = True) -> tuple[str, float]:
    client = client_for(api, urls)
    session = fsm_agent.Session(retries=0, max_bytes=CAP)
    gc.collect()
    if traced:
        tracemalloc.start()
    outcome = "no error"
    try:
        session.stream(client, PARAMS[api], api=api)
    except fsm_agent.StreamLimitError:
        outcome = "StreamLimitError"
    except Exception as exc:  # printed: a row that does not raise the cap's error is a failure
        outcome = type(exc).__name__
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        close_client(api, client)
    return outcome, peak / CAP


def main() -> int:
    print(f"{'api':<26} {'path':<10} {'outcome':<18} peak / cap (1 MiB)")
    failed = False
    for path in PATHS:
        child = subprocess.Popen(
            [sys.executable, "-c", _EMULATOR, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert child.stdout is not None
            urls = _Urls(child.stdout.readline().strip())
            for api in APIS:
                if (api, path) == ("bedrock_converse", "json body"):
                    continue
                _one(api, urls, traced=False)  # warm: the SDK's lazy imports are not the read's memory
                outcome, ratio = _one(api, urls)
                failed |= outcome != "StreamLimitError" or ratio >= 2.0
                print(f"{api:<26} {path:<10} {outcome:<18} {ratio:.2f}x", flush=True)
        finally:
            assert child.stdin is not None
            child.stdin.close()
            child.wait(30)
    print("goal: every row StreamLimitError, peak < 2x the cap:", "MISSED" if failed else "met")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
