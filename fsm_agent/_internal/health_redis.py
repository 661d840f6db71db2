"""`RedisHealth`: endpoint health shared through Redis by every process that uses it (HL-2, HL-3).

Each endpoint's health is one Redis string, `<prefix>:health:<api>|<base URL>|<model>`, holding
the non-default fields of `EndpointHealth` as JSON, written and read by one schema (`encode`,
`decode`): each field's kind is the kind of its default value, so a field added to
`EndpointHealth` is stored and read back without another table to keep in step. A read is one
`GET`. An update is one compare-and-set script (`_CAS`): the new value is computed by
`health.apply()` from the value last read, and written only if Redis still holds exactly that
value; otherwise the script returns what it holds and the change is applied to that instead. So
the rules of a change live in one place (`apply`), and concurrent processes never lose each
other's changes. A value that no longer matters expires (`EndpointHealth.expires_at`): a healthy
endpoint's key is deleted, a cooldown or an open breaker expires when it ends.

One client with one connection pool of `max_connections` serves sync and async requests alike:
an async request runs the same operation on one of the store's `max_connections` worker threads,
so the event loop never waits on Redis and there is no second (async) copy of any operation.

HL-3: every wait on Redis is bounded by `timeout` (50 ms) as a socket timeout (connect, and each
reply), which measures Redis itself: neither the event loop's scheduling delay, nor a wait for a
free pooled connection, nor this process's own CPU is held against it. A Redis that is down, slow
or answers something that is not our JSON switches the store to its local memory (the last values
it read or wrote, plus what is learned meanwhile), logs one warning, and tries Redis again after
`retry_interval` seconds; the changes learned meanwhile are then written to Redis before anything
else, so what one process learned during the outage is shared once Redis is back. A request that
finds every pooled connection busy for `pool_wait` seconds is served from local memory (its change
queued the same way) without declaring Redis unusable.

Never raises to a request (any failure of Redis is the fallback), never imports `redis` unless a
`RedisHealth` is made (it is the optional extra `fsm_agent[redis]`), never closes a client the
caller passed (it only reads where that client connects), and never shows a password in its repr
or its warnings (SEC-9).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import logging
import math
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from .capacity import Bucket, CapacityChange, CapacityKey, apply_capacity
from .health import EndpointHealth, EndpointKey, HealthChange, apply
from .redact import redact, remember_secret

__all__ = ["RedisHealth"]

log = logging.getLogger("fsm_agent")

T = TypeVar("T")

# KEYS[1]: the endpoint's key. ARGV[1]: the value the change was computed from ("" = absent);
# ARGV[2]: the new value ("" = delete); ARGV[3]: time to live in ms ("" = forever). A duration,
# not a wall-clock instant: the key lives as long as the value matters, whatever the writer's clock
# says (HL-1).
# Returns {1} when written, else {0, what Redis holds} so the caller can recompute from it.
_CAS = """
local held = redis.call('GET', KEYS[1])
if not held then held = '' end
if held ~= ARGV[1] then return {0, held} end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2])
  if ARGV[3] ~= '' then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
