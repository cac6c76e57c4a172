"""Regenerate the simulator's speech clips in voicecore/sim/clips/ (8 kHz mu-law, raw, no header).

Owns the list of utterances (text, speaker, kind) and the espeak-ng + sox pipeline that renders them;
knows nothing of how the simulators use them. The output is synthetic speech, so no dataset licence
applies (PROTOCOLS.md E.2, "Generated speech"). Run after changing a line:

    /tmp/venv/bin/python bench/make_clips.py

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

BYTES_PER_MS = 8  # 8 kHz mu-law: one byte per sample (voicecore/timing.py)

AGENT_VOICE = "en-us+f3"
CALLER_VOICE = "en+m3"
AGENT_WPM = 160
CALLER_WPM = 170

# (name, role, kind, text). Kinds: greeting, question, answer, goodbye, checkin (agent); caller (caller).
# The model simulator speaks `greeting`/`goodbye`/`checkin` when a response's instructions quote them and
# round-robins over `question` and `answer` otherwise. Numbers in answers are the ones a knowledge base
# would hold; the simulator's hallucination switch uses a number that is in none of them (777).
UTTERANCES: list[tuple[str, str, str, str]] = [
    ("agent_greeting", "agent", "greeting", "Hello, thanks for calling Acme. How can I help you today?"),
    ("agent_question", "agent", "question", "Would you like to hear about our Basic plan or our Premium plan?"),
    ("agent_basic_price", "agent", "answer", "Our Basic plan costs 199 kronor per month, with no binding period."),
    ("agent_premium_price", "agent", "answer", "Premium costs 349 kronor per month and includes unlimited data."),
    ("agent_basic_data", "agent", "answer", "Basic includes 10 gigabytes of data every month."),
    ("agent_cancel", "agent", "answer", "You can cancel at any time, with one month of notice."),
    ("agent_hours", "agent", "answer", "Our support is open every weekday, from 8 in the morning to 6 in the evening."),
    ("agent_sim_card", "agent", "answer", "A new SIM card is free, and it arrives within 3 working days."),
    ("agent_goodbye", "agent", "goodbye", "Thank you for calling Acme. Have a nice day, goodbye!"),
    ("agent_checkin", "agent", "checkin", "Are you still there?"),
    ("agent_safe_line", "agent", "safe_line", "I can't verify that."),
    ("caller_hello", "caller", "caller", "Hi, I would like to know more about your plans."),
    ("caller_basic_price", "caller", "caller", "How much does the Basic plan cost?"),
    ("caller_premium", "caller", "caller", "And what about Premium?"),
    ("caller_cancel", "caller", "caller", "Can I cancel whenever I want to, or is there a binding period?"),
    ("caller_interrupt", "caller", "caller", "Sorry, wait."),
    ("caller_bye", "caller", "caller", "No, that was all. Thanks, bye."),
]


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
    args = parser.parse_args(argv)
    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            print(f"{tool} not found on PATH (apt-get install espeak-ng sox)", file=sys.stderr)
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    index = []
    total_bytes = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, role, kind, text in UTTERANCES:
            voice, wpm = (AGENT_VOICE, AGENT_WPM) if role == "agent" else (CALLER_VOICE, CALLER_WPM)
            audio = render(text, voice, wpm, args.out / f"{name}.ulaw", Path(tmp))
            total_bytes += len(audio)
            index.append(
                {
                    "name": name,
                    "role": role,
                    "kind": kind,
                    "text": text,
                    "voice": voice,
                    "duration_ms": len(audio) // BYTES_PER_MS,
                    "bytes": len(audio),
                }
            )
    (args.out / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    print(f"wrote {len(index)} clips, {total_bytes} bytes, to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
