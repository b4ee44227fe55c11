"""The deterministic extractor: a Context Capsule from transcript entries alone, with no model.

Two jobs depend on it (seed sections 1 and 7):

* :func:`deterministic_capsule` is the local fallback when model summarization exceeds
  ``timeoutMs`` (the capsule is then marked ``quality: degraded``). It rolls the previous capsule
  forward and adds a short work summary inferred from the entries: completed steps, the last
  thing the assistant said, interrupted tool calls, still-failing checks.
* :func:`extract_facts` supplies the facts every model-written capsule is grounded in
  (:mod:`.grounding`): its files read and modified, verification commands with their last result,
  active skills and the notebook cells run with the figures seen (:mod:`.cell_facts`) *replace*
  the model's claims, and the goal and the user's corrections are
  merged in, so a model summary can neither lose nor invent them.

It reads tool calls (name + arguments on assistant entries) paired with their results by tool
call id, for SOBA's own tools and for the tools of agents whose sessions get imported (pi, Claude
Code, SWE-agent, mini-swe-agent); shell command lines are analysed by :mod:`.shell_parse`, check
results read by :mod:`.verification`. A file counts as modified only when the tool call that
changed it succeeded, and as read only when the read succeeded. Every list extracted from the
entries is capped and every string clipped: the degraded capsule exists to reclaim tokens, so it
must stay far smaller than the history it replaces. What a previous capsule held is never cut:
rolled work lists past their bound have their oldest items merged into one item that says so.

Pure functions, no I/O, linear in the number of entries (a thousand-entry session takes a few
milliseconds once its shell commands are memoized, well under 50 ms cold).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..session.entries import Entry
from ..session.payloads import VerificationStatus, checkpoint_data, config_data
from .capsule import Capsule, Decision, EntryRange, Verification, merge_unique, resolved_item, roll
from .cell_facts import CellFacts
from .file_changes import FileChanges
from .latest_request import latest_request
from .shell_parse import ShellEffects, classify_shell_command, normalize_path
from .verification import verification_outcome, verification_status

__all__ = [
    "MAX_FILES",
    "MERGED_ITEM",
    "ShellEffects",
    "classify_shell_command",
    "deterministic_capsule",
    "extract_facts",
    "user_messages",
    "verification_status",
]

#: Caps on every list the extractor produces (files lists are the largest on purpose: losing a
#: modified file is worse than a few more tokens).
MAX_FILES = 200
MAX_VERIFICATIONS = 40
MAX_DONE = 12
MAX_CORRECTIONS = 5
MAX_PENDING = 5
MAX_BLOCKERS = 3
MAX_NEXT_STEPS = 5
MAX_ARTIFACTS = 50
MAX_DECISIONS = 12
MAX_SKILLS = 20
#: Caps applied after rolling in a previous capsule (it brings its own items).
MAX_ROLLED_DONE = 20
MAX_ROLLED_CONSTRAINTS = 12
MAX_ROLLED_PENDING = 8

GOAL_CHARS = 400
CORRECTION_CHARS = 200
ACTIVE_CHARS = 300
ITEM_CHARS = 200
#: A user message longer than this is a paste, not a short correction.
LONG_MESSAGE_CHARS = 1000

_PATH_KEYS = ("path", "file_path", "filename", "notebook_path", "file")
_READ_TOOLS = frozenset({"read_file", "read", "Read", "view_file", "open"})
_WRITE_TOOLS = frozenset({"write_file", "write", "Write", "create", "create_file"})
_EDIT_TOOLS = frozenset({"edit_file", "edit", "Edit", "MultiEdit", "NotebookEdit", "insert", "str_replace",
                         "multi_edit"})
_SHELL_TOOLS = frozenset({"shell", "bash", "Bash", "execute_bash", "run_shell_command", "run_command"})
_GREP_TOOLS = frozenset({"grep", "Grep"})
#: SWE-agent's file tools report failure in their text, not with an error flag.
_TEXT_ERROR_TOOLS = frozenset({"str_replace_editor", "open", "create", "edit", "insert"})
_SKIPPED_SOURCES = frozenset({"capsule", "capsule_load", "cell_history"})
_RESULT_ROLES = frozenset({"tool", "toolResult"})
_FAILED_TEXT = re.compile(r"^\s*(?:Error\b|ERROR\b|No replacement was performed|Invalid \w+|"
                          r"The path \S+ does not exist|File not found|Failed to\b)")
_DIRECTORY_LISTING = re.compile(r"^\s*Here's the files and directories")
_SLASH_COMMAND = re.compile(r"/[A-Za-z][\w:-]*(?:[ \t]+\S+){0,3}")
_NEXT_HEADING = re.compile(r"^\s*(?:[#>*-]+\s*)?(?:\*\*|__)?next(?:\s+steps?)?(?:\*\*|__)?\s*[:：]\s*(?:\*\*)?\s*(.*)$",
                           re.IGNORECASE)
_NEXT_SENTENCE = re.compile(r"^\s*(?:[-*]\s*)?next,?\s+(?:i(?:'ll|\s+will|\s+need)|we(?:'ll|\s+will|\s+should)|"
                            r"step\b|up\b)", re.IGNORECASE)
_INTERRUPTED = " (interrupted, no result)"
#: A next step about a failure (stale once the failing check passes).
_STALE_STEP = re.compile(r"\b(?:fix|fail|failing|failure|error|errors|broken|debug|red)\b", re.IGNORECASE)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+(.*\S)")


# -- small helpers -----------------------------------------------------------------------------

def _clip(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters, cut at a word when possible."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit * 0.6:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def _content_text(content: Any) -> str:
    """Text of a message's ``content``: a string, or the text blocks of a list (pi, Anthropic)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text") for b in content if isinstance(b, Mapping) and b.get("type") in ("text", None)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def _tool_calls(message: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, Any]]]:
    """``(id, name, arguments)`` of an assistant message: SOBA's ``toolCalls``, or tool-call
    blocks left in ``content`` by an importer (pi ``toolCall``, Anthropic ``tool_use``)."""
    out: list[tuple[str, str, Mapping[str, Any]]] = []
    calls = message.get("toolCalls")
    blocks = message.get("content")
    candidates: list[Any] = []
    if isinstance(calls, list):
        candidates.extend(calls)
    if isinstance(blocks, list):
        candidates.extend(b for b in blocks if isinstance(b, Mapping) and b.get("type") in ("toolCall", "tool_use"))
    for call in candidates:
        if not isinstance(call, Mapping):
            continue
        args = call.get("arguments", call.get("input"))
        out.append((str(call.get("id") or ""), str(call.get("name") or ""), args if isinstance(args, Mapping) else {}))
    return out


