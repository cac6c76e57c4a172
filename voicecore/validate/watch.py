"""The knowledge-base folder, watched: read at start, reloaded when a markdown file changes.

Shared by the validator (grounding) and the model worker (retrieve-first); each process keeps its own
copy. A folder that cannot be read is no knowledge base (None): the gate then rejects every number.
"""

from __future__ import annotations

import logging
from pathlib import Path

from voicecore.validate.knowledge import KnowledgeBase, load_knowledge_dir

log = logging.getLogger("voicecore.knowledge")


class KnowledgeWatcher:
    """The knowledge-base folder: a signature of its markdown files (path, mtime, size) polled cheaply,
    a full reload only when the signature changed."""

    POLL_NS = 1_000_000_000  # how often the owner should call poll()

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory) if directory else None
        self.signature: tuple | None = None
        self.errors = 0

    def _signature(self) -> tuple:
        assert self.directory is not None
        try:
            entries = []
            for file in sorted(self.directory.rglob("*.md")):
                info = file.stat()
                entries.append((str(file), info.st_mtime_ns, info.st_size))
            return ("ok", tuple(entries))
        except OSError as exc:
            return ("error", type(exc).__name__)

    def poll(self) -> tuple[bool, KnowledgeBase | None]:
        """(changed, knowledge base); the knowledge base is None when there is none or it is unreadable."""
        if self.directory is None:
            changed = self.signature is None
            self.signature = ()
            return changed, None
        signature = self._signature()
        if signature == self.signature:
            return False, None
        self.signature = signature
        if not self.directory.is_dir():
            self.errors += 1
            log.error("knowledge_dir %s is not a folder: every number will be rejected", self.directory)
            return True, None
        try:
            knowledge = KnowledgeBase.from_documents(load_knowledge_dir(self.directory))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            self.errors += 1
            log.error("knowledge base %s unreadable (%s): every number will be rejected",
                      self.directory, type(exc).__name__)
            return True, None
        stats = knowledge.statistics()
        log.info("knowledge base %s loaded: %d files, %d snippets, %d numbers (version %s)",
                 self.directory, stats.files, stats.snippets, stats.numbers, stats.version)
        return True, knowledge
