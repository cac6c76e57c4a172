"""The validation gate's text cores (INV-GATE): number extraction and normalization, claims (a number with
what its sentence says it is), grounding in a markdown knowledge base with citations, scripted-prompt
following and forbidden phrases.

Pure and sans-I/O (no files, clocks, sockets): the validator worker's shell feeds transcripts in and maps
verdicts to audio positions. ``knowledge.load_knowledge_dir`` is the one shell helper that reads files.
"""

from voicecore.validate.claims import Claim, claims_of
from voicecore.validate.knowledge import (
    Citation,
    ClaimVerdict,
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
    "Claim",
    "ClaimVerdict",
    "claims_of",
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
