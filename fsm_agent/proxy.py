"""`fsm_agent.proxy`: the streaming proxy as an ASGI application, for your own server (PX-1).

```python
import fsm_agent.proxy

app = fsm_agent.proxy.app("fsm-agent.toml")   # mount it, or run it: uvicorn module:app
```

`fsm-agent serve --config fsm-agent.toml` runs the same application on uvicorn. The
configuration's keys are on the proxy guide page (docs/guide/proxy.md). Needs the `proxy` extra
(`pip install 'fsm_agent[proxy]'`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ._internal.proxy.config import ConfigError, ProxyConfig, load_config, parse_config

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["ConfigError", "ProxyConfig", "app", "load_config", "parse_config"]


def app(config: ProxyConfig | str | os.PathLike[str]) -> Starlette:
    """The proxy as a Starlette (ASGI) application.

    Args:
        config: A `ProxyConfig` (`load_config(path)`, `parse_config(text)`) or the path of a TOML
            configuration file.

    Raises:
        ConfigError: The configuration is not valid; the message names the line and the key.
    """
    from ._internal.proxy.app import build_app

    return build_app(config)
