"""The offline model's coding scenario: how it decides every next step.

This module owns the *script* of :class:`~soba_notebook.demo.scripted.ScriptedModel`: a
small but real coding session in the agent's workspace. Whatever the prompt, the model continues
one demo project, a calculator package in ``calc_demo/``, one task per user prompt (the core, a
parser, a command line, sessions with variables; then a review for every further prompt). What
each task builds, with the demo files' verbatim texts, is data in :mod:`.scenario_tasks`; this
module re-exports its public names. Every result the model sees is real tool output.

**How the next step is decided.** :func:`decide` is a pure function of the request's messages,
never of a counter kept between calls, so it keeps working after the history was compacted:

* Every scripted tool call id is ``scripted-<task>-<step>-<n>``; the newest scripted call after
  the last user prompt names the task in progress. When there is none (a new prompt, or a
  context that holds only a capsule), the turn starts with a *survey*: ``list_files`` and a shell
  command that prints ``calc_demo/PROGRESS.md`` and the project's files. The first task the
  progress notes do not list is the one to work on.
* A *world model* is rebuilt from every visible tool call and its result, in order: the text of
  each file as last written, edited or read; which files exist (from the survey or a failed
  read); the test runs; greps; checkpoints; the progress notes.
* From that the plan is: orient (first step of a task after a prompt) → if a test run of this
  task is newer than every visible change, it decides: failed → locate and read the broken file,
  then fix it (or pivot); passed → record progress and a milestone, then answer with a final
  text. Otherwise make sure every change is in place: re-check which files exist (the survey
  command) and re-read edit targets when that knowledge was compacted away, write missing
  files and apply pending edits (one group per step, as parallel calls), then run the tests.
  A file that already exists is never rewritten blindly; the tests say whether it is right.
* Guards end the turn with a clear text instead of looping: tools the scenario needs are
  missing, the tests cannot run, a failure the script does not recognise, the same step tried
  three times, or more than :data:`MAX_STEPS_PER_TURN` steps.

Each prompt takes 10–12 inferences (4 for a review).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..providers.base import message_text
from ..session.entries import ToolCall
from .scenario_tasks import (
    DEMO_PROMPTS,
    PROGRESS_PATH,
    PROJECT_DIR,
    REVIEW,
    SURVEY_COMMAND,
    TASKS,
    TEST_COMMAND,
    Change,
    Fix,
    Task,
)

__all__ = [
    "DEMO_PROMPTS",
    "MARKER",
    "MAX_STEPS_PER_TURN",
    "PROGRESS_PATH",
    "PROJECT_DIR",
    "REQUIRED_TOOLS",
    "REVIEW",
    "SURVEY_COMMAND",
    "TASKS",
    "TEST_COMMAND",
    "Change",
    "Fix",
    "Step",
    "Task",
    "decide",
    "run_summary",
]

#: Every turn's first reply (and its final answer) starts with this label.
MARKER = "[offline scripted model] "
#: How the first reply of a session introduces the model (in full once; later turns get one line).
_INTRODUCTION = "I am SOBA's offline scripted model"
#: Without these the scenario cannot do anything useful; it says so instead of trying.
REQUIRED_TOOLS = frozenset({"read_file", "write_file", "edit_file", "shell"})
#: Tool-call steps after one prompt before the script gives up with an explanation.
MAX_STEPS_PER_TURN = 24
#: An identical step (same calls, same arguments) is tried at most this often per prompt.
MAX_REPEATS = 3

_ID = re.compile(r"^scripted-([a-z]+)-([a-z]+)-\d+$")
_CAPSULE_PREFIX = "<context_capsule"
_ORPHAN_PREFIXES = ("[result of tool", "[error result of tool")
_NUMBERED_LINE = re.compile(r"^ *\d+\t(.*)$")
_READ_FOOTER = re.compile(r"^\[(?:line|lines) \d+(?:-\d+)? of \d+ in .+\]$")
_PROGRESS_LINE = re.compile(r"^- \[x\] ([a-z]+):", re.MULTILINE)
_GREP_HIT = re.compile(r"^[^:\n]+:(\d+): ", re.MULTILINE)
_RAN = re.compile(r"^Ran (\d+) tests? in ", re.MULTILINE)
_FAILED = re.compile(r"^FAILED \(([^)]*)\)\s*$", re.MULTILINE)
_EXIT = re.compile(r"\[exit code (-?\d+)\]\s*$")


# -- the script's vocabulary -------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Step:
    """The model's next reply: text plus tool calls; no calls means the turn is finished."""

    text: str
    calls: tuple[ToolCall, ...] = ()

    @property
    def final(self) -> bool:
        return not self.calls


