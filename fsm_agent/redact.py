"""Removes secrets from text before it reaches an error, a log or a trace (TR-5, RES-10, SEC-9).

Two kinds of secret are removed: the well-known key shapes (`sk-…`, `sk-ant-…`, `gsk_…`, `xai-…`,
`AIza…`, AWS access key ids, bearer tokens, `api_key: …` pairs), and the keys of the clients the
session was given, whatever their shape — read once from each client object when a request is
planned (`remember_client_secrets`) and kept only in this process's memory, never in a record.

Pure string functions apart from that registry; never performs I/O.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any

from .urls import is_botocore_client

__all__ = [
    "SECRET_HEADERS",
    "redact",
    "redact_value",
    "remember_client_secrets",
    "remember_secret",
    "truncate",
]

SECRET_HEADERS = frozenset(
    {"authorization", "x-api-key", "api-key", "x-goog-api-key", "x-amz-security-token", "cookie"}
)

_PATTERNS = (
    # "Authorization: Bearer …", "x-api-key: …" and JSON forms of them
    re.compile(
        r"(?i)((?:authorization|x-api-key|api[-_]key|x-goog-api-key|x-amz-security-token|"
        r"aws_secret_access_key|aws_session_token|secret[-_]?key|password)\"?\s*[:=]\s*\"?)"
        r"(?:bearer\s+)?[^\s\",}]+"
    ),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"),
    # provider key shapes: sk-…, sk-ant-…, sk-proj-…, gsk_…, xai-…, AIza…, AWS access key ids
    re.compile(r"()\b(?:sk|rk|pk)-[A-Za-z0-9_-]{8,}"),
    re.compile(r"()\b(?:gsk_|xai-)[A-Za-z0-9_-]{16,}"),
    re.compile(r"()\bAIza[0-9A-Za-z_-]{20,}"),
    re.compile(r"()\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
)

# A client key shorter than this is not redacted on its own (a test key "x" would blank every x).
MIN_SECRET = 8
_MAX_SECRETS = 64  # the most recent client keys kept; older ones still match the shapes above
_lock = threading.Lock()
_secrets: OrderedDict[str, None] = OrderedDict()
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
        ordered = sorted(_secrets, key=len, reverse=True)  # the longest first: no partial leftovers
        _secret_pattern = re.compile("|".join(re.escape(secret) for secret in ordered))


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
    if pattern is not None:
        text = pattern.sub("[REDACTED]", text)
    for shape in _PATTERNS:
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