end
return {1}
"""

_HEALTHY = EndpointHealth()
_EMPTY_BUCKET = Bucket()
_BUCKET_FIELDS = Bucket.__match_args__
_CAS_ROUNDS = 64  # a bound besides the timeout: writers to one endpoint race rarely and briefly
_PENDING_CAP = 1024  # changes kept for Redis while it is away (oldest dropped first)
_MAX_NUMBER = 2**63  # a stored number beyond this is nonsense (and a float could not hold it)
_MAX_TEXT = 256  # a stored text (a request id) longer than this is nonsense


def _is_bool(item: object) -> bool:
    return isinstance(item, bool)


def _is_count(item: object) -> bool:
    return type(item) is int and 0 <= item <= _MAX_NUMBER


def _is_time(item: object) -> bool:
    if type(item) is int:
        return 0 <= item <= _MAX_NUMBER
    return type(item) is float and math.isfinite(item) and 0.0 <= item <= _MAX_NUMBER


def _is_text(item: object) -> bool:
    return isinstance(item, str) and len(item) <= _MAX_TEXT


# The one schema of a stored value: each field of `EndpointHealth` with the kind of its default
# (the annotations are strings under `from __future__ import annotations`; the defaults are not).
_CHECKS: dict[type, Callable[[object], bool]] = {
    bool: _is_bool,
    int: _is_count,
    float: _is_time,
    str: _is_text,
}
_SCHEMA: dict[str, tuple[type, Callable[[object], bool]]] = {
    name: (type(getattr(_HEALTHY, name)), _CHECKS[type(getattr(_HEALTHY, name))])
    for name in EndpointHealth.__match_args__
}


class HealthStoreUnavailable(Exception):
    """Redis did not answer usably (down, slow, garbled); the store falls back to memory."""


def encode(health: EndpointHealth, writer: str = "") -> str:
    """The stored JSON: only the fields that differ from a healthy endpoint, in a fixed order, and
    the `writer` token of the write that stored it (`decode` ignores it, as any field it does not
    know): a retried write tells its own value from a rival's equal one by it."""
    fields: dict[str, Any] = {
        name: getattr(health, name) for name in _SCHEMA if getattr(health, name) != getattr(_HEALTHY, name)
    }
    if writer:
        fields["writer"] = writer
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def decode(raw: bytes | str | None) -> EndpointHealth:
    """A stored value back to health (`encode`'s inverse); anything that is not our JSON is garbled
    (HL-3). Fields this version does not know (written by a newer one) are ignored."""
    if raw is None or raw in (b"", ""):
        return _HEALTHY
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise HealthStoreUnavailable(f"garbled health value {raw[:80]!r}") from exc
    if not isinstance(value, dict):
        raise HealthStoreUnavailable(f"garbled health value {raw[:80]!r}")
    fields: dict[str, Any] = {}
    for name, (kind, check) in _SCHEMA.items():
        if name not in value:
            continue
        item = value[name]
        if not check(item):
            raise HealthStoreUnavailable(f"garbled health field {name}={item!r:.80}")
        fields[name] = float(item) if kind is float else item
    return EndpointHealth(**fields)


def _expiry(health: EndpointHealth, now: float, writer: str = "") -> tuple[str, str]:
    """(new value, time to live in ms) for the CAS script: ("", "") deletes the key. `now` is the
    writer's clock, the one the value's deadlines were set by."""
    expires = health.expires_at(now)
    if health.is_default() or (expires is not None and expires <= now):
        return "", ""
    ttl = "" if expires is None else str(max(1, math.ceil((expires - now) * 1000)))
    return encode(health, writer), ttl


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


class _NotShared:
    """What an operation gives when Redis cannot serve it now: the caller uses local memory."""


_NOT_SHARED = _NotShared()


