"""Compatibility: the names `drivers/common.py` held before it was split by concern.

`callbacks` (the caller's callbacks and their rules), `failures` (what ended an attempt, as an
event), `clients` (what a caller's object is), `source` (each attempt's client, without the SDK's
retries). Import from those; this module only re-exports them for code not yet moved.
"""

from __future__ import annotations

from .callbacks import (
    CallbackError,
    Callbacks,
    activity_label,
    check_callbacks,
    settle_content,
    settle_notice,
)
from .clients import _async_by_class, _client_classes, check_client, is_async_client, looks_like_client
from .failures import failure_event, is_read_timeout
from .source import ClientSource, _no_retry_views, _viewless_classes, without_sdk_retries

__all__ = [
    "CallbackError",
    "Callbacks",
    "ClientSource",
    "_async_by_class",
    "_client_classes",
    "_no_retry_views",
    "_viewless_classes",
    "activity_label",
    "check_callbacks",
    "check_client",
    "failure_event",
    "is_async_client",
    "is_read_timeout",
    "looks_like_client",
    "settle_content",
    "settle_notice",
    "without_sdk_retries",
]
