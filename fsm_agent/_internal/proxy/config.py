"""The proxy's configuration (PX-2): a TOML file read, checked whole and turned into values.

`load_config(path)` (or `parse_config(text)`) returns a `ProxyConfig`: the proxy's own settings
(`[proxy]`), the session's (`[session]`, with `backoff`, `timeouts` and `recovery` tables) and
the model aliases (`[models.ALIAS]`, each with its `[[models.ALIAS.routes]]`). Every mistake
is a `ConfigError` that names the file, the line and the key (`fsm-agent.toml:12:
models.fast.routes[0].provider: …`); unknown keys are mistakes too (a typo never passes
silently). Keys for the upstreams are never in the file: a route names the environment variable
that holds its key, read here, at start. Never opens a connection.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PROVIDERS", "ConfigError", "ProxyConfig", "RouteConfig", "load_config", "parse_config"]

# provider -> the downstream APIs its routes serve
PROVIDERS = {"openai": ("chat_completions", "responses"), "anthropic": ("anthropic_messages",)}


class ConfigError(ValueError):
    """A configuration the proxy cannot start with; the message names the line and the key."""


@dataclass(frozen=True, slots=True)
class RouteConfig:
    provider: str
    base_url: str | None
    key_env: str
    model: str
    name: str
    retries: int | None = None
    timeout: float | None = None
    key: str = field(default="", repr=False)  # read from `key_env` at start; never shown

    @property
    def apis(self) -> tuple[str, ...]:
        return PROVIDERS[self.provider]


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    host: str = "127.0.0.1"
    port: int = 8400
    keys: tuple[str, ...] = field(default=(), repr=False)
    keepalive: float = 15.0
    max_body_bytes: int = 8 * 1024 * 1024
    trace_dir: str | None = None
    record_wire: bool = False
    markers: bool = True
    session: dict[str, Any] = field(default_factory=dict)  # Session keywords, as values
    health: str | None = None  # "redis://…"; None: each worker's own memory
    health_prefix: str = "fsm_agent"
    models: dict[str, tuple[RouteConfig, ...]] = field(default_factory=dict)
    source: str = "<config>"

    def __repr__(self) -> str:
        return (
            f"ProxyConfig(source={self.source!r}, host={self.host!r}, port={self.port}, "
            f"keys={len(self.keys)}, models={sorted(self.models)})"
        )


def load_config(path: str | os.PathLike[str], environ: dict[str, str] | None = None) -> ProxyConfig:
    """Read and check the TOML file at `path` (PX-2)."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source}: cannot read the configuration: {exc}") from None
    return parse_config(text, source, environ)


