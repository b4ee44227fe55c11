"""Grounding a model's capsule in the history it summarizes, and judging what is left.

A model summary is text a model wrote; the history is what happened. This module owns the line
between them (issue 20, item 6: a small model rated ``ok`` wrote the goal
``<%= JSON.stringify(user_obj) %>`` and a file that was never modified):

* the **grounded fields** — files read, files modified, verification commands with their last
  status, active skills — are *replaced* by the deterministic extractor's facts (the history,
  plus the previous capsule's facts rolled forward), never merged with the model's claims. A claim
  the facts do not support is dropped and counted (:func:`ungrounded_claims`); only the count is
  recorded, never the claim's text;
* **template garbage** (:func:`is_placeholder`: empty text, a bare ``<%= … %>`` / ``{{ … }}`` /
  ``${…}`` tag, ``[GOAL]``, ``N/A``, ``TODO`` …) is removed from every text field the model wrote;
* the **quality** (:data:`~soba_notebook.session.payloads.Quality`): ``partial`` when the model's
  goal is garbage, or empty with no earlier goal to carry forward; or when every next step it gave
  is garbage, or it gave none (and none carries forward) while the history names some (the
  assistant's last "Next: …" line). Otherwise ``ok``. An empty list of next steps is not by itself
  partial: finished work has none, and the history then shows none either. A partial capsule is
  still appended; its goal and next steps are filled from the history where it has them.

Pure functions over frozen values; nothing here reads a file or runs a model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from ..session.payloads import Quality
from .capsule import Capsule, Decision, Verification, merge_unique, roll, with_facts
from .extract import extract_facts
from .planner import CompactionPlan
from .shell_parse import normalize_path

__all__ = ["Grounded", "ground", "ground_plan_summary", "is_placeholder", "ungrounded_claims",
           "without_placeholders"]

#: Template tags of the common engines (ERB/EJS, Jinja/Mustache/Handlebars, JS/shell, Python format)
_TEMPLATE_TAG = re.compile(r"<%.*?%>|\{\{.*?\}\}|\{%.*?%\}|\$\{[^{}]*\}|\{[A-Za-z_][\w.]*\}", re.DOTALL)
#: A field label a model puts before its (missing) value: ``Goal:``, ``Next step -``
_LABEL = re.compile(r"^(?:goal|objective|task|next\s+steps?|step\s*\d*)\s*[:\-–—]\s*", re.IGNORECASE)
#: The whole text (brackets, quotes and underscores already gone) is a stand-in, not content
_STAND_IN = re.compile(
    r"(?:n/?a|none|null|nil|undefined|unknown|todo|tbd|tba|fixme|xxx|placeholder|str|string|text|"
    r"lorem ipsum.*|not stated|no goal|"
    r"(?:insert |enter |add |describe )?(?:the |your |a )?"
    r"(?:goal|objective|task|next steps?|step|steps|description|summary)(?: \d+)?(?: here)?)")
_LONGEST_PLACEHOLDER = 200
_EDGES = "\"'`*_[](){}<>«»“”‘’.,;:!? \t\r\n"


def is_placeholder(text: str) -> bool:
    """Whether ``text`` holds no content: empty or whitespace, punctuation only, a template tag
    with nothing around it (``<%= user.goal %>``, ``{{ goal }}``, ``${GOAL}``), a bracketed field
    name (``[GOAL]``, ``<goal>``, ``<your goal here>``) or a stand-in word (``N/A``, ``TODO``,
    ``None``, ``TBD``, ``str``, ``(not stated)``).

    Conservative: text that says anything besides (``Fix the {{name}} rendering``, ``Step 2:
    run pytest``, ``TODO: remove the debug print``) is content.
    """
    text = text.strip()
    if len(text) > _LONGEST_PLACEHOLDER:
        return False  # a stand-in is short; and the tag scan below stays linear
    rest = _LABEL.sub("", _TEMPLATE_TAG.sub(" ", text).strip())
    if not any(ch.isalnum() for ch in rest):
        return True
    words = " ".join(rest.replace("_", " ").strip(_EDGES).lower().split())
    return _STAND_IN.fullmatch(words) is not None


def _real(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(i for i in items if not is_placeholder(i))


def without_placeholders(capsule: Capsule) -> Capsule:
    """``capsule`` with every placeholder removed: the goal becomes empty, list items, decisions
    (a placeholder *why* becomes empty), checks with a placeholder command go."""
    return replace(
        capsule,
        goal="" if is_placeholder(capsule.goal) else capsule.goal,
        constraints=_real(capsule.constraints), done=_real(capsule.done), active=_real(capsule.active),
        pending=_real(capsule.pending), blockers=_real(capsule.blockers), next_steps=_real(capsule.next_steps),
        decisions=tuple(Decision(d.what, "" if is_placeholder(d.why) else d.why)
                        for d in capsule.decisions if not is_placeholder(d.what)),
        files_read=_real(capsule.files_read), files_modified=_real(capsule.files_modified),
        verification=tuple(v for v in capsule.verification if not is_placeholder(v.command)),
        active_skills=_real(capsule.active_skills), artifacts=_real(capsule.artifacts),
    )


def _path(text: str) -> str:
    return normalize_path(text) or text.strip()


def _command(text: str) -> str:
    return " ".join(text.strip().strip("`").split())


def _check_supported(claim: Verification, facts: dict[str, Verification]) -> bool:
    """A check is supported when the history ran that command with that result (a claim of
    ``unknown`` says no more than that it ran)."""
    fact = facts.get(_command(claim.command))
    return fact is not None and claim.status in (fact.status, "unknown")


def ungrounded_claims(summary: Capsule, facts: Capsule) -> int:
    """How many of the model's grounded-field claims ``facts`` does not support: a file read that
    the history neither read nor modified, a file modified it did not modify, a check it did not
    run or whose result differs, a skill that is not active. Blank claims are not counted."""
    read = {_path(p) for p in (*facts.files_read, *facts.files_modified)}
    modified = {_path(p) for p in facts.files_modified}
    checks = {_command(v.command): v for v in facts.verification}
    skills = {s.strip() for s in facts.active_skills}
    claims = [_path(p) in read for p in summary.files_read if p.strip()]
    claims += [_path(p) in modified for p in summary.files_modified if p.strip()]
    claims += [_check_supported(v, checks) for v in summary.verification if v.command.strip()]
    claims += [s.strip() in skills for s in summary.active_skills if s.strip()]
    return claims.count(False)


@dataclass(frozen=True, slots=True)
class Grounded:
    """A model summary made into a capsule: the capsule, its quality, and what was done to it."""

    capsule: Capsule
    quality: Quality
    #: model claims in the grounded fields that the history does not support (dropped)
    ungrounded: int = 0
    #: what the model left as garbage or empty: ``goal``, ``next steps``
    missing: tuple[str, ...] = ()

    @property
    def note(self) -> str | None:
        """The outcome note: what made the capsule partial and what was dropped, or ``None``."""
        parts = []
        if self.missing:
            parts.append(f"partial: the model's summary gave no usable {' or '.join(self.missing)} (template text "
                         f"or empty); filled from the history where it could be")
        if self.ungrounded:
            claims = "claim" if self.ungrounded == 1 else "claims"
            parts.append(f"ungrounded: {self.ungrounded:,} model {claims} about files, checks or skills that the "
                         f"history does not support dropped")
        return "; ".join(parts) or None


def ground(summary: Capsule, facts: Capsule, *, previous: Capsule | None = None,
           previous_checkpoint: str | None = None, fallback_next_steps: Iterable[str] = ()) -> Grounded:
    """The capsule to append for the model's ``summary`` of a span.

    ``facts`` are the history's facts rolled over the previous capsule (the deterministic
    extractor's files, checks, skills, goal, corrections, artifacts, range); ``previous`` is the
    capsule in force, rolled forward under the summary; ``fallback_next_steps`` (the
    deterministic capsule's: the history's) stand in for next steps the model did not give.
    """
    clean = without_placeholders(summary)
    carried = without_placeholders(previous) if previous is not None else None
    rolled = roll(carried, clean, previous_checkpoint=previous_checkpoint)
    history_steps = merge_unique(fallback_next_steps)
    missing = []
    if is_placeholder(summary.goal) and (summary.goal.strip() or not rolled.goal):
        missing.append("goal")  # garbage, or empty with no earlier goal to carry forward
    if summary.next_steps and not clean.next_steps:
        missing.append("next steps")  # every step given is garbage
    elif not rolled.next_steps and history_steps:
        missing.append("next steps")  # none given, none carried, but the history names some
    capsule = with_facts(rolled, facts)
    if not capsule.next_steps:
        capsule = replace(capsule, next_steps=history_steps)
    return Grounded(capsule, "partial" if missing else "ok", ungrounded_claims(summary, facts), tuple(missing))


def ground_plan_summary(plan: CompactionPlan, summary: Capsule, fallback: Capsule) -> Grounded:
    """A model's ``summary`` of ``plan`` grounded in its history (``fallback``: the plan's
    deterministic capsule). Only a model's summary needs the facts (the fallback is made of them).
    The fallback's skills are the grounded ones: its scan starts from the previous capsule's
    active set."""
    facts = replace(roll(plan.previous_capsule, extract_facts(list(plan.summarize)),
                         previous_checkpoint=plan.previous_checkpoint_id), active_skills=fallback.active_skills)
    return ground(summary, facts, previous=plan.previous_capsule, previous_checkpoint=plan.previous_checkpoint_id,
                  fallback_next_steps=fallback.next_steps)
