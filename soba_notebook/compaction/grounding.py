"""Grounding a model's capsule in the history it summarizes, and judging what is left.

A model summary is text a model wrote; the history is what happened. This module owns the line
between them (issue 20, item 6: a small model rated ``ok`` wrote the goal
``<%= JSON.stringify(user_obj) %>`` and a file that was never modified):

* the **grounded fields** — files read, files modified, verification commands with their last
  status, active skills — are *replaced* by the deterministic extractor's facts (the history,
  plus the previous capsule's facts rolled forward), never merged with the model's claims. A claim
  the facts do not support is dropped and counted (:func:`ungrounded_claims`); only the count is
  recorded, never the claim's text;
* **what the user said** (:mod:`.claims`, docs/CAPSULE_FORMAT.md "Grounding"): a goal or constraint
  the model attributes to the user stays only when a user message (or the user's instructions for
  the compaction, or the capsule rolled forward) supports it; a decision, blocker or next step that
  names a file, command, cell or error the history never shows is dropped. Each drop is an
  ungrounded claim, counted per field (:attr:`Grounded.by_field`);
* **junk** in decisions, blockers and next steps (template text, an echo of the summary prompt's
  instructions, an item of one word) is dropped and makes the capsule ``partial``, naming it;
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

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from ..session.capsule_schema import CAPSULE_FIELDS
from ..session.entries import Entry
from ..session.payloads import Quality
from .capsule import Capsule, Decision, Verification, merge_unique, roll, with_facts
from .claims import haystack, junk_reason, unsupported_mentions, user_support
from .extract import extract_facts, user_messages
from .planner import CompactionPlan
from .shell_parse import normalize_path
from .summarize import PROMPT_INSTRUCTIONS

__all__ = ["Grounded", "History", "ground", "ground_plan_summary", "history_of", "is_placeholder",
           "ungrounded_by_field", "ungrounded_claims", "without_placeholders"]

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


def ungrounded_by_field(summary: Capsule, facts: Capsule) -> dict[str, int]:
    """Per field (JSON key), how many of the model's grounded-field claims ``facts`` does not
    support: a file read that the history neither read nor modified, a file modified it did not
    modify, a check it did not run or whose result differs, a skill that is not active. Blank
    claims are not counted; fields with none are left out."""
    read = {_path(p) for p in (*facts.files_read, *facts.files_modified)}
    modified = {_path(p) for p in facts.files_modified}
    checks = {_command(v.command): v for v in facts.verification}
    skills = {s.strip() for s in facts.active_skills}
    counts = {"filesRead": sum(_path(p) not in read for p in summary.files_read if p.strip()),
              "filesModified": sum(_path(p) not in modified for p in summary.files_modified if p.strip()),
              "verification": sum(not _check_supported(v, checks) for v in summary.verification if v.command.strip()),
              "activeSkills": sum(s.strip() not in skills for s in summary.active_skills if s.strip())}
    return {k: n for k, n in counts.items() if n}


def ungrounded_claims(summary: Capsule, facts: Capsule) -> int:
    """How many of the model's grounded-field claims ``facts`` does not support (:func:`ungrounded_by_field`)."""
    return sum(ungrounded_by_field(summary, facts).values())


@dataclass(frozen=True, slots=True)
class History:
    """What a model's summary is checked against: what the user said (their messages, their
    instructions for the compaction, the goal, constraints and latest request of the capsule rolled
    forward), all the history's text (:func:`~.claims.haystack`), and the summary prompt's
    instruction lines (an item repeating one is an echo)."""

    users: tuple[str, ...]
    text: str
    instructions: tuple[str, ...] = PROMPT_INSTRUCTIONS


def _entry_text(entry: Entry) -> str:
    message = entry.message if entry.is_model_input else {}
    calls = [f"{c.name} {json.dumps(dict(c.arguments), ensure_ascii=False)}" for c in entry.tool_calls] \
        if entry.is_model_input else []
    return "\n".join([entry.text or "", *calls, str(message.get("name", ""))])


def history_of(entries: Sequence[Entry], previous: Capsule | None = None, instructions: str | None = None) -> History:
    """The :class:`History` of a span of ``entries`` summarized over ``previous`` (rolled forward),
    with the user's ``instructions`` for the compaction, if any."""
    carried: list[str] = []
    if previous is not None:
        carried = [previous.goal, previous.latest_request, *previous.constraints]
    users = tuple(u for u in (*user_messages(entries), *carried, instructions or "") if u.strip())
    earlier = json.dumps(previous.to_json(), ensure_ascii=False) if previous is not None else ""
    return History(users, haystack([*(_entry_text(e) for e in entries), earlier, instructions or ""]))


@dataclass(frozen=True, slots=True)
class _Checked:
    """A summary with its unsupported and junk items removed, and how many of each, per field."""

    summary: Capsule
    ungrounded: Counter[str]
    junk: Counter[str]


def _check_items(summary: Capsule, history: History) -> _Checked:
    """Drop what the model attributes to the user without support (goal, constraints), and the
    decisions, blockers and next steps that are junk or name what the history never shows."""
    ungrounded: Counter[str] = Counter()
    junk: Counter[str] = Counter()
    goal = summary.goal
    if goal.strip() and not user_support(goal, history.users):
        ungrounded["goal"] += 1
        goal = ""
    constraints = []
    for c in summary.constraints:
        if user_support(c, history.users):
            constraints.append(c)
        else:
            ungrounded["constraints"] += 1

    def kept(key: str, text: str) -> bool:
        if junk_reason(text, history.instructions) is not None:
            junk[key] += 1
            return False
        if unsupported_mentions(text, history.text):
            ungrounded[key] += 1
            return False
        return True

    return _Checked(replace(
        summary, goal=goal, constraints=tuple(constraints),
        decisions=tuple(d for d in summary.decisions if kept("decisions", f"{d.what} {d.why}".strip())),
        blockers=tuple(b for b in summary.blockers if kept("blockers", b)),
        next_steps=tuple(s for s in summary.next_steps if kept("nextSteps", s))), ungrounded, junk)