# -- reading the request -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Call:
    """A tool call visible in the request, with its result (``None`` when it has none)."""

    order: int
    message: int
    id: str
    name: str
    args: Mapping[str, Any]
    result: str | None = None
    is_error: bool = False
    task: str | None = None
    step: str | None = None

    @property
    def path(self) -> str:
        return _norm(self.args.get("path"))


@dataclass(frozen=True, slots=True)
class _Conversation:
    calls: tuple[_Call, ...]
    prompt: str
    prompt_at: int  # message index of the last user prompt, -1 when there is none
    compacted: bool  # the request starts from a context capsule
    introduced: bool = False  # an earlier reply of this session already said what this model is

    def since_prompt(self) -> list[_Call]:
        return [c for c in self.calls if c.message > self.prompt_at and c.result is not None]


def _norm(path: object) -> str:
    text = str(path or "").strip()
    while text.startswith("./"):
        text = text[2:]
    return text


def _read_conversation(messages: Sequence[Mapping[str, Any]]) -> _Conversation:
    calls: list[_Call] = []
    waiting: dict[str, int] = {}
    prompt, prompt_at, compacted, introduced_at = "", -1, False, -1
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "user":
            text = message_text(message.get("content"))
            if text.lstrip().startswith(_CAPSULE_PREFIX):
                compacted = True
            elif not text.startswith(_ORPHAN_PREFIXES):
                prompt, prompt_at = text, index
        elif role == "assistant":
            if _INTRODUCTION in message_text(message.get("content")):
                introduced_at = index
            for raw in message.get("toolCalls") or ():
                if not isinstance(raw, Mapping):
                    continue
                call_id = str(raw.get("id") or "")
                args = raw.get("arguments")
                match = _ID.match(call_id)
                waiting[call_id] = len(calls)
                calls.append(_Call(len(calls), index, call_id, str(raw.get("name") or ""),
                                   dict(args) if isinstance(args, Mapping) else {},
                                   task=match.group(1) if match else None, step=match.group(2) if match else None))
        elif role == "tool":
            position = waiting.pop(str(message.get("toolCallId") or ""), None)
            if position is not None:
                calls[position] = replace(calls[position], result=message_text(message.get("content")),
                                          is_error=bool(message.get("isError")))
    # a capsule stands for earlier turns of this session, whose first reply said it
    introduced = compacted or -1 < introduced_at < prompt_at
    return _Conversation(tuple(calls), prompt, prompt_at, compacted, introduced)


# -- the world model ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Read:
    order: int
    path: str
    text: str


