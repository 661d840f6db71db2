"""The proxy's configuration (PX-2): checked whole at start, each mistake naming its line and key."""

from __future__ import annotations

import pytest

from fsm_agent import Backoff, Recovery, Timeouts
from fsm_agent.proxy import ConfigError, load_config, parse_config

ENV = {"KEY_A": "sk-a-0123456789", "PROXY_KEYS": "one, two"}
GOOD = """\
[proxy]
port = 9000
keys_env = "PROXY_KEYS"
keepalive = 2.5

[session]
retries = 1
health = "redis://127.0.0.1:6379/0"
backoff = { base = 0.1, cap = 2.0 }
[session.timeouts]
connect = 5
[session.recovery]
continue = true
final = "raise"

[models.fast]
[[models.fast.routes]]
provider = "openai"
base_url = "https://api.example.com/v1"
key_env = "KEY_A"
model = "gpt-4.1-mini"
retries = 0

[[models.fast.routes]]
provider = "openai"
key_env = "KEY_A"
model = "gpt-4.1-mini"
"""


def test_a_good_configuration_becomes_values() -> None:
    config = parse_config(GOOD, "good.toml", ENV)
    assert config.port == 9000 and config.keepalive == 2.5 and config.keys == ("one", "two")
    assert config.health == "redis://127.0.0.1:6379/0"
    assert config.session["retries"] == 1
    assert config.session["backoff"] == Backoff(base=0.1, cap=2.0)
    assert config.session["timeouts"] == Timeouts(connect=5)
    assert config.session["recovery"] == Recovery(continue_=True, final="raise")
    first, second = config.models["fast"]
    assert (first.name, first.retries, first.key) == ("openai:gpt-4.1-mini", 0, "sk-a-0123456789")
    assert second.name == "openai:gpt-4.1-mini#2" and second.base_url is None
    shown = repr(config) + repr(first)
    assert "sk-a-0123456789" not in shown and "two" not in shown


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (("port = 9000", "port = 99999"), "good.toml:2: proxy.port: must be between 0 and 65535"),
        (("keepalive = 2.5", "keepalive = 0"), "good.toml:4: proxy.keepalive: must be > 0"),
        (("retries = 1", "retris = 1"), "good.toml:7: session.retris: unknown key"),
        (
            ('provider = "openai"\nbase', 'provider = "azure"\nbase'),
            "good.toml:18: models.fast.routes[0].provider",
        ),
        (
            (
                'key_env = "KEY_A"\nmodel = "gpt-4.1-mini"\nretries',
                'key_env = "NOPE"\nmodel = "gpt-4.1-mini"\nretries',
            ),
            "good.toml:20: models.fast.routes[0].key_env: the environment variable NOPE is not set",
        ),
        (("connect = 5", "connect = -1"), "good.toml:11: session.timeouts.connect: must be > 0"),
        (('final = "raise"', 'final = "explode"'), "good.toml:12: session.recovery: "),
        (
            ('health = "redis', 'health = "http'),
            "good.toml:8: session.health: must be 'memory' or a redis:// URL",
        ),
        (('base_url = "https', 'base_url = "ftp'), "good.toml:19: models.fast.routes[0].base_url"),
        (("port = 9000", "port = = 9000"), "(at line 2, column 8)"),
    ],
)
def test_each_mistake_names_its_line_and_key(edit: tuple[str, str], where: str) -> None:
    old, new = edit
    assert old in GOOD
    with pytest.raises(ConfigError) as caught:
        parse_config(GOOD.replace(old, new, 1), "good.toml", ENV)
    assert where in str(caught.value)


def test_no_alias_and_an_unreadable_file_are_clear(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="no model alias is configured"):
        parse_config("[proxy]\nport = 1\n", "x.toml", ENV)
    with pytest.raises(ConfigError, match="cannot read the configuration"):
        load_config(tmp_path / "missing.toml")
