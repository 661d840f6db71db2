"""The emulator's HTTP server and its public face, `Emulator`: a threaded stdlib server on
127.0.0.1 that hands connections to `EmulatorHandler`, keeps the
scenario script and request log, counts open connections, and stops promptly, ending every handler
thread and closing every socket."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from collections import deque
from http.server import ThreadingHTTPServer
from types import TracebackType
from typing import Any

from fsm_agent.testing import faults as F
from fsm_agent.testing.handler import EmulatorHandler, Request, make_wires
from fsm_agent.testing.rate_limit import RateLimit
from fsm_agent.testing.scenario import Scenario

THREAD_PREFIX = "fsm-emulator"

__all__ = ["THREAD_PREFIX", "Emulator", "EmulatorServer", "Request"]


class EmulatorServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # the stdlib's 5 makes bursts of connects wait a 1 s SYN retry

    def __init__(self, emulator: Emulator, address: tuple[str, int]) -> None:
        self.emulator = emulator
        super().__init__(address, EmulatorHandler)

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        emu = self.emulator
        with emu._lock:
            if emu._stopping.is_set():
                self.shutdown_request(request)
                return
            t = threading.Thread(
                target=self._run, args=(request, client_address), name=f"{THREAD_PREFIX}-conn", daemon=True
            )
            emu._conns.add(request)
            emu._threads.add(t)
        t.start()

    def _run(self, request: Any, client_address: Any) -> None:
        emu = self.emulator
        try:
            self.finish_request(request, client_address)
        except Exception:  # a broken client must not print tracebacks
            pass
        finally:
            self.shutdown_request(request)
            with emu._idle:
                emu._conns.discard(request)
                emu._threads.discard(threading.current_thread())
                emu._idle.notify_all()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class Emulator:
    """An LLM provider emulator: a real HTTP server on 127.0.0.1 that the real SDK clients talk to.

    It answers every API fsm_agent speaks, each at its own path under one port, so one emulator
    serves any mix of clients. Give each SDK the address it expects:

    | SDK client | argument | property |
    |---|---|---|
    | `openai.OpenAI` / `AsyncOpenAI` (Chat, Responses) | `base_url=` | `openai_base_url` (`…/v1`) |
    | `anthropic.Anthropic` / `AsyncAnthropic` | `base_url=` | `anthropic_base_url` |
    | boto3 `bedrock-runtime` | `endpoint_url=` | `bedrock_endpoint_url` |
    | `google.genai.Client` | `http_options={"base_url": ...}` | `gemini_base_url` |

    Any API key is accepted (none is checked); for boto3 give dummy credentials and a region.

    Each request is served the next scenario of the script (`script()`): one `Scenario` per
    attempt, so a retry gets the second one. When the script is played out, the last scenario
    is repeated (or `then`, or the script starts over with `cycle=True`); with no script at all,
    `default`. Every request received is kept in `requests` (method, path, headers, parsed body),
    so a test can check what the client sent and how many attempts it made.

    Use it as a context manager (`with Emulator() as emu:`), or call `start()` and `stop()`;
    `stop()` ends stalls, closes every connection and joins every thread. In pytest, take the
    `emulator` fixture instead (a fresh started emulator per test). An emulator cannot be
    restarted once stopped.

    Args:
        *scenarios: The first script, as `script(*scenarios)` would set it.
        port: The port on 127.0.0.1; 0 (the default) picks a free one.
        default: What to serve while no script is set; None means a short text answer,
            `"Hello from the emulator."`.
        frame_delay: Seconds to pause between the frames of every answer (a scenario's own
            `frame_delay` overrides it), to make a stream take visible time.
        rate_limit: A `RateLimit` the emulator enforces (requests and tokens per window), told
            in every answer's rate-limit headers in the provider's style; a refused request gets
            a 429 and no scenario.
    """

    _wake_r: socket.socket
    _wake_w: socket.socket

    def __init__(
        self,
        *scenarios: Scenario,
        port: int = 0,
        default: Scenario | None = None,
        frame_delay: float = 0.0,
        rate_limit: RateLimit | None = None,
    ) -> None:
        self.frame_delay = frame_delay
        self.rate_limit = rate_limit  # issue 29: requests and tokens per window, enforced
        self.default = default if default is not None else Scenario.build("Hello from the emulator.")
        self._want_port = port
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._conns: set[Any] = set()
        self._threads: set[threading.Thread] = set()
        self._queue: deque[Scenario] = deque(scenarios)
        self._script: tuple[Scenario, ...] = ()
        self._last: Scenario | None = None
        self._then: Scenario | None = None
        self._requests: list[Request] = []
        self._served = 0
        self._server: EmulatorServer | None = None
        self._serve_thread: threading.Thread | None = None
        self._wires = make_wires()
        # RC-2: background responses by id: their frames, and whether reading on is refused
        self._background: dict[str, tuple[list[Any], F.ExpireResume | None]] = {}

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Emulator:
        """Start serving on a background thread and return the emulator (a no-op if running)."""
        if self._server is not None:
            return self
        if self._stopping.is_set():
            raise RuntimeError("an Emulator cannot be restarted after stop(); create a new one")
        self._server = EmulatorServer(self, ("127.0.0.1", self._want_port))
        self._wake_r, self._wake_w = socket.socketpair()
        self._serve_thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=f"{THREAD_PREFIX}-server",
            daemon=True,
        )
        self._serve_thread.start()
        return self

    def __repr__(self) -> str:
        if self._stopping.is_set():
            where = "stopped"
        elif self._server is None:
            where = "not started"
        else:
            where = self.base_url
        with self._lock:
            queued, served = len(self._queue), len(self._requests)
        return f"<Emulator {where}: {queued} scenario(s) queued, {served} request(s) served>"

    def stop(self, timeout: float = 2.0) -> None:
        """Stop serving: end stalls, shut every connection, join every thread, close every socket."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        server = self._server
        if server is None:
            return
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        server.shutdown()
        if self._serve_thread is not None:
            self._serve_thread.join(timeout)
        with self._lock:
            conns = list(self._conns)
            threads = list(self._threads)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        server.server_close()
        self._wake_r.close()
        self._wake_w.close()

    def close(self) -> None:
        """The same as `stop()`."""
        self.stop()

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ addresses

    @property
    def port(self) -> int:
        """The port the server listens on (RuntimeError before `start()`)."""
        if self._server is None:
            raise RuntimeError("Emulator not started")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT`, the server's root."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """For `openai.OpenAI(base_url=...)`: `http://127.0.0.1:PORT/v1` (Chat Completions, Responses)."""
        return f"{self.base_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """For `anthropic.Anthropic(base_url=...)`: the server's root (the SDK adds `/v1/messages`)."""
        return self.base_url

    @property
    def bedrock_endpoint_url(self) -> str:
        """For `boto3.client("bedrock-runtime", endpoint_url=...)`: the server's root."""
        return self.base_url

    @property
    def gemini_base_url(self) -> str:
        """For `google.genai.Client(http_options={"base_url": ...})` (the SDK adds `/v1beta/…`)."""
        return self.base_url

    # ------------------------------------------------------------------ scripting

    def script(self, *scenarios: Scenario, then: Scenario | None = None, cycle: bool = False) -> None:
        """Serve ``scenarios`` one per request, in order; afterwards ``then`` (default: repeat the
        last one). With ``cycle=True`` the script starts over once played in full."""
        with self._lock:
            self._queue = deque(scenarios)
            self._script = tuple(scenarios) if cycle else ()
            self._last = None
            self._then = then

    def reset(self) -> None:
        """Forget the script and the recorded requests."""
        with self._lock:
            self._queue.clear()
            self._script = ()
            self._last = None
            self._then = None
            self._requests.clear()
            self._served = 0
            self._background.clear()

    @property
    def requests(self) -> list[Request]:
        """Every request received since the start (or the last `reset()`), oldest first."""
        with self._lock:
            return list(self._requests)

    @property
    def pending(self) -> int:
        """Scripted scenarios not served yet."""
        with self._lock:
            return len(self._queue)

    @property
    def open_connections(self) -> int:
        """How many client connections are open now (see `wait_idle()`)."""
        with self._lock:
            return len(self._conns)

    def wait_idle(self, timeout: float = 2.0) -> bool:
        """Wait until no client connection is open; True when that happened within ``timeout``."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._conns, timeout)

    def _next_scenario(self) -> Scenario:
        with self._lock:
            if not self._queue and self._script:
                self._queue.extend(self._script)
            if self._queue:
                self._last = self._queue.popleft()
                return self._last
            if self._then is not None:
                return self._then
            return self._last if self._last is not None else self.default

    def _count(self) -> int:
        with self._lock:
            self._served += 1
            return self._served

    def _record(self, req: Request) -> None:
        with self._lock:
            self._requests.append(req)