@dataclass(slots=True)
class _World:
    """What the visible tool results say about the workspace, newest fact winning."""

    texts: dict[str, str | None] = field(default_factory=dict)  # None: exists, text not known
    missing: set[str] = field(default_factory=set)
    modified_at: int = -1
    reads: list[_Read] = field(default_factory=list)
    runs: list[_Call] = field(default_factory=list)
    greps: list[_Call] = field(default_factory=list)
    checkpoints: set[tuple[str, str]] = field(default_factory=set)
    progress: set[str] = field(default_factory=set)

    def state(self, path: str) -> str:
        if path in self.missing:
            return "missing"
        if path not in self.texts:
            return "unknown"
        return "present" if self.texts[path] is None else "known"

    def _touch(self, path: str, order: int) -> None:
        self.missing.discard(path)
        if path.startswith(PROJECT_DIR + "/") and path != PROGRESS_PATH:
            self.modified_at = max(self.modified_at, order)

    def observe(self, call: _Call) -> None:
        result, ok, path = call.result or "", not call.is_error, call.path
        if call.name == "write_file" and ok and path:
            content = str(call.args.get("content", ""))
            self.texts[path] = content
            self._touch(path, call.order)
            if path == PROGRESS_PATH:
                self.progress |= set(_PROGRESS_LINE.findall(content))
        elif call.name == "edit_file" and ok and path:
            known, old = self.texts.get(path), str(call.args.get("old", ""))
            self.texts[path] = known.replace(old, str(call.args.get("new", "")), 1) \
                if isinstance(known, str) and old in known else None
            self._touch(path, call.order)
        elif call.name == "read_file" and path:
            if ok:
                text = _unnumber(result)
                self.reads.append(_Read(call.order, path, text))
                self.missing.discard(path)
                whole = call.args.get("start_line") is None and call.args.get("end_line") is None
                if whole:
                    self.texts[path] = text
                else:
                    self.texts.setdefault(path, None)
            elif result.startswith("no such file"):
                self.texts.pop(path, None)
                self.missing.add(path)
        elif call.name == "shell" and ok:
            command = str(call.args.get("command", ""))
            if command == SURVEY_COMMAND:
                self._survey(result)
            elif command == TEST_COMMAND:
                self.runs.append(call)
        elif call.name == "shell" and str(call.args.get("command", "")) == TEST_COMMAND:
            self.runs.append(call)  # a failing run is an error result too
        elif call.name == "grep" and ok:
            self.greps.append(call)
        elif call.name == "checkpoint" and ok:
            self.checkpoints.add((str(call.args.get("kind", "")), str(call.args.get("note", ""))))

    def _survey(self, output: str) -> None:
        notes, _, listing = output.partition(f"--- python files in {PROJECT_DIR} ---")
        self.progress |= set(_PROGRESS_LINE.findall(notes))
        listed = {_norm(line) for line in listing.splitlines() if line.startswith(PROJECT_DIR + "/")}
        for path in listed:
            self.missing.discard(path)
            self.texts.setdefault(path, None)
        for path in _planned_files():
            if path not in listed:
                self.texts.pop(path, None)
                self.missing.add(path)


def _unnumber(text: str) -> str:
    """A ``read_file`` result without its line numbers and range footer: the file's text."""
    if text.startswith("(") and text.endswith(" is empty)"):
        return ""
    lines = []
    for line in text.splitlines():
        match = _NUMBERED_LINE.match(line)
        if match:
            lines.append(match.group(1))
        elif not _READ_FOOTER.match(line):
            lines.append(line)
    return "\n".join(lines) + "\n"


def _planned_files() -> set[str]:
    return {c.path for t in TASKS for c in t.changes if not c.is_edit}


def _world(conversation: _Conversation) -> _World:
    world = _World()
    for call in conversation.calls:
        if call.result is not None:
            world.observe(call)
    return world


# -- test output -------------------------------------------------------------------------------

def _outcome(output: str) -> str:
    """``passed``, ``failed`` (tests ran, some failed) or ``broken`` (no usable test run)."""
    exit_code = _EXIT.search(output)
    ran = _RAN.search(output)
    if ran is None or int(ran.group(1)) == 0:
        return "broken"
    if exit_code is not None and exit_code.group(1) == "0":
        return "passed"
    return "failed" if _FAILED.search(output) else "broken"


def run_summary(output: str) -> str:
    """``"38 tests, OK"`` / ``"66 tests, failures=3, errors=2"`` from unittest output (no timings,
    so texts built from it stay deterministic)."""
    ran = _RAN.search(output)
    count = f"{ran.group(1)} tests" if ran else "no tests ran"
    failed = _FAILED.search(output)
    if failed:
        return f"{count}, {failed.group(1)}"
    return f"{count}, OK" if _outcome(output) == "passed" else count


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


# -- deciding ----------------------------------------------------------------------------------

