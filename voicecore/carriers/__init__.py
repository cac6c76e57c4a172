"""Telephony carriers other than Twilio: one sans-I/O protocol module each (docs/reference/carriers.md).

Every carrier module here speaks its carrier's media-stream WebSocket protocol without I/O and turns it
into the events of :mod:`voicecore.carriers.events`, so the gateway can serve any carrier through one
shape. Each module holds:

- ``<Carrier>StreamProtocol``: the server side of one stream (receive_text / receive_binary -> events;
  deadline_violation; statistics; a close-code table in its docstring);
- ``<Carrier>OutboundEncoder``: the exact wire messages we send (media, mark, clear) as
  :class:`voicecore.carriers.events.Outbound`;
- ``<Carrier>CarrierSide``: the carrier's end of the same protocol (what the carrier sends, parsing what
  we send), the core of that carrier's simulator mode;
- the carrier's answer document (XML / NCCO / TeXML) and its request signing, where it has them.

Twilio keeps its own home in :mod:`voicecore.carriers.twilio` (the gateway's first carrier).
"""
