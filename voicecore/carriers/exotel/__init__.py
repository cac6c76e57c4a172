"""Exotel: the Voicebot applet's bidirectional media stream from a dynamic-URL answer (docs/reference/carriers.md).

- ``protocol.py``: the stream's server side (events, order, close codes), the messages we send, the chunk rules
  and the batcher that obeys them, Exotel's own end of the stream (the simulator's core), the dynamic-URL
  answer and the Basic-auth check;
- ``carrier.py``: the carrier's descriptor, which the registry (voicecore/carriers/registry.py) serves. Exotel
  has no REST call that ends or redirects a Voicebot call: closing the stream hands the call to the flow's
  next applet;
- ``sim.py``: Exotel as the carrier simulator plays it: the dynamic-URL request, its JSON answer read, the Basic
  credentials on the stream's upgrade.
"""