class _Ids:
    """Tool-call ids ``scripted-<task>-<step>-<n>``, ``n`` counting the calls in the request."""

    def __init__(self, conversation: _Conversation) -> None:
        self.next = len(conversation.calls) + 1

    def __call__(self, task: str, step: str, name: str, **args: Any) -> ToolCall:
        call = ToolCall(f"scripted-{task}-{step}-{self.next}", name, args)
        self.next += 1
        return call


def _stop(text: str) -> Step:
    return Step(MARKER + text)


def _signature(calls: Sequence[ToolCall] | Sequence[_Call]) -> str:
    return json.dumps([[c.name, dict(c.args if isinstance(c, _Call) else c.arguments)] for c in calls],
                      sort_keys=True, ensure_ascii=False)


def _guarded(step: Step, conversation: _Conversation) -> Step:
    """``step``, unless it would be one step too many or the same attempt once too often."""
    if step.final:
        return step
    by_message: dict[int, list[_Call]] = {}
    for call in conversation.since_prompt():
        by_message.setdefault(call.message, []).append(call)
    if len(by_message) >= MAX_STEPS_PER_TURN:
        return _stop(f"I have taken {len(by_message)} steps for this request without finishing, which means "
                     "the workspace is not in a state this script understands. Stopping here; the files and "
                     f"`{PROGRESS_PATH}` show where things stand.")
    wanted = _signature(step.calls)
    tries = sum(1 for calls in by_message.values() if _signature(calls) == wanted)
    if tries >= MAX_REPEATS:
        names = ", ".join(c.name for c in step.calls)
        return _stop(f"I already made the same {names} call {tries} times for this request and it did not "
                     "get the work further, so I am stopping instead of looping. The last results above "
                     "show what went wrong.")
    return step


def decide(messages: Sequence[Mapping[str, Any]], tools: Collection[str] | None = None) -> Step:
    """The next reply for an agent request with these messages.

    ``tools`` names the tools the request offers (``None``: assume all of them). Pure and
    deterministic: the same messages always give the same step.
    """
    last = messages[-1] if messages else None
    if last is not None and last.get("role") == "assistant" and not last.get("toolCalls"):
        return _stop("Nothing is pending: the last request is finished. Send a new prompt to continue the "
                     "calculator demo.")
    available = None if tools is None else frozenset(tools)
    absent = REQUIRED_TOOLS - available if available is not None else frozenset()
    if absent:
        missing = ", ".join(sorted(absent))
        return _stop(f"This offline scripted model runs a fixed coding demo that needs the tools "
                     f"{', '.join(sorted(REQUIRED_TOOLS))}; this session does not offer {missing} "
                     "(disabled in the tools config?). Nothing was changed.")

    def has(name: str) -> bool:
        return available is None or name in available

    conversation = _read_conversation(messages)
    ids = _Ids(conversation)
    scripted = [c for c in conversation.since_prompt() if c.task is not None]
    if not scripted:
        return _guarded(_survey(conversation, ids, has), conversation)
    world = _world(conversation)
    key = scripted[-1].task
    task = _next_task(world) if key == "turn" else _task(key)
    if task is None:
        return _stop(f"I do not recognise the task {key!r} from my earlier tool calls; send a new prompt and "
                     "I will re-check the workspace.")
    return _guarded(_plan(task, conversation, world, ids, has), conversation)


def _task(key: str | None) -> Task | None:
    return next((t for t in (*TASKS, REVIEW) if t.key == key), None)


def _next_task(world: _World) -> Task:
    return next((t for t in TASKS if t.key not in world.progress), REVIEW)


