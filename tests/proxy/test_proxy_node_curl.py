"""Clients in other languages against `fsm-agent serve` (PX-3, PX-5): the official `openai` npm
package under Node (tests/proxy/node_client.cjs) and `curl`. Each reads a whole answer across a
drop, a stall and a 429; a cut that cannot be rescued is an error the Node SDK raises, and what
`curl` prints ends with the API's error event, never `[DONE]`.

The npm package is installed by the test itself, once, into `.cache/node` at the top of the
repository (`npm install --prefix`). Without `node`, `npm` or `curl` these tests are skipped with
the reason, except under `CI=true`, where a missing tool fails them (.ci/run installs them).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from proxy_server import PROXY_KEY, ThreadServer, config_text, serve_in_thread

from fsm_agent.testing import DropAfter, Emulator, HttpError, Scenario, Stall

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / ".cache" / "node"
NPM_OPENAI = "openai@7"  # the major tested
SCRIPT = Path(__file__).with_name("node_client.cjs")
ANSWER = "Any language reads this answer whole through the proxy."
FAULTS = [DropAfter(frames=0), Stall(frames=0, seconds=10), HttpError(429, retry_after=0.01)]
CUT = DropAfter(frames=1, kind="text")  # after visible text: no silent retry


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {name} is missing: .ci/run must install it")
        pytest.skip(f"{name} is not installed: the cross-language client tests need it")
    return found


@pytest.fixture(scope="session")
def node_modules() -> Path:
    _tool("node")
    npm = _tool("npm")
    NODE_DIR.mkdir(parents=True, exist_ok=True)
    with open(NODE_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test workers: one installs, the other waits
        if not (NODE_DIR / "node_modules" / "openai" / "package.json").exists():
            done = subprocess.run(
                [
                    npm,
                    "install",
                    "--prefix",
                    str(NODE_DIR),
                    "--no-audit",
                    "--no-fund",
                    "--silent",
                    NPM_OPENAI,
                ],
                capture_output=True,
                text=True,
                timeout=300,
            )
            if done.returncode != 0:
                pytest.fail(f"npm install {NPM_OPENAI} failed: {done.stderr[-2000:]}")
    return NODE_DIR / "node_modules"


@pytest.fixture
def proxy(emulator: Emulator) -> Iterator[ThreadServer]:
    with serve_in_thread(config_text(emulator, session="stale_timeout = 0.6")) as server:
        yield server


def _script_faults(emulator: Emulator) -> None:
    steps = []
    for fault in FAULTS:
        steps += [Scenario.build(ANSWER, faults=[fault]), Scenario.build(ANSWER)]
    emulator.script(*steps, Scenario.build(ANSWER, faults=[CUT]), then=Scenario.build(ANSWER))


@pytest.mark.parametrize("mode", ["chat", "responses"])
def test_the_openai_npm_package_reads_whole_answers_and_raises_on_a_cut(
    node_modules: Path, emulator: Emulator, proxy: ThreadServer, mode: str
) -> None:
    _script_faults(emulator)
    command = ["node", str(SCRIPT), str(node_modules), f"{proxy.url}/v1", PROXY_KEY, "chat"]
    done = subprocess.run([*command, *[mode] * 4], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["ok"] for r in results] == [True, True, True, False], results
    assert all(r["text"] == ANSWER for r in results[:3])
    assert "cut off" in results[3]["error"] and results[3]["text"] != ANSWER
    assert len(emulator.requests) == 7  # three faults retried, and the cut


def _curl(proxy: ThreadServer, path: str, body: dict[str, object]) -> str:
    curl = _tool("curl")
    command = [curl, "-sS", "-N", "--max-time", "30", "-H", f"Authorization: Bearer {PROXY_KEY}"]
    command += ["-H", "content-type: application/json", "-d", json.dumps(body), f"{proxy.url}{path}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _chat_text(body: str) -> str:
    text = []
    for line in body.splitlines():
        if line.startswith("data: {"):
            with contextlib.suppress(KeyError, IndexError):
                text.append(json.loads(line[6:])["choices"][0]["delta"].get("content") or "")
    return "".join(text)


def test_curl_reads_whole_answers_and_a_cut_ends_with_the_error_event(
    emulator: Emulator, proxy: ThreadServer
) -> None:
    _script_faults(emulator)
    chat = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    for _ in FAULTS:
        body = _curl(proxy, "/v1/chat/completions", chat)
        assert _chat_text(body) == ANSWER and body.endswith("data: [DONE]\n\n")
    body = _curl(proxy, "/v1/chat/completions", chat)
    last = json.loads(body.rstrip().splitlines()[-1][6:])
    assert "[DONE]" not in body and last["error"]["code"] == "incomplete_answer"

    emulator.script(Scenario.build(ANSWER, faults=[CUT]), then=Scenario.build(ANSWER))
    claude = {
        "model": "claude",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
    }
    body = _curl(proxy, "/v1/messages", claude)
    assert "message_stop" not in body
    assert body.rstrip().splitlines()[-2:][0] == "event: error"
