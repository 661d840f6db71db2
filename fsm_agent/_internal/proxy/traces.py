"""One trace file per proxied request (TR-1), so `fsm-agent replay FILE` works on any of them.

`RequestFiles` is the session's sink: it opens a `JsonlSink` (the library's own format, created
owner-only, SEC-3) for each request when the request announces itself, named by the time and
the request id (`20261202-141503-<request_id>.jsonl`, the id the proxy also sends back in the
`x-fsm-agent-request-id` header), passes that request's lines to it, and closes it when the
proxy says the request has ended. Sinks never see parameters or headers (TR-5).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from ..trace.sinks import JsonlSink

__all__ = ["RequestFiles"]


class RequestFiles:
    def __init__(self, directory: str | os.PathLike[str], record_wire: bool = False) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.record_wire = record_wire
        self._open: dict[str, JsonlSink] = {}
        self._lock = threading.Lock()

    def path_for(self, request_id: str) -> Path | None:
        sink = self._open.get(request_id)
        return None if sink is None else sink.path

    def write_request(self, request_id: str, header: dict[str, Any]) -> None:
        with self._lock:
            sink = self._open.get(request_id)
            if sink is None:
                stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
                name = f"{stamp}-{''.join(c for c in request_id if c.isalnum() or c in '-_')}.jsonl"
                sink = self._open[request_id] = JsonlSink(self.directory / name, self.record_wire)
        sink.write_request(request_id, header)

    def write_record(self, record: Any) -> None:
        sink = self._open.get(record.request_id)
        if sink is not None:
            sink.write_record(record)

    def write_event(self, request_id: str, event: object, t: float, attempt: int, state: str) -> None:
        sink = self._open.get(request_id)
        if sink is not None:
            sink.write_event(request_id, event, t, attempt, state)

    def end(self, request_id: str) -> None:
        """The request has ended: its file is complete."""
        with self._lock:
            sink = self._open.pop(request_id, None)
        if sink is not None:
            sink.close()

    def close(self) -> None:
        with self._lock:
            sinks, self._open = list(self._open.values()), {}
        for sink in sinks:
            sink.close()