def _survey(conversation: _Conversation, ids: _Ids, has: Callable[[str], bool]) -> Step:
    prompt = " ".join(conversation.prompt.split())
    if len(prompt) > 300:
        prompt = prompt[:297] + "…"
    shown = f"“{prompt}”" if prompt else "(no prompt text)"
    lines = [f"{MARKER}You asked: {shown}", ""]
    if conversation.compacted:
        lines += ["Earlier context was compacted into a capsule; rather than trusting memory, I am re-checking "
                  "the files on disk before I continue.", ""]
    if conversation.introduced:  # said in full once per session; each later turn gets one line
        lines += [f"(Still the offline demo script, not your request: it continues the calculator demo in "
                  f"`{PROJECT_DIR}/`.) First I look at the workspace and at `{PROGRESS_PATH}`."]
    else:
        lines += [f"{_INTRODUCTION}: no model provider is configured, so a fixed demo script "
                  "answers instead of a language model (deterministic, no network). **I will not do what you "
                  f"asked.** What I will do: continue one fixed demo project, a tiny calculator package in the "
                  f"demo folder `{PROJECT_DIR}/` of this workspace, built over several requests (core operations, "
                  "a parser, a command line, sessions with variables). I only create files that do not exist yet "
                  "and never write over an existing file of yours; every step runs real tools.", "",
                  f"First I look at the workspace and at `{PROGRESS_PATH}` to see how far the project has come."]
    calls = [ids("turn", "survey", "list_files", path=".")] if has("list_files") else []
    calls.append(ids("turn", "survey", "shell", command=SURVEY_COMMAND))
    return Step("\n".join(lines), tuple(calls))


def _intro(task: Task, world: _World) -> str:
    done = [t.title for t in TASKS if t.key in world.progress]
    if task is REVIEW:
        return f"{REVIEW.intro}\n\n"
    status = (f"The progress notes list {', '.join(done)} as done." if done
              else "Nothing is recorded as done yet, so this is the first task.")
    return f"{status} Next on the list: {task.title}. {task.intro}\n\n"


def _plan(task: Task, conversation: _Conversation, world: _World, ids: _Ids,
          has: Callable[[str], bool]) -> Step:
    after = conversation.since_prompt()
    started = any(c.task == task.key for c in after)
    intro = "" if started else _intro(task, world)
    key = task.key

    orient = [(name, args) for name, args in task.orient if has(name)]
    if not started and orient:
        return Step(intro + task.orient_text, tuple(ids(key, "orient", n, **a) for n, a in orient))

    # A test run of this task newer than every visible change decides everything that follows.
    runs = [r for r in world.runs
            if r.task == key and r.message > conversation.prompt_at and r.order > world.modified_at]
    if runs:
        output = runs[-1].result or ""
        outcome = _outcome(output)
        if outcome == "broken":
            return _stop(f"I could not get a usable test run from `{TEST_COMMAND}` (is `python3` on the PATH of "
                         f"the shell tool?). The end of its output:\n\n```\n{_tail(output)}\n```\n\nStopping "
                         "here so you can check the environment; nothing else was changed.")
        if outcome == "failed":
            return _repair(task, runs[-1], world, ids, has)
        if task.progress and key not in world.progress:
            calls = [ids(key, "finish", "write_file", path=PROGRESS_PATH, content=_progress_notes(task))]
            if has("checkpoint") and ("milestone", task.milestone) not in world.checkpoints:
                calls.append(ids(key, "finish", "checkpoint", kind="milestone", note=task.milestone))
            return Step(f"All tests pass ({run_summary(output)}). I record the task in `{PROGRESS_PATH}` and "
                        f"mark a milestone checkpoint: “{task.milestone}”.", tuple(calls))
        return Step(MARKER + task.done_text.format(summary=run_summary(output)))

    # No current run: first make sure every change of the task is in place.
    recheck = any(not c.is_edit and world.state(c.path) == "unknown" for c in task.changes)
    reread = list(dict.fromkeys(c.path for c in task.changes
                                if c.is_edit and world.state(c.path) in ("unknown", "present")))
    if recheck or reread:
        what = ["check which of its files exist"] if recheck else []
        what += [f"re-read {', '.join(f'`{p}`' for p in reread)}"] if reread else []
        calls = [ids(key, "recheck", "shell", command=SURVEY_COMMAND)] if recheck else []
        calls += [ids(key, "recheck", "read_file", path=p) for p in reread]
        return Step(intro + "Part of this task's state is not in my context any more (it was compacted, or the "
                    f"workspace changed), so I {' and '.join(what)} before deciding what is left to do, rather "
                    "than redoing work.", tuple(calls))

    pending = [c for c in task.changes if _pending(c, world)]
    if pending:
        group = [c for c in pending if c.group == pending[0].group]
        texts, calls = [], []
        for change in group:
            if change.is_edit:
                texts.append(f"Updating `{change.path}`: {change.about}")
                calls.append(ids(key, "change", "edit_file", path=change.path, old=change.old, new=change.new))
            else:
                texts.append(f"Writing `{change.path}`: {change.about}")
                calls.append(ids(key, "change", "write_file", path=change.path, content=change.content))
        return Step(intro + "\n\n".join(texts), tuple(calls))

    earlier = any(r.task == key and r.message > conversation.prompt_at for r in world.runs)
    text = ("Re-running the whole test suite after the change." if earlier
            else f"Running the whole test suite, verbosely, so every test's rule is visible: `{TEST_COMMAND}`.")
    return Step(intro + text, (ids(key, "test", "shell", command=TEST_COMMAND),))


