"""`shutdown_now`: the watchdog's way to wake a blocked reader (WD-4, RES-11), on both of its paths.

The C library's `shutdown(2)` through `ctypes.PyDLL` keeps the interpreter lock across the call, so
one thread aborts many sockets in a row without waiting for the lock back after each; where it is
unreachable, `socket.shutdown` does the same job. Each path must wake a thread blocked in `recv`,
and neither may raise on a socket that is already closed."""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator

import pytest

from fsm_agent._internal import sockets


@pytest.fixture(params=["c_library", "socket_module"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[int]]]:
    """Which path `shutdown_now` takes; yields the file descriptors the C path was called with
    (always empty on the socket module's path)."""
    calls: list[int] = []
    if request.param == "socket_module":
        monkeypatch.setattr(sockets, "_c_shutdown", None)
        monkeypatch.setattr(sockets, "_loaded", True)
    else:
        real = sockets._load()
        if real is None:
            assert sys.platform == "win32", "the C library's shutdown must be reachable off Windows"
            pytest.skip("Windows has no C library shutdown to reach: the socket module's path serves")

        def recording(fd: int, how: int) -> int:
            calls.append(fd)
            return real(fd, how)

        monkeypatch.setattr(sockets, "_c_shutdown", recording)
        monkeypatch.setattr(sockets, "_loaded", True)
    yield request.param, calls


def test_a_reader_blocked_in_recv_is_woken(path: tuple[str, list[int]]) -> None:
    reader_end, writer_end = socket.socketpair()
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(reader_end.recv(1024)))
    reader.start()
    try:
        sockets.shutdown_now(reader_end)
        reader.join(10)
        assert not reader.is_alive(), "the blocked recv was not woken"
        assert got == [b""]  # a shut-down socket reads as the end of the stream
        name, calls = path
        assert calls == ([reader_end.fileno()] if name == "c_library" else [])
    finally:
        reader_end.close()
        writer_end.close()


def test_a_closed_socket_is_ignored(path: tuple[str, list[int]]) -> None:
    one, other = socket.socketpair()
    one.close()
    other.close()
    sockets.shutdown_now(one)  # no error, and nothing else is shut down (fileno() is -1)
    assert path[1] == []


def test_the_c_library_is_loaded_only_when_first_needed() -> None:
    import subprocess

    code = "import fsm_agent, fsm_agent._internal.sockets, sys; print('ctypes' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