def _arg(args: Mapping[str, Any], *keys: str) -> str:
    for key in keys:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return ""


@dataclass(frozen=True, slots=True)
class _Result:
    is_error: bool | None
    cancelled: bool
    text: str
    #: the exit status the source recorded (SOBA's shell tool, mini-swe-agent's return code)
    exit_code: int | None = None
    #: ``is_error`` was recorded for every run (pi), so ``False`` means success
    status_recorded: bool = False
    #: files the run was observed to change (SOBA's shell and python tools), when observed
    changes: FileChanges | None = None
    #: the stored result message (the notebook tools' cell runs and figures are read from it)
    message: Mapping[str, Any] | None = None


@dataclass(slots=True)
class _Scan:
    """Everything one pass over the entries learns; turned into capsule fields afterwards."""

    skills: list[str]
    users: list[str] = field(default_factory=list)
    last_assistant: str = ""
    reads: dict[str, int] = field(default_factory=dict)
    modified: dict[str, int] = field(default_factory=dict)
    #: path -> (entry index, "Modified" | "Created" | "Deleted") for the work summary
    changes: dict[str, tuple[int, str]] = field(default_factory=dict)
    artifacts: dict[str, None] = field(default_factory=dict)
    checks: dict[str, tuple[int, Verification]] = field(default_factory=dict)
    #: command -> the detail of its latest failure, kept as history once it passes again
    failed_before: dict[str, str] = field(default_factory=dict)
    milestones: list[tuple[int, str]] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    #: interrupted calls: summary -> entry index; cleared when the same call later completes
    pending: dict[str, int] = field(default_factory=dict)
    completed: set[str] = field(default_factory=set)
    open_file: str | None = None  # SWE-agent's windowed editor edits the file last opened
    cells: CellFacts = field(default_factory=CellFacts)

    # -- files ---------------------------------------------------------------------------------
    def read(self, path: str | None, index: int) -> None:
        if path:
            self.reads.pop(path, None)
            self.reads[path] = index

    def modify(self, path: str | None, index: int, how: str = "Modified") -> None:
        if not path:
            return
        if how == "Created":
            if path in self.reads or path in self.modified:
                how = "Modified"  # it existed: an overwrite, not a new file
            else:
                self.artifacts[path] = None
        elif how == "Deleted":
            self.artifacts.pop(path, None)
        prior = self.changes.get(path)
        if prior is not None and prior[1] == "Created" and how == "Modified":
            how = "Created"
        self.modified.pop(path, None)
        self.modified[path] = index
        self.changes.pop(path, None)
        self.changes[path] = (index, how)

    # -- verification --------------------------------------------------------------------------
    def check(self, command: str, status: VerificationStatus, detail: str, index: int) -> None:
        prior = self.checks.get(command)
        if prior is not None and status == "unknown" and prior[1].status != "unknown":
            return  # an unreadable rerun does not erase a known result
        if prior is not None and prior[1].status == "failed":
            self.failed_before[command] = prior[1].detail or "failed"
        elif status == "failed":
            self.failed_before.pop(command, None)
        self.checks.pop(command, None)
        self.checks[command] = (index, Verification(command, status, _clip(detail, 120)))

    # -- skills and checkpoints ----------------------------------------------------------------
    def skill(self, name: str, active: bool) -> None:
        name = name.strip()
        if not name:
            return
        if name in self.skills:
            self.skills.remove(name)
        if active:
            self.skills.append(name)

    def checkpoint(self, kind: str, note: str, index: int) -> None:
        note = _clip(note, ITEM_CHARS)
        if kind == "milestone":
            self.milestones.append((index, f"Milestone: {note}" if note else "Milestone reached"))
        elif kind == "plan_pivot" and note:
            self.decisions.append(Decision(note, "plan pivot"))


