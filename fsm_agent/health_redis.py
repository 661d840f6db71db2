"""`RedisHealth`: endpoint health shared through Redis by every process that uses it (HL-2, HL-3).

Each endpoint's health is one Redis string, `<prefix>:health:<api>|<base URL>|<model>`, holding
the non-default fields of `EndpointHealth` as JSON. A read is one `GET`. An update is one
compare-and-set script (`_CAS`): the new value is computed by `health.apply()` from the value last
read, and written only if Redis still holds exactly that value; otherwise the script returns what
it holds and the change is applied to that instead. So the rules of a change live in one place
(`apply`), and concurrent processes never lose each other's changes. A value that no longer
matters expires (`EndpointHealth.expires_at`): a healthy endpoint's key is deleted, a cooldown or
an open breaker expires when it ends.

HL-3: every wait on Redis is bounded by `timeout` (50 ms): connect and read timeouts on the sync
client, `asyncio.wait_for` around each whole operation on the async one, no client-side retries.
A Redis that is down, slow or answers something that is not our JSON switches the store to its
local memory (the last values it read or wrote, plus what is learned meanwhile), logs one
warning, and tries Redis again after
`retry_interval` seconds; the changes learned meanwhile are then written to Redis, so what one
process learned during the outage is shared once Redis is back.

Never raises to a request (any failure of Redis is the fallback), never imports `redis` unless a
`RedisHealth` is made (it is the optional extra `fsm_agent[redis]`), never closes a client the
caller passed (it only reads where that client connects).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .health import EndpointHealth, EndpointKey, HealthChange, apply

__all__ = ["RedisHealth"]

log = logging.getLogger("fsm_agent")

T = TypeVar("T")

# KEYS[1]: the endpoint's key. ARGV[1]: the value the change was computed from ("" = absent);
# ARGV[2]: the new value ("" = delete); ARGV[3]: expiry in Unix ms ("" = never).
# Returns {1} when written, else {0, what Redis holds} so the caller can recompute from it.
_CAS = """
local held = redis.call('GET', KEYS[1])
if not held then held = '' end
if held ~= ARGV[1] then return {0, held} end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2])
  if ARGV[3] ~= '' then redis.call('PEXPIREAT', KEYS[1], ARGV[3]) end
end
return {1}
"""

_FIELDS = {field.name: field.type for field in dataclasses.fields(EndpointHealth)}
_HEALTHY = EndpointHealth()
_CAS_ROUNDS = 64  # a bound besides the timeout: writers to one endpoint race rarely and briefly
_PENDING_CAP = 1024  # changes kept for Redis while it is away (oldest dropped first)


class HealthStoreUnavailable(Exception):
    """Redis did not answer usably (down, slow, garbled); the store falls back to memory."""


def encode(health: EndpointHealth) -> str:
    """The stored JSON: only the fields that differ from a healthy endpoint, in a fixed order."""
    return json.dumps(
        {
            name: getattr(health, name)
            for name in _FIELDS
            if getattr(health, name) != getattr(_HEALTHY, name)
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def decode(raw: bytes | str | None) -> EndpointHealth:
    """A stored value back to health; anything that is not our JSON is garbled (HL-3). Fields this
    version does not know (written by a newer one) are ignored."""
    if raw is None or raw in (b"", ""):
        return _HEALTHY
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HealthStoreUnavailable(f"garbled health value {raw[:80]!r}") from exc
    if not isinstance(value, dict):
        raise HealthStoreUnavailable(f"garbled health value {raw[:80]!r}")
    fields: dict[str, Any] = {}
    for name, kind in _FIELDS.items():
        if name not in value:
            continue
        item = value[name]
        ok = (
            isinstance(item, bool)
            if kind == "bool"
            else isinstance(item, int) and not isinstance(item, bool) and item >= 0
            if kind == "int"
            else isinstance(item, int | float) and not isinstance(item, bool) and math.isfinite(item)
        )
        if not ok:
            raise HealthStoreUnavailable(f"garbled health field {name}={item!r}")
        fields[name] = float(item) if kind == "float" else item
    return EndpointHealth(**fields)


def _expiry(health: EndpointHealth, now: float) -> tuple[str, str]:
    """(new value, expiry in Unix ms) for the CAS script: ("", "") deletes the key."""
    expires = health.expires_at(now)
    if health.is_default() or (expires is not None and expires <= now):
        return "", ""
    return encode(health), "" if expires is None else str(math.ceil(expires * 1000))


def _connection_settings(client: Any) -> dict[str, Any]:
    """Where and how a caller's client connects (host, port, db, credentials, TLS, socket path),
    as `redis.Redis` keyword arguments. Its timeouts and retries are deliberately not taken."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, dict):
        raise TypeError(
            "RedisHealth takes a redis URL, a redis.Redis or a redis.asyncio.Redis client, "
            f"not {type(client).__name__}"
        )
    settings: dict[str, Any] = {
        name: kwargs[name]
        for name in ("host", "port", "db", "username", "password", "credential_provider", "protocol")
        if kwargs.get(name) is not None
    }
    if kwargs.get("path"):
        settings["unix_socket_path"] = kwargs["path"]
        settings.pop("host", None)
        settings.pop("port", None)
    if "SSL" in type(pool).__name__ or "SSL" in getattr(pool, "connection_class", type).__name__:
        settings["ssl"] = True
        settings.update({name: value for name, value in kwargs.items() if name.startswith("ssl_")})
    return settings


