"""Regenerate the simulator's speech clips in voicecore/sim/clips/ (8 kHz mu-law, raw, no header).

Owns the list of utterances (text, speaker, kind, optional voice) and the espeak-ng + sox pipeline that
renders them; knows nothing of how the simulators use them. The output is synthetic speech, so no dataset
licence applies (docs/explanation/protocols.md#e2, "Generated speech"). Run after changing a line:

    .venv/bin/python bench/make_clips.py

or, after adding lines, render only the clips that have no file yet (`--only-missing`): the existing
files are measured elsewhere (bench baselines, frame identity), so they keep their bytes, and their index
rows are rebuilt from the files as they are.

Needs `espeak-ng` and `sox` on PATH (Debian packages of the same names). The pipeline is deterministic:
sox runs with -D (no dither), so the same tool versions give byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

BYTES_PER_MS = 8  # 8 kHz mu-law: one byte per sample (voicecore/timing.py)

AGENT_VOICE = "en-us+f3"
CALLER_VOICE = "en+m3"
AGENT_WPM = 160
CALLER_WPM = 170


class Utterance(NamedTuple):
    """One clip to render. `voice` None: the role's voice (AGENT_VOICE / CALLER_VOICE); `wpm` None: the
    role's speed (a slow backchannel sets its own)."""

    name: str
    role: str  # agent | caller
    # agent: greeting, question, answer, goodbye, checkin, safe_line; caller: caller (a real turn),
    # backchannel (a listener's "mm-hmm" that asks for no answer), noise (a cough or a breath: no words)
    kind: str
    text: str  # what is spoken; the model simulator's recognised words for a caller clip
    voice: str | None = None
    wpm: int | None = None


class Noise(NamedTuple):
    """A caller sound without words (kind `noise`, text ""): bursts of shaped noise made with sox, each
    (seconds of silence before it, its length in seconds, its envelope: cough | breath)."""

    name: str
    bursts: tuple[tuple[float, float, str], ...]


SWEDISH_CALLER_VOICE = "sv+m3"

