"""Vonage: the Voice API's WebSocket endpoint from an answer NCCO, and the Voice API's call updates
(docs/reference/carriers.md).

- ``protocol.py``: the stream's server side (binary L16 audio, JSON control; events, order, close codes), the
  messages we send, Vonage's own end of the stream (the simulator's core), the NCCO and the signed-webhook JWT
  (webhook and stream upgrade);
- ``rest.py``: the application JWT and the ``PUT /v1/calls/{uuid}`` requests that hang up or transfer a call;
- ``carrier.py``: the carrier's descriptor, which the registry (voicecore/carriers/registry.py) serves;
- ``sim.py``: Vonage as the carrier simulator plays it: its signed webhooks and events, its NCCO read, the
  ``disconnected`` event of a synchronous connect.
"""
