"""`fsm-agent serve --config FILE [--host H] [--port P] [--workers N]`: the proxy on uvicorn (PX-1).

Reads and checks the configuration first (a mistake is one sentence naming its line and key,
exit 2, before any worker starts), then runs the proxy's ASGI application on uvicorn: in this
process with one worker, or as N worker processes sharing the listening socket (each with its
own session; endpoint health is shared between them only through `session.health = "redis://…"`,
HL-2, PX-8). With several workers the Prometheus counts are summed across them through a
directory of the metrics client's own (`PROMETHEUS_MULTIPROC_DIR`), made here and removed at the
end. `--host`/`--port` override the file's `[proxy]` values. A host other than loopback needs
proxy keys: an open proxy spends the upstream keys of whoever runs it. SIGINT / SIGTERM stop it
gracefully (open streams get `--graceful-timeout` seconds).
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import os
import shutil
import sys
import tempfile
from typing import Any

from .args import UsageError, port_number

__all__ = ["CONFIG_VARIABLE", "add_arguments", "run", "worker_app"]

CONFIG_VARIABLE = "FSM_AGENT_PROXY_CONFIG"  # how a worker process finds the configuration


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, metavar="FILE", help="the proxy's TOML configuration")
    parser.add_argument(
        "--host", default=None, help="the address to listen on (default: the file's, else 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=port_number, default=None, help="the port (default: the file's, else 8400)"
    )
    parser.add_argument("--workers", type=_workers, default=1, help="worker processes (default: 1)")
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn's",
    )
    parser.add_argument(
        "--graceful-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long open streams may run on after a stop signal (default: 30)",
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def worker_app() -> Any:
    """The application of one worker process (`uvicorn --factory`): its configuration from the
    file the parent checked."""
    from ..proxy.app import build_app

    return _settled(build_app(os.environ[CONFIG_VARIABLE]))


def _settled(app: Any) -> Any:
    """The built application, with what the process holds by now (the modules, the upstream
    clients) moved out of the collector's reach (`gc.freeze()`): a full collection then walks
    what requests made, not every imported object: 30-40 ms of stalled streams otherwise, about
    once in a hundred requests (measured in bench_proxy's serve process). Only our own process:
    `fsm_agent.proxy.app()` mounted in a user's server leaves its collector alone."""
    gc.freeze()
    return app


def run(args: argparse.Namespace) -> int:
    from ..proxy.config import ConfigError, load_config

    try:
        import starlette  # noqa: F401
        import uvicorn
    except ImportError:
        raise UsageError("serving needs the proxy extra: pip install 'fsm_agent[proxy]'") from None
    path = os.path.abspath(args.config)
    try:
        config = load_config(path)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    host = args.host if args.host is not None else config.host
    port = args.port if args.port is not None else config.port
    if not config.keys and not _is_loopback(host):
        raise UsageError(
            f"refusing to serve on {host} without proxy keys: set [proxy] keys or keys_env in {args.config}"
        )
    settings: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_level": args.log_level,
        "lifespan": "on",
        "timeout_graceful_shutdown": args.graceful_timeout,
    }
    aliases = ", ".join(sorted(config.models))
    print(
        f"fsm-agent serve: http://{host}:{port} ({args.workers} worker{'s' if args.workers > 1 else ''}); "
        f"models: {aliases}",
        file=sys.stderr,
        flush=True,
    )
    if args.workers == 1:
        from ..proxy.app import build_app

        uvicorn.run(_settled(build_app(config)), **settings)
        return 0
    os.environ[CONFIG_VARIABLE] = path
    made = None
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        made = os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="fsm-agent-metrics-")
    try:
        uvicorn.run(f"{__name__}:worker_app", factory=True, workers=args.workers, **settings)
    finally:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
    return 0
