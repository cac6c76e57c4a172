"""Every citation in the code (design sections, README sections, invariants, seeds, issues, docs pages) with its
target, and the check that the code cites only what a reader of the repository can open.

    python docs/find_citations.py            # file:line: cited -> target (page#anchor, UNMAPPED, BROKEN or RULE: ...)
    python docs/find_citations.py --json     # the same as one JSON list
    python docs/find_citations.py --check    # exit 1 on a problem, each printed as file:line: what to do

A comment cites a page of docs/ by its repository path and anchor (``docs/explanation/protocols.md#c5``; more
anchors of the same page may follow: ``, #section-3 and #section-6``), an invariant by its name (INV-ONE-VOICE),
and says the rule itself where it relied on a seed or an issue. ``--check`` fails on

- a citation of a file outside the repository: ARCHITECTURE.md, PROTOCOLS.md, STYLE.md, ../shared/...;
- a README section ("README \"Carriers\"", "README (dependencies)"): the README's sections moved to docs pages;
- a seed or an issue number ("seed 001", "issue 13"): say the rule; a public tracker's number stays, written
  after its project's name ("CPython issue 82300"; the names are PUBLIC_TRACKERS) or as a URL;
- a docs link whose page or anchor does not exist;
- a citation the tables of docs/citations.md do not map.

The first four are checked in CHECKED_DIRS, the folders the listing covers (SCANNED_DIRS), tests/ included;
tests/rules/test_docs.py runs the check over them. The map is the tables of
docs/citations.md (first column the cited name in backticks, second its page link), so the page a reader sees
and what this script uses are one table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
import unicodedata
from functools import cache
from pathlib import Path

DOCS_DIR = Path(__file__).resolve().parent
REPO_DIR = DOCS_DIR.parent
CITATIONS_PAGE = DOCS_DIR / "citations.md"
SCANNED_DIRS = ("voicecore", "workers", "bench", "tests", "deploy", "examples", ".ci", "docs")
CHECKED_DIRS = SCANNED_DIRS  # every scanned folder, tests/ included
SCANNED_SUFFIXES = {".py", ".toml", ".yaml", ".yml", ".conf", ".service", ".env", ".sh", ".md", ".json", ".js",
                    ".html", ".cfg", ".ini", ""}
SKIPPED_PARTS = {"__pycache__", "results", "clips", "static_vendor", "node_modules"}
SKIPPED_FILES = {
    "tests/rules/test_docs.py",  # its citation forms are test data, not citations
    "docs/find_citations.py",  # its patterns and help are about citations
}

DESIGN = re.compile(r"\b(ARCHITECTURE|PROTOCOLS|STYLE)\.md"
                    r"(?:[,;:]? ?(?:(?:section|sections) )?([A-E](?:\.\d+)?|\d+\b)(?: (item|step) (\d+))?)?")
INVARIANT = re.compile(r"\bINV-[A-Z]+(?:-[A-Z]+)*\b")
README = re.compile(r"\bREADME(?:\.md)?(?:'s)?[,:]? ?\(?[\"“]([A-Z][^\"”]{2,40})[\"”]")
README_LOOSE = re.compile(r"\bREADME(?:\.md)?(?:'s)?(?:, [A-Z][a-z]+\b| \([a-z][a-z ]+\))")
TRACKER = re.compile(r"(?<!CPython )\b(seed|issue)s? (\d{1,3})\b", re.IGNORECASE)
# Projects whose public tracker a comment may cite by number ("CPython issue 82300"): the word before "issue".
PUBLIC_TRACKERS = frozenset({"cpython", "pipecat", "numba", "uvloop", "websockets", "picows", "openai-python",
                             "openai-agents-python", "twilio-python", "pyzmq", "supervisor"})
OUTSIDE_PATH = re.compile(r"(?:\.\./|/work/)shared/[\w./-]*")
DOCS_LINK = re.compile(r"(?<![\w./-])docs/([\w./-]+?\.md)(#[\w-]+)?((?:(?:,| and|, and) #[\w-]+)*)")
MORE_ANCHORS = re.compile(r"#([\w-]+)")


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
    """(line number, normalized cited name) of every citation of a design document, a README section, an
    invariant, a seed or an issue in ``text`` (docs links are ``links_in``'s)."""
    found: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in DESIGN.finditer(line):
            found.append((number, _design_key(m[1], m[2], m[3], m[4])))
        for m in INVARIANT.finditer(line):
            found.append((number, m[0]))
        for m in README.finditer(line):
            found.append((number, f'README "{m[1]}"'))
        for m in TRACKER.finditer(line):
            before = line[:m.start()].split()
            if before and before[-1].lower() in PUBLIC_TRACKERS:
                continue
            kind, n = m[1].lower(), int(m[2])
            found.append((number, f"seed {n:03d}" if kind == "seed" else f"issue {n}"))
    return found


def links_in(text: str) -> list[tuple[int, str, list[str]]]:
    """(line number, page path under docs/, anchors) of every ``docs/<page>.md#anchor`` in ``text``. A link is
    one to check when its first part is a folder or page of this site (``docs/CallCommandsApi.md`` of another
    project's repository is not)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in DOCS_LINK.finditer(line):
            page = m[1]
            if not ((DOCS_DIR / page.split("/")[0]).is_dir() or (DOCS_DIR / page).is_file()):
                continue
            anchors = ([m[2][1:]] if m[2] else []) + MORE_ANCHORS.findall(m[3] or "")
            found.append((number, page, anchors))
    return found


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's toc extension gives a heading without one of its own."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>|`", "", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


@cache
def _generated_pages() -> dict:
    spec = importlib.util.spec_from_file_location("docs_gen_reference", DOCS_DIR / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.GENERATED


@cache
def anchors_of(page: str) -> frozenset[str] | None:
    """Every anchor of docs/<page>, or None when there is no such page (a generated page is generated)."""
    path = DOCS_DIR / page
    if path.is_file():
        text = path.read_text(encoding="utf-8")
    else:
        make = _generated_pages().get(page)
        if make is None:
            return None
        text = make()  # the generators import voicecore: the check runs where the package is installed
    anchors = set(re.findall(r"\{[^}]*#([\w-]+)[^}]*\}", text)) | set(re.findall(r"\bid=[\"']([\w-]+)[\"']", text))
    in_code = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            in_code = not in_code
        elif not in_code and (heading := re.match(r"^#{1,6} (.+?)\s*$", line)):
            if "{#" not in heading[1]:
                anchors.add(_slug(heading[1]))
    return frozenset(anchors)


def link_target(page: str, anchors: list[str]) -> str:
    """page#anchor when the page and each anchor exist, else what is BROKEN."""
    known = anchors_of(page)
    if known is None:
        return f"BROKEN: no page docs/{page}"
    missing = [a for a in anchors if a not in known]
    if missing:
        return f"BROKEN: docs/{page} has no anchor " + ", ".join("#" + a for a in missing)
    return page + ("#" + anchors[0] if anchors else "")


def _files(dirs: tuple[str, ...] = SCANNED_DIRS) -> list[Path]:
    files = []
    for top in dirs:
        root = REPO_DIR / top
        if top == "docs":  # the site's own scripts; its pages are what is cited
            paths = sorted(root.glob("*.py"))
        else:
            paths = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in paths:
            if (path.is_file() and path.suffix in SCANNED_SUFFIXES and not SKIPPED_PARTS & set(path.parts)
                    and str(path.relative_to(REPO_DIR)) not in SKIPPED_FILES):
                files.append(path)
    return files


def _texts(dirs: tuple[str, ...]):
    for path in _files(dirs):
        try:
            yield str(path.relative_to(REPO_DIR)), path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue


def find(mapping: dict[str, str] | None = None, dirs: tuple[str, ...] = SCANNED_DIRS) -> list[dict[str, object]]:
    """Every citation in ``dirs``: design sections, README sections, invariants, seeds and issues with their
    target in docs/citations.md (UNMAPPED when it has none), and docs links with their page (BROKEN when the
    page or an anchor does not exist)."""
    mapping = load_map() if mapping is None else mapping
    rows = []
    for name, text in _texts(dirs):
        for line, cited in citations_in(text):
            rows.append({"file": name, "line": line, "cited": cited, "target": mapping.get(cited, "UNMAPPED")})
        for line, page, anchors in links_in(text):
            cited = "docs/" + page + "".join("#" + a for a in anchors[:1]) + "".join(", #" + a for a in anchors[1:])
            rows.append({"file": name, "line": line, "cited": cited, "target": link_target(page, anchors)})
    return sorted(rows, key=lambda r: (r["file"], r["line"]))


def problems_in(name: str, text: str, mapping: dict[str, str] | None = None) -> list[str]:
    """``name:line: problem`` for each citation in ``text`` a reader of the repository cannot follow: an outside
    file, a README section, a seed or an issue, a docs link to a page or anchor that does not exist."""
    mapping = load_map() if mapping is None else mapping
    found: list[tuple[int, str]] = []
    for line, cited in citations_in(text):
        target = mapping.get(cited, "")
        if cited.startswith(("ARCHITECTURE.md", "PROTOCOLS.md", "STYLE.md", "README")):
            page = f"docs/{target}" if target and not target.startswith("RULE: ") else "its docs page"
            where = "moved to the docs" if cited.startswith("README") else "is not in the repository"
            found.append((line, f"{cited} {where}: cite {page}"))
        elif cited.startswith(("seed ", "issue ")):
            rule = target.removeprefix("RULE: ") if target else "the rule"
            found.append((line, f"{cited} cannot be looked up: say the rule itself (it stood for: {rule})"))
    for number, line in enumerate(text.splitlines(), 1):
        for m in OUTSIDE_PATH.finditer(line):
            found.append((number, f"{m[0]} is outside the repository: cite a docs page or say the rule"))
        for m in README_LOOSE.finditer(line):
            found.append((number, f"{m[0]} cites a README section: cite the docs page it moved to"))
    for line, page, anchors in links_in(text):
        target = link_target(page, anchors)
        if target.startswith("BROKEN"):
            found.append((line, target.removeprefix("BROKEN: ")))
    return [f"{name}:{line}: {problem}" for line, problem in sorted(found)]


def problems(dirs: tuple[str, ...] = CHECKED_DIRS) -> list[str]:
    """``problems_in`` over every scanned file of ``dirs``."""
    mapping = load_map()
    return [p for name, text in _texts(dirs) for p in problems_in(name, text, mapping)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON list")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 on a citation of a file outside the repository, a README section, a seed or "
                             "an issue, or a broken docs link in " + ", ".join(CHECKED_DIRS) + ", or on a "
                             "citation docs/citations.md does not map; print each with its file and line")
    args = parser.parse_args(argv)
    rows = find()
    if args.check:
        found = problems()
        unmapped = [f"{r['file']}:{r['line']}: {r['cited']} has no row in docs/citations.md"
                    for r in rows if r["target"] == "UNMAPPED"]
        for line in found + unmapped:
            print(line)
        if found or unmapped:
            print(f"{len(found) + len(unmapped)} problem(s)", file=sys.stderr)
            return 1
        print(f"ok: {len(rows)} citations, none outside the repository in {', '.join(CHECKED_DIRS)}")
        return 0
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for row in rows:
            print(f"{row['file']}:{row['line']}: {row['cited']} -> {row['target']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