# -- the pass over the entries -----------------------------------------------------------------

def _results(entries: Sequence[Entry]) -> dict[str, _Result]:
    out: dict[str, _Result] = {}
    for entry in entries:
        if entry.type != "message":
            continue
        message = entry.message
        if message.get("role") not in _RESULT_ROLES:
            continue
        call_id = message.get("toolCallId")
        if isinstance(call_id, str) and call_id:
            error = message.get("isError")
            code = message.get("exitCode")
            out[call_id] = _Result(error if isinstance(error, bool) else None, bool(message.get("cancelled")),
                                   _content_text(message.get("content")),
                                   code if isinstance(code, int) and not isinstance(code, bool) else None,
                                   message.get("statusRecorded") is True, FileChanges.from_json(
                                       message.get("filesChanged")), message)
    return out


def _scan(entries: Sequence[Entry], initial_skills: Iterable[str] = ()) -> _Scan:
    results = _results(entries)
    scan = _Scan(skills=list(initial_skills))
    for index, entry in enumerate(entries):
        if entry.type == "message":
            message = entry.message
            role = message.get("role")
            if role == "user":
                _user(scan, message)
            elif role == "assistant":
                text = _content_text(message.get("content")).strip()
                if text:
                    scan.last_assistant = text
                    scan.cells.assistant(text)
                for call_id, name, args in _tool_calls(message):
                    _tool_call(scan, index, name, args, results.get(call_id) if call_id else None)
        elif entry.type == "checkpoint":
            mark = checkpoint_data(entry)
            kind, note = mark.get("kind"), mark.get("note")
            scan.checkpoint(kind if isinstance(kind, str) else "", note if isinstance(note, str) else "", index)
        elif entry.type == "config":
            changes = config_data(entry).get("changes")
            skills = changes.get("activeSkills") if isinstance(changes, Mapping) else None
            if isinstance(skills, list):
                scan.skills = list(merge_unique(s for s in skills if isinstance(s, str)))
    return scan


