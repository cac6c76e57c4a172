"""Every citation of the design documents, the README's sections, the invariants, seeds and issues in the code,
with the page and anchor docs/citations.md maps it to.

    python docs/find_citations.py            # file:line: cited -> page#anchor (or UNMAPPED, or RULE: ...)
    python docs/find_citations.py --json     # the same as one JSON list
    python docs/find_citations.py --check    # exit 1 when a design-document, README or invariant citation is unmapped

The map is the tables of docs/citations.md (first column the cited name in backticks, second its page link), so
the page a reader sees and what this script uses are one table. For the pass that points code comments at pages:
a line marked ``RULE:`` cites a seed or an issue, which is to be replaced by the rule itself (the table's second
column says what it stands for), not by a link.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

DOCS_DIR = Path(__file__).resolve().parent
REPO_DIR = DOCS_DIR.parent
CITATIONS_PAGE = DOCS_DIR / "citations.md"
SCANNED_DIRS = ("voicecore", "workers", "bench", "tests", "deploy", "examples", ".ci")
SCANNED_SUFFIXES = {".py", ".toml", ".yaml", ".yml", ".conf", ".service", ".env", ".sh", ".md", ".json", ".js",
                    ".html", ".cfg", ".ini", ""}
SKIPPED_PARTS = {"__pycache__", "results", "clips", "static_vendor", "node_modules"}
SKIPPED_FILES = {"tests/rules/test_docs.py"}  # its citation forms are test data, not citations

DESIGN = re.compile(r"\b(ARCHITECTURE|PROTOCOLS|STYLE)\.md"
                    r"(?:[,;:]? ?(?:(?:section|sections) )?([A-E](?:\.\d+)?|\d+\b)(?: (item|step) (\d+))?)?")
INVARIANT = re.compile(r"\bINV-[A-Z]+(?:-[A-Z]+)*\b")
README = re.compile(r"\bREADME(?:\.md)?(?:'s)?[,:]? ?\(?[\"“]([A-Z][^\"”]{2,40})[\"”]")
TRACKER = re.compile(r"(?<!CPython )\b(seed|issue)s? (\d{1,3})\b", re.IGNORECASE)


def load_map(page: Path = CITATIONS_PAGE) -> dict[str, str]:
    """cited name -> its target (page#anchor, or for seeds and issues the rule), from the page's tables."""
    mapping: dict[str, str] = {}
    for line in page.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\| `([^`]+)` \| (.+?) \|(?: (.+?) \|)?$", line)
        if not match:
            continue
        cited, second, third = match[1], match[2], match[3]
        if third is not None:  # seeds and issues: | cited | rule | page |
            mapping[cited] = "RULE: " + second
        else:
            link = re.search(r"\]\(([^)]+)\)", second)
            mapping[cited] = link[1] if link else second
    return mapping


def _design_key(kind: str, section: str | None, sub: str | None, number: str | None) -> str:
    key = f"{kind}.md"
    if section:
        key += f" section {section}" if kind == "ARCHITECTURE" else f" {section}"
        if sub:
            key += f" {sub} {number}"
    return key


def citations_in(text: str) -> list[tuple[int, str]]:
    """(line number, normalized cited name) of every citation in ``text``."""
    found: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in DESIGN.finditer(line):
            found.append((number, _design_key(m[1], m[2], m[3], m[4])))
        for m in INVARIANT.finditer(line):
            found.append((number, m[0]))
        for m in README.finditer(line):
            found.append((number, f'README "{m[1]}"'))
        for m in TRACKER.finditer(line):
            kind, n = m[1].lower(), int(m[2])
            found.append((number, f"seed {n:03d}" if kind == "seed" else f"issue {n}"))
    return found


def _files() -> list[Path]:
    files = []
    for top in SCANNED_DIRS:
        root = REPO_DIR / top
        paths = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in paths:
            if (path.is_file() and path.suffix in SCANNED_SUFFIXES and not SKIPPED_PARTS & set(path.parts)
                    and str(path.relative_to(REPO_DIR)) not in SKIPPED_FILES):
                files.append(path)
    return files


def find(mapping: dict[str, str] | None = None) -> list[dict[str, object]]:
    mapping = load_map() if mapping is None else mapping
    rows = []
    for path in _files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for line, cited in citations_in(text):
            rows.append({"file": str(path.relative_to(REPO_DIR)), "line": line, "cited": cited,
                         "target": mapping.get(cited, "UNMAPPED")})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON list")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a design-document, README or invariant citation has no row in docs/citations.md")
    args = parser.parse_args(argv)
    rows = find()
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for row in rows:
            print(f"{row['file']}:{row['line']}: {row['cited']} -> {row['target']}")
    unmapped = [r for r in rows if r["target"] == "UNMAPPED"]
    if args.check and unmapped:
        print(f"{len(unmapped)} citation(s) docs/citations.md does not map", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