def parse_config(text: str, source: str = "<config>", environ: dict[str, str] | None = None) -> ProxyConfig:
    """Check a configuration given as TOML text; `environ` (default `os.environ`) holds the keys."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    return _Checker(source, _key_lines(text), os.environ if environ is None else environ).config(data)


# -- where each key is written ------------------------------------------------------------------------
_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(
    r"^\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*="
)


def _dotted(text: str) -> list[str]:
    parts = re.findall(r"\"([^\"]*)\"|'([^']*)'|([A-Za-z0-9_-]+)", text)
    return [a or b or c for a, b, c in parts]


def _key_lines(text: str) -> dict[str, int]:
    """The line of every key and table in the file, by its path (`models.a.routes[1].model`);
    a best effort over the usual layout, enough to point at a mistake."""
    lines: dict[str, int] = {}
    counts: dict[str, int] = {}
    table = ""
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header is not None:
            path = ".".join(_dotted(header.group(2)))
            if header.group(1) == "[[":
                index = counts.get(path, 0)
                counts[path] = index + 1
                table = f"{path}[{index}]"
            else:
                table = path
            lines.setdefault(table, number)
            continue
        key = _KEY.match(line)
        if key is not None:
            path = ".".join(_dotted(key.group(1)))
            lines.setdefault(f"{table}.{path}" if table else path, number)
    return lines


# -- checking ----------------------------------------------------------------------------------------
_PROXY_KEYS = {"host", "port", "keys", "keys_env", "keepalive", "max_body_bytes", "trace_dir"}
_PROXY_KEYS |= {"record_wire", "markers"}
_SESSION_KEYS = {"retries", "stale_timeout", "stale_giveup", "breaker_cooldown", "unsupported", "max_bytes"}
_SESSION_KEYS |= {"health", "health_prefix", "backoff", "timeouts", "recovery", "telemetry"}
_ROUTE_KEYS = {"provider", "base_url", "key_env", "model", "name", "retries", "timeout"}
_BACKOFF_KEYS = {"base", "cap", "max_wait"}
_TIMEOUT_KEYS = {"connect", "first_event", "thinking", "text", "tool_args", "liveness"}
_RECOVERY_KEYS = {"resume", "continue", "restart", "final"}


class _Checker:
    def __init__(self, source: str, lines: dict[str, int], environ: Any) -> None:
        self.source = source
        self.lines = lines
        self.environ = environ

    def fail(self, path: str, message: str) -> ConfigError:
        probe = path
        while probe and probe not in self.lines:  # the nearest enclosing key that is written down
            probe = probe.rpartition(".")[0] if "." in probe else re.sub(r"\[\d+\]$", "", probe)
            if probe == path:
                break
        line = self.lines.get(probe)
        where = f"{self.source}:{line}" if line is not None else self.source
        return ConfigError(f"{where}: {path}: {message}")

    def table(self, value: Any, path: str, allowed: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"must be a table, not {_kind(value)}")
        for key in value:
            if key not in allowed:
                raise self.fail(
                    f"{path}.{key}" if path else key, f"unknown key (known: {', '.join(sorted(allowed))})"
                )
        return value

    def number(self, value: Any, path: str, *, minimum: float = 0.0, positive: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.fail(path, f"must be a number, not {_kind(value)}")
        if value < minimum or (positive and value <= 0):
            raise self.fail(path, f"must be {'> 0' if positive else f'>= {minimum:g}'}, not {value!r}")
        return float(value)

    def integer(self, value: Any, path: str, *, minimum: int = 0, maximum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be an integer, not {_kind(value)}")
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
            raise self.fail(path, f"must be {bound}, not {value!r}")
        return value

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(path, f"must be a non-empty string, not {_kind(value)}")
        return value

    def boolean(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(path, f"must be true or false, not {_kind(value)}")
        return value

    def config(self, data: dict[str, Any]) -> ProxyConfig:
        self.table(data, "", {"proxy", "session", "models"})
        proxy = self.table(data.get("proxy", {}), "proxy", _PROXY_KEYS)
        settings = self.proxy(proxy)
        session, health, prefix = self.session(self.table(data.get("session", {}), "session", _SESSION_KEYS))
        if "models" not in data:
            raise self.fail("models", "no model alias is configured (add a [models.NAME] table with routes)")
        models_table = data["models"]
        if not isinstance(models_table, dict) or not models_table:
            raise self.fail("models", "must name at least one model alias ([models.NAME])")
        models = {alias: self.alias(alias, spec) for alias, spec in models_table.items()}
        return ProxyConfig(
            **settings,
            session=session,
            health=health,
            health_prefix=prefix,
            models=models,
            source=self.source,
        )

    def proxy(self, proxy: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if "host" in proxy:
            out["host"] = self.string(proxy["host"], "proxy.host")
        if "port" in proxy:
            out["port"] = self.integer(proxy["port"], "proxy.port", minimum=0, maximum=65535)
        if "keepalive" in proxy:
            out["keepalive"] = self.number(proxy["keepalive"], "proxy.keepalive", positive=True)
        if "max_body_bytes" in proxy:
            out["max_body_bytes"] = self.integer(proxy["max_body_bytes"], "proxy.max_body_bytes", minimum=1)
        if "trace_dir" in proxy:
            out["trace_dir"] = self.string(proxy["trace_dir"], "proxy.trace_dir")
        for flag in ("record_wire", "markers"):
            if flag in proxy:
                out[flag] = self.boolean(proxy[flag], f"proxy.{flag}")
        keys: list[str] = []
        if "keys" in proxy:
            given = proxy["keys"]
            if not isinstance(given, list) or not all(isinstance(key, str) and key for key in given):
                raise self.fail("proxy.keys", "must be a list of non-empty strings")
            keys += given
        if "keys_env" in proxy:
            name = self.string(proxy["keys_env"], "proxy.keys_env")
            value = self.environ.get(name)
            if not value:
                raise self.fail("proxy.keys_env", f"the environment variable {name} is not set")
            keys += [key.strip() for key in value.split(",") if key.strip()]
        out["keys"] = tuple(keys)
        return out

    def session(self, table: dict[str, Any]) -> tuple[dict[str, Any], str | None, str]:
        from ..backoff import Backoff
        from ..deadlines import Timeouts
        from ..recovery import Recovery

        out: dict[str, Any] = {}
        if "retries" in table:
            out["retries"] = self.integer(table["retries"], "session.retries")
        if "stale_timeout" in table:
            out["stale_timeout"] = self.number(table["stale_timeout"], "session.stale_timeout", positive=True)
        if "stale_giveup" in table:
            out["stale_giveup"] = self.integer(table["stale_giveup"], "session.stale_giveup")
        if "breaker_cooldown" in table:
            out["breaker_cooldown"] = self.number(table["breaker_cooldown"], "session.breaker_cooldown")
        if "max_bytes" in table:
            out["max_bytes"] = self.integer(table["max_bytes"], "session.max_bytes", minimum=1)
        if "telemetry" in table:
            out["telemetry"] = self.boolean(table["telemetry"], "session.telemetry")
        if "unsupported" in table:
            mode = table["unsupported"]
            if mode not in ("fallback", "raise"):
                raise self.fail("session.unsupported", f"must be 'fallback' or 'raise', not {mode!r}")
            out["unsupported"] = mode
        if "backoff" in table:
            given = self.table(table["backoff"], "session.backoff", _BACKOFF_KEYS)
            values = {k: self.number(v, f"session.backoff.{k}") for k, v in given.items()}
            out["backoff"] = self.build(Backoff, values, "session.backoff")
        if "timeouts" in table:
            given = self.table(table["timeouts"], "session.timeouts", _TIMEOUT_KEYS)
            values = {k: self.number(v, f"session.timeouts.{k}", positive=True) for k, v in given.items()}
            out["timeouts"] = self.build(Timeouts, values, "session.timeouts")
        if "recovery" in table:
            given = self.table(table["recovery"], "session.recovery", _RECOVERY_KEYS)
            steps: dict[str, Any] = {}
            for key, value in given.items():
                if key == "final":
                    steps["final"] = self.string(value, "session.recovery.final")
                else:
                    steps["continue_" if key == "continue" else key] = self.boolean(
                        value, f"session.recovery.{key}"
                    )
            out["recovery"] = self.build(Recovery, steps, "session.recovery")
        health = None
        if "health" in table:
            health = self.string(table["health"], "session.health")
            if health == "memory":
                health = None
            elif not health.startswith(("redis://", "rediss://", "unix://")):
                raise self.fail("session.health", f"must be 'memory' or a redis:// URL, not {health!r}")
        prefix = self.string(table.get("health_prefix", "fsm_agent"), "session.health_prefix")
        return out, health, prefix

    def build(self, cls: type, values: dict[str, Any], path: str) -> Any:
        try:
            return cls(**values)
        except (TypeError, ValueError) as exc:
            raise self.fail(path, str(exc)) from None

    def alias(self, alias: str, spec: Any) -> tuple[RouteConfig, ...]:
        path = f"models.{alias}"
        table = self.table(spec, path, {"routes"})
        routes = table.get("routes")
        if not isinstance(routes, list) or not routes:
            raise self.fail(path, "needs at least one route ([[models.ALIAS.routes]])")
        built: list[RouteConfig] = []
        for index, spec_route in enumerate(routes):
            route = self.route(spec_route, f"{path}.routes[{index}]")
            taken = {known.name for known in built}
            if route.name in taken:
                if isinstance(spec_route, dict) and "name" in spec_route:
                    raise self.fail(f"{path}.routes[{index}].name", f"the name {route.name!r} is used twice")
                serial = 2  # two hosts serving the same model: "openai:gpt-4.1#2", as Route names do
                while f"{route.name}#{serial}" in taken:
                    serial += 1
                route = dataclasses.replace(route, name=f"{route.name}#{serial}")
            built.append(route)
        return tuple(built)

    def route(self, spec: Any, path: str) -> RouteConfig:
        table = self.table(spec, path, _ROUTE_KEYS)
        for required in ("provider", "model", "key_env"):
            if required not in table:
                raise self.fail(path, f"missing key {required!r}")
        provider = table["provider"]
        if provider not in PROVIDERS:
            raise self.fail(
                f"{path}.provider", f"must be one of {', '.join(sorted(PROVIDERS))}, not {provider!r}"
            )
        model = self.string(table["model"], f"{path}.model")
        key_env = self.string(table["key_env"], f"{path}.key_env")
        key = self.environ.get(key_env)
        if not key:
            raise self.fail(f"{path}.key_env", f"the environment variable {key_env} is not set")
        base_url = None
        if "base_url" in table:
            base_url = self.string(table["base_url"], f"{path}.base_url")
            if not base_url.startswith(("http://", "https://")):
                raise self.fail(f"{path}.base_url", f"must be an http:// or https:// URL, not {base_url!r}")
        retries = self.integer(table["retries"], f"{path}.retries") if "retries" in table else None
        timeout = (
            self.number(table["timeout"], f"{path}.timeout", positive=True) if "timeout" in table else None
        )
        name = self.string(table["name"], f"{path}.name") if "name" in table else f"{provider}:{model}"
        return RouteConfig(provider, base_url, key_env, model, name, retries, timeout, key)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"{value!r} (a string)" if value else "an empty string"
    return f"{value!r}"
