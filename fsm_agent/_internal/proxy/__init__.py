"""The proxy (PX-): `fsm-agent serve`, an OpenAI- and Anthropic-compatible streaming server.

`config.py` reads and checks the TOML configuration; `upstream.py` makes the routes' clients
and a request's SDK call; `app.py` is the Starlette application; `stream.py` one answer on the
wire (keepalives, in-band errors, cancellation); `failures.py` what a failed request says;
`traces.py` one trace file per request; `metrics.py` the Prometheus counters. The translation
of the machine's events into each API's payloads and bytes is `wrap/`'s, shared with `wrap()`.
"""