class RedisHealth:
    """Endpoint health in Redis, shared by every process and machine using it (HL-2).

    `url_or_client`: a `redis://` / `rediss://` / `unix://` URL, or a `redis.Redis` /
    `redis.asyncio.Redis` client, which tells where to connect; the store opens its own connections
    (at most `max_connections`, pooled) with its `timeout`, because the application's client may
    wait much longer than a request may.
    `timeout`: the most one wait on Redis may take (connect, or a reply), in seconds (HL-3).
    `retry_interval`: how long local memory serves after Redis failed, before Redis is tried again.
    `max_connections`: the pool's size, for sync and async requests together (also the number of
    worker threads async requests run their operation on).
    `pool_wait`: how long a request waits for a free pooled connection before it goes on from
    local memory (no warning: the congestion is the process's own).
    """

    def __init__(
        self,
        url_or_client: Any,
        prefix: str = "fsm_agent",
        *,
        timeout: float = 0.05,
        retry_interval: float = 5.0,
        max_connections: int = 8,
        pool_wait: float = 1.0,
    ) -> None:
        try:
            import redis
            import redis.exceptions
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError as exc:  # pragma: no cover - the extra is installed for the tests
            raise ImportError("RedisHealth needs the redis package: pip install 'fsm_agent[redis]'") from exc
        if timeout <= 0 or retry_interval < 0 or pool_wait < 0:
            raise ValueError("timeout must be positive, and retry_interval and pool_wait not negative")
        if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
            raise ValueError("max_connections must be a positive int")
        self.prefix = prefix
        self.timeout = timeout
        self.retry_interval = retry_interval
        self.max_connections = max_connections
        self.pool_wait = pool_wait
        # Bounded, and one retry only for a connection that broke (a pooled connection that Redis
        # closed while it was idle, or before a restart): a timeout is never retried (HL-3).
        ours: dict[str, Any] = {
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "retry": Retry(NoBackoff(), 1, supported_errors=(redis.exceptions.ConnectionError,)),
            "max_connections": max_connections,
        }
        # No CLIENT SETINFO round trips on connect (redis-py 7+ spells it driver_info=None).
        if "driver_info" in inspect.signature(redis.Redis.__init__).parameters:
            ours["driver_info"] = None
        else:  # pragma: no cover - older redis-py
            ours.update(lib_name=None, lib_version=None)
        if isinstance(url_or_client, str):
            _remember_url_secrets(url_or_client)
            self._sync = redis.Redis.from_url(url_or_client, **ours)
            self._where = _where(url_or_client)
        else:
            settings = _connection_settings(url_or_client)
            remember_secret(settings.get("password"))
            self._sync = redis.Redis(**settings, **ours)
            self._where = redact(f"{settings.get('host') or settings.get('unix_socket_path')}")
        self._script = self._sync.register_script(_CAS)
        self._local: dict[EndpointKey, EndpointHealth] = {}  # last known values, and the fallback
        self._held: dict[EndpointKey, str] = {}  # the raw value Redis held when last seen
        self._pending: deque[tuple[EndpointKey, HealthChange]] = deque(maxlen=_PENDING_CAP)
        self._held_buckets: dict[CapacityKey, str] = {}  # CAP-3: the raw bucket Redis held when last seen
        self._local_buckets: dict[CapacityKey, Bucket] = {}  # and the fallback's estimates (HL-3)
        self._down_until: float | None = None  # monotonic; None while Redis answers
        self.round_trips = 0  # Redis commands sent (benchmarks and tests read it)
        self._closed = False
        self._start_in_this_process()
        _reset_in_forked_children(self)

    def _start_in_this_process(self) -> None:  # also run by the at-fork hook below
        """The locks, connection slots and worker threads of this process (again in a forked
        child, where a lock or slot held by a thread of the parent would never be released). The
        parent's queued changes stay the parent's to write: a child writing them too would count
        them twice."""
        if getattr(self, "_pid", None) is not None:
            self._pending.clear()
        self._pid = os.getpid()
        self._lock = threading.Lock()
        # one per pooled connection: the pool is never asked for more than it may hold
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._workers: ThreadPoolExecutor | None = None

    # -- the HealthStore protocol ------------------------------------------------------------------
    def get(self, key: EndpointKey) -> EndpointHealth:
        found = self._shared(lambda: self._read(key))
        return self._local_get(key) if isinstance(found, _NotShared) else found

    def update(self, key: EndpointKey, change: HealthChange) -> EndpointHealth:
        found = self._shared(lambda: self._write(key, change))
        return self._local_update(key, change) if isinstance(found, _NotShared) else found

    async def aget(self, key: EndpointKey) -> EndpointHealth:
        found = await self._on_a_worker(functools.partial(self.get, key))
        return self._local_get(key) if isinstance(found, _NotShared) else found

    async def aupdate(self, key: EndpointKey, change: HealthChange) -> EndpointHealth:
        found = await self._on_a_worker(functools.partial(self.update, key, change))
        return self._local_update(key, change) if isinstance(found, _NotShared) else found

    async def _on_a_worker(self, operation: Callable[[], T]) -> T | _NotShared:
        """Run the sync operation on one of the store's worker threads: the loop goes on meanwhile,
        and only the socket waits count against `timeout`. A request cancelled meanwhile leaves the
        operation to finish (it is bounded), so a change is never half-written. `_NOT_SHARED`
        without a thread hop while Redis is away, and once the store is closed."""
        if self._pid != os.getpid():
            self._start_in_this_process()  # before any lock of ours: a forked child's are new
        workers = self._worker_threads() if self._reachable() else None
        if workers is None:
            return _NOT_SHARED
        try:
            done = asyncio.get_running_loop().run_in_executor(workers, operation)
        except RuntimeError:  # closed meanwhile: the executor takes no more work
            return _NOT_SHARED
        # Shielded: a request cancelled while the operation waits for a worker must not drop the
        # operation (a change neither written nor queued); it runs to its bounded end.
        return await asyncio.shield(done)

    def _worker_threads(self) -> ThreadPoolExecutor | None:
        if self._pid != os.getpid():
            self._start_in_this_process()
        with self._lock:
            if self._workers is None and not self._closed:
                self._workers = ThreadPoolExecutor(self.max_connections, thread_name_prefix="fsm_agent-redis")
            return self._workers

    # -- CAP-3: capacity, one bucket per (endpoint, key) for the whole fleet -------------------------
    def capacity(self, key: CapacityKey, change: CapacityChange) -> tuple[Bucket, float]:
        """Apply `change` to the fleet's bucket of `key` atomically (a compare-and-set, as health
        changes are); Redis away: to this process's own estimate (HL-3)."""
        found = self._shared(lambda: self._capacity_write(key, change))
        return self._local_capacity(key, change) if isinstance(found, _NotShared) else found

    async def acapacity(self, key: CapacityKey, change: CapacityChange) -> tuple[Bucket, float]:
        found = await self._on_a_worker(functools.partial(self.capacity, key, change))
        return self._local_capacity(key, change) if isinstance(found, _NotShared) else found

    def capacity_key(self, key: CapacityKey) -> str:
        return f"{self.prefix}:capacity:{key}"

    def _capacity_write(self, key: CapacityKey, change: CapacityChange) -> tuple[Bucket, float]:
        with self._lock:
            held = self._held_buckets.get(key, "")
        redis_key = self.capacity_key(key)
        if not held and change.op == "reserve":
            # HL-2: an endpoint this process has learned no capacity of costs no round trip at a
            # request's start (a provider without rate-limit headers never does); its first
            # answer's headers join it to the fleet's bucket (`learn` reads it, as a CAS does)
            return apply_capacity(_EMPTY_BUCKET, change)
        for _ in range(_CAS_ROUNDS):
            bucket, wait = apply_capacity(_decode_bucket(held), change)
            value = "" if bucket.is_default() else _encode_bucket(bucket, os.urandom(6).hex())
            expiry = str(max(1, math.ceil(bucket.expires_in() * 1000)))
            self._count()
            written, found = self._cas_answer(self._script(keys=[redis_key], args=[held, value, expiry]))
            if written or found == value:
                with self._lock:
                    self._held_buckets[key] = value
                    self._local_buckets[key] = bucket
                return bucket, wait
            held = found
        raise HealthStoreUnavailable(f"{_CAS_ROUNDS} concurrent writers in a row on {key}")

    def _local_capacity(self, key: CapacityKey, change: CapacityChange) -> tuple[Bucket, float]:
        with self._lock:
            bucket, wait = apply_capacity(self._local_buckets.get(key, _EMPTY_BUCKET), change)
            self._local_buckets[key] = bucket
            return bucket, wait

    # -- lifecycle -----------------------------------------------------------------------------------
    @property
    def shared(self) -> bool:
        """False while the store serves from local memory because Redis did not answer."""
        with self._lock:
            return self._down_until is None

    def close(self) -> None:
        """Stop the worker threads and close the store's own connections (never the caller's client)."""
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, None
        if workers is not None:
            workers.shutdown(wait=True)
        self._sync.close()

    def __enter__(self) -> RedisHealth:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RedisHealth({self._where!r}, prefix={self.prefix!r}, shared={self.shared})"

    # -- Redis ---------------------------------------------------------------------------------------
    def redis_key(self, key: EndpointKey) -> str:
        return f"{self.prefix}:health:{key}"

    def _shared(self, operation: Callable[[], T]) -> T | _NotShared:
        """Write what was learned while Redis was away, then run `operation` on Redis; `_NOT_SHARED`
        when Redis is away (HL-3) or every pooled connection stayed busy for `pool_wait`."""
        if self._pid != os.getpid():
            self._start_in_this_process()
        if self._closed or not self._reachable():
            return _NOT_SHARED  # a closed store keeps health in memory, sync or async alike
        if not self._slots.acquire(timeout=self.pool_wait):
            return _NOT_SHARED  # our own congestion, not Redis's: no warning
        try:
            try:
                self._write_pending()
                value = operation()
            except Exception as exc:
                self._went_away(exc)
                return _NOT_SHARED
            self._answered()
            return value
        finally:
            self._slots.release()

    def _write_pending(self) -> None:
        while (pending := self._take_pending()) is not None:
            try:
                self._write(*pending, late=True)
            except BaseException:
                self._return_pending(pending)
                raise

    def _read(self, key: EndpointKey) -> EndpointHealth:
        self._count()
        raw = self._sync.get(self.redis_key(key))
        return self._seen(key, raw)

    def _write(self, key: EndpointKey, change: HealthChange, *, late: bool = False) -> EndpointHealth:
        """Compare-and-set `change` onto the stored value. `late`: a change queued while Redis was
        away, applied without bounding by its old clock (health.apply)."""
        held = self._held_value(key)
        for _ in range(_CAS_ROUNDS):
            updated = apply(decode(held), change, bound=not late)
            writer = os.urandom(6).hex()
            value, expiry = _expiry(updated, change.at if change.at > 0 else time.time(), writer)
            self._count()
            answer = self._script(keys=[self.redis_key(key)], args=[held, value, expiry])
            written, held = self._cas_answer(answer)
            # A reply lost to a broken connection is retried by redis-py (one retry): the script
            # then finds our own value already there, writer token and all. That is our write, not
            # a rival's to apply the change on top of again (a stall counted twice). A deletion
            # found done is a success applied once more: the same outcome.
            if written or held == value:
                return self._stored(key, value, updated)
        raise HealthStoreUnavailable(f"{_CAS_ROUNDS} concurrent writers in a row on {key}")

    # -- bookkeeping ---------------------------------------------------------------------------------
    def _count(self) -> None:
        with self._lock:
            self.round_trips += 1

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
            self._held_buckets.clear()
        with contextlib.suppress(Exception):  # the idle pooled connections may be as broken
            self._sync.connection_pool.disconnect(inuse_connections=False)
        if first:  # one warning per outage, not one per request
            log.warning(
                "fsm_agent: Redis health store at %s unusable (%s: %s); keeping endpoint health in "
                "this process and retrying Redis every %g s",
                self._where,
                type(exc).__name__,
                redact(str(exc)),
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


def _encode_bucket(bucket: Bucket, writer: str) -> str:
    """CAP-3: a bucket as stored: its fields, and the writer's token (as `encode` does)."""
    fields: dict[str, Any] = {name: getattr(bucket, name) for name in _BUCKET_FIELDS}
    fields["writer"] = writer
    return json.dumps(fields, separators=(",", ":"))


def _decode_bucket(raw: str) -> Bucket:
    """A stored bucket; "" is none yet. Anything that is not our JSON of finite numbers is garbage
    (HealthStoreUnavailable: the store falls back to its local estimates, HL-3)."""
    if not raw:
        return _EMPTY_BUCKET
    try:
        data = json.loads(raw)
    except ValueError:
        raise HealthStoreUnavailable("a stored bucket is not JSON") from None
    if not isinstance(data, dict):
        raise HealthStoreUnavailable("a stored bucket is not an object")
    values: dict[str, float] = {}
    for name in _BUCKET_FIELDS:
        value = data.get(name, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise HealthStoreUnavailable(f"a stored bucket's {name} is not a number")
        if abs(value) > _MAX_NUMBER:
            raise HealthStoreUnavailable(f"a stored bucket's {name} is out of range")
        values[name] = float(value)
    return Bucket(**values)


def _where(url: str) -> str:
    """Where a URL points, for the repr and the warnings: scheme, host, port and path (the
    database), never its user, password or query (`?password=` is a query parameter), SEC-9."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<unparsable redis URL>"
    netloc = f"{host}:{port}" if port else host
    return redact(f"{parts.scheme}://{netloc}{parts.path}")


def _remember_url_secrets(url: str) -> None:
    """The URL's password (user:password@ or ?password=) is redacted wherever it shows (SEC-9)."""
    try:
        parts = urlsplit(url)
        remember_secret(parts.password)
        for password in parse_qs(parts.query).get("password", []):
            remember_secret(password)
    except ValueError:
        pass


_STORES: weakref.WeakSet[RedisHealth] = weakref.WeakSet()  # the live stores, for the at-fork hook
_FORK_HOOK = threading.Lock()
_fork_hook_registered = False


def _reset_in_forked_children(store: RedisHealth) -> None:
    """Give `store` new locks, slots and workers in a forked child, while the child has one thread
    (os.register_at_fork): a lock a parent's thread held at the fork would never be released, and
    two of the child's threads resetting it lazily could race. Registered with the first store."""
    global _fork_hook_registered
    with _FORK_HOOK:
        if not _fork_hook_registered and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_reset_all_after_fork)
            _fork_hook_registered = True
        _STORES.add(store)


def _reset_all_after_fork() -> None:
    for store in list(_STORES):
        store._start_in_this_process()
