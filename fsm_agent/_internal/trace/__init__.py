"""Transition traces: records, sinks, the JSON Lines format, and offline replay (TR-1..6).

`records` defines the unit (one transition record), `codec` turns events into JSON values and
back, `sinks` writes traces, `reader` reads and checks them, `replay` and `whatif` re-drive a fresh
machine from them, `report` holds what a replay found. Nothing here imports a provider SDK.
"""
