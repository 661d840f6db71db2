"""A fleet of proxies sharing endpoint health in Redis (PX-8, HL-2, HL-3, RC-9): three
`fsm-agent serve` processes, one real `redis-server` on loopback, two emulators (the alias's
primary route and its backup). A primary made to fail opens its breaker for all three within one
request each; Redis killed mid-run, requests go on; one process killed mid-stream, its client gets
an error and the others' streams end whole.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from proxy_server import PROXY_KEY, ServeProcess

from fsm_agent.testing import Emulator, HttpError, Scenario, Stall

ANSWER = "The fleet answered from the backup route."
MESSAGES = [{"role": "user", "content": "hi"}]

pytestmark = pytest.mark.slow  # three server processes start (~5 s on two cores)


def _config(primary: Emulator, backup: Emulator, redis_url: str, prefix: str) -> str:
    return f"""
[proxy]
keys = ["{PROXY_KEY}"]
keepalive = 5.0

[session]
retries = 1
stale_giveup = 2
stale_timeout = 10
backoff = {{ base = 0.0 }}
health = "{redis_url}"
health_prefix = "{prefix}"

[models.chat]
[[models.chat.routes]]
provider = "openai"
base_url = "{primary.openai_base_url}"
key_env = "EMU_KEY"
model = "gpt-4.1"
name = "primary"

[[models.chat.routes]]
provider = "openai"
base_url = "{backup.openai_base_url}"
key_env = "EMU_KEY"
model = "gpt-4.1"
name = "backup"
"""


def _ask(server: ServeProcess) -> str:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=PROXY_KEY, max_retries=0, timeout=20)
    try:
        stream = client.chat.completions.create(model="chat", messages=MESSAGES, stream=True)
        return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    finally:
        client.close()


def test_three_proxies_share_the_breaker_survive_redis_and_one_of_them(
    tmp_path: Path, emulator_factory: Any, fresh_redis_server: Any, redis_prefix: str
) -> None:
    primary, backup = emulator_factory(), emulator_factory()
    primary.script(then=Scenario.build(ANSWER, faults=[HttpError(503)]))
    backup.script(then=Scenario.build(ANSWER))
    path = tmp_path / "fleet.toml"
    path.write_text(_config(primary, backup, fresh_redis_server.url, redis_prefix))
    fleet = [ServeProcess(str(path)) for _ in range(3)]
    starters = [threading.Thread(target=server.start) for server in fleet]
    for starter in starters:
        starter.start()
    for starter in starters:
        starter.join()
    try:
        assert all(server.process is not None for server in fleet), [s.output() for s in fleet]
        # The first proxy meets the failing primary twice (stale_giveup = 2): its breaker opens in
        # Redis, and the request is answered by the backup.
        assert _ask(fleet[0]) == ANSWER
        assert len(primary.requests) == 2
        # The other two read the open breaker at their first request: none of it reaches the primary.
        assert _ask(fleet[1]) == ANSWER and _ask(fleet[2]) == ANSWER
        assert len(primary.requests) == 2 and len(backup.requests) == 3

        # Redis goes away: every proxy goes on from its own memory (HL-3).
        fresh_redis_server.kill()
        assert [_ask(server) for server in fleet] == [ANSWER] * 3

        # One proxy dies mid-stream: its client gets an error; the others' streams end whole.
        backup.script(then=Scenario.build(ANSWER, faults=[Stall(frames=2, seconds=1.5)]))
        outcomes: dict[int, Any] = {}

        def read(index: int) -> None:
            try:
                outcomes[index] = _ask(fleet[index])
            except (openai.APIError, httpx.HTTPError) as exc:
                outcomes[index] = exc

        readers = [threading.Thread(target=read, args=(index,)) for index in range(3)]
        for reader in readers:
            reader.start()
        _wait_for(lambda: len(backup.requests) >= 3 + 3 + 3)  # all three streams are open upstream
        victim = fleet[0].process
        assert victim is not None
        victim.send_signal(signal.SIGKILL)
        for reader in readers:
            reader.join(30)
        assert isinstance(outcomes[0], (openai.APIError, httpx.HTTPError)), outcomes
        assert outcomes[1] == ANSWER and outcomes[2] == ANSWER
    finally:
        for server in fleet:
            server.stop()


def _wait_for(condition: Any, timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the streams did not open in time")
        time.sleep(0.01)