def _user(scan: _Scan, message: Mapping[str, Any]) -> None:
    if message.get("source") in _SKIPPED_SOURCES:
        return
    text = _content_text(message.get("content")).strip()
    if not text or text.startswith("<context_capsule"):
        return
    if len(text) < 80 and _SLASH_COMMAND.fullmatch(text):
        return  # a UI command (``/mode``, ``/compact``), not an instruction
    scan.users.append(text)


def user_messages(entries: Iterable[Entry]) -> tuple[str, ...]:
    """What the user typed in ``entries``, in order: their messages' text, without UI commands
    (``/compact``), capsules or loaded handoffs (the same messages the goal and corrections come from)."""
    scan = _Scan(skills=[])
    for entry in entries:
        if entry.type == "message" and entry.message.get("role") == "user":
            _user(scan, entry.message)
    return tuple(scan.users)


def _call_summary(name: str, args: Mapping[str, Any]) -> str:
    target = _arg(args, "command", "cmd", *_PATH_KEYS, "pattern", "name", "code", "entry_id")
    return f"{name}: {_clip(target, 120)}" if target else name


def _tool_call(scan: _Scan, index: int, name: str, args: Mapping[str, Any], result: _Result | None) -> None:
    summary = _call_summary(name, args)
    if result is None or result.cancelled:
        scan.pending[summary] = index  # until the same call later completes
        return
    scan.pending.pop(summary, None)
    scan.completed.add(summary)
    scan.cells.tool_result(name, args, result.message)
    ok = result.is_error is not True
    if ok and name in _TEXT_ERROR_TOOLS and result.is_error is None and _FAILED_TEXT.match(result.text[:300]):
        ok = False

    if result.changes is not None:
        _observed(scan, index, result.changes)
    path = normalize_path(_arg(args, *_PATH_KEYS))
    if name in _SHELL_TOOLS:
        command = _arg(args, "command", "cmd")
        if command:
            _shell(scan, index, classify_shell_command(command), result, ok)
    elif name == "str_replace_editor":
        sub = _arg(args, "command")
        if not ok:
            return
        if sub == "view":
            if not _DIRECTORY_LISTING.match(result.text[:200]):
                scan.read(path, index)
        elif sub == "create":
            scan.modify(path, index, "Created")
        elif sub in ("str_replace", "insert", "undo_edit"):
            scan.modify(path, index)
    elif name in _READ_TOOLS:
        if ok:
            scan.read(path, index)
            if name == "open":
                scan.open_file = path or scan.open_file
    elif name in _WRITE_TOOLS:
        if ok:
            scan.modify(path, index, "Created")
            if name == "create":
                scan.open_file = path or scan.open_file
    elif name in _EDIT_TOOLS:
        if ok:  # SWE-agent's windowed ``edit``/``insert`` name no file: they change the open one
            scan.modify(path or (scan.open_file if name in ("edit", "insert") else None), index)
    elif name in _GREP_TOOLS:
        if ok and path and "." in path.rsplit("/", 1)[-1]:
            scan.read(path, index)  # grep in one named file shows parts of it
    elif name in ("activate_skill", "deactivate_skill"):
        if ok:
            scan.skill(_arg(args, "name", "skill"), name == "activate_skill")
    elif name == "checkpoint" and ok:
        scan.checkpoint(_arg(args, "kind"), _arg(args, "note"), index)


def _observed(scan: _Scan, index: int, changes: FileChanges) -> None:
    """Files a run was observed to create, modify or delete: facts, whatever its exit status."""
    for path in changes.read:
        scan.read(path, index)
    for path in changes.created:
        scan.modify(path, index, "Created")
    for path in changes.modified:
        scan.modify(path, index)
    for path in changes.deleted:
        scan.modify(path, index, "Deleted")


