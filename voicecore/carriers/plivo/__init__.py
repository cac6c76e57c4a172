"""Plivo: bidirectional audio streams from an answer XML, and the Call API (docs/reference/carriers.md).

- ``protocol.py``: the stream's server side (events, order, close codes), the messages we send, the unplayed
  audio bounded by checkpoints (``CheckpointLead``), Plivo's own end of the stream (the simulator's core), the
  answer XML and the V3 request signatures (webhook and stream upgrade);
- ``backlog.py``: that bound as the gateway keeps it for one call, from what it sends and what is echoed;
- ``rest.py``: the Call API requests that hang up or transfer a call, the ``<Dial>`` of a transfer, and
  reading their answers;
- ``carrier.py``: the carrier's descriptor, which the registry (voicecore/carriers/registry.py) serves;
- ``sim.py``: Plivo as the carrier simulator plays it: its signed requests and stream upgrade, its XML read, the
  Call API's callbacks and a transfer's ``aleg_url`` fetch.
"""
