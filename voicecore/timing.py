"""Every timing and audio-size constant of the media path, in one place (units in the names)."""

SAMPLE_RATE_HZ = 8000
BYTES_PER_MS = 8  # mu-law at 8 kHz: one byte per sample
FRAME_MS = 20
FRAME_BYTES = 160  # one Twilio media message: 20 ms of 8 kHz mu-law
FRAME_NS = FRAME_MS * 1_000_000
FRAME_B64_CHARS = 216

DEFAULT_LEAD_MS = 80  # send-ahead kept in the carrier's buffer (docs/explanation/architecture.md#section-6)
DEFAULT_MARK_EVERY_FRAMES = 5  # a mark after every 100 ms of audio gives the played position
# When the carrier's buffer is dry (a response starts, or the model fell behind), wait until a lead's
# worth of frames is ready, or this long, before releasing: the model's first delta is often a frame or
# two, and releasing it alone puts a gap into the caller's audio one tick later. A vendor that delivers at
# real time or faster fills a lead within a few ticks, so the bound only matters when its delivery pauses
# after a short first chunk: then the caller hears the answer start later, whole, instead of its first word
# and a gap (60 ms here gave 1-16 underruns per 50-call Gemini receptionist run on a quiet machine, the
# vendor's next chunks coming ~200 ms after its first: docs/how-to/use-gemini.md#prefill).
DEFAULT_START_HOLD_MS = 300
MAX_CATCH_UP_FRAMES = 10  # bounded burst after a stall: never more than 200 ms at once

HEARTBEAT_MS = 150
# A process with no live call beats this often instead: heartbeats feed /healthz alone (standby takeover
# goes by locks, voicecore/standby.py), and an idle node should sleep, not wake 7 times a second per process.
IDLE_HEARTBEAT_MS = 1000
HEARTBEAT_MISSES_DEAD = 3  # of the interval the process announced with its last heartbeat
# The processes a call cannot do without (nothing paces its audio, nothing answers the caller): the node is
# ready (/healthz 200, `voicecore up` and the demo's readiness wait) only while each has been heard from.
ESSENTIAL_WORKERS = ("pacer", "model")


def heartbeat_interval_ms(live_calls: bool) -> int:
    return HEARTBEAT_MS if live_calls else IDLE_HEARTBEAT_MS

START_DEADLINE_MS = 5000  # a stream must send a valid `start` this soon after opening
TOKEN_TTL_MS = 60_000  # a TwiML session token is valid this long, once
# A draining node waits this long, at most, for the stream of a call it answered <Connect><Stream> before the
# drain began (Twilio dials the stream right after it fetched the TwiML: well under a second); a caller who
# hung up in between never sends one, and the node stops without it after this.
DRAIN_STREAM_WAIT_MS = 10_000
# A call a draining node ended at the deadline is owed the answer to its carrier's re-attach request (Twilio's
# <Connect action>, POSTed right after the stream closed): the node answers it <Hangup/> before it stops, or
# the carrier finds nobody there and the caller hears its error message. It waits this long for one, at most.
DRAIN_REATTACH_WAIT_MS = 3000
MAX_MESSAGE_BYTES = 64 * 1024

INBOUND_BATCH_MS = 100  # caller audio is appended to the model in batches of this size
# A barge-in should have its `clear` within this long: speech_started -> cancel -> clear takes milliseconds;
# 1.5 s covers a slow loop and the turn-taking controller's semantic barge-in after 0.5-1 s of speech.
# Used by the carrier simulator (a barge-in without a clear) and the reports (which clears are barge-ins').
BARGEIN_CLEAR_WINDOW_MS = 1500
