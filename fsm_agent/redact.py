"""Removes secrets from text before it reaches an error, a log or a trace (TR-5, RES-10).

Pure string functions; never performs I/O.
"""

from __future__ import annotations

import re

__all__ = ["SECRET_HEADERS", "redact", "truncate"]

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
    # provider key shapes: sk-…, sk-ant-…, AIza…, AWS access key ids
    re.compile(r"()\b(?:sk|rk|pk)-[A-Za-z0-9_-]{8,}"),
    re.compile(r"()\bAIza[0-9A-Za-z_-]{20,}"),
    re.compile(r"()\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
)


def redact(text: str) -> str:
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + "[REDACTED]", text)
    return text


def truncate(text: str, limit: int = 4096) -> str:
    return text if len(text) <= limit else text[:limit]