def _shell(scan: _Scan, index: int, effects: ShellEffects, result: _Result, ok: bool) -> None:
    if effects.verification and effects.check:
        status, detail = verification_outcome(result.text, result.is_error,
                                              exit_code_reliable=effects.exit_code_reliable,
                                              exit_code=result.exit_code, status_recorded=result.status_recorded)
        scan.check(effects.check, status, detail, index)
    if not ok:
        return
    for path in effects.reads:
        scan.read(path, index)
    if result.changes is not None and result.changes.complete:
        return  # observed changes replace what the command line suggests (shell parsing is the fallback)
    deleted = set(effects.deletes)
    for path in effects.writes:
        scan.modify(path, index, "Deleted" if path in deleted else "Modified")
    for path in effects.artifacts:
        scan.artifacts[path] = None


# -- from the scan to capsule fields -----------------------------------------------------------

def _goal_text(text: str) -> str:
    """The goal: the whole message when short, else its first paragraph, clipped."""
    text = text.strip()
    if len(text) <= GOAL_CHARS:
        return text
    first = re.split(r"\n[ \t]*\n", text, maxsplit=1)[0].strip()
    if len(first) >= 40:
        return first if len(first) <= GOAL_CHARS else _clip(first, GOAL_CHARS)
    return _clip(text, GOAL_CHARS)


def _correction(text: str) -> str:
    """A later user message as a short correction; a long paste (a log, a diff) keeps only its
    opening paragraph when that is short, else it is left to the transcript."""
    if len(text) <= LONG_MESSAGE_CHARS:
        return text
    first = re.split(r"\n[ \t]*\n", text.strip(), maxsplit=1)[0]
    return first if len(first) <= 300 else ""


def _recent(items: dict[str, int], limit: int) -> tuple[str, ...]:
    """At most ``limit`` keys, the most recently touched ones, in first-seen order."""
    if len(items) <= limit:
        return tuple(items)
    keep = set(sorted(items, key=items.__getitem__)[-limit:])
    return tuple(k for k in items if k in keep)


def _facts(scan: _Scan, entries: Sequence[Entry], *, goal_from_first_message: bool = True) -> Capsule:
    users = scan.users
    goal = _goal_text(users[0]) if users and goal_from_first_message else ""
    corrections = users[1:] if goal_from_first_message else users
    checks = sorted(scan.checks.values(), key=lambda item: item[0])[-MAX_VERIFICATIONS:]
    return Capsule(
        goal=goal,
        latest_request=latest_request(users[-1]) if users else "",
        constraints=merge_unique(f"User: {_clip(c, CORRECTION_CHARS)}"
                                 for c in [c for c in map(_correction, corrections) if c][-MAX_CORRECTIONS:]),
        done=merge_unique(text for _, text in scan.milestones[-MAX_DONE:]),
        decisions=tuple(scan.decisions[-MAX_DECISIONS:]),
        files_read=_recent(scan.reads, MAX_FILES),
        files_modified=_recent(scan.modified, MAX_FILES),
        verification=tuple(v for _, v in checks),
        active_skills=tuple(scan.skills[-MAX_SKILLS:]),
        artifacts=tuple(list(scan.artifacts)[-MAX_ARTIFACTS:]),
        cells_run=scan.cells.items(),
        covers=EntryRange(entries[0].id if entries else None, entries[-1].id if entries else None, len(entries)),
    )


def extract_facts(entries: Sequence[Entry]) -> Capsule:
    """The deterministic facts of ``entries`` alone: goal and user corrections, files read and
    modified, verification commands with their last result, active skills, artifacts, milestones
    and plan pivots. ``covers`` spans exactly these entries."""
    entries = list(entries)
    return _facts(_scan(entries), entries)


