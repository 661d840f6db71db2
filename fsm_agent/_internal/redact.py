"""Removes secrets from text before it reaches an error, a log or a trace (TR-5, RES-10, SEC-9).

Two kinds of secret are removed: the well-known key shapes (`sk-…`, `sk-ant-…`, `gsk_…`, `xai-…`,
`AIza…`, AWS access key ids, bearer tokens, `api_key: …` pairs), and the keys of the clients the
session was given, whatever their shape — read once from each client object when a request is
planned (`remember_client_secrets`) and kept only in this process's memory, never in a record.

Every text the library writes itself passes through `redact`: trace records (`error_text`),
`on_status` notices, OpenTelemetry span statuses and exception events (`error_text`,
`traceback_text`), log records of the `fsm_agent` logger (`RedactingFilter`), reprs
(`redact_headers`) and the error a request raises, with its chain (`scrub_error`).

Pure string functions apart from that registry; never performs I/O.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import traceback
from collections import OrderedDict
from typing import Any

from .urls import is_botocore_client

__all__ = [
    "SECRET_HEADERS",
    "RedactingFilter",
    "error_text",
    "redact",
    "redact_headers",
    "redact_value",
    "remember_client_secrets",
    "remember_secret",
    "scrub_error",
    "traceback_text",
    "truncate",
]

SECRET_HEADERS = frozenset(
    {"authorization", "x-api-key", "api-key", "x-goog-api-key", "x-amz-security-token", "cookie"}
)

# The well-known secret shapes, compiled at the first text redacted (`_shapes`): a request that
# writes no error, log line or trace text never needs them.
_SHAPE_SOURCES = (
    # "Authorization: Bearer …", "x-api-key: …" and JSON forms of them
    r"(?i)((?:authorization|x-api-key|api[-_]key|x-goog-api-key|x-amz-security-token|"
    r"aws_secret_access_key|aws_session_token|secret[-_]?key|password)\"?\s*[:=]\s*\"?)"
    r"(?:bearer\s+)?[^\s\",}]+",
    r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}",
    # provider key shapes: sk-…, sk-ant-…, sk-proj-…, gsk_…, xai-…, AIza…, AWS access key ids
    r"()\b(?:sk|rk|pk)-[A-Za-z0-9_-]{8,}",
    r"()\b(?:gsk_|xai-)[A-Za-z0-9_-]{16,}",
    r"()\bAIza[0-9A-Za-z_-]{20,}",
    r"()\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    # AWS session tokens (STS): long base64 text beginning with the shapes STS issues them in
    r"()\b(?:FwoGZXIvYXdzE|IQoJb3JpZ2luX2Vj|IQo[A-Za-z0-9])[A-Za-z0-9/+=]{40,}",
)
_shape_patterns: tuple[re.Pattern[str], ...] | None = None


def _shapes() -> tuple[re.Pattern[str], ...]:
    global _shape_patterns
    if _shape_patterns is None:
        _shape_patterns = tuple(re.compile(source) for source in _SHAPE_SOURCES)
    return _shape_patterns


# A client key shorter than this is not redacted on its own (a test key "x" would blank every x).
MIN_SECRET = 8
_MAX_SECRETS = 64  # the most recent client keys kept; older ones still match the shapes above
_lock = threading.Lock()
_secrets: OrderedDict[str, None] = OrderedDict()
# The remembered keys as one pattern, made at the first text redacted after a key was added (each
# request remembers its client's key: compiling it then would cost every first request).
_secret_pattern: re.Pattern[str] | None = None


def remember_secret(value: object) -> None:
    """Redact `value` wherever it appears from now on (SEC-9)."""
    global _secret_pattern
    if not isinstance(value, str) or len(value) < MIN_SECRET:
        return
    with _lock:
        if value in _secrets:
            _secrets.move_to_end(value)
            return
        _secrets[value] = None
        while len(_secrets) > _MAX_SECRETS:
            _secrets.popitem(last=False)
        _secret_pattern = None


def _secrets_pattern() -> re.Pattern[str] | None:
    global _secret_pattern
    with _lock:
        if _secret_pattern is None and _secrets:
            ordered = sorted(_secrets, key=len, reverse=True)  # the longest first: no partial leftovers
            _secret_pattern = re.compile("|".join(re.escape(secret) for secret in ordered))
        return _secret_pattern


def remember_client_secrets(client: Any) -> None:
    """Read the credentials of an SDK client once and remember them for redaction: `api_key`
    (openai, anthropic and alike), and a boto3 client's AWS secret key and session token."""
    if not is_botocore_client(client):  # a boto3 client has neither: asking costs a botocore hook trip
        for name in ("api_key", "auth_token"):
            remember_secret(_plain_attribute(client, name))
    credentials = _plain_attribute(_plain_attribute(client, "_request_signer"), "_credentials")
    if credentials is not None:
        for name in ("secret_key", "token"):
            remember_secret(_plain_attribute(credentials, name))