# The model simulator speaks `greeting`/`goodbye`/`checkin` when a response's instructions quote them and
# round-robins over `question` and `answer` otherwise. Numbers in answers are the ones a knowledge base
# would hold; the simulator's hallucination switch uses a number that is in none of them (777). The
# caller lines after caller_bye are the example agents' callers (examples/*/demo.toml name them).
UTTERANCES: list[Utterance] = [
    Utterance("agent_greeting", "agent", "greeting", "Hello, thanks for calling Acme. How can I help you today?"),
    Utterance("agent_question", "agent", "question",
              "Would you like to hear about our Basic plan or our Premium plan?"),
    Utterance("agent_basic_price", "agent", "answer",
              "Our Basic plan costs 199 kronor per month, with no binding period."),
    Utterance("agent_premium_price", "agent", "answer",
              "Premium costs 349 kronor per month and includes unlimited data."),
    Utterance("agent_basic_data", "agent", "answer", "Basic includes 10 gigabytes of data every month."),
    Utterance("agent_cancel", "agent", "answer", "You can cancel at any time, with one month of notice."),
    Utterance("agent_hours", "agent", "answer",
              "Our support is open every weekday, from 8 in the morning to 6 in the evening."),
    Utterance("agent_sim_card", "agent", "answer", "A new SIM card is free, and it arrives within 3 working days."),
    Utterance("agent_goodbye", "agent", "goodbye", "Thank you for calling Acme. Have a nice day, goodbye!"),
    Utterance("agent_checkin", "agent", "checkin", "Are you still there?"),
    Utterance("agent_safe_line", "agent", "safe_line", "I can't verify that."),
    Utterance("caller_hello", "caller", "caller", "Hi, I would like to know more about your plans."),
    Utterance("caller_basic_price", "caller", "caller", "How much does the Basic plan cost?"),
    Utterance("caller_premium", "caller", "caller", "And what about Premium?"),
    Utterance("caller_cancel", "caller", "caller", "Can I cancel whenever I want to, or is there a binding period?"),
    Utterance("caller_interrupt", "caller", "caller", "Sorry, wait."),
    Utterance("caller_bye", "caller", "caller", "No, that was all. Thanks, bye."),
    # receptionist
    Utterance("caller_hours", "caller", "caller", "What are your opening hours?"),
    Utterance("caller_book", "caller", "caller", "I would like to book a cleaning tomorrow at ten."),
    Utterance("caller_yes", "caller", "caller", "Yes, please."),
    Utterance("caller_no", "caller", "caller", "No, thank you."),
    Utterance("caller_person", "caller", "caller", "Can I talk to a person, please?"),
    # shop assistant (Swedish)
    Utterance("caller_sv_price", "caller", "caller", "Vad kostar Premium per månad?", SWEDISH_CALLER_VOICE),
    Utterance("caller_sv_callback", "caller", "caller", "Ring mig imorgon på plus 46 70 123 45 67.",
              SWEDISH_CALLER_VOICE),
    Utterance("caller_sv_sms", "caller", "caller", "Kan ni skicka priset som sms?", SWEDISH_CALLER_VOICE),
    Utterance("caller_sv_ja", "caller", "caller", "Ja, gärna.", SWEDISH_CALLER_VOICE),
    Utterance("caller_sv_nej", "caller", "caller", "Nej tack.", SWEDISH_CALLER_VOICE),
    Utterance("caller_sv_bye", "caller", "caller", "Tack, hej då.", SWEDISH_CALLER_VOICE),
    # interview
    Utterance("caller_ready", "caller", "caller", "Yes, I am ready to start."),
    Utterance("caller_experience", "caller", "caller", "I have worked with Python for five years."),
    Utterance("caller_done", "caller", "caller", "That is all from me, thank you."),
    # Short real turns: a caller who cuts the agent off in one word must be heard as a turn, not as noise.
    # "Yeah, but on Friday." starts like a backchannel and is not one (its second word decides).
    Utterance("caller_short_no", "caller", "caller", "No."),
    Utterance("caller_short_stop", "caller", "caller", "Stop."),
    Utterance("caller_short_wait", "caller", "caller", "Wait."),
    Utterance("caller_who_is_this", "caller", "caller", "Sorry, who is this?"),
    Utterance("caller_hold_on", "caller", "caller", "Hold on a second."),
    Utterance("caller_yeah_but", "caller", "caller", "Yeah, but on Friday."),
    Utterance("caller_sv_short_nej", "caller", "caller", "Nej.", SWEDISH_CALLER_VOICE),
    Utterance("caller_sv_short_vanta", "caller", "caller", "Vänta.", SWEDISH_CALLER_VOICE),
    Utterance("caller_sv_who_is_this", "caller", "caller", "Förlåt, vem är det här?", SWEDISH_CALLER_VOICE),
    # Backchannels: the caller listening, said over the agent; the agent must talk on. One is long (a slow
    # "Okay, okay.", over 700 ms of speech: duration alone would call it a turn), one is short (under 400 ms).
    Utterance("backchannel_mm_hmm", "caller", "backchannel", "Mm-hmm."),
    Utterance("backchannel_yeah", "caller", "backchannel", "Yeah.", wpm=260),
    Utterance("backchannel_okay", "caller", "backchannel", "Okay."),
    Utterance("backchannel_uh_huh", "caller", "backchannel", "Uh-huh."),
    Utterance("backchannel_right", "caller", "backchannel", "Right."),
    Utterance("backchannel_okay_okay", "caller", "backchannel", "Okay, okay.", wpm=110),
    Utterance("backchannel_sv_mm", "caller", "backchannel", "Mm.", SWEDISH_CALLER_VOICE),
    Utterance("backchannel_sv_ja", "caller", "backchannel", "Ja.", SWEDISH_CALLER_VOICE),
    Utterance("backchannel_sv_okej", "caller", "backchannel", "Okej.", SWEDISH_CALLER_VOICE),
    Utterance("backchannel_sv_precis", "caller", "backchannel", "Precis.", SWEDISH_CALLER_VOICE),
]

# Caller sounds without words, loud enough for the model simulator's energy VAD (a turn starts on them):
# a runtime must not take them for a turn. Bursts of 150-450 ms.
NOISES: list[Noise] = [
    Noise("noise_cough", ((0.0, 0.22, "cough"),)),
    Noise("noise_cough_short", ((0.0, 0.16, "cough"),)),
    Noise("noise_breath", ((0.0, 0.42, "breath"),)),
]


# The runtime's own lines (voicecore/fallback/): what the pacer plays when the model cannot speak. The hold
# line stays under 1 s (the pacer owns it and a caller must hear it within 1 s of a failure); the
# apologies end a call the failure policy gives up on. `--fallback` renders them into voicecore/fallback/clips.
FALLBACK_UTTERANCES: list[Utterance] = [
    Utterance("en_hold", "agent", "hold", "One moment, please.", "en-us+f3"),
    Utterance("en_apology_hangup", "agent", "apology_hangup",
              "I'm sorry, we're having technical trouble. Please call again later. Goodbye.", "en-us+f3"),
    Utterance("en_apology_transfer", "agent", "apology_transfer",
              "I'm sorry, we're having technical trouble. Let me transfer you to a colleague.", "en-us+f3"),
    Utterance("sv_hold", "agent", "hold", "Ett ögonblick.", "sv+f3"),
    Utterance("sv_apology_hangup", "agent", "apology_hangup",
              "Förlåt, vi har tekniska problem. Ring gärna igen senare. Hej då.", "sv+f3"),
    Utterance("sv_apology_transfer", "agent", "apology_transfer",
              "Förlåt, vi har tekniska problem. Jag kopplar dig till en kollega.", "sv+f3"),
]
FALLBACK_WPM = 185
FALLBACK_HOLD_WPM = 275  # the hold line must fit in 1 s


