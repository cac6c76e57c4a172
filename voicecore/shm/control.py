"""The per-call control block: one row of int64 words per call slot, each word with exactly one writer.

Owns the word indices and their meaning; knows nothing of sockets or processes. Single-writer words are what
make the block safe without locks: a reader may see an old value, never a torn one (aligned 64-bit stores).
Writers publish in order: payload, then header, then the counter or state word that makes it visible
(docs/explanation/architecture.md#section-4). x86-64 keeps stores in program order; see rings.py for the
fences.
"""

# --- written by the gateway -------------------------------------------------------------------
STATE = 0  # SLOT_FREE / SLOT_ACTIVE / SLOT_ENDING
GENERATION = 1  # bumped each time the slot is claimed for a new call
IN_HEAD = 2  # inbound ring: frames written (producer counter)
IN_OVERRUNS = 3  # inbound frames dropped because the ring was full
WIRE_TAIL = 4  # wire ring: entries taken by the gateway (consumer counter)
PLAYED_TAG = 5  # tag of the last mark echoed because its audio played
PLAYED_FRAMES = 6  # frames of PLAYED_TAG played through that mark
PLAYED_AT_NS = 7  # CLOCK_MONOTONIC when the audio through that mark had played: its echo, less what the
#                   carrier edge knows it came late by (a resampled stream's mark waits for a whole frame)
STARTED_AT_NS = 8  # when the stream's `start` was accepted
CLEARS_SENT = 9  # `clear` messages written to the socket
MARKS_DISCARDED = 10  # mark echoes that came back because of a `clear`, not because audio played
LEAD_NS = 11  # send-ahead the pacer keeps in this call's carrier buffer, ns, written at claim time from the
#              call's carrier (its edge batches or holds audio back: an Exotel chunk); 0: the pacer's lead_ms
BACKLOG_MAX_FRAMES = 12  # the most unplayed frames known from the carrier's echoes the pacer may leave in its
#                          buffer, written at claim time from the call's carrier (Plivo's checkpoints); 0: no
#                          bound, the lead by time alone (every other carrier)
CARRIER_PLAYED_POS = 13  # frames of this call known played, or thrown away by a clear the gateway sent, counted
#                          in wire order as the pacer's WIRE_FRAMES (a call with BACKLOG_MAX_FRAMES only)
CODEC = 14  # the law of every frame this call's rings carry, written at claim time: CODEC_ULAW (0) or CODEC_ALAW
#            (a carrier stream in A-law passed through to a model that takes it: the pacer plays its A-law
#            fallback lines, the model worker opens the session in A-law)

# --- written by the model worker --------------------------------------------------------------
IN_TAIL = 16  # inbound ring: frames taken (consumer counter)
OUT_HEAD = 17  # outbound ring: slots written (producer counter)
CANCEL_SEQ = 18  # bumped on every cancel; the pacer compares it with CANCEL_SEEN_SEQ
CANCEL_TAG = 19  # the tag of the newest cancel
CANCEL_DECISION_NS = 20  # CLOCK_MONOTONIC of the newest barge-in decision
MODEL_GENERATION = 21  # the slot GENERATION the model worker is serving (0: none yet)
OUT_DROPPED = 22  # outbound frames the model worker could not place (ring full: reported, not written)
NEXT_TAG = 23  # the next response tag to hand out: a restarted worker continues, never reuses a tag
PAUSED_TAG = 24  # release of this tag's frames is held (a bare VAD edge: the caller may be barging in); 0: none
PAUSE_SINCE_NS = 25  # CLOCK_MONOTONIC when that hold began (written before PAUSED_TAG)
FALLBACK_CLIP = 26  # the fallback line asked for (voicecore/fallback: a clip number), written before ...
FALLBACK_SEQ = 27  # ... this is bumped: the pacer plays the line once the call's queued audio has played
MODEL_ALIVE_NS = 28  # CLOCK_MONOTONIC the model worker last stamped this call (every ~100 ms while it serves)
MODEL_EXPECTING = 29  # 1 while a response is expected or playing (a caller waits on the model); 0 when idle
HOLD_CLIP = 30  # the call's hold line in its language: what the pacer plays on its own when the model worker
#                 stamps no more (MODEL_ALIVE_NS older than the pacer's model_silent limit) while MODEL_EXPECTING

