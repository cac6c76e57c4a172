"""Twilio: Media Streams from a ``<Connect><Stream>`` TwiML answer, and the Calls REST resource
(docs/reference/carriers.md, docs/explanation/protocols.md#a).

- ``stream.py``: the stream's server side (events, order, close codes) and the exact messages we send (the
  golden bytes of tests/unit/test_twilio_wire_format.py);
- ``webhook.py``: the voice webhook and status callback fields, the TwiML answer (and the ``<Reject>`` /
  ``<Redirect>`` of a draining node) and the ``X-Twilio-Signature`` check, over ``signature.py``'s HMAC;
- ``rest.py``: the Calls resource requests that hang up or redirect a call, and reading their answers;
- ``carrier.py``: the carrier's descriptor, which the registry (voicecore/carriers/registry.py) serves;
- ``sim.py``: Twilio as the carrier simulator plays it: the Calls API's progress and AMD callbacks, signed.

Twilio's own end of the stream, for the simulator, is voicecore/sim/carrier_core.py's Twilio adapter.
"""
