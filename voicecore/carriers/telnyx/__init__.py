"""Telnyx: media streaming over WebSocket from a TeXML application, and Call Control (docs/reference/carriers.md).

- ``protocol.py``: the stream's server side (events, order, close codes), the messages we send, Telnyx's own
  end of the stream (the simulator's core), the TeXML answer and the webhooks' Ed25519 signatures;
- ``rest.py``: the Call Control ``hangup`` and ``transfer`` requests and reading their answers;
- ``carrier.py``: the carrier's descriptor, which the registry (voicecore/carriers/registry.py) serves;
- ``sim.py``: Telnyx as the carrier simulator plays it: its signed TeXML requests, its TeXML answer read, its
  calls' ids, the TeXML Calls API's callbacks.
"""