def _done(scan: _Scan) -> tuple[str, ...]:
    events: list[tuple[int, str, bool]] = [(i, f"{how} {path}", False) for path, (i, how) in scan.changes.items()]
    events += [(i, f"{v.command} passed" + (f" (it failed earlier: {scan.failed_before[v.command]})"
                                            if v.command in scan.failed_before else ""), False)
               for i, v in scan.checks.values() if v.status == "passed"]
    events += [(i, text, True) for i, text in scan.milestones]
    events.sort(key=lambda e: e[0])
    if len(events) > MAX_DONE:
        milestones = [e for e in events if e[2]][-(MAX_DONE // 2):]
        others = [e for e in events if not e[2]][-(MAX_DONE - len(milestones)):]
        events = sorted(milestones + others, key=lambda e: e[0])
    return merge_unique(_clip(text, ITEM_CHARS) for _, text, _ in events)


def _blockers(scan: _Scan) -> tuple[str, ...]:
    failing = sorted((item for item in scan.checks.values() if item[1].status == "failed"), key=lambda e: e[0])
    return tuple(_clip(f"{v.command} failed" + (f" ({v.detail})" if v.detail else ""), ITEM_CHARS)
                 for _, v in failing[-MAX_BLOCKERS:])


def _next_steps(text: str) -> tuple[str, ...]:
    """Steps the assistant announced on an explicit "Next…" line (and the bullets under it)."""
    steps: list[str] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        heading = _NEXT_HEADING.match(line)
        if heading:
            rest = heading.group(1).strip(" *_")
            if rest:
                steps.append(rest)
            for following in lines[i + 1:]:
                bullet = _BULLET.match(following)
                if bullet:
                    steps.append(bullet.group(1))
                elif following.strip() or len(steps) > (1 if rest else 0):
                    break
                if len(steps) >= MAX_NEXT_STEPS:
                    break
            break
        if _NEXT_SENTENCE.match(line):
            steps.append(line.strip(" -*"))
            break
    return merge_unique(_clip(s, ITEM_CHARS) for s in steps[:MAX_NEXT_STEPS])


def _work_summary(scan: _Scan, facts: Capsule) -> Capsule:
    pending = sorted(scan.pending.items(), key=lambda item: item[1])[-MAX_PENDING:]
    return replace(
        facts,
        done=_done(scan),
        active=(_clip(scan.last_assistant, ACTIVE_CHARS),) if scan.last_assistant else (),
        pending=tuple(summary + _INTERRUPTED for summary, _ in pending),
        blockers=_blockers(scan),
        next_steps=_next_steps(scan.last_assistant),
    )


#: the item a bounded list's oldest items are merged into (its count, what, the merged text)
MERGED_ITEM = re.compile(r"^\[(\d+) earlier (.+?) merged to bound the capsule\] (.*)$", re.DOTALL)


def _merged_count(text: str) -> tuple[int, str]:
    match = MERGED_ITEM.match(text)
    return (int(match.group(1)), match.group(3)) if match else (1, text)


#: Characters the merged item of one list may hold. Merging alone would let a capsule grow with
#: the whole history (a long session's capsule then no longer fits its window, and every soft
#: compaction misses its savings); past this bound the oldest merged text is elided with a marker
#: that says so and where it is kept, never silently.
MAX_MERGED_CHARS = 1_200
_ELIDED = "[… {n:,} characters of the oldest merged items elided here; the transcript keeps them all …] "
_ELIDED_AT_START = re.compile(r"^\[… ([\d,]+) characters of the oldest merged items elided here; "
                              r"the transcript keeps them all …\] ")


def _bounded(items: tuple[str, ...], limit: int, what: str) -> tuple[str, ...]:
    """At most ``limit`` items: the oldest are merged into one first item that says how many it
    holds (an earlier merged item is folded in, not nested); a merged text past
    :data:`MAX_MERGED_CHARS` keeps its newest part and says how much older text it elided."""
    if len(items) <= limit:
        return items
    overflow = len(items) - limit + 1
    head = items[:overflow]
    merged_at = [i for i, item in enumerate(head) if MERGED_ITEM.match(item)]
    if len(merged_at) > 1:  # a model's copy of an earlier merged item rolled over ours: the largest holds it
        largest = max(merged_at, key=lambda i: _merged_count(head[i])[0])
        head = tuple(item for i, item in enumerate(head) if i == largest or i not in merged_at)
    parts = [_merged_count(item) for item in head]
    body = "; ".join(b for _, b in parts)
    earlier = _ELIDED_AT_START.match(body)
    elided = int(earlier.group(1).replace(",", "")) if earlier else 0
    if earlier:
        body = body[earlier.end():]
    if len(body) > MAX_MERGED_CHARS:
        elided += len(body) - MAX_MERGED_CHARS
        body = body[len(body) - MAX_MERGED_CHARS:]
    if elided:
        body = _ELIDED.format(n=elided) + body
    merged = f"[{sum(n for n, _ in parts)} earlier {what} merged to bound the capsule] {body}"
    return (merged, *items[overflow:])


def _bounded_decisions(decisions: tuple[Decision, ...], limit: int) -> tuple[Decision, ...]:
    if len(decisions) <= limit:
        return decisions
    overflow = len(decisions) - limit + 1
    text = _bounded(tuple(d.what + (f" (because {d.why})" if d.why else "") for d in decisions[:overflow]),
                    1, "decisions")[0]
    return (Decision(text), *decisions[overflow:])


def deterministic_capsule(entries: Sequence[Entry], previous: Capsule | None = None,
                          previous_checkpoint: str | None = None) -> Capsule:
    """The local fallback capsule: ``previous`` rolled forward with the facts of ``entries`` and
    a degraded work summary (done, active, pending, blockers, next steps) inferred from them.

    When ``previous`` already states a goal, the first user message of ``entries`` is kept as a
    correction instead of replacing it (a compacted span rarely starts at the task's beginning).
    Skills start from ``previous``'s active set, so an activation in ``entries`` adds to it.
    Blockers and interrupted calls of ``previous`` that ``entries`` resolved are dropped.
    """
    entries = list(entries)
    scan = _scan(entries, previous.active_skills if previous is not None else ())
    keep_goal = previous is not None and bool(previous.goal)
    newer = _work_summary(scan, _facts(scan, entries, goal_from_first_message=not keep_goal))
    rolled = roll(previous, newer, previous_checkpoint=previous_checkpoint)
    passed = [v.command for v in newer.verification if v.status == "passed"]
    blockers = tuple(b for b in rolled.blockers if b in newer.blockers
                     or not any(b.startswith(f"{c} failed") or f"`{c}`" in b for c in passed))
    resolved = [resolved_item(b) for b in rolled.blockers if b not in blockers]
    any_resolved = bool(resolved) or (previous is not None and len(rolled.blockers) < len(previous.blockers))
    next_steps = rolled.next_steps
    if any_resolved and not newer.next_steps:
        # steps written while the blocker stood ("fix the failing tests") are stale once it is resolved
        next_steps = tuple(s for s in next_steps if not _STALE_STEP.search(s))
    pending = tuple(p for p in rolled.pending
                    if p in newer.pending or p.removesuffix(_INTERRUPTED) not in scan.completed)
    # Nothing the previous capsule held is dropped unless superseded (done work, resolved
    # blockers and interrupted calls): the work lists are bounded by merging their oldest items,
    # and the merged item says so; files, checks, skills and artifacts are kept whole.
    return replace(
        rolled,
        constraints=_bounded(rolled.constraints, MAX_ROLLED_CONSTRAINTS, "constraints"),
        done=_bounded(merge_unique(rolled.done, resolved), MAX_ROLLED_DONE, "completed items"),
        pending=_bounded(pending, MAX_ROLLED_PENDING, "pending items"),
        decisions=_bounded_decisions(rolled.decisions, MAX_DECISIONS),
        blockers=_bounded(blockers, MAX_BLOCKERS * 2, "blockers"),
        next_steps=_bounded(next_steps, MAX_NEXT_STEPS, "next steps"),
    )
