"""The validation gate's text cores (issue 5, INV-GATE): number extraction and normalization, grounding
in a markdown knowledge base with citations, scripted-prompt following and forbidden phrases.

Pure and sans-I/O (no files, clocks, sockets): the validator worker's shell feeds transcripts in and maps
verdicts to audio positions. ``knowledge.load_knowledge_dir`` is the one shell helper that reads files.
"""

from voicecore.validate.knowledge import (
    Citation,
    GroundingResult,
    KnowledgeBase,
    KnowledgeStatistics,
    Snippet,
    load_knowledge_dir,
)
from voicecore.validate.numbers import NumberMention, extract_numbers, phone_variants
from voicecore.validate.script import ForbiddenPhrases, ScriptMatcher, Verdict, normalize_for_script, word_overlap

__all__ = [
    "Citation",
    "ForbiddenPhrases",
    "GroundingResult",
    "KnowledgeBase",
    "KnowledgeStatistics",
    "NumberMention",
    "ScriptMatcher",
    "Snippet",
    "Verdict",
    "extract_numbers",
    "load_knowledge_dir",
    "normalize_for_script",
    "phone_variants",
    "word_overlap",
]
