"""How the pacer writes one call's outbound messages, as the call's carrier module says.

Owns the contract between a carrier protocol module, the gateway (which writes a call's templates into its
arena slot when the call starts) and the pacer (whose kernels copy them byte by byte around each frame's
base64 and each mark's name). Must not know any carrier's field names: each carrier module builds its
:class:`WireTemplates` from its own encoder.

Two modes:

- **final** (``raw`` False): the pacer writes the finished message: ``media_prefix`` + base64 of one
  160-byte mu-law frame + ``media_suffix``; ``mark_prefix`` + name + ``mark_suffix`` (a mark name is ASCII
  digits and colons, voicecore/carriers/marks.py, so it needs no escaping in JSON); ``clear``. The gateway
  sends each entry as it is (a text frame, or binary when ``binary``). Twilio, Telnyx and Plivo (mu-law).
- **raw** (``raw`` True): the carrier needs work the pacer must not do (resampling to 16 kHz L16, batching
  20 ms frames into 100 ms chunks): the pacer writes ``RAW_MEDIA`` + the 160 mu-law bytes, ``RAW_MARK`` +
  name, or ``RAW_CLEAR``, and the gateway's carrier edge finishes each message. Vonage, Exotel, and any
  carrier whose negotiated encoding is not mu-law at 8 kHz.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_MARK_NAME_BYTES", "MAX_TEMPLATE_BYTES", "RAW", "RAW_CLEAR", "RAW_MARK", "RAW_MEDIA", "WireTemplates"]

# Each piece. 128 was too small: Plivo's playAudio head carries contentType and sampleRate besides the
# stream id (103 bytes + a 36-character UUID = 139; Plivo ids may be 128 characters: 231). 256 holds every
# carrier's head around the longest id its module accepts. What fits a wire slot (prefix + 216 base64
# characters + suffix) is checked against the arena's slot size when the templates are written.
MAX_TEMPLATE_BYTES = 256
# A mark name as the pacer writes it: two int64 counters in decimal (19 digits each at most), a colon, and
# ":end" (voicecore/carriers/marks.py).
MAX_MARK_NAME_BYTES = 19 + 1 + 19 + 4

RAW_MEDIA = b"A"
RAW_MARK = b"M"
RAW_CLEAR = b"C"


@dataclass(frozen=True, slots=True)
class WireTemplates:
    media_prefix: bytes
    media_suffix: bytes
    mark_prefix: bytes
    mark_suffix: bytes
    clear: bytes
    binary: bool = False  # final-mode entries go out as binary WebSocket frames
    raw: bool = False

    def __post_init__(self) -> None:
        for name in ("media_prefix", "media_suffix", "mark_prefix", "mark_suffix", "clear"):
            value = getattr(self, name)
            if not isinstance(value, bytes) or len(value) > MAX_TEMPLATE_BYTES:
                raise ValueError(f"{name} must be bytes of at most {MAX_TEMPLATE_BYTES}")
        if self.raw and self.binary:
            raise ValueError("raw entries are finished by the gateway: binary says nothing for them")
        # The gateway tells an entry's kind by its head (media first, then mark, then clear): no head may be
        # empty or a prefix of another, or a mark could pass for a media message.
        heads = (self.media_prefix, self.mark_prefix, self.clear)
        if not all(heads) or any(heads[i].startswith(heads[j]) for i in range(3) for j in range(3) if i != j):
            raise ValueError("media_prefix, mark_prefix and clear must be non-empty and none a prefix of another")


# The raw mode's pieces: the gateway's carrier edge reads the kind from the first byte.
RAW = WireTemplates(media_prefix=RAW_MEDIA, media_suffix=b"", mark_prefix=RAW_MARK, mark_suffix=b"",
                    clear=RAW_CLEAR, raw=True)