class RedisHealth:
    """Endpoint health in Redis, shared by every process and machine using it (HL-2).

    `url_or_client`: a `redis://` / `rediss://` / `unix://` URL, or a `redis.Redis` /
    `redis.asyncio.Redis` client, which tells where to connect; the store opens its own connections
    with its `timeout`, because the application's client may wait much longer than a request may.
    """

    def __init__(
        self,
        url_or_client: Any,
        prefix: str = "fsm_agent",
        *,
        timeout: float = 0.05,
        retry_interval: float = 5.0,
    ) -> None:
        try:
            import redis
            import redis.asyncio
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError as exc:  # pragma: no cover - the extra is installed for the tests
            raise ImportError("RedisHealth needs the redis package: pip install 'fsm_agent[redis]'") from exc
        if timeout <= 0 or retry_interval < 0:
            raise ValueError("timeout must be positive and retry_interval not negative")
        self.prefix = prefix
        self.timeout = timeout
        self.retry_interval = retry_interval
        # Bounded and without the client library's own retries: HL-3 bounds the whole operation.
        ours: dict[str, Any] = {
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "retry": Retry(NoBackoff(), 0),
        }
        # No CLIENT SETINFO round trips on connect (redis-py 7+ spells it driver_info=None).
        if "driver_info" in inspect.signature(redis.Redis.__init__).parameters:
            ours["driver_info"] = None
        else:  # pragma: no cover - older redis-py
            ours.update(lib_name=None, lib_version=None)
        if isinstance(url_or_client, str):
            url = url_or_client
            self._sync = redis.Redis.from_url(url, **ours)
            self._new_async: Callable[[], Any] = lambda: redis.asyncio.Redis.from_url(
                url, single_connection_client=True, **ours
            )
            self._where = _redacted(url)
        else:
            settings = _connection_settings(url_or_client)
            self._sync = redis.Redis(**settings, **ours)
            self._new_async = lambda: redis.asyncio.Redis(
                **settings, single_connection_client=True, **ours
            )
            self._where = f"{settings.get('host') or settings.get('unix_socket_path')}"
        self._script = self._sync.register_script(_CAS)
        self._lock = threading.Lock()
        self._local: dict[EndpointKey, EndpointHealth] = {}  # last known values, and the fallback
        self._held: dict[EndpointKey, str] = {}  # the raw value Redis held when last seen
        self._pending: deque[tuple[EndpointKey, HealthChange]] = deque(maxlen=_PENDING_CAP)
        self._down_until: float | None = None  # monotonic; None while Redis answers
        self.round_trips = 0  # Redis commands sent (benchmarks and tests read it)

    # -- the HealthStore protocol ------------------------------------------------------------------
    def get(self, key: EndpointKey) -> EndpointHealth:
        if self._reachable():
            try:
                return self._bounded(lambda: self._read(key))
            except Exception as exc:
                self._went_away(exc)
        return self._local_get(key)

    def update(self, key: EndpointKey, change: HealthChange) -> EndpointHealth:
        if self._reachable():
            try:
                return self._bounded(lambda: self._write(key, change))
            except Exception as exc:
                self._went_away(exc)
        return self._local_update(key, change)

    async def aget(self, key: EndpointKey) -> EndpointHealth:
        if self._reachable():
            try:
                return await self._abounded(lambda client: self._aread(client, key))
            except Exception as exc:
                self._went_away(exc)
        return self._local_get(key)

    async def aupdate(self, key: EndpointKey, change: HealthChange) -> EndpointHealth:
        if self._reachable():
            try:
                return await self._abounded(lambda client: self._awrite(client, key, change))
            except Exception as exc:
                self._went_away(exc)
        return self._local_update(key, change)

    # -- lifecycle -----------------------------------------------------------------------------------
    @property
    def shared(self) -> bool:
        """False while the store serves from local memory because Redis did not answer."""
        with self._lock:
            return self._down_until is None

    def close(self) -> None:
        """Close the store's own connections (never the caller's client)."""
        self._sync.close()

    def __enter__(self) -> RedisHealth:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RedisHealth({self._where!r}, prefix={self.prefix!r}, shared={self.shared})"

    # -- Redis, sync -----------------------------------------------------------------------------------
    def redis_key(self, key: EndpointKey) -> str:
        return f"{self.prefix}:health:{key}"

    def _read(self, key: EndpointKey) -> EndpointHealth:
        self.round_trips += 1
        raw = self._sync.get(self.redis_key(key))
        return self._seen(key, raw)

    def _write(self, key: EndpointKey, change: HealthChange) -> EndpointHealth:
        held = self._held_value(key)
        for _ in range(_CAS_ROUNDS):
            updated = apply(decode(held), change)
            value, expiry = _expiry(updated, time.time())
            self.round_trips += 1
            answer = self._script(keys=[self.redis_key(key)], args=[held, value, expiry])
            written, held = self._cas_answer(answer)
            if written:
                return self._stored(key, value, updated)
        raise HealthStoreUnavailable(f"{_CAS_ROUNDS} concurrent writers in a row on {key}")

    def _bounded(self, operation: Callable[[], T]) -> T:
        """Write what was learned while Redis was away, then run `operation`. The sync client's
        socket timeouts bound every wait on Redis (connect and each reply), so a Redis that does not
        answer in time raises here; time this process spends on its own CPU is not held against it."""
        while (pending := self._take_pending()) is not None:
            try:
                self._write(*pending)
            except BaseException:
                self._return_pending(pending)
                raise
        value = operation()
        self._answered()
        return value

    # -- Redis, async (a connection per operation: never tied to an event loop that may end) ---------
    async def _abounded(self, operation: Callable[[Any], Awaitable[T]]) -> T:
        """`_bounded` for the async client: the whole operation, connect included, within `timeout`."""
        client = self._new_async()
        try:
            value = await asyncio.wait_for(self._apending_then(client, operation), self.timeout)
        finally:
            await asyncio.shield(client.aclose())
        self._answered()
        return value

    async def _apending_then(self, client: Any, operation: Callable[[Any], Awaitable[T]]) -> T:
        while (pending := self._take_pending()) is not None:
            try:
                await self._awrite(client, *pending)
            except BaseException:
                self._return_pending(pending)
                raise
        return await operation(client)

    async def _aread(self, client: Any, key: EndpointKey) -> EndpointHealth:
        self.round_trips += 1
        raw = await client.get(self.redis_key(key))
        return self._seen(key, raw)

    async def _awrite(self, client: Any, key: EndpointKey, change: HealthChange) -> EndpointHealth:
        held = self._held_value(key)
        for _ in range(_CAS_ROUNDS):
            updated = apply(decode(held), change)
            value, expiry = _expiry(updated, time.time())
            self.round_trips += 1
            answer = await client.eval(_CAS, 1, self.redis_key(key), held, value, expiry)
            written, held = self._cas_answer(answer)
            if written:
                return self._stored(key, value, updated)
        raise HealthStoreUnavailable(f"{_CAS_ROUNDS} concurrent writers in a row on {key}")

    # -- bookkeeping ---------------------------------------------------------------------------------
    def _seen(self, key: EndpointKey, raw: Any) -> EndpointHealth:
        if raw is not None and not isinstance(raw, bytes | str):
            raise HealthStoreUnavailable(f"unexpected reply {type(raw).__name__}")
        health = decode(raw)
        text = "" if raw is None else raw.decode() if isinstance(raw, bytes) else raw
        with self._lock:
            self._held[key] = text
            self._remember_locally(key, health)
        return health

    def _stored(self, key: EndpointKey, value: str, health: EndpointHealth) -> EndpointHealth:
        with self._lock:
            self._held[key] = value
            self._remember_locally(key, health)
        return health

    def _remember_locally(self, key: EndpointKey, health: EndpointHealth) -> None:
        if health.is_default():
            self._local.pop(key, None)
        else:
            self._local[key] = health

    def _held_value(self, key: EndpointKey) -> str:
        with self._lock:
            return self._held.get(key, "")

    @staticmethod
    def _cas_answer(answer: Any) -> tuple[bool, str]:
        if not isinstance(answer, list) or not answer or answer[0] not in (0, 1):
            raise HealthStoreUnavailable(f"unexpected script reply {answer!r:.80}")
        if answer[0] == 1:
            return True, ""
        held = answer[1] if len(answer) > 1 else b""
        if not isinstance(held, bytes | str):
            raise HealthStoreUnavailable(f"unexpected script reply {answer!r:.80}")
        return False, held.decode() if isinstance(held, bytes) else held

    # -- the fallback (HL-3) -------------------------------------------------------------------------
    def _reachable(self) -> bool:
        with self._lock:
            down_until = self._down_until
        return down_until is None or time.monotonic() >= down_until

    def _went_away(self, exc: BaseException) -> None:
        with self._lock:
            first = self._down_until is None
            self._down_until = time.monotonic() + self.retry_interval
            self._held.clear()  # what Redis held is unknown from now on
        if first:  # one warning per outage, not one per request
            log.warning(
                "fsm_agent: Redis health store at %s unusable (%s: %s); keeping endpoint health in "
                "this process and retrying Redis every %g s",
                self._where,
                type(exc).__name__,
                exc,
                self.retry_interval,
            )

    def _answered(self) -> None:
        """Redis answered: if it had been away, health is shared again from now on."""
        with self._lock:
            was_away = self._down_until is not None
            self._down_until = None
        if was_away:
            log.info("fsm_agent: Redis health store at %s answers again; health is shared", self._where)

    def _take_pending(self) -> tuple[EndpointKey, HealthChange] | None:
        """The oldest change learned while Redis was away; taken, so no other thread writes it too."""
        with self._lock:
            return self._pending.popleft() if self._pending else None

    def _return_pending(self, pending: tuple[EndpointKey, HealthChange]) -> None:
        with self._lock:
            self._pending.appendleft(pending)

    def _local_get(self, key: EndpointKey) -> EndpointHealth:
        with self._lock:
            return self._local.get(key, _HEALTHY)

    def _local_update(self, key: EndpointKey, change: HealthChange) -> EndpointHealth:
        with self._lock:
            updated = apply(self._local.get(key, _HEALTHY), change)
            self._remember_locally(key, updated)
            self._pending.append((key, change))
            return updated


def _redacted(url: str) -> str:
    """The URL without its password, for the warning."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest:
        rest = rest.split("@", 1)[1]
    return f"{scheme}{sep}{rest}"