def _template_items(summary: Capsule, clean: Capsule) -> Counter[str]:
    """Per field, the decisions, blockers and next steps :func:`without_placeholders` removed."""
    return Counter({"decisions": len(summary.decisions) - len(clean.decisions),
                    "blockers": len(summary.blockers) - len(clean.blockers),
                    "nextSteps": len(summary.next_steps) - len(clean.next_steps)})


@dataclass(frozen=True, slots=True)
class Grounded:
    """A model summary made into a capsule: the capsule, its quality, and what was done to it."""

    capsule: Capsule
    quality: Quality
    #: model claims in the grounded fields that the history does not support (dropped)
    ungrounded: int = 0
    #: what the model left as garbage or empty: ``goal``, ``next steps``
    missing: tuple[str, ...] = ()
    #: the ungrounded claims per field (JSON key), in field order; they sum to :attr:`ungrounded`
    by_field: tuple[tuple[str, int], ...] = ()
    #: per field, the junk items dropped (template text, prompt echoes, one word): each makes it ``partial``
    junk: tuple[tuple[str, int], ...] = ()

    @property
    def note(self) -> str | None:
        """The outcome note: what made the capsule partial and what was dropped, or ``None``."""
        parts = []
        if self.missing:
            parts.append(f"partial: the model's summary gave no usable {' or '.join(self.missing)} (template text "
                         f"or empty); filled from the history where it could be")
        if self.junk:
            parts.append(f"partial: junk dropped from the model's summary (template text, an echo of the prompt's "
                         f"instructions, or one word): {_per_field(self.junk)}")
        if self.ungrounded:
            claims = "claim" if self.ungrounded == 1 else "claims"
            parts.append(f"ungrounded: {self.ungrounded:,} model {claims} the history does not support dropped "
                         f"({_per_field(self.by_field)})")
        return "; ".join(parts) or None


def _per_field(counts: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{key} {n:,}" for key, n in counts)


def _in_field_order(counts: Counter[str]) -> tuple[tuple[str, int], ...]:
    return tuple((f.key, counts[f.key]) for f in CAPSULE_FIELDS if counts[f.key])


def ground(summary: Capsule, facts: Capsule, *, previous: Capsule | None = None,
           previous_checkpoint: str | None = None, fallback_next_steps: Iterable[str] = (),
           history: History | None = None) -> Grounded:
    """The capsule to append for the model's ``summary`` of a span.

    ``facts`` are the history's facts rolled over the previous capsule (the deterministic
    extractor's files, checks, skills, goal, corrections, artifacts, range); ``previous`` is the
    capsule in force, rolled forward under the summary; ``fallback_next_steps`` (the
    deterministic capsule's: the history's) stand in for next steps the model did not give.
    ``history``: what the user said and the history's text (:func:`history_of`); without it only
    the grounded fields and template text are checked.
    """
    clean = without_placeholders(summary)
    junk = _template_items(summary, clean)
    ungrounded: Counter[str] = Counter(ungrounded_by_field(summary, facts))
    if history is not None:
        checked = _check_items(clean, history)
        clean = checked.summary
        ungrounded.update(checked.ungrounded)
        junk.update(checked.junk)
    carried = without_placeholders(previous) if previous is not None else None
    rolled = roll(carried, clean, previous_checkpoint=previous_checkpoint)
    history_steps = merge_unique(fallback_next_steps)
    missing = []
    if is_placeholder(summary.goal) and (summary.goal.strip() or not rolled.goal):
        missing.append("goal")  # garbage, or empty with no earlier goal to carry forward
    if summary.next_steps and not clean.next_steps and not ungrounded["nextSteps"]:
        missing.append("next steps")  # every step given is garbage
    elif not rolled.next_steps and history_steps:
        missing.append("next steps")  # none given, none carried, but the history names some
    capsule = with_facts(rolled, facts)
    if not capsule.next_steps:
        capsule = replace(capsule, next_steps=history_steps)
    by_field = _in_field_order(ungrounded)
    junked = _in_field_order(junk)
    return Grounded(capsule, "partial" if missing or junked else "ok", sum(n for _, n in by_field), tuple(missing),
                    by_field, junked)


def ground_plan_summary(plan: CompactionPlan, summary: Capsule, fallback: Capsule) -> Grounded:
    """A model's ``summary`` of ``plan`` grounded in its history (``fallback``: the plan's
    deterministic capsule). Only a model's summary needs the facts (the fallback is made of them).
    The fallback's skills are the grounded ones: its scan starts from the previous capsule's
    active set."""
    facts = replace(roll(plan.previous_capsule, extract_facts(list(plan.summarize)),
                         previous_checkpoint=plan.previous_checkpoint_id), active_skills=fallback.active_skills)
    history = history_of(plan.summarize, plan.previous_capsule, plan.instructions)
    grounded = ground(summary, facts, previous=plan.previous_capsule, previous_checkpoint=plan.previous_checkpoint_id,
                      fallback_next_steps=fallback.next_steps, history=history)
    return replace(grounded, capsule=plan.with_request_rule(grounded.capsule))
