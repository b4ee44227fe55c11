"""Compaction: triggers and intents, planner, Context Capsule, extractor, summarizer, barrier.

Headless: nothing here knows a notebook, a widget or a provider (seed sections 2 to 8).
"""

from .barrier import OUTCOMES, CompactionEngine, CompactionOutcome
from .capsule import Capsule, Decision, EntryRange, Verification, render, roll
from .capsule_entry import capsule_message, capsule_of
from .operation import EngineParts
from .planner import CompactionPlan, context_slice, find_cut_point
from .summarize import ModelSummarizer, Summarizer, SummaryRequest
from .triggers import Intent, IntentQueue, Trigger, TurnState, choose_trigger, post_generation_roi, pre_generation_roi

__all__ = [
    "OUTCOMES",
    "Capsule",
    "CompactionEngine",
    "CompactionOutcome",
    "CompactionPlan",
    "Decision",
    "EngineParts",
    "EntryRange",
    "Intent",
    "IntentQueue",
    "ModelSummarizer",
    "Summarizer",
    "SummaryRequest",
    "Trigger",
    "TurnState",
    "Verification",
    "capsule_message",
    "capsule_of",
    "choose_trigger",
    "context_slice",
    "find_cut_point",
    "post_generation_roi",
    "pre_generation_roi",
    "render",
    "roll",
]
