"""Shutting a socket down from another thread, without handing the interpreter lock away.

A watchdog ends a blocked read by shutting the reader's socket down (WD-4, RES-11). `socket.shutdown`
releases the interpreter lock around the system call, and the reader it wakes takes the lock at once:
the watchdog's thread then waits a whole switch interval (5 ms) for it back, per socket. When 200
requests stall together, the last abort came hundreds of milliseconds late on a loaded machine. The
C library's `shutdown(2)` never blocks (it only marks the connection and wakes its readers), so it
is called here through `ctypes.PyDLL`, which keeps the lock across the call: one thread aborts many
sockets in a row (measured in spec-notes, "Watchdog lateness of many stalls at once").

Where the C library's symbol is not reachable (Windows, an interpreter without `ctypes`), or the
socket is already closed, `socket.shutdown` is used as before (`_c_shutdown` None with `_loaded`
True: the seam a test sets).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import socket

__all__ = ["shutdown_now"]

_loaded = False
_c_shutdown: Callable[[int, int], int] | None = None


def _load() -> Callable[[int, int], int] | None:
    """The C library's `shutdown`, called with the interpreter lock held; None where unavailable."""
    if sys.platform == "win32":
        return None
    try:
        import ctypes  # only when a socket is first aborted: most processes never need it

        function = ctypes.PyDLL(None).shutdown
    except (ImportError, OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int)
    function.restype = ctypes.c_int
    return function


def shutdown_now(sock: socket.socket) -> None:
    """Shut `sock` down both ways, waking whoever blocks on it; errors (already closed) are ignored."""
    import socket  # loaded by whoever made `sock` (not at our import: a process may never abort one)

    global _c_shutdown, _loaded
    if not _loaded:
        _c_shutdown, _loaded = _load(), True
    function = _c_shutdown
    if function is not None:
        fd = sock.fileno()
        if fd >= 0 and function(fd, socket.SHUT_RDWR) == 0:
            return
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