# --- written by the pacer ---------------------------------------------------------------------
OUT_TAIL = 32  # outbound ring: slots consumed (released or skipped)
WIRE_HEAD = 33  # wire ring: entries written (producer counter)
SENT_TAG = 34  # tag of the newest frame put on the wire queue
SENT_FRAMES = 35  # frames of SENT_TAG put on the wire queue
CANCEL_SEEN_SEQ = 36  # the CANCEL_SEQ the pacer has acted on
CARRIER_EMPTY_AT_NS = 37  # pacer's model of when the carrier's play buffer runs dry
FRAMES_RELEASED = 38
FRAMES_SKIPPED = 39  # frames of cancelled tags consumed without sending (INV-STALE)
UNDERRUNS = 40  # ticks where a live, approved response had no frame ready and the carrier ran dry
GATE_HELD = 41  # ticks where the head frame waited for the gate watermark (INV-GATE)
WIRE_FULL = 42  # ticks the wire ring had no room (gateway behind)
PACER_GENERATION = 43  # the slot GENERATION the pacer has initialised its state for
CLEAR_QUEUED_NS = 44  # CLOCK_MONOTONIC when the newest `clear` went into the wire ring
LAST_RELEASE_NS = 45
SENT_CLOSED = 46  # SENT_OPEN / SENT_ENDED (its ":end" mark is queued) / SENT_CLEARED (cut by a `clear`)
UNDERRUN_OPEN = 47  # 1 while the carrier is dry inside a live response and that underrun is counted
HOLD_SINCE_NS = 48  # 1 + when the pacer started holding a dry carrier's next frame to prefill (0: not holding)
START_HOLDS = 49  # prefills that waited for audio (counted once each)
FRAMES_SUPERSEDED = 50  # frames of an older tag met after a newer tag's frames went out (INV-ONE-VOICE);
#                         also counted in FRAMES_SKIPPED
FALLBACK_SEEN_SEQ = 51  # the FALLBACK_SEQ the pacer has taken in
FALLBACK_PENDING = 52  # 1 + the clip asked for and not started yet (0: none)
FALLBACK_PLAYING = 53  # 1 + the clip being played now (0: none): nothing of the outbound ring goes out meanwhile
FALLBACK_POS = 54  # frames of that clip put on the wire queue
FALLBACK_LINES = 55  # fallback lines started in this call
FALLBACK_AUTO_FOR_NS = 56  # the MODEL_ALIVE_NS the pacer played its own hold line for (one line per silence)
WIRE_FRAMES = 57  # media entries (responses' and fallback lines' frames) put on the wire ring, for a call with
#                   BACKLOG_MAX_FRAMES only: with CARRIER_PLAYED_POS it gives the carrier's unplayed backlog
BACKLOG_HELD = 58  # ticks a due frame waited because the carrier's unplayed backlog was at BACKLOG_MAX_FRAMES
#                    (the carrier still has that much to play: not an underrun)

# --- tag table, written by the model worker ---------------------------------------------------
# TAG_TABLE_SIZE rows of TAG_ROW_WORDS words at TAG_TABLE_BASE; row = tag % TAG_TABLE_SIZE. A row whose
# TAG word differs from a slot's tag means that tag is long gone: treat it as dead.
TAG_TABLE_BASE = 64
TAG_TABLE_SIZE = 16
TAG_ROW_WORDS = 4
TAG_ROW_TAG = 0
TAG_ROW_STATE = 1  # TAG_LIVE / TAG_CANCELLED / TAG_DONE
TAG_ROW_APPROVED_FRAMES = 2  # frames with index < this may be released (INV-GATE)
TAG_ROW_GATED = 3  # 1 when the validator's verdict bounds release; 0 = approve-all

CONTROL_WORDS = TAG_TABLE_BASE + TAG_TABLE_SIZE * TAG_ROW_WORDS  # 128

SLOT_FREE = 0
SLOT_ACTIVE = 1
SLOT_ENDING = 2
# An ended call's slot rests this long before the gateway hands it out again: the pacer and the workers finish
# with it first (they see SLOT_ENDING on their next pass). A node needs spare slots for calls that churn.
SLOT_QUARANTINE_MS = 2000

TAG_LIVE = 1
TAG_CANCELLED = 2
TAG_DONE = 3

APPROVE_ALL = 1 << 62

CODEC_ULAW = 0  # G.711 mu-law (audio/pcmu, g711_ulaw): every call unless the gateway said otherwise
CODEC_ALAW = 1  # G.711 A-law (audio/pcma, g711_alaw)

SENT_OPEN = 0
SENT_ENDED = 1
SENT_CLEARED = 2
