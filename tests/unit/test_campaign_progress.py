"""The campaign run's progress line: a bar, the callees done, the calls in the air and the outcomes so far;
rewritten in place on a terminal, one plain line at a time otherwise."""

from __future__ import annotations

import io
from collections import Counter

from voicecore.outbound.campaign_run import Progress, RunReport


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_line_shows_the_share_done_and_the_outcomes():
    out = io.StringIO()
    progress = Progress(200, out)
    progress.update(100, 20, 151, Counter({"completed": 40, "busy": 9}), force=True)
    line = out.getvalue()
    assert line == ("[" + "#" * 15 + "." * 15 + "] 100/200 done, 20 in the air, 151 dials: busy 9, completed 40\n")
    progress.update(101, 20, 152, Counter(), force=False)  # within its 5 s: not written again
    assert out.getvalue() == line


def test_on_a_terminal_the_line_is_rewritten_in_place_and_ended_at_the_close():
    out = Terminal()
    progress = Progress(4, out)
    progress.update(0, 2, 2, Counter(), force=True)
    progress.update(4, 0, 5, Counter({"completed": 4}), force=True)
    progress.close()
    text = out.getvalue()
    assert text.startswith("\r[....") and "\r[" + "#" * 30 + "] 4/4 done" in text and text.endswith("\n")
    assert text.count("\n") == 1


def test_the_report_is_plain_json_data():
    report = RunReport("reminders", 1, 2, False, attempt_outcomes=Counter({"busy": 1}),
                       outcomes=Counter({"completed": 2}), seconds=1.234)
    data = report.to_dict()
    assert data["attempt_outcomes"] == {"busy": 1} and data["outcomes"] == {"completed": 2} and data["seconds"] == 1.23
    assert {"followed_on_start", "interrupted_on_start", "refused_by_dnc", "not_placed", "finished"} <= set(data)