def _pending(change: Change, world: _World) -> bool:
    if not change.is_edit:
        return world.state(change.path) == "missing"
    text = world.texts.get(change.path)
    return isinstance(text, str) and change.applied not in text and change.old in text


def _progress_notes(task: Task) -> str:
    done = TASKS[:TASKS.index(task) + 1]
    lines = [f"# {PROJECT_DIR} progress", "",
             "Maintained by SOBA's offline scripted model: one line per finished and verified task.", ""]
    lines += [f"- [x] {t.key}: {t.progress}" for t in done]
    lines += [f"- [ ] {t.key}: {t.title}" for t in TASKS[len(done):]]
    return "\n".join(lines) + "\n"


def _repair(task: Task, run: _Call, world: _World, ids: _Ids, has: Callable[[str], bool]) -> Step:
    output = run.result or ""
    fix = task.fix
    if fix is None:
        return _stop(f"The test suite fails ({run_summary(output)}), and nothing in this task explains it: "
                     f"something changed outside the script. The end of the output:\n\n```\n{_tail(output)}\n```"
                     "\n\nStopping here so you can have a look.")
    key = task.key
    inspected = [r for r in world.reads if r.order > run.order and r.path == fix.path]
    if not inspected:
        if fix.locate and has("grep"):
            greps = [g for g in world.greps if g.order > run.order]
            if not greps:
                return Step(f"The tests fail ({run_summary(output)}). The failures point at `{fix.path}`; I "
                            f"search it for `{fix.locate}` to find the exact place.",
                            (ids(key, "locate", "grep", pattern=fix.locate, path=fix.path),))
            hit = _GREP_HIT.search(greps[-1].result or "")
            if hit:
                line = int(hit.group(1))
                return Step(f"Found it at line {line}; reading that part of `{fix.path}`.",
                            (ids(key, "inspect", "read_file", path=fix.path, start_line=max(1, line - 2),
                                 end_line=line + 24),))
        return Step(f"The tests fail ({run_summary(output)}). Reading `{fix.path}` to see why.",
                    (ids(key, "inspect", "read_file", path=fix.path),))
    known = world.texts.get(fix.path)
    if fix.detect not in inspected[-1].text and not (isinstance(known, str) and fix.detect in known):
        return _stop(f"The tests still fail ({run_summary(output)}), but `{fix.path}` does not contain the "
                     "problem this script knows how to fix, so I stop rather than guess. The end of the test "
                     f"output:\n\n```\n{_tail(output)}\n```")
    calls = []
    if fix.pivot and has("checkpoint") and ("plan_pivot", fix.pivot) not in world.checkpoints:
        calls.append(ids(key, "pivot", "checkpoint", kind="plan_pivot", note=fix.pivot))
    if fix.rewrite is not None:
        calls.append(ids(key, "pivot" if fix.pivot else "fix", "write_file", path=fix.path, content=fix.rewrite))
    else:
        calls.append(ids(key, "fix", "edit_file", path=fix.path, old=fix.old, new=fix.new))
    return Step(fix.explanation, tuple(calls))