def voice_of(utterance: Utterance) -> tuple[str, int]:
    """(espeak-ng voice, words per minute) of an utterance."""
    if utterance.role == "agent":
        return utterance.voice or AGENT_VOICE, utterance.wpm or AGENT_WPM
    return utterance.voice or CALLER_VOICE, utterance.wpm or CALLER_WPM


# sox synth + effects per envelope: a cough is pink noise with a sharp attack and a fast decay, band-limited
# to the throat's range; a breath is softer brown noise, faded in and out, with its highs kept.
_ENVELOPES = {
    "cough": ["synth", "{seconds}", "pinknoise", "sinc", "250-3000", "fade", "h", "0.008", "{seconds}", "{decay}",
              "norm", "-4"],
    "breath": ["synth", "{seconds}", "brownnoise", "sinc", "400-3500", "fade", "q", "0.15", "{seconds}", "0.2",
               "norm", "-14"],
}


def render_noise(noise: Noise, out_path: Path, work_dir: Path) -> bytes:
    """Each burst with sox (-R: its noise generators seeded the same every run), joined after its silence,
    padded like the speech clips and written as raw 8 kHz mu-law."""
    parts: list[str] = []
    for i, (silence_s, seconds, envelope) in enumerate(noise.bursts):
        if silence_s > 0:
            gap = work_dir / f"gap{i}.wav"
            subprocess.run(["sox", "-R", "-D", "-n", "-r", "8000", "-c", "1", "-b", "16", str(gap), "trim", "0",
                            f"{silence_s}"], check=True)
            parts.append(str(gap))
        burst = work_dir / f"burst{i}.wav"
        effects = [arg.format(seconds=seconds, decay=round(seconds * 0.8, 3)) for arg in _ENVELOPES[envelope]]
        subprocess.run(["sox", "-R", "-D", "-n", "-r", "8000", "-c", "1", "-b", "16", str(burst), *effects], check=True)
        parts.append(str(burst))
    subprocess.run(["sox", "-R", "-D", *parts, "-r", "8000", "-c", "1", "-e", "mu-law", "-t", "raw", str(out_path),
                    "pad", "0.05", "0.10"], check=True)
    return out_path.read_bytes()


def render(text: str, voice: str, wpm: int, out_path: Path, work_dir: Path) -> bytes:
    """Speak `text` with espeak-ng, then trim, normalise and convert it to raw 8 kHz mu-law with sox."""
    wav = work_dir / "speech.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(wav), text], check=True)
    subprocess.run(
        [
            "sox", "-D", str(wav),
            "-r", "8000", "-c", "1", "-e", "mu-law", "-t", "raw", str(out_path),
            # trim leading and trailing silence, normalise the peak, then keep a short natural pad
            "silence", "1", "0.02", "0.3%", "reverse", "silence", "1", "0.02", "0.3%", "reverse",
            "norm", "-3", "pad", "0.05", "0.10",
        ],
        check=True,
    )
    return out_path.read_bytes()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_out = Path(__file__).resolve().parent.parent / "voicecore" / "sim" / "clips"
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--only-missing", action="store_true",
                        help="render only clips with no file yet; existing files are kept byte for byte")
    parser.add_argument("--fallback", action="store_true",
                        help="render the runtime's fallback lines (FALLBACK_UTTERANCES) into voicecore/fallback/clips instead")
    args = parser.parse_args(argv)
    utterances: list[Utterance | Noise] = [*UTTERANCES, *NOISES]
    if args.fallback:
        utterances = FALLBACK_UTTERANCES
        if args.out == default_out:
            args.out = default_out.parent.parent / "fallback" / "clips"
    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            print(f"{tool} not found on PATH (apt-get install espeak-ng sox)", file=sys.stderr)
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    index = []
    total_bytes = 0
    rendered = 0
    with tempfile.TemporaryDirectory() as tmp:
        for utterance in utterances:
            path = args.out / f"{utterance.name}.ulaw"
            if isinstance(utterance, Noise):
                voice, role, kind, text = "sox", "caller", "noise", ""
            else:
                voice, wpm = voice_of(utterance)
                role, kind, text = utterance.role, utterance.kind, utterance.text
                if args.fallback:
                    wpm = FALLBACK_HOLD_WPM if utterance.kind == "hold" else FALLBACK_WPM
            if args.only_missing and path.exists():
                audio = path.read_bytes()
            elif isinstance(utterance, Noise):
                audio = render_noise(utterance, path, Path(tmp))
                rendered += 1
            else:
                audio = render(utterance.text, voice, wpm, path, Path(tmp))
                rendered += 1
            total_bytes += len(audio)
            index.append(
                {
                    "name": utterance.name,
                    "role": role,
                    "kind": kind,
                    "text": text,
                    "voice": voice,
                    "duration_ms": len(audio) // BYTES_PER_MS,
                    "bytes": len(audio),
                }
            )
    # ensure_ascii (json's default) keeps the file's existing bytes: the Swedish rows come out escaped
    (args.out / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    print(f"rendered {rendered} of {len(index)} clips ({total_bytes} bytes in all) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
