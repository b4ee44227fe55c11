"""The offline model's coding scenario: what it builds, and how it decides every next step.

This module owns the *script* of :class:`~soba_notebook.providers.scripted.ScriptedModel`: a
small but real coding session in the agent's workspace. Whatever the prompt, the model continues
one demo project, a calculator package in ``calc_demo/`` (a subdirectory, so that a real project's
own files and ``tests/`` are never touched), one task per user prompt:

1. ``calc`` — the arithmetic core with a deliberate bug (floor instead of true division) that the
   first test run exposes and an ``edit_file`` fixes; then a ``milestone`` checkpoint.
2. ``parser`` — a tokenizer and a recursive-descent parser. The first tokenizer is one regular
   expression; its test failures lead to a ``plan_pivot`` checkpoint ("switch from regex to a
   hand-written tokenizer") and a rewrite.
3. ``cli`` — ``python3 -m calc``; a formatting bug found with ``grep`` and a ranged ``read_file``.
4. ``session`` — variables and ``ans``; a shared-dict bug.

After the four tasks, every further prompt runs a short review (list, grep, full test run).
Tests use ``python3 -m unittest`` (standard library only) and every result is real tool output.

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

Each prompt takes 10–12 inferences (4 for a review). The file contents at the end of this module
are verbatim Python that the scenario's own tests run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..session.entries import ToolCall
from .base import message_text

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
PROJECT_DIR = "calc_demo"
PROGRESS_PATH = f"{PROJECT_DIR}/PROGRESS.md"
TEST_COMMAND = f"cd {PROJECT_DIR} && python3 -m unittest discover -s tests -v"
SURVEY_COMMAND = (f"cat {PROGRESS_PATH} 2>/dev/null || echo '(no {PROGRESS_PATH} yet)'; "
                  f"echo '--- python files in {PROJECT_DIR} ---'; "
                  f"find {PROJECT_DIR} -name '*.py' -not -path '*/__pycache__/*' 2>/dev/null | sort")
#: Without these the scenario cannot do anything useful; it says so instead of trying.
REQUIRED_TOOLS = frozenset({"read_file", "write_file", "edit_file", "shell"})
#: Tool-call steps after one prompt before the script gives up with an explanation.
MAX_STEPS_PER_TURN = 24
#: An identical step (same calls, same arguments) is tried at most this often per prompt.
MAX_REPEATS = 3
#: Prompts that read naturally with the scenario, in order (any prompt works).
DEMO_PROMPTS = (
    "Create a tiny calculator package and make its tests pass.",
    "Add a parser so that expressions like 2 * (3 + 4) can be evaluated.",
    "Add a command-line interface, so I can run python3 -m calc '1 + 2'.",
    "Add sessions with variables and ans that persist between lines.",
)

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
class Change:
    """One planned change: a new file (``content``) or an edit (``old`` -> ``new``).

    Changes of the same ``group`` are made together, as parallel tool calls in one step.
    ``applied`` is text that is present once an edit has been made (how a re-read file shows it).
    """

    path: str
    about: str
    group: int
    content: str | None = None
    old: str = ""
    new: str = ""
    applied: str = ""

    @property
    def is_edit(self) -> bool:
        return self.content is None


@dataclass(frozen=True, slots=True)
class Fix:
    """What the first test run of a task exposes, and how the script repairs it.

    ``detect`` is a fragment of one line present only in the broken file. The repair is an
    edit (``old`` -> ``new``) or a whole new file (``rewrite``), optionally announced by a
    ``plan_pivot`` checkpoint (``pivot``). ``locate`` is a grep pattern used to find the place
    before a ranged read.
    """

    path: str
    detect: str
    explanation: str
    old: str = ""
    new: str = ""
    rewrite: str | None = None
    pivot: str | None = None
    locate: str | None = None


@dataclass(frozen=True, slots=True)
class Task:
    """One user prompt's worth of work."""

    key: str
    title: str
    intro: str
    orient_text: str = ""
    orient: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    changes: tuple[Change, ...] = ()
    fix: Fix | None = None
    milestone: str = ""
    progress: str = ""
    done_text: str = ""


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
    prompt, prompt_at, compacted = "", -1, False
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "user":
            text = message_text(message.get("content"))
            if text.lstrip().startswith(_CAPSULE_PREFIX):
                compacted = True
            elif not text.startswith(_ORPHAN_PREFIXES):
                prompt, prompt_at = text, index
        elif role == "assistant":
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
    return _Conversation(tuple(calls), prompt, prompt_at, compacted)


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
    lines += ["I am SOBA's offline scripted model: deterministic, no network, no language model behind me. "
              f"Whatever the prompt, I continue one fixed demo project, a tiny calculator package in "
              f"`{PROJECT_DIR}/`, built over several requests (core operations, a parser, a command line, "
              "sessions with variables). Every step runs real tools in this workspace.", "",
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


# -- the demo project's files, verbatim; the broken versions are what the script writes first --

INIT_V1 = r'''"""calc: a tiny calculator package, built step by step by SOBA's offline scripted model.

The package grows during the demo session, one user request at a time:

* :mod:`calc.ops` - arithmetic on plain numbers with friendly, explicit errors;
* :mod:`calc.tokenizer` and :mod:`calc.parser` - expression text to tokens to a syntax tree;
* :mod:`calc.cli` - ``python3 -m calc "1 + 2 * 3"`` on the command line;
* :mod:`calc.session` - variables and ``ans`` that persist from one line to the next.

Only the Python standard library is used, and every module has unittest tests under ``tests/``;
run them from the project directory with ``python3 -m unittest discover -s tests -v``.
"""

from calc.ops import (
    OPERATORS,
    CalcError,
    Number,
    absolute,
    add,
    clamp,
    divide,
    floor_divide,
    mean,
    modulo,
    multiply,
    negate,
    percent,
    power,
    square_root,
    subtract,
)

__all__ = [
    "OPERATORS",
    "CalcError",
    "Number",
    "absolute",
    "add",
    "clamp",
    "divide",
    "floor_divide",
    "mean",
    "modulo",
    "multiply",
    "negate",
    "percent",
    "power",
    "square_root",
    "subtract",
]

__version__ = "0.1.0"
'''

OPS_V1 = r'''"""Arithmetic operations for the calc package.

Every operation takes plain Python numbers (``int`` or ``float``) and returns a number. Errors a
user can cause (dividing by zero, the square root of a negative number, an argument that is not
a number) raise :class:`CalcError` with a message that says what went wrong, never a bare
``ZeroDivisionError`` or ``TypeError`` from deep inside, so that the front ends (the parser, the
command line, sessions) can show one clean line to the person at the keyboard.

Design notes
------------
* Integers stay integers where the mathematics allows it: ``add(2, 3) == 5``. True division
  always returns a float, like Python's ``/``: ``divide(7, 2) == 3.5`` and ``divide(6, 3) == 2.0``.
* Booleans are refused even though ``bool`` is a subclass of ``int``: ``add(True, 1)`` is almost
  certainly a mistake in the caller, and silently answering ``2`` would hide it.
* ``NaN`` is refused as an input, and a result too large to represent is reported as an
  overflow instead of being returned as ``inf``.
* The functions are deliberately small and flat. The parser maps each operator symbol onto one
  of them through :data:`OPERATORS`, so adding an operator is one function plus one table entry.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

Number = int | float

__all__ = [
    "OPERATORS",
    "CalcError",
    "Number",
    "absolute",
    "add",
    "clamp",
    "divide",
    "floor_divide",
    "mean",
    "modulo",
    "multiply",
    "negate",
    "percent",
    "power",
    "square_root",
    "subtract",
]

#: Integer results with more digits than this are reported as an overflow.
MAX_DIGITS = 300


class CalcError(ValueError):
    """A calculation that cannot be done. The message is written for the person at the keyboard."""


def _check(*values: object) -> None:
    """Raise :class:`CalcError` unless every value is an ``int`` or ``float`` (and not a ``bool``)."""
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise CalcError(f"expected a number, got {value!r}")
        if isinstance(value, float) and math.isnan(value):
            raise CalcError("expected a number, got NaN")


def _finite(result: Number, what: str) -> Number:
    """``result`` unless it overflowed; ``what`` names the operation in the message."""
    if isinstance(result, float) and math.isinf(result):
        raise CalcError(f"{what} overflowed: the result is too large to represent")
    if isinstance(result, int) and result != 0 and math.log10(abs(result)) > MAX_DIGITS:
        raise CalcError(f"{what} overflowed: the result has more than {MAX_DIGITS} digits")
    return result


def add(a: Number, b: Number) -> Number:
    """``a + b``.

    >>> add(2, 3)
    5
    >>> add(0.5, 0.25)
    0.75
    """
    _check(a, b)
    return _finite(a + b, "addition")


def subtract(a: Number, b: Number) -> Number:
    """``a - b``.

    >>> subtract(10, 4)
    6
    """
    _check(a, b)
    return _finite(a - b, "subtraction")


def multiply(a: Number, b: Number) -> Number:
    """``a * b``.

    >>> multiply(6, 7)
    42
    """
    _check(a, b)
    return _finite(a * b, "multiplication")


def divide(a: Number, b: Number) -> float:
    """``a / b`` as a float (true division, like Python's ``/``).

    >>> divide(7, 2)
    3.5
    >>> divide(6, 3)
    2.0

    Dividing by zero raises :class:`CalcError` rather than ``ZeroDivisionError``.
    """
    _check(a, b)
    if b == 0:
        raise CalcError("division by zero")
    return float(a // b)


def floor_divide(a: Number, b: Number) -> Number:
    """``a // b``: the quotient rounded towards negative infinity.

    >>> floor_divide(7, 2)
    3
    >>> floor_divide(-7, 2)
    -4
    """
    _check(a, b)
    if b == 0:
        raise CalcError("division by zero")
    return a // b


def modulo(a: Number, b: Number) -> Number:
    """``a % b``: the remainder, with the sign of ``b`` (Python's convention).

    >>> modulo(7, 3)
    1
    >>> modulo(-7, 3)
    2
    """
    _check(a, b)
    if b == 0:
        raise CalcError("modulo by zero")
    return a % b


def power(base: Number, exponent: Number) -> Number:
    """``base ** exponent``.

    >>> power(2, 10)
    1024
    >>> power(2, -1)
    0.5

    Zero to a negative power, and a negative base with a fractional exponent (a complex
    result), raise :class:`CalcError`. So does a result too large to represent.
    """
    _check(base, exponent)
    if base == 0 and exponent < 0:
        raise CalcError("zero cannot be raised to a negative power")
    if base < 0 and isinstance(exponent, float) and not exponent.is_integer():
        raise CalcError("a negative number raised to a fractional power is not a real number")
    if (isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1
            and exponent * math.log10(abs(base)) > MAX_DIGITS):
        raise CalcError(f"exponentiation overflowed: the result has more than {MAX_DIGITS} digits")
    try:
        result = base ** exponent
    except OverflowError:
        raise CalcError("exponentiation overflowed: the result is too large to represent") from None
    return _finite(result, "exponentiation")


def negate(a: Number) -> Number:
    """``-a``.

    >>> negate(5)
    -5
    """
    _check(a)
    return -a


def absolute(a: Number) -> Number:
    """``abs(a)``.

    >>> absolute(-3.5)
    3.5
    """
    _check(a)
    return abs(a)


def square_root(a: Number) -> float:
    """The square root of ``a`` as a float; negative input raises :class:`CalcError`.

    >>> square_root(9)
    3.0
    """
    _check(a)
    if a < 0:
        raise CalcError(f"the square root of a negative number ({a}) is not a real number")
    return math.sqrt(a)


def mean(values: Iterable[Number]) -> float:
    """The arithmetic mean of ``values`` (at least one).

    >>> mean([1, 2, 3, 4])
    2.5
    """
    items = list(values)
    if not items:
        raise CalcError("the mean of no values is undefined")
    total: Number = 0
    for value in items:
        total = add(total, value)
    return divide(total, len(items))


def clamp(value: Number, low: Number, high: Number) -> Number:
    """``value`` limited to the range ``low..high`` (inclusive).

    >>> clamp(15, 0, 10)
    10
    """
    _check(value, low, high)
    if low > high:
        raise CalcError(f"clamp range is empty: low {low} is greater than high {high}")
    return min(max(value, low), high)


def percent(value: Number, pct: Number) -> float:
    """``pct`` percent of ``value``.

    >>> percent(200, 15)
    30.0
    """
    return multiply(value, divide(pct, 100))


#: Binary operator symbol -> operation. The parser looks operators up here.
OPERATORS: dict[str, Callable[[Number, Number], Number]] = {
    "+": add,
    "-": subtract,
    "*": multiply,
    "/": divide,
    "//": floor_divide,
    "%": modulo,
    "^": power,
    "**": power,
}
'''

TEST_OPS = r'''"""Tests for calc.ops: results, types, and the errors a user can cause.

Run from the project directory: ``python3 -m unittest discover -s tests -v``.
Each test's docstring says the rule it checks, so the verbose output reads as a specification.
"""

import math
import unittest

from calc.ops import (
    OPERATORS,
    CalcError,
    absolute,
    add,
    clamp,
    divide,
    floor_divide,
    mean,
    modulo,
    multiply,
    negate,
    percent,
    power,
    square_root,
    subtract,
)


class AddSubtractMultiplyTests(unittest.TestCase):
    def test_add_integers_stays_integer(self):
        """2 + 3 is the integer 5, not 5.0."""
        result = add(2, 3)
        self.assertEqual(result, 5)
        self.assertIsInstance(result, int)

    def test_add_floats(self):
        """0.5 + 0.25 is 0.75."""
        self.assertEqual(add(0.5, 0.25), 0.75)

    def test_add_negative(self):
        """Adding a negative number subtracts."""
        self.assertEqual(add(10, -4), 6)

    def test_subtract(self):
        """10 - 4 is 6 and 4 - 10 is -6 (order matters)."""
        self.assertEqual(subtract(10, 4), 6)
        self.assertEqual(subtract(4, 10), -6)

    def test_multiply(self):
        """6 * 7 is 42; anything times zero is zero."""
        self.assertEqual(multiply(6, 7), 42)
        self.assertEqual(multiply(123.5, 0), 0)

    def test_multiply_overflow_is_reported(self):
        """A float product too large to represent raises CalcError, not inf."""
        with self.assertRaises(CalcError):
            multiply(1e200, 1e200)


class DivideTests(unittest.TestCase):
    def test_divide_exact_half(self):
        """7 / 2 is 3.5: true division, not floor division."""
        self.assertEqual(divide(7, 2), 3.5)

    def test_divide_fraction(self):
        """1 / 4 is 0.25."""
        self.assertEqual(divide(1, 4), 0.25)

    def test_divide_negative(self):
        """-7 / 2 is -3.5 (floor division would give -4)."""
        self.assertEqual(divide(-7, 2), -3.5)

    def test_divide_returns_float(self):
        """6 / 3 is the float 2.0, like Python's / operator."""
        result = divide(6, 3)
        self.assertEqual(result, 2.0)
        self.assertIsInstance(result, float)

    def test_divide_by_zero(self):
        """Dividing by zero raises CalcError with a readable message."""
        with self.assertRaisesRegex(CalcError, "division by zero"):
            divide(1, 0)

    def test_floor_divide(self):
        """7 // 2 is 3 and -7 // 2 is -4 (rounds towards negative infinity)."""
        self.assertEqual(floor_divide(7, 2), 3)
        self.assertEqual(floor_divide(-7, 2), -4)

    def test_floor_divide_by_zero(self):
        """Floor division by zero raises CalcError."""
        with self.assertRaises(CalcError):
            floor_divide(3, 0)

    def test_modulo_sign_follows_divisor(self):
        """-7 % 3 is 2: the remainder takes the sign of the divisor."""
        self.assertEqual(modulo(7, 3), 1)
        self.assertEqual(modulo(-7, 3), 2)

    def test_modulo_by_zero(self):
        """Modulo by zero raises CalcError."""
        with self.assertRaisesRegex(CalcError, "modulo by zero"):
            modulo(5, 0)


class PowerTests(unittest.TestCase):
    def test_integer_power(self):
        """2 ^ 10 is the integer 1024."""
        self.assertEqual(power(2, 10), 1024)

    def test_negative_exponent(self):
        """2 ^ -1 is 0.5."""
        self.assertEqual(power(2, -1), 0.5)

    def test_fractional_exponent(self):
        """9 ^ 0.5 is 3.0."""
        self.assertAlmostEqual(power(9, 0.5), 3.0)

    def test_zero_to_negative_power(self):
        """0 ^ -1 is undefined and raises CalcError."""
        with self.assertRaises(CalcError):
            power(0, -1)

    def test_negative_base_fractional_exponent(self):
        """(-8) ^ 0.5 has no real value and raises CalcError."""
        with self.assertRaises(CalcError):
            power(-8, 0.5)

    def test_huge_integer_power_is_refused(self):
        """10 ^ 1000 would have 1001 digits: reported as an overflow."""
        with self.assertRaisesRegex(CalcError, "overflowed"):
            power(10, 1000)


class UnaryTests(unittest.TestCase):
    def test_negate(self):
        """negate(5) is -5 and negate(-2.5) is 2.5."""
        self.assertEqual(negate(5), -5)
        self.assertEqual(negate(-2.5), 2.5)

    def test_absolute(self):
        """abs(-3.5) is 3.5."""
        self.assertEqual(absolute(-3.5), 3.5)

    def test_square_root(self):
        """sqrt(9) is 3.0 and sqrt(2) is about 1.41421."""
        self.assertEqual(square_root(9), 3.0)
        self.assertAlmostEqual(square_root(2), math.sqrt(2))

    def test_square_root_of_negative(self):
        """sqrt(-1) raises CalcError (no complex numbers here)."""
        with self.assertRaisesRegex(CalcError, "negative"):
            square_root(-1)


class AggregateTests(unittest.TestCase):
    def test_mean_of_two(self):
        """The mean of 1 and 2 is 1.5."""
        self.assertEqual(mean([1, 2]), 1.5)

    def test_mean_of_many(self):
        """The mean of 2, 4 and 6 is 4.0."""
        self.assertEqual(mean([2, 4, 6]), 4.0)

    def test_mean_of_nothing(self):
        """The mean of an empty list raises CalcError."""
        with self.assertRaises(CalcError):
            mean([])

    def test_clamp(self):
        """clamp keeps a value inside low..high."""
        self.assertEqual(clamp(15, 0, 10), 10)
        self.assertEqual(clamp(-5, 0, 10), 0)
        self.assertEqual(clamp(5, 0, 10), 5)

    def test_clamp_empty_range(self):
        """clamp with low > high raises CalcError."""
        with self.assertRaises(CalcError):
            clamp(1, 10, 0)

    def test_percent(self):
        """15 percent of 200 is 30."""
        self.assertAlmostEqual(percent(200, 15), 30.0)


class ValidationTests(unittest.TestCase):
    def test_booleans_are_refused(self):
        """add(True, 1) raises CalcError: a bool is almost certainly a caller bug."""
        with self.assertRaisesRegex(CalcError, "expected a number"):
            add(True, 1)

    def test_strings_are_refused(self):
        """multiply("2", 3) raises CalcError instead of repeating the string."""
        with self.assertRaises(CalcError):
            multiply("2", 3)

    def test_nan_is_refused(self):
        """NaN is not a number the calculator accepts."""
        with self.assertRaisesRegex(CalcError, "NaN"):
            subtract(float("nan"), 1)

    def test_errors_are_value_errors(self):
        """CalcError subclasses ValueError, so generic handlers still catch it."""
        self.assertTrue(issubclass(CalcError, ValueError))


class OperatorTableTests(unittest.TestCase):
    def test_every_symbol_is_mapped(self):
        """The parser's operator symbols all have an operation."""
        self.assertEqual(set(OPERATORS), {"+", "-", "*", "/", "//", "%", "^", "**"})

    def test_table_division(self):
        """The '/' entry is true division: 5 / 2 is 2.5."""
        self.assertEqual(OPERATORS["/"](5, 2), 2.5)

    def test_table_power_aliases(self):
        """'^' and '**' are the same operation."""
        self.assertIs(OPERATORS["^"], OPERATORS["**"])


if __name__ == "__main__":
    unittest.main()
'''

TOKENIZER_REGEX = r'''"""Tokenizer for calc expressions: text in, a list of :class:`Token` out.

This first version is one regular expression with a named group per token kind, matched again
and again from the current position. It is short, and it handles the common cases: integers
and decimals (``12``, ``3.25``), names (``pi``, ``radius``), the operators ``+ - * / // % ^ **``,
parentheses and commas.

Token positions are 0-based columns into the original text, so that error messages can point at
the exact character (``CalcSyntaxError.position``); the parser relies on them for its own errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from calc.ops import CalcError

__all__ = ["OPERATOR_SYMBOLS", "CalcSyntaxError", "Token", "tokenize"]

#: Operator symbols, longest first so that ``**`` wins over ``*``.
OPERATOR_SYMBOLS = ("**", "//", "+", "-", "*", "/", "%", "^")


class CalcSyntaxError(CalcError):
    """The text is not a valid expression; ``position`` is the 0-based column of the problem."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} (at column {position + 1})")
        self.position = position


@dataclass(frozen=True, slots=True)
class Token:
    """One token: ``kind`` is number, name, op, lparen, rparen, comma or end."""

    kind: str
    text: str
    position: int
    value: int | float | None = None


_TOKEN_RE = re.compile(
    r"\s*(?:"
    r"(?P<number>\d+(?:\.\d+)?)"
    r"|(?P<name>[A-Za-z_][A-Za-z_0-9]*)"
    r"|(?P<op>\*\*|//|[-+*/%^])"
    r"|(?P<lparen>\()"
    r"|(?P<rparen>\))"
    r"|(?P<comma>,)"
    r")"
)


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, ending with an ``end`` token at ``len(text)``."""
    tokens: list[Token] = []
    position = 0
    while position < len(text):
        if not text[position:].strip():
            break
        match = _TOKEN_RE.match(text, position)
        if match is None or match.lastgroup is None:
            raise CalcSyntaxError(f"unexpected character {text[position:].strip()[0]!r}", position)
        kind = match.lastgroup
        raw = match.group(kind)
        value: int | float | None = None
        if kind == "number":
            value = float(raw) if "." in raw else int(raw)
        tokens.append(Token(kind, raw, match.start(kind), value))
        position = match.end()
    tokens.append(Token("end", "", len(text)))
    return tokens
'''

TOKENIZER_SCANNER = r'''"""Tokenizer for calc expressions: text in, a list of :class:`Token` out.

A hand-written scanner (it replaced a first version built on one regular expression, which could
not read ``.5`` or ``1e3`` and reported error columns off by the skipped whitespace). It walks
the text once, character by character, so every token and every error knows its exact column.

Tokens:

* ``number`` - ``12``, ``3.25``, ``.5``, ``3.``, ``1e3``, ``2.5e-3``; ``value`` is an ``int`` for
  plain digits and a ``float`` when there is a decimal point or an exponent;
* ``name`` - ``pi``, ``radius``, ``x_1`` (letters, digits and underscores, not starting with a digit);
* ``op`` - ``+ - * / // % ^ **`` (two-character operators are matched first);
* ``lparen``, ``rparen``, ``comma``;
* ``end`` - always last, positioned at ``len(text)``.

Token positions are 0-based columns into the original text, so that error messages can point at
the exact character (``CalcSyntaxError.position``); the parser relies on them for its own errors.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.ops import CalcError

__all__ = ["OPERATOR_SYMBOLS", "CalcSyntaxError", "Token", "tokenize"]

#: Operator symbols, longest first so that ``**`` wins over ``*``.
OPERATOR_SYMBOLS = ("**", "//", "+", "-", "*", "/", "%", "^")

_PUNCTUATION = {"(": "lparen", ")": "rparen", ",": "comma"}


class CalcSyntaxError(CalcError):
    """The text is not a valid expression; ``position`` is the 0-based column of the problem."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} (at column {position + 1})")
        self.position = position


@dataclass(frozen=True, slots=True)
class Token:
    """One token: ``kind`` is number, name, op, lparen, rparen, comma or end."""

    kind: str
    text: str
    position: int
    value: int | float | None = None


def _digits(text: str, index: int) -> int:
    """The index just past the run of digits starting at ``index``."""
    while index < len(text) and text[index].isdigit():
        index += 1
    return index


def _number(text: str, start: int) -> Token:
    """The number token starting at ``start`` (a digit, or a dot followed by a digit)."""
    index = _digits(text, start)
    is_float = False
    if index < len(text) and text[index] == ".":
        is_float = True
        index = _digits(text, index + 1)
    if index < len(text) and text[index] in "eE":
        exponent = index + 1
        if exponent < len(text) and text[exponent] in "+-":
            exponent += 1
        if exponent >= len(text) or not text[exponent].isdigit():
            raise CalcSyntaxError(f"malformed exponent in {text[start:exponent]!r}", start)
        is_float = True
        index = _digits(text, exponent)
    if index < len(text) and (text[index].isalnum() or text[index] in "._"):
        raise CalcSyntaxError(f"malformed number {text[start:index + 1]!r}", start)
    raw = text[start:index]
    return Token("number", raw, start, float(raw) if is_float else int(raw))


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, ending with an ``end`` token at ``len(text)``."""
    tokens: list[Token] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char.isspace():
            index += 1
        elif char.isdigit() or (char == "." and text[index + 1:index + 2].isdigit()):
            token = _number(text, index)
            tokens.append(token)
            index += len(token.text)
        elif char.isalpha() or char == "_":
            start = index
            while index < len(text) and (text[index].isalnum() or text[index] == "_"):
                index += 1
            tokens.append(Token("name", text[start:index], start))
        elif text[index:index + 2] in ("**", "//"):
            tokens.append(Token("op", text[index:index + 2], index))
            index += 2
        elif char in "+-*/%^":
            tokens.append(Token("op", char, index))
            index += 1
        elif char in _PUNCTUATION:
            tokens.append(Token(_PUNCTUATION[char], char, index))
            index += 1
        else:
            raise CalcSyntaxError(f"unexpected character {char!r}", index)
    tokens.append(Token("end", "", len(text)))
    return tokens
'''

PARSER = r'''"""Parser and evaluator for calc expressions: tokens to a syntax tree to a number.

Grammar, lowest precedence first::

    expression := term (("+" | "-") term)*
    term       := unary (("*" | "/" | "//" | "%") unary)*
    unary      := ("+" | "-") unary | power
    power      := primary (("^" | "**") unary)?
    primary    := NUMBER | NAME | NAME "(" arguments ")" | "(" expression ")"
    arguments  := expression ("," expression)*

Consequences worth knowing:

* ``^`` and ``**`` bind tighter than unary minus and are right-associative, as in mathematics:
  ``-2 ^ 2 == -4`` and ``2 ^ 3 ^ 2 == 512``; an exponent may itself be negative: ``2 ^ -1 == 0.5``.
* ``/`` is true division and ``//`` floor division, exactly like :mod:`calc.ops`.
* Names are looked up in :data:`CONSTANTS` and then in the ``names`` mapping given to
  :func:`evaluate`, so sessions can define variables.

The parser is recursive descent: one method per grammar rule, each returning a node. Nodes are
frozen dataclasses that remember the column they started at, so evaluation errors can point at
their source too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from calc.ops import (
    OPERATORS,
    CalcError,
    Number,
    absolute,
    clamp,
    mean,
    negate,
    square_root,
)
from calc.tokenizer import CalcSyntaxError, Token, tokenize

__all__ = ["CONSTANTS", "FUNCTIONS", "Binary", "Call", "Name", "Node", "Num", "Unary", "evaluate",
           "evaluate_node", "parse"]

#: Names every expression can use.
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _extreme(pick: Callable[..., Number]) -> Callable[..., Number]:
    def run(*values: Number) -> Number:
        if not values:
            raise CalcError("needs at least one argument")
        for value in values:
            absolute(value)  # validates: numbers only
        return pick(values)

    return run


#: Function name -> (number of arguments or None for "one or more", implementation).
FUNCTIONS: dict[str, tuple[int | None, Callable[..., Number]]] = {
    "sqrt": (1, square_root),
    "abs": (1, absolute),
    "min": (None, _extreme(min)),
    "max": (None, _extreme(max)),
    "mean": (None, lambda *values: mean(values)),
    "clamp": (3, clamp),
}


@dataclass(frozen=True, slots=True)
class Num:
    value: Number
    position: int


@dataclass(frozen=True, slots=True)
class Name:
    name: str
    position: int


@dataclass(frozen=True, slots=True)
class Unary:
    op: str
    operand: Node
    position: int


@dataclass(frozen=True, slots=True)
class Binary:
    op: str
    left: Node
    right: Node
    position: int


@dataclass(frozen=True, slots=True)
class Call:
    name: str
    args: tuple[Node, ...]
    position: int


Node = Num | Name | Unary | Binary | Call


class _Parser:
    """Recursive descent over a token list; one method per grammar rule."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.index = 0

    @property
    def current(self) -> Token:
        return self.tokens[self.index]

    def advance(self) -> Token:
        token = self.tokens[self.index]
        if token.kind != "end":
            self.index += 1
        return token

    def at_op(self, *symbols: str) -> bool:
        return self.current.kind == "op" and self.current.text in symbols

    def expect(self, kind: str, what: str) -> Token:
        if self.current.kind != kind:
            found = "the end of the expression" if self.current.kind == "end" else repr(self.current.text)
            raise CalcSyntaxError(f"expected {what}, found {found}", self.current.position)
        return self.advance()

    def parse(self) -> Node:
        if self.current.kind == "end":
            raise CalcSyntaxError("empty expression", 0)
        node = self.expression()
        if self.current.kind != "end":
            raise CalcSyntaxError(f"unexpected {self.current.text!r} after a complete expression",
                                  self.current.position)
        return node

    def expression(self) -> Node:
        node = self.term()
        while self.at_op("+", "-"):
            op = self.advance()
            node = Binary(op.text, node, self.term(), op.position)
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.at_op("*", "/", "//", "%"):
            op = self.advance()
            node = Binary(op.text, node, self.unary(), op.position)
        return node

    def unary(self) -> Node:
        if self.at_op("+", "-"):
            op = self.advance()
            return Unary(op.text, self.unary(), op.position)
        return self.power()

    def power(self) -> Node:
        base = self.primary()
        if self.at_op("^", "**"):
            op = self.advance()
            return Binary("^", base, self.unary(), op.position)
        return base

    def primary(self) -> Node:
        token = self.current
        if token.kind == "number":
            self.advance()
            assert token.value is not None
            return Num(token.value, token.position)
        if token.kind == "name":
            self.advance()
            if self.current.kind != "lparen":
                return Name(token.text, token.position)
            self.advance()
            args = [self.expression()]
            while self.current.kind == "comma":
                self.advance()
                args.append(self.expression())
            self.expect("rparen", "')' to close the arguments of " + token.text)
            return Call(token.text, tuple(args), token.position)
        if token.kind == "lparen":
            self.advance()
            node = self.expression()
            self.expect("rparen", "')'")
            return node
        if token.kind == "end":
            raise CalcSyntaxError("unexpected end of expression", token.position)
        raise CalcSyntaxError(f"unexpected {token.text!r}", token.position)


def parse(text: str) -> Node:
    """The syntax tree of ``text``; raises :class:`CalcSyntaxError` with the column on bad input."""
    return _Parser(tokenize(text)).parse()


def evaluate_node(node: Node, names: Mapping[str, Number]) -> Number:
    """The value of ``node`` with ``names`` in scope."""
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Name):
        if node.name in names:
            return names[node.name]
        raise CalcError(f"unknown name {node.name!r}")
    if isinstance(node, Unary):
        value = evaluate_node(node.operand, names)
        if node.op == "-":
            return negate(value)
        absolute(value)  # unary plus changes nothing, but still accepts numbers only
        return value
    if isinstance(node, Binary):
        left = evaluate_node(node.left, names)
        right = evaluate_node(node.right, names)
        return OPERATORS[node.op](left, right)
    spec = FUNCTIONS.get(node.name)
    if spec is None:
        raise CalcError(f"unknown function {node.name!r}; known: {', '.join(sorted(FUNCTIONS))}")
    arity, function = spec
    if arity is not None and len(node.args) != arity:
        plural = "" if arity == 1 else "s"
        raise CalcError(f"{node.name}() takes {arity} argument{plural}, got {len(node.args)}")
    return function(*(evaluate_node(arg, names) for arg in node.args))


def evaluate(text: str, names: Mapping[str, Number] | None = None) -> Number:
    """The value of the expression ``text``; ``names`` adds to (or overrides) :data:`CONSTANTS`."""
    scope: dict[str, Number] = dict(CONSTANTS)
    if names:
        scope.update(names)
    return evaluate_node(parse(text), scope)
'''

TEST_PARSER = r'''"""Tests for calc.tokenizer and calc.parser: tokens, precedence, functions, names and errors.

Run from the project directory: ``python3 -m unittest discover -s tests -v``.
"""

import math
import unittest

from calc.ops import CalcError
from calc.parser import Binary, Call, Name, Num, Unary, evaluate, parse
from calc.tokenizer import CalcSyntaxError, tokenize


def kinds(text):
    return [token.kind for token in tokenize(text)]


class TokenizerTests(unittest.TestCase):
    def test_integers_and_operators(self):
        """'12 + 3' is number, op, number, end."""
        self.assertEqual(kinds("12 + 3"), ["number", "op", "number", "end"])
        self.assertEqual(tokenize("12 + 3")[0].value, 12)

    def test_decimal(self):
        """'3.25' is one float token."""
        token = tokenize("3.25")[0]
        self.assertEqual((token.kind, token.value), ("number", 3.25))

    def test_leading_dot(self):
        """'.5' is the number 0.5."""
        token = tokenize(".5")[0]
        self.assertEqual((token.kind, token.value), ("number", 0.5))

    def test_scientific_notation(self):
        """'1e3' is 1000.0 and '2.5e-3' is 0.0025, each a single token."""
        self.assertEqual([t.value for t in tokenize("1e3")], [1000.0, None])
        self.assertEqual(tokenize("2.5e-3")[0].value, 0.0025)

    def test_two_character_operators(self):
        """'**' and '//' are single operator tokens."""
        self.assertEqual([t.text for t in tokenize("2 ** 3 // 4")], ["2", "**", "3", "//", "4", ""])

    def test_names_and_calls(self):
        """Names, parentheses and commas are their own kinds."""
        self.assertEqual(kinds("max(a, b_2)"), ["name", "lparen", "name", "comma", "name", "rparen", "end"])

    def test_positions(self):
        """Each token knows its 0-based column."""
        self.assertEqual([t.position for t in tokenize("1 +  23")], [0, 2, 5, 7])

    def test_error_points_at_the_character(self):
        """In '2 $ 3' the error is at column 2, the '$' itself."""
        with self.assertRaises(CalcSyntaxError) as caught:
            tokenize("2 $ 3")
        self.assertEqual(caught.exception.position, 2)

    def test_error_after_leading_spaces(self):
        """In '   @' the error is at column 3, not at the spaces before it."""
        with self.assertRaises(CalcSyntaxError) as caught:
            tokenize("   @")
        self.assertEqual(caught.exception.position, 3)

    def test_malformed_number(self):
        """'1.2.3' is not a number."""
        with self.assertRaises(CalcSyntaxError):
            tokenize("1.2.3")

    def test_syntax_errors_are_calc_errors(self):
        """Front ends catch CalcError and get syntax errors too."""
        self.assertTrue(issubclass(CalcSyntaxError, CalcError))


class ParserShapeTests(unittest.TestCase):
    def test_precedence(self):
        """'1 + 2 * 3' multiplies first."""
        tree = parse("1 + 2 * 3")
        self.assertIsInstance(tree, Binary)
        self.assertEqual(tree.op, "+")
        self.assertEqual(tree.right.op, "*")

    def test_left_associative_subtraction(self):
        """'8 - 3 - 2' is (8 - 3) - 2."""
        tree = parse("8 - 3 - 2")
        self.assertEqual(tree.left.op, "-")

    def test_unary_and_call_nodes(self):
        """'-x' is a Unary over a Name; 'sqrt(4)' is a Call."""
        self.assertEqual(parse("-x"), Unary("-", Name("x", 1), 0))
        self.assertEqual(parse("sqrt(4)"), Call("sqrt", (Num(4, 5),), 0))


class EvaluateTests(unittest.TestCase):
    def test_arithmetic(self):
        """The basics, with the usual precedence."""
        self.assertEqual(evaluate("1 + 2 * 3"), 7)
        self.assertEqual(evaluate("(1 + 2) * 3"), 9)
        self.assertEqual(evaluate("7 / 2"), 3.5)
        self.assertEqual(evaluate("7 // 2"), 3)
        self.assertEqual(evaluate("7 % 4"), 3)

    def test_power_is_right_associative(self):
        """'2 ^ 3 ^ 2' is 2 ^ 9 = 512."""
        self.assertEqual(evaluate("2 ^ 3 ^ 2"), 512)
        self.assertEqual(evaluate("2 ** 10"), 1024)

    def test_unary_minus_binds_looser_than_power(self):
        """'-2 ^ 2' is -4 and '2 ^ -1' is 0.5."""
        self.assertEqual(evaluate("-2 ^ 2"), -4)
        self.assertEqual(evaluate("2 ^ -1"), 0.5)

    def test_scientific_numbers_in_expressions(self):
        """'1e3 + .5' is 1000.5."""
        self.assertEqual(evaluate("1e3 + .5"), 1000.5)

    def test_constants(self):
        """pi, e and tau are predefined."""
        self.assertAlmostEqual(evaluate("2 * pi"), evaluate("tau"))
        self.assertAlmostEqual(evaluate("e"), math.e)

    def test_names_from_the_caller(self):
        """Names passed in are in scope and may shadow constants."""
        self.assertEqual(evaluate("x * y", {"x": 6, "y": 7}), 42)
        self.assertEqual(evaluate("pi", {"pi": 3}), 3)

    def test_functions(self):
        """sqrt, abs, min, max, mean and clamp are available."""
        self.assertEqual(evaluate("sqrt(16)"), 4.0)
        self.assertEqual(evaluate("abs(-3)"), 3)
        self.assertEqual(evaluate("max(1, 5, 3)"), 5)
        self.assertEqual(evaluate("min(4, 2)"), 2)
        self.assertEqual(evaluate("mean(1, 2, 3, 4)"), 2.5)
        self.assertEqual(evaluate("clamp(15, 0, 10)"), 10)

    def test_division_by_zero_is_a_calc_error(self):
        """'1 / (2 - 2)' raises CalcError from calc.ops."""
        with self.assertRaisesRegex(CalcError, "division by zero"):
            evaluate("1 / (2 - 2)")


class ErrorTests(unittest.TestCase):
    def test_empty_expression(self):
        """An empty string is a syntax error."""
        with self.assertRaises(CalcSyntaxError):
            evaluate("   ")

    def test_unbalanced_parenthesis(self):
        """'(1 + 2' is missing its ')' at the end."""
        with self.assertRaises(CalcSyntaxError) as caught:
            evaluate("(1 + 2")
        self.assertEqual(caught.exception.position, 6)

    def test_trailing_tokens(self):
        """'1 2' has a number left over after a complete expression."""
        with self.assertRaisesRegex(CalcSyntaxError, "after a complete expression"):
            evaluate("1 2")

    def test_unknown_name(self):
        """An unknown name raises CalcError naming it."""
        with self.assertRaisesRegex(CalcError, "unknown name 'nope'"):
            evaluate("nope + 1")

    def test_unknown_function(self):
        """An unknown function raises CalcError naming it."""
        with self.assertRaisesRegex(CalcError, "unknown function 'foo'"):
            evaluate("foo(1)")

    def test_wrong_number_of_arguments(self):
        """sqrt takes exactly one argument."""
        with self.assertRaisesRegex(CalcError, "takes 1 argument"):
            evaluate("sqrt(1, 2)")


if __name__ == "__main__":
    unittest.main()
'''

CLI_V1 = r'''"""Command line front end: ``python3 -m calc EXPRESSION...``.

Every argument is one expression; each is evaluated on its own and its value printed on its own
line, in order. An expression that fails prints ``calc: error: ...`` on stderr and the others
still run.

    $ python3 -m calc "1 + 2 * 3" "7 / 2" "6 / 3"
    7
    3.5
    2

Options:

* ``--precision N`` - significant digits for results that are not whole numbers (default 12), so
  ``0.1 + 0.2`` prints ``0.3`` rather than ``0.30000000000000004``;
* ``--define NAME=VALUE`` / ``-D`` - define a name before evaluating (repeatable; a value may use
  names defined before it).

An expression that starts with ``-`` looks like an option to argparse: put ``--`` before it
(``python3 -m calc -- "-3 + 1"``).

Exit status: 0 when every expression evaluated, 1 when at least one failed, 2 for a usage error
(no expressions, a malformed ``--define``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from calc.ops import CalcError, Number
from calc.parser import evaluate

__all__ = ["build_parser", "format_number", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (public so that ``--help`` text can be tested and reused)."""
    parser = argparse.ArgumentParser(
        prog="calc",
        description="Evaluate arithmetic expressions, one per argument.",
        epilog="Operators: + - * / // % ^ **; functions: sqrt abs min max mean clamp; constants: pi e tau.",
    )
    parser.add_argument("expressions", nargs="*", metavar="EXPRESSION", help="an expression such as '2 * (3 + 4)'")
    parser.add_argument("--precision", type=int, default=12, metavar="N",
                        help="significant digits for results that are not whole numbers (default: 12)")
    parser.add_argument("--define", "-D", action="append", default=[], metavar="NAME=VALUE",
                        help="define a name before evaluating; repeatable")
    return parser


def format_number(value: Number, precision: int = 12) -> str:
    """The text printed for ``value``.

    Whole numbers print without a decimal point, whether they are ints or floats (``6 / 3``
    prints ``2``); other floats print with ``precision`` significant digits; very large or very
    small floats use exponent notation.

    >>> format_number(2.0)
    '2'
    >>> format_number(0.1 + 0.2)
    '0.3'
    """
    if isinstance(value, int):
        return f"{value:d}"
    if value.is_integer() and abs(value) < 1e15:
        return str(value)
    return f"{value:.{precision}g}"


def _definitions(items: Sequence[str]) -> dict[str, Number]:
    """``--define`` values, evaluated in order (each may use the names before it)."""
    names: dict[str, Number] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise CalcError(f"--define expects NAME=VALUE, got {item!r}")
        names[name] = evaluate(raw, names)
    return names


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run the command line; returns the exit status (see the module docstring)."""
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    if not args.expressions:
        print('calc: error: give at least one expression, for example: calc "1 + 2"', file=err)
        return 2
    try:
        names = _definitions(args.define)
    except CalcError as exc:
        print(f"calc: error: {exc}", file=err)
        return 2
    status = 0
    for text in args.expressions:
        try:
            value = evaluate(text, names)
        except CalcError as exc:
            print(f"calc: error: {text}: {exc}", file=err)
            status = 1
            continue
        print(format_number(value, args.precision), file=out)
    return status
'''

MAIN = r'''"""``python3 -m calc``: run the command line front end (see :mod:`calc.cli`)."""

import sys

from calc.cli import main

if __name__ == "__main__":
    sys.exit(main())
'''

TEST_CLI = r'''"""Tests for calc.cli: number formatting, output, exit status, and ``python3 -m calc``.

Run from the project directory: ``python3 -m unittest discover -s tests -v``.
"""

import io
import subprocess
import sys
import unittest
from pathlib import Path

from calc.cli import build_parser, format_number, main

PROJECT = Path(__file__).resolve().parents[1]


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    status = main(list(argv), stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


class FormatNumberTests(unittest.TestCase):
    def test_integer(self):
        """An int prints as itself."""
        self.assertEqual(format_number(42), "42")

    def test_whole_float_has_no_decimal_point(self):
        """2.0 prints as '2', like a person would write it."""
        self.assertEqual(format_number(2.0), "2")

    def test_negative_whole_float(self):
        """-4.0 prints as '-4'."""
        self.assertEqual(format_number(-4.0), "-4")

    def test_fraction(self):
        """3.5 prints as '3.5'."""
        self.assertEqual(format_number(3.5), "3.5")

    def test_precision_hides_float_noise(self):
        """0.1 + 0.2 prints as '0.3' with the default 12 significant digits."""
        self.assertEqual(format_number(0.1 + 0.2), "0.3")

    def test_custom_precision(self):
        """precision=3 prints pi as '3.14'."""
        self.assertEqual(format_number(3.14159265, 3), "3.14")

    def test_huge_float_uses_exponent(self):
        """1e20 prints in exponent notation."""
        self.assertEqual(format_number(1e20), "1e+20")


class MainTests(unittest.TestCase):
    def test_one_expression(self):
        """'1 + 2 * 3' prints 7 and exits 0."""
        self.assertEqual(run("1 + 2 * 3"), (0, "7\n", ""))

    def test_division_result_is_printed_cleanly(self):
        """'6 / 3' prints 2, not 2.0."""
        self.assertEqual(run("6 / 3"), (0, "2\n", ""))

    def test_several_expressions_in_order(self):
        """Each argument prints on its own line, in order."""
        self.assertEqual(run("1 + 1", "7 / 2", "2 ^ 10"), (0, "2\n3.5\n1024\n", ""))

    def test_error_keeps_going_and_exits_1(self):
        """A failing expression reports on stderr; the others still print."""
        status, out, err = run("1 / 0", "2 + 2")
        self.assertEqual((status, out), (1, "4\n"))
        self.assertIn("calc: error: 1 / 0: division by zero", err)

    def test_no_expressions_is_a_usage_error(self):
        """No arguments exits 2 with a hint."""
        status, out, err = run()
        self.assertEqual((status, out), (2, ""))
        self.assertIn("give at least one expression", err)

    def test_define(self):
        """--define names values; later definitions may use earlier ones."""
        self.assertEqual(run("-D", "r=2", "-D", "d=2*r", "pi * r ^ 2 / d")[1], "3.14159265359\n")

    def test_malformed_define(self):
        """--define without '=' is a usage error."""
        self.assertEqual(run("--define", "oops", "1")[0], 2)

    def test_leading_minus_after_double_dash(self):
        """'--' lets an expression start with a minus sign."""
        self.assertEqual(run("--", "-3 + 1"), (0, "-2\n", ""))

    def test_help_mentions_functions(self):
        """--help lists the functions and constants."""
        self.assertIn("sqrt", build_parser().format_help())


class ModuleEntryPointTests(unittest.TestCase):
    def test_python_dash_m_calc(self):
        """'python3 -m calc' works from the project directory."""
        done = subprocess.run([sys.executable, "-m", "calc", "2 * 21", "1 / 4"], cwd=PROJECT,
                              capture_output=True, text=True, timeout=60)
        self.assertEqual((done.returncode, done.stdout), (0, "42\n0.25\n"))


if __name__ == "__main__":
    unittest.main()
'''

SESSION_V1 = r'''"""Sessions: evaluate lines one after another, remembering variables and the last result.

    >>> s = Session()
    >>> s.execute("radius = 2")
    2
    >>> round(s.execute("pi * radius ^ 2"), 4)
    12.5664
    >>> round(s.execute("ans / 2"), 4)
    6.2832

Rules:

* ``NAME = EXPRESSION`` assigns; anything else is evaluated. Both return the value and store it
  in ``ans``.
* Names start with a letter or underscore. ``ans`` and the constants (``pi``, ``e``, ``tau``) are
  reserved: assigning them raises :class:`~calc.ops.CalcError`.
* A line that fails changes nothing: no variable, no ``ans``, no history item.
* Every session has its own variables. :attr:`Session.defaults` holds what a new session starts
  with, and it is never modified by using a session.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from calc.ops import CalcError, Number
from calc.parser import CONSTANTS, evaluate

__all__ = ["RESERVED", "HistoryItem", "Session"]

_ASSIGNMENT = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*=\s*(.+?)\s*$")

#: Names a line may read but never assign.
RESERVED = frozenset(CONSTANTS) | {"ans"}


@dataclass(frozen=True, slots=True)
class HistoryItem:
    """One successfully executed line: its text, its value, and the variable it set (if any)."""

    line: str
    value: Number
    assigned: str | None = None


class Session:
    """A sequence of lines sharing variables; see the module docstring for the rules."""

    #: What every new session starts with. Sessions copy it; nothing writes to it.
    defaults: dict[str, Number] = {**CONSTANTS, "ans": 0}

    def __init__(self) -> None:
        self.variables: dict[str, Number] = Session.defaults
        self.history: list[HistoryItem] = []

    def execute(self, line: str) -> Number:
        """Run one line and return its value."""
        text = line.strip()
        if not text:
            raise CalcError("empty line: type an expression or NAME = EXPRESSION")
        match = _ASSIGNMENT.match(text)
        assigned: str | None = None
        if match:
            assigned, expression = match.group(1), match.group(2)
            if assigned in RESERVED:
                raise CalcError(f"{assigned} is reserved and cannot be assigned")
            value = evaluate(expression, self.variables)
            self.variables[assigned] = value
        else:
            value = evaluate(text, self.variables)
        self.variables["ans"] = value
        self.history.append(HistoryItem(text, value, assigned))
        return value

    def user_names(self) -> dict[str, Number]:
        """The variables this session assigned (not the defaults), in assignment order."""
        return {name: value for name, value in self.variables.items() if name not in Session.defaults}

    def reset(self) -> None:
        """Forget every variable and the history; ``ans`` goes back to 0."""
        self.variables = dict(Session.defaults)
        self.history.clear()

    def transcript(self) -> str:
        """The history as text, one ``line => value`` per executed line."""
        return "\n".join(f"{item.line} => {item.value}" for item in self.history)
'''

TEST_SESSION = r'''"""Tests for calc.session: assignments, ans, reserved names, failures, and isolation.

Run from the project directory: ``python3 -m unittest discover -s tests -v``.
"""

import unittest

from calc.ops import CalcError
from calc.session import RESERVED, HistoryItem, Session


class AssignmentTests(unittest.TestCase):
    def test_assignment_returns_the_value(self):
        """'x = 2 + 3' returns 5."""
        self.assertEqual(Session().execute("x = 2 + 3"), 5)

    def test_variables_persist_between_lines(self):
        """A variable assigned on one line is usable on the next."""
        s = Session()
        s.execute("width = 3")
        s.execute("height = 4")
        self.assertEqual(s.execute("width * height"), 12)

    def test_reassignment_replaces_the_value(self):
        """Assigning a name again replaces its value."""
        s = Session()
        s.execute("n = 1")
        s.execute("n = n + 1")
        self.assertEqual(s.variables["n"], 2)

    def test_reserved_names_cannot_be_assigned(self):
        """ans, pi, e and tau are reserved."""
        s = Session()
        for name in sorted(RESERVED):
            with self.subTest(name=name), self.assertRaisesRegex(CalcError, "reserved"):
                s.execute(f"{name} = 1")


class AnsTests(unittest.TestCase):
    def test_ans_starts_at_zero(self):
        """A new session has ans = 0."""
        self.assertEqual(Session().execute("ans"), 0)

    def test_ans_is_the_last_result(self):
        """ans holds the value of the previous line."""
        s = Session()
        s.execute("6 * 7")
        self.assertEqual(s.execute("ans + 1"), 43)

    def test_assignment_also_sets_ans(self):
        """After 'r = 10', ans is 10."""
        s = Session()
        s.execute("r = 10")
        self.assertEqual(s.execute("ans"), 10)


class FailureTests(unittest.TestCase):
    def test_empty_line(self):
        """An empty line raises CalcError."""
        with self.assertRaises(CalcError):
            Session().execute("   ")

    def test_failed_line_changes_nothing(self):
        """'x = 1 / 0' leaves no x, no new ans and no history item."""
        s = Session()
        s.execute("5")
        with self.assertRaises(CalcError):
            s.execute("x = 1 / 0")
        self.assertNotIn("x", s.variables)
        self.assertEqual(s.variables["ans"], 5)
        self.assertEqual(len(s.history), 1)

    def test_unknown_name(self):
        """Using an undefined variable raises CalcError naming it."""
        with self.assertRaisesRegex(CalcError, "unknown name 'missing'"):
            Session().execute("missing * 2")


class HistoryTests(unittest.TestCase):
    def test_history_records_lines(self):
        """Each executed line is recorded with its value and assigned name."""
        s = Session()
        s.execute("a = 2")
        s.execute("a * 3")
        self.assertEqual(s.history, [HistoryItem("a = 2", 2, "a"), HistoryItem("a * 3", 6, None)])

    def test_transcript(self):
        """transcript() shows 'line => value' per line."""
        s = Session()
        s.execute("b = 4")
        self.assertEqual(s.transcript(), "b = 4 => 4")

    def test_reset(self):
        """reset() forgets variables and history."""
        s = Session()
        s.execute("c = 9")
        s.reset()
        self.assertEqual((s.user_names(), s.history, s.variables["ans"]), ({}, [], 0))


class IsolationTests(unittest.TestCase):
    def test_user_names_lists_only_assigned_variables(self):
        """user_names() holds what this session assigned, not the defaults."""
        s = Session()
        s.execute("speed = 12")
        self.assertEqual(s.user_names(), {"speed": 12})

    def test_sessions_are_independent(self):
        """A variable assigned in one session does not appear in another."""
        first, second = Session(), Session()
        first.execute("secret = 42")
        self.assertNotIn("secret", second.variables)

    def test_defaults_are_never_modified(self):
        """Using a session leaves Session.defaults as it was."""
        before = dict(Session.defaults)
        s = Session()
        s.execute("z = 3")
        s.execute("z * 2")
        self.assertEqual(Session.defaults, before)


if __name__ == "__main__":
    unittest.main()
'''


# -- the tasks ---------------------------------------------------------------------------------

_P = PROJECT_DIR
_INIT = f"{_P}/calc/__init__.py"

TASKS: tuple[Task, ...] = (
    Task(
        key="calc",
        title="the calculator core",
        intro="I will write the package (`calc/__init__.py`, `calc/ops.py`) and a unittest suite with one "
              "rule per test, run it, and fix whatever it finds.",
        changes=(
            Change(_INIT, "the package entry point. It re-exports the operations and documents how the package "
                   "will grow over the next requests.", 1, INIT_V1),
            Change(f"{_P}/calc/ops.py", "the arithmetic operations. Each one validates its inputs and raises "
                   "`CalcError` with a readable message (division by zero, NaN, booleans, overflow), and the "
                   "`OPERATORS` table maps symbols to operations for the parser that comes later.", 2, OPS_V1),
            Change(f"{_P}/tests/test_ops.py", "the tests, one rule per test with the rule as its docstring, so the "
                   "verbose test output reads like a specification.", 3, TEST_OPS),
        ),
        fix=Fix(f"{_P}/calc/ops.py", detect="return float(a // b)",
                explanation="Found it: `divide` computes `float(a // b)`, which is floor division, so `7 / 2` gives "
                            "3.0 instead of 3.5, and `mean`, `percent` and the `/` entry of `OPERATORS` inherit the "
                            "error. True division is `a / b`; I also route the result through `_finite` like the "
                            "other operations, so an overflow is reported instead of returned as inf.",
                old="    return float(a // b)\n", new='    return _finite(a / b, "division")\n'),
        milestone="calculator tests pass",
        progress="calculator core (calc/ops.py) with 38 unittest tests",
        done_text="Done: the calculator core is in place and its tests pass ({summary}).\n\n"
                  "What I did:\n"
                  "- `calc_demo/calc/ops.py`: add, subtract, multiply, divide, floor_divide, modulo, power, "
                  "negate, absolute, square_root, mean, clamp and percent. Bad input (division by zero, NaN, "
                  "booleans, overflow) raises `CalcError` with a readable message. The `OPERATORS` table is "
                  "ready for a parser.\n"
                  "- `calc_demo/calc/__init__.py`: re-exports the operations.\n"
                  "- `calc_demo/tests/test_ops.py`: 38 unittest tests, one rule each.\n\n"
                  "The first run failed: `divide` used floor division, so `7 / 2` gave 3.0, and `mean` and "
                  "`percent` were wrong too. After switching to true division the suite passes.\n\n"
                  "Progress is noted in `calc_demo/PROGRESS.md`, and a milestone checkpoint was recorded. A good "
                  "next prompt: “add a parser so that expressions like 2 * (3 + 4) can be evaluated”.",
    ),
    Task(
        key="parser",
        title="the expression parser",
        intro="I will add a tokenizer and a recursive-descent parser on top of `calc.ops`, with tests. First a "
              "look at the existing package, so the parser reuses its operations and error type.",
        orient_text="Reading the package entry point and the operations in parallel, to see what the parser "
                    "can build on.",
        orient=(("read_file", {"path": _INIT}), ("read_file", {"path": f"{_P}/calc/ops.py"})),
        changes=(
            Change(f"{_P}/calc/tokenizer.py", "the tokenizer. A first version that uses one regular expression "
                   "with a named group per token kind. It is short and covers integers, decimals, names, "
                   "operators and parentheses.", 1, TOKENIZER_REGEX),
            Change(f"{_P}/calc/parser.py", "a recursive-descent parser, one method per grammar rule, building "
                   "frozen dataclass nodes that remember their column, plus `evaluate()` with the constants pi, "
                   "e and tau and the functions sqrt, abs, min, max, mean and clamp.", 2, PARSER),
            Change(f"{_P}/tests/test_parser.py", "the tokenizer, precedence, associativity, functions, names and "
                   "error-position tests.", 3, TEST_PARSER),
            Change(_INIT, "export `parse` and `evaluate` from the package and bump the version to 0.2.0.", 4,
                   old='__version__ = "0.1.0"\n',
                   new='from calc.parser import evaluate, parse\n\n__all__ += ["evaluate", "parse"]\n\n'
                       '__version__ = "0.2.0"\n',
                   applied='__version__ = "0.2.0"'),
        ),
        fix=Fix(f"{_P}/calc/tokenizer.py", detect="_TOKEN_RE = re.compile(",
                explanation="The regular expression is the problem, not a typo in it: it cannot read `.5` or "
                            "`1e3` without growing a lot more alternatives. Its error column also points at the "
                            "whitespace it skipped instead of the bad character, because the `\\s*` prefix is "
                            "part of the match. Patching that makes the expression unreadable. I change the "
                            "plan: the tokenizer becomes a hand-written scanner that walks the text once, so "
                            "every token and every error knows its exact column. Recording the change of "
                            "direction as a plan_pivot checkpoint, and rewriting the file.",
                rewrite=TOKENIZER_SCANNER, pivot="switch from regex to a hand-written tokenizer"),
        milestone="parser tests pass",
        progress="tokenizer (hand-written scanner) and recursive-descent parser with 28 tests",
        done_text="Done: expressions now parse and evaluate, and the whole suite passes ({summary}).\n\n"
                  "- `calc_demo/calc/tokenizer.py`: a hand-written scanner. Numbers like `.5`, `3.`, `1e3` and "
                  "`2.5e-3` are supported, and errors report the exact column.\n"
                  "- `calc_demo/calc/parser.py`: recursive descent with the usual precedence. `^`/`**` bind "
                  "tighter than unary minus and are right-associative, so `-2 ^ 2` is -4 and `2 ^ 3 ^ 2` is 512. "
                  "Constants pi, e and tau; functions sqrt, abs, min, max, mean and clamp.\n"
                  "- `calc_demo/tests/test_parser.py`: 28 tests. `calc` now exports `parse` and `evaluate` "
                  "(version 0.2.0).\n\n"
                  "Change of plan along the way: the first tokenizer was one regular expression. It failed on "
                  "`.5` and `1e3` and reported error columns off by the skipped whitespace, so I replaced it "
                  "with a scanner (recorded as a plan_pivot checkpoint).\n\n"
                  "Next, for example: “add a command-line interface, so I can run python3 -m calc '1 + 2'”.",
    ),
    Task(
        key="cli",
        title="the command line",
        intro="I will add `calc/cli.py` and `calc/__main__.py` for `python3 -m calc`, with tests that call "
              "`main()` directly and one that runs the module in a subprocess.",
        orient_text="Checking the parser's public functions and the package entry point before wiring up the "
                    "command line.",
        orient=(("read_file", {"path": f"{_P}/calc/parser.py", "start_line": 1, "end_line": 60}),
                ("read_file", {"path": _INIT})),
        changes=(
            Change(f"{_P}/calc/cli.py", "an argparse front end. Each argument is one expression, with "
                   "`--precision` and repeatable `--define NAME=VALUE`. Exit status is 0, 1 if any expression "
                   "failed, or 2 for usage errors.", 1, CLI_V1),
            Change(f"{_P}/calc/__main__.py", "`python3 -m calc` calls `calc.cli.main()`.", 2, MAIN),
            Change(_INIT, "bump the version to 0.3.0 for the command line.", 2,
                   old='__version__ = "0.2.0"\n', new='__version__ = "0.3.0"\n', applied='__version__ = "0.3.0"'),
            Change(f"{_P}/tests/test_cli.py", "tests for number formatting, output order, exit status, "
                   "`--define`, and a real `python3 -m calc` subprocess.", 3, TEST_CLI),
        ),
        fix=Fix(f"{_P}/calc/cli.py", detect="return str(value)", locate="def format_number",
                explanation="There it is: for a whole float, `format_number` returns `str(value)`, which is "
                            "`'2.0'`. The docstring promises `'2'`. Converting to int first gives the promised "
                            "output, and the `abs(value) < 1e15` guard already keeps the conversion exact.",
                old="        return str(value)\n", new="        return str(int(value))\n"),
        milestone="command line tests pass",
        progress="command line (python3 -m calc) with 17 tests",
        done_text="Done: `python3 -m calc` works and the suite passes ({summary}).\n\n"
                  "- `calc_demo/calc/cli.py`: one expression per argument, `--precision N`, repeatable "
                  "`--define NAME=VALUE`. Exit status is 0, 1 if any expression failed (the others still "
                  "print), or 2 for usage errors.\n"
                  "- `calc_demo/calc/__main__.py`: the `python3 -m calc` entry point. The package version is "
                  "0.3.0.\n"
                  "- `calc_demo/tests/test_cli.py`: 17 tests, including a real subprocess run.\n\n"
                  "The first run caught a formatting bug: whole floats printed as `2.0`. I found "
                  "`format_number` with grep, read just that part of the file, and fixed it.\n\n"
                  "Try it: `cd calc_demo && python3 -m calc \"6 / 3\" \"2 ^ 10\" \"sqrt(2)\"`. Next, for "
                  "example: “add sessions with variables and ans that persist between lines”.",
    ),
    Task(
        key="session",
        title="sessions with variables",
        intro="I will add `calc/session.py`: lines evaluated one after another, with variables, `ans`, "
              "reserved names, and failed lines that change nothing.",
        orient_text="Looking at how `evaluate` takes names, at the package entry point, and at the existing "
                    "test files, all in one go.",
        orient=(("read_file", {"path": f"{_P}/calc/parser.py", "start_line": 1, "end_line": 40}),
                ("read_file", {"path": _INIT}),
                ("glob", {"pattern": f"{_P}/tests/test_*.py"})),
        changes=(
            Change(f"{_P}/calc/session.py", "`Session.execute()` for assignments (`NAME = EXPRESSION`) and "
                   "expressions, `ans`, history, `reset()` and `transcript()`. `Session.defaults` holds what a "
                   "new session starts with.", 1, SESSION_V1),
            Change(f"{_P}/tests/test_session.py", "tests for assignment, `ans`, reserved names, failed lines, "
                   "history, and isolation between sessions.", 2, TEST_SESSION),
            Change(_INIT, "export `Session` and bump the version to 0.4.0.", 3,
                   old='__version__ = "0.3.0"\n',
                   new='from calc.session import Session\n\n__all__ += ["Session"]\n\n__version__ = "0.4.0"\n',
                   applied='__version__ = "0.4.0"'),
        ),
        fix=Fix(f"{_P}/calc/session.py", detect="Number] = Session.defaults",
                explanation="The bug is in `__init__`: `self.variables = Session.defaults` shares one dict "
                            "between every session and the class. Assigning `x` in one session leaks into all "
                            "the others and into `Session.defaults`, so `ans` and `user_names()` are wrong too. "
                            "Each session needs its own copy.",
                old="        self.variables: dict[str, Number] = Session.defaults\n",
                new="        self.variables: dict[str, Number] = dict(Session.defaults)\n"),
        milestone="session tests pass",
        progress="sessions with variables and ans, with 16 tests",
        done_text="Done: sessions with variables work and the whole suite passes ({summary}).\n\n"
                  "- `calc_demo/calc/session.py`: `Session.execute(\"r = 2\")`, then `execute(\"pi * r ^ 2\")`, "
                  "then `execute(\"ans / 2\")`. Reserved names are `ans`, `pi`, `e` and `tau`. A failing line "
                  "changes nothing, and history and `transcript()` are available. `calc` exports `Session` "
                  "(version 0.4.0).\n"
                  "- `calc_demo/tests/test_session.py`: 16 tests.\n\n"
                  "The first run showed that sessions shared one variables dict (and modified "
                  "`Session.defaults`). Each session now gets its own copy.\n\n"
                  "That completes the four tasks of this demo. Further prompts run a review of the project "
                  "(files, markers, full test run).",
    ),
)

#: What every prompt after the four tasks does: look around, run everything, report.
REVIEW = Task(
    key="review",
    title="a project review",
    intro="All four demo tasks are recorded as done, so this request gets a review: I list the project's "
          "files, look for leftover TODO/FIXME markers, and run the whole suite again.",
    orient_text="Listing the project's Python files and searching for leftover markers, in parallel.",
    orient=(("glob", {"pattern": f"{_P}/**/*.py"}), ("grep", {"pattern": "TODO|FIXME|XXX", "path": _P})),
    done_text="Review finished: the calculator project is complete and its suite passes ({summary}). All four "
              "demo tasks (core, parser, command line, sessions) are recorded in `calc_demo/PROGRESS.md`. The "
              "offline script has nothing more to build. To start over, delete `calc_demo/` and send any "
              "prompt.",
)
