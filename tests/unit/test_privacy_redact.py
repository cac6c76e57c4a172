"""The redactor (voicecore/privacy/redact.py): each kind, the spoken forms, the checksums that keep ordinary
numbers, the agent's patterns and their validation, and the `voicecore redact` command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from voicecore.agent.load import check_agent
from voicecore.privacy.redact import PatternError, Redactor, compile_patterns, iban_ok, luhn_ok, personnummer_ok

EN = Redactor(("en",))
SV = Redactor(("sv",))


@pytest.mark.parametrize("text, expected", [
    ("my number is 0 7 0 1 2 3 4 5 6 7 thanks", "my number is [phone] thanks"),
    ("call me on 070-123 45 67", "call me on [phone]"),
    ("+46 70 123 45 67", "[phone]"),
    ("0046 70 123 45 67 please", "[phone] please"),
    ("it's 415 555 2671", "it's [phone]"),
    ("call (415) 555-2671", "call [phone]"),
    ("ring 020 7946 0958", "ring [phone]"),
    ("noll sju noll ett två tre fyra fem sex sju", "[phone]"),
    ("zero seven oh one two three four five six seven", "[phone]"),
    ("shall I call plus four six, seven zero, one two three, four five, six seven?", "shall I call [phone]?"),
    ("ring mig på plus 46 70 123 45 67.", "ring mig på [phone]."),
])
def test_phone_numbers_written_and_spoken(text: str, expected: str) -> None:
    assert EN.redact(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("card 4111 1111 1111 1111 exp 12/27", "card [card] exp 12/27"),
    ("4111-1111-1111-1111", "[card]"),
    ("four one one one one one one one one one one one one one one one", "[card]"),
    ("5 5 5 5 5 5 5 5 5 5 5 5 4 4 4 4", "[card]"),
    ("amex 3782 822463 10005", "amex [card]"),
])
def test_card_numbers_luhn_checked(text: str, expected: str) -> None:
    assert EN.redact(text) == expected


def test_a_card_number_that_fails_luhn_is_kept() -> None:
    assert not luhn_ok("4111111111111112")
    assert EN.redact("4111 1111 1111 1112") == "4111 1111 1111 1112"


@pytest.mark.parametrize("text", ["19121212-1212", "121212-1212", "121212+1212", "191212121212", "1212121212",
                                  "20121212 1212", "1 2 1 2 1 2 1 2 1 2", "811218-9876",
                                  "701063-2391"])  # the last: a samordningsnummer (day 63 = 3rd)
def test_personnummer_with_and_without_century(text: str) -> None:
    assert SV.redact(f"mitt nummer är {text} tack") == "mitt nummer är [personnummer] tack"


def test_personnummer_checks() -> None:
    assert personnummer_ok("8112189876")
    assert not personnummer_ok("8112189875")  # Luhn
    assert not personnummer_ok("8113189876")  # month 13
    assert not personnummer_ok("218112189876")  # century 21


@pytest.mark.parametrize("iban", ["SE45 5000 0000 0583 9825 7466", "GB82WEST12345698765432", "DE89 3704 0044 0532 0130 00",
                                  "se45 5000 0000 0583 9825 7466"])
def test_ibans_mod97_checked(iban: str) -> None:
    assert EN.redact(f"my IBAN is {iban} thanks") == "my IBAN is [iban] thanks"


def test_a_wrong_iban_is_kept() -> None:
    assert not iban_ok("SE4550000000058398257467")
    assert EN.redact("SE45 5000 0000 0583 9825 7467") == "SE45 5000 0000 0583 9825 7467"


def test_email_addresses() -> None:
    assert EN.redact("mail john.doe+x@mail.example.co.uk, or a@b.se.") == "mail [email], or [email]."


@pytest.mark.parametrize("text", [
    "Our Basic plan costs 199 kronor per month, with no binding period.",
    "open from 8 in the morning to 6, 2024 and 2025",
    "order 12345678",  # no trunk prefix: not a national phone number
    "my order number is 5 5 5 1 2 3 4",
    "one moment, I have two questions",
    "the meeting is on 2026-11-29 at 10:30",
])
def test_ordinary_numbers_are_kept(text: str) -> None:
    assert EN.redact(text) == text
    assert SV.redact(text) == text


def test_two_numbers_in_one_run_are_both_found() -> None:
    assert EN.redact("070 123 45 67 4111 1111 1111 1111") == "[phone] [card]"


def test_redaction_is_idempotent() -> None:
    text = "0 7 0 1 2 3 4 5 6 7, 4111111111111111, a@b.se, SE4550000000058398257466, 811218-9876"
    once = EN.redact(text)
    assert once == "[phone], [card], [email], [iban], [personnummer]"
    assert EN.redact(once) == once


def test_agent_patterns() -> None:
    redactor = Redactor(("en",), [r"order (number )?\d{5}", r"\bAB-\d+"])
    assert redactor.redact("order number 12345 and ab-77") == "[pattern] and [pattern]"


@pytest.mark.parametrize("pattern", ["([a-z", "x{2,1}", "a|"])
def test_a_bad_pattern_is_refused_with_its_index(pattern: str) -> None:
    with pytest.raises(PatternError) as caught:
        compile_patterns(["ok", pattern])
    assert caught.value.index == 1 and pattern in str(caught.value)


def _agent(tmp_path: Path, privacy: str) -> Path:
    (tmp_path / "agent.toml").write_text(f'name = "a"\ninstructions = "b"\n{privacy}', encoding="utf-8")
    return tmp_path


def test_agent_privacy_section(tmp_path: Path) -> None:
    check = check_agent(_agent(tmp_path, '[privacy]\nstorage = "metadata_only"\npatterns = ["AB-\\\\d+"]\n'))
    assert check.problems == []
    assert check.spec is not None
    assert check.spec.privacy_storage == "metadata_only" and check.spec.privacy_patterns == (r"AB-\d+",)


def test_agent_without_privacy_stores_everything(tmp_path: Path) -> None:
    spec = check_agent(_agent(tmp_path, "")).spec
    assert spec is not None and spec.privacy_storage == "everything" and spec.privacy_patterns == ()


def test_agent_privacy_problems(tmp_path: Path) -> None:
    check = check_agent(_agent(tmp_path, '[privacy]\nstorage = "some"\npatterns = ["ok", "([a-z"]\nother = 1\n'))
    codes = {(p.path, p.code) for p in check.problems}
    assert codes == {("$.privacy.storage", "unknown-storage-tier"), ("$.privacy.patterns[1]", "bad-pattern"),
                     ("$.privacy.other", "unknown-key")}
    bad = next(p for p in check.problems if p.code == "bad-pattern")
    assert "([a-z" in bad.message and "unterminated character set" in bad.message


def test_the_shipped_agents_store_redacted() -> None:
    root = Path(__file__).resolve().parents[2]
    for directory in [root / "voicecore" / "agents" / "default", *sorted((root / "examples").iterdir())]:
        if (directory / "agent.toml").is_file():
            spec = check_agent(directory).spec
            assert spec is not None and spec.privacy_storage == "redacted", directory


def test_redact_command(tmp_path: Path) -> None:
    agent = _agent(tmp_path, '[privacy]\npatterns = ["order \\\\d{5}"]\n')
    run = subprocess.run([sys.executable, "-m", "voicecore.cli", "redact", "--language", "sv", "--agent", str(agent),
                          "ring 070-123 45 67 om order 12345"], capture_output=True, text=True, check=True)
    assert run.stdout == "ring [phone] om [pattern]\n"
    bad = _agent(tmp_path, '[privacy]\npatterns = ["([a-z"]\n')
    run = subprocess.run([sys.executable, "-m", "voicecore.cli", "redact", "--agent", str(bad), "x"],
                         capture_output=True, text=True)
    assert run.returncode == 1 and "$.privacy.patterns[0]" in run.stderr and "not a valid regular expression" in run.stderr