def _plain_attribute(obj: Any, name: str) -> Any:
    """An attribute without running arbitrary code paths of a custom client (a property may raise)."""
    if obj is None:
        return None
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def redact(text: str) -> str:
    pattern = _secret_pattern
    if pattern is None and _secrets:
        pattern = _secrets_pattern()
    if pattern is not None:
        text = pattern.sub("[REDACTED]", text)
    for shape in _shape_patterns or _shapes():
        text = shape.sub(lambda m: m.group(1) + "[REDACTED]", text)
    return text


def redact_value(value: Any, depth: int = 0) -> Any:
    """`redact` over the strings of a JSON-like value (an error body), nesting bounded."""
    if isinstance(value, str):
        return redact(value)
    if depth >= 32:
        return value
    if isinstance(value, dict):
        return {key: redact_value(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [redact_value(item, depth + 1) for item in value]
    return value


def truncate(text: str, limit: int = 4096) -> str:
    return text if len(text) <= limit else text[:limit]


def _safe_str(value: object) -> str:
    try:
        return str(value)
    except Exception:  # an exception whose __str__ raises: its type says enough
        return f"<{type(value).__name__}>"


def error_text(error: BaseException, limit: int = 4096) -> str:
    """SEC-9: the one text of an error the library writes (a trace, a notice, a span, a log)."""
    return truncate(redact(_safe_str(error)), limit)


def traceback_text(error: BaseException) -> str:
    """An error's formatted traceback (the chain included), redacted: a span's exception event."""
    try:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    except Exception:
        text = f"{type(error).__name__}: {_safe_str(error)}"
    return redact(text)


def redact_headers(value: Any, depth: int = 0) -> Any:
    """A request's keyword arguments with the values of secret headers (`SECRET_HEADERS`, e.g. an
    `extra_headers` Authorization) replaced, at any depth, for a repr (SEC-9)."""
    if depth >= 8:
        return value
    if isinstance(value, dict):
        return {
            key: "[REDACTED]"
            if isinstance(key, str) and key.lower() in SECRET_HEADERS
            else redact_headers(item, depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return type(value)(redact_headers(item, depth + 1) for item in value)
    return value


def scrub_error(error: BaseException) -> BaseException:
    """SEC-9: `error` and every error in its chain (`__cause__`, `__context__`) with secrets
    removed in place from their `args` and every text attribute (an SDK's `message`, `body`,
    `api_message`; a JSONDecodeError's `doc`, which is the raw frame: cut to its head as well).
    Returns `error`."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen or len(seen) >= 64:
            continue
        seen.add(id(current))
        # Only what a secret was removed from is replaced: anything else keeps its identity.
        with contextlib.suppress(Exception):  # args that cannot be set: the attributes still are
            args = tuple(_scrubbed(arg) for arg in current.args)
            if any(new is not old for new, old in zip(args, current.args, strict=True)):
                current.args = args
        fields = getattr(current, "__dict__", None)
        if isinstance(fields, dict):
            for name, value in list(fields.items()):
                if isinstance(current, json.JSONDecodeError) and name == "doc" and isinstance(value, str):
                    value = fields[name] = truncate(value, 200)
                new = _scrubbed(value)
                if new is not value:
                    fields[name] = new
        pending.extend((current.__cause__, current.__context__))
    return error


def _scrubbed(value: Any) -> Any:
    """`value` redacted, or `value` itself when it holds no secret (or is no text at all)."""
    if not isinstance(value, (str, dict, list)):
        return value
    new = redact_value(value)
    try:
        return value if new == value else new
    except Exception:  # a comparison that raises: the redacted copy
        return new


class RedactingFilter(logging.Filter):
    """SEC-9 for logs: a record of the `fsm_agent` logger leaves with its message and its
    exception text redacted (the exception's own objects are scrubbed too)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, dict):
            # structlog's stdlib integration (ProcessorFormatter) hands the event dict itself to
            # the formatter: it must stay a dict, its values redacted.
            record.msg = redact_value(record.msg)
            if record.args:
                record.args = redact_value(record.args)
        else:
            try:
                message = record.getMessage()
            except Exception:
                return True  # a bad format string: logging reports it as it would
            record.msg, record.args = redact(message), None
        if record.exc_info and record.exc_info[1] is not None:
            scrub_error(record.exc_info[1])
            if not record.exc_text:
                record.exc_text = traceback_text(record.exc_info[1]).rstrip("\n")
        return True
