"""Where the command line keeps the traces of its runs: a per-user state directory, latest 100 kept.

`$XDG_STATE_HOME/fsm-agent/traces` (default `~/.local/state/fsm-agent/traces`; on Windows
`%LOCALAPPDATA%\\fsm-agent\\traces`), created readable by its owner only. Each run adds one file
named by its start time; the oldest beyond `KEEP` are removed. `--trace PATH` bypasses it. This
module never reads a trace and never touches a file outside that directory.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

from .args import UsageError, os_error_text

__all__ = ["KEEP", "new_trace_path", "trace_dir"]

KEEP = 100


def trace_dir() -> Path:
    """The per-user directory for CLI traces (not created here)."""
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
    else:
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "fsm-agent" / "traces"


def new_trace_path(command: str, keep: int = KEEP) -> str:
    """A new, empty, owner-only trace file for a run of `command`; prunes all but the latest `keep`.

    A directory that cannot be made or written (a file in the way, no permission, a read-only
    disk) is a UsageError naming it and the ways around it."""
    directory = trace_dir()
    try:
        return _new_file(directory, command, keep)
    except OSError as exc:
        raise UsageError(
            f"cannot write a trace in {directory}: {os_error_text(exc)} "
            "(set XDG_STATE_HOME to a writable directory, or pass --trace PATH)"
        ) from None


def _new_file(directory: Path, command: str, keep: int) -> str:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if directory.stat().st_mode & 0o077:  # made by someone else, or before: the traces are private
        directory.chmod(0o700)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime())
    for serial in range(1000):
        path = directory / f"{stamp}-{os.getpid()}-{serial}-{command}.jsonl"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        os.close(fd)
        _prune(directory, keep)
        return str(path)
    raise FileExistsError(f"cannot create a new trace file in {directory}")


def _prune(directory: Path, keep: int) -> None:
    """Remove the oldest traces beyond `keep` (by modification time; a vanished file is fine)."""
    entries = []
    for path in directory.glob("*.jsonl"):
        try:
            entries.append((path.stat().st_mtime_ns, path.name, path))
        except FileNotFoundError:
            continue
    entries.sort()
    for _, _, path in entries[: max(0, len(entries) - keep)]:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
