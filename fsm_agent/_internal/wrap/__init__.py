"""`fsm_agent.wrap(client)` (WR-1): an SDK client whose streaming calls run through the machine.

`api.py` recognises the client and builds its stand-in; `clients.py` holds the stand-ins'
namespaces (`chat.completions`, `responses`, `messages`, …); `streams.py` the stream objects they
return; one module per API (`openai_chat.py`, …) holds that API's translator (the machine's events
as the API's payloads, which the proxy can send as they are) and its builder (the payloads as the
SDK's objects). `text_gate.py` is what every translator does with the library's own text.
"""
