"""The no-retries view of a caller's client (RES-1, RES-11): remembered, and never a stale one.

A remembered view is used only while the client's settings equal the view's own. The case that an
`id()` fingerprint got wrong: a setting reassigned twice between two requests, the second new
object taking the id of the one the view was made from (freed by the first reassignment).
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import anthropic
import openai
import pytest

import fsm_agent
from fsm_agent._internal.client_views import without_sdk_retries
from fsm_agent.testing import Emulator, Scenario


@pytest.mark.parametrize("sdk", [anthropic.Anthropic, openai.OpenAI])
def test_a_view_always_sends_where_the_client_sends_now(sdk: type) -> None:
    client = sdk(base_url="http://start.invalid", api_key="sk-test")
    for number in range(50):
        client.base_url = f"http://a{number}.invalid"
        client.base_url = f"http://b{number}.invalid"  # may reuse the id of the URL freed just before
        view = without_sdk_retries(client)
        assert str(view.base_url) == str(client.base_url)
        assert view.max_retries == 0


def test_a_view_is_reused_while_nothing_changed_and_sees_every_reassigned_setting() -> None:
    client = openai.OpenAI(base_url="http://x.invalid/v1", api_key="sk-1", timeout=30.0)
    view = without_sdk_retries(client)
    assert without_sdk_retries(client) is view
    client.api_key = "sk-1"  # an equal value: a copy made now would be the same
    assert without_sdk_retries(client) is view
    client.timeout = 5.0
    fresh = without_sdk_retries(client)
    assert fresh is not view and fresh.timeout == 5.0 and fresh.api_key == "sk-1"
    assert client.max_retries == 2  # the caller's client is left as it is


def test_clients_without_retries_or_views_are_used_as_they_are() -> None:
    client = openai.OpenAI(base_url="http://x.invalid/v1", api_key="sk", max_retries=0)
    assert without_sdk_retries(client) is client

    class Odd:  # no with_options: nothing to make
        max_retries = 3

    odd = Odd()
    assert without_sdk_retries(odd) is odd


def test_a_remembered_view_never_keeps_its_client_alive() -> None:
    client = anthropic.Anthropic(base_url="http://x.invalid", api_key="sk")
    client.messages  # a resource in a reference cycle with its client, as after a request  # noqa: B018
    without_sdk_retries(client)
    alive = weakref.ref(client)
    del client
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_one_view_serves_every_request_of_a_client(emulator: Emulator, sdk: str) -> None:
    """A view changes as it is used (anthropic builds its middleware chain at the first request):
    that is no reason to make another. One view per client means no copy, and no reference cycle
    of a copy's resources left for the collector, per request."""
    emulator.script(Scenario.build("hi"))
    if sdk == "anthropic":
        client: Any = anthropic.Anthropic(base_url=emulator.anthropic_base_url, api_key="sk-ant-test")
        params: dict[str, Any] = {
            "model": "m",
            "max_tokens": 16,
            "messages": [{"role": "user", "content": "hi"}],
        }
    else:
        client = openai.OpenAI(base_url=emulator.openai_base_url, api_key="sk-test")
        params = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    session = fsm_agent.Session()
    try:
        assert session.stream(client, params).content == "hi"
        view = without_sdk_retries(client)
        for _ in range(3):
            assert session.stream(client, params).content == "hi"
            assert without_sdk_retries(client) is view
    finally:
        client.close()
