"""The emulator's HTTP server and its public face, :class:`Emulator`: a threaded stdlib server on
127.0.0.1 that hands connections to :class:`~fsm_agent.testing.handler.EmulatorHandler`, keeps the
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

from fsm_agent.testing.handler import EmulatorHandler, Request, make_wires
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
    """An LLM provider emulator on 127.0.0.1. See the package docs for the full API."""

    _wake_r: socket.socket
    _wake_w: socket.socket

    def __init__(
        self,
        *scenarios: Scenario,
        port: int = 0,
        default: Scenario | None = None,
        frame_delay: float = 0.0,
    ) -> None:
        self.frame_delay = frame_delay
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

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Emulator:
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
        if self._server is None:
            raise RuntimeError("Emulator not started")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.base_url

    @property
    def bedrock_endpoint_url(self) -> str:
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

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    @property
    def pending(self) -> int:
        """Scripted scenarios not served yet."""
        with self._lock:
            return len(self._queue)

    @property
    def open_connections(self) -> int:
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
