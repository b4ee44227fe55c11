"""The agent's tools: their schemas, argument checking, execution, and bounded output.

This module owns the contract between the model and the machine:

* :class:`ToolRegistry` lists :class:`~soba_notebook.providers.base.ToolSpec` schemas for the
  request and runs a call by name. ``run`` never raises for anything the model can cause: an
  unknown tool, missing or mistyped arguments, a path outside the workspace, a failing command all
  come back as ``ToolOutcome(is_error=True)`` with a message that says what to do instead.
* :class:`ToolContext` is everything a tool may touch (workspace, config, session store, the
  kernel's namespace, checkpoint callbacks, skills, the cancel token). Tools reach nothing else.
* Output bounding: a result longer than ``tools.maxOutputChars`` keeps its head and tail for the
  model, with a pointer line ``[output truncated: N characters; full text in .soba/outputs/<id>.txt]``
  and the full text written to that file, so nothing is lost and the model can read it in pieces.

Confinement and the file operations live in :mod:`.workspace`; running a command (subprocess,
process-group kill, timeout, the status line) in :mod:`.shell`; running Python code (its own
thread, output capture, the trailing expression's repr, interrupt on cancel) in :mod:`.pyexec`.
This module wraps them as tools. Shell commands are not sandboxed: they run with the user's rights
and can reach anything the user can; ``tools.allowShell: false`` removes the tool. ``allowWrite``
and ``allowPython`` likewise remove ``write_file``/``edit_file`` and ``python``; a call to a
removed tool is refused, not run.

Argument names are part of the contract (the compaction extractor reads ``path`` of the file
tools and ``command`` of ``shell``, and a shell result always ends with ``[exit code N]`` or
``[timed out after Ns]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import TOOL_NAMES, ToolsConfig
from ..errors import SessionError, ToolError
from ..providers.base import ToolSpec
from ..scrub import Scrubber
from ..session.attachments import ImageAttachment
from ..trusted_import import distrust
from . import file_changes as observe
from . import import_guard
from . import workspace as ws
from .notebook_access import NotebookAccess
from .pyexec import run_python
from .sandbox import with_sandbox_note
from .shell import run_shell
from .tool_output import bound_output

if TYPE_CHECKING:
    from ..cancel import CancelToken
    from ..session.store import SessionStore
    from .skills import SkillRegistry

__all__ = [
    "CHECKPOINT_KINDS",
    "Tool",
    "ToolContext",
    "ToolOutcome",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "bound_output",
    "default_tools",
]

CHECKPOINT_KINDS = ("milestone", "plan_pivot")


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """The result of one tool call.

    ``content`` is what the model sees (already bounded); ``full_chars`` is the length of the full
    text when ``content`` was truncated; ``data`` holds structured extras for the UI and the
    transcript (``exit_code``, ``path``, ``spill_path``, ``cancelled``…) and is not sent to the model.
    """

    content: str
    is_error: bool = False
    full_chars: int | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    #: figures shown to the model (a provider that takes no images is sent their descriptions)
    images: tuple[ImageAttachment, ...] = ()

    @property
    def cancelled(self) -> bool:
        return bool(self.data.get("cancelled"))


@dataclass(slots=True)
class ToolContext:
    """What tools may touch. Built by the agent; ``workspace`` is resolved on construction.

    ``record_intent(kind, note) -> bool`` records a compaction intent and says whether config
    allowed it; ``append_checkpoint(kind, note)`` appends the checkpoint entry. ``user_namespace``
    is where ``python`` runs (the kernel's namespace in a notebook); without one a private dict,
    kept for the life of this context, is used. ``spill_dir`` defaults to ``<workspace>/.soba/outputs``.
    ``hidden_env`` names environment variables removed from the environment of shell commands
    (the model's API key variable), so ``env`` in a command does not copy a secret into the transcript.
    ``scrubber`` removes secrets from every result *before* it is bounded or spilled to a file
    (default: one built from the environment at each call). ``refresh_secrets()`` is called after
    every tool that runs code (``python``, ``shell``) and before its result is scrubbed: code may set
    a secret variable and print it in the same run (the agent's callback updates ``scrubber``).
    """

    workspace: Path
    config: ToolsConfig = field(default_factory=ToolsConfig)
    store: SessionStore | None = None
    user_namespace: dict[str, Any] | None = None
    record_intent: Callable[[str, str], bool] | None = None
    append_checkpoint: Callable[[str, str], object] | None = None
    skills: SkillRegistry | None = None
    cancel: CancelToken | None = None
    spill_dir: Path | None = None
    hidden_env: frozenset[str] = frozenset()
    scrubber: Scrubber | None = None
    refresh_secrets: Callable[[], object] | None = None
    notebooks: NotebookAccess = field(default_factory=NotebookAccess)  # the notebook tools' seams (front end)
    _private_namespace: dict[str, Any] = field(default_factory=lambda: {"__name__": "__soba__"}, init=False,
                                               repr=False)

    def __post_init__(self) -> None:
        self.workspace = Path(self.workspace).expanduser().resolve()
        distrust(self.workspace)  # SOBA's own lazy imports never load a module its shell commands can plant
        if self.spill_dir is None:
            self.spill_dir = self.workspace / ".soba" / "outputs"

    @classmethod
    def from_config(cls, config: ToolsConfig, *, base_dir: str | os.PathLike[str] | None = None,
                    **kwargs: Any) -> ToolContext:
        """A context whose workspace is ``config.workspace``, relative to ``base_dir`` (default: cwd)."""
        root = Path(config.workspace).expanduser()
        if not root.is_absolute():
            root = Path(base_dir or os.getcwd()) / root
        return cls(root, config, **kwargs)

    @property
    def python_namespace(self) -> dict[str, Any]:
        return self.user_namespace if self.user_namespace is not None else self._private_namespace


Handler = Callable[[dict[str, Any], ToolContext], Awaitable["ToolResult"]]


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool: its schema, its handler, and the config switch (if any) it requires."""

    spec: ToolSpec
    handler: Handler
    requires: str | None = None  # a ToolsConfig boolean field, e.g. "allow_shell"
    #: runs the model's code, which may set environment variables: secrets are re-read after it
    runs_code: bool = False

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool's handler returns: its unbounded text, whether it is an error, structured ``data``
    for the transcript, and a ``footer`` kept verbatim after truncation (shell's exit line). The
    registry bounds it into the :class:`ToolOutcome` the model sees."""

    text: str
    is_error: bool = False
    data: Mapping[str, Any] = field(default_factory=dict)
    footer: str = ""
    images: tuple[ImageAttachment, ...] = ()


# -- argument checking -------------------------------------------------------------------------

_TYPE_NAMES = {"string": "a string", "integer": "a whole number", "number": "a number",
               "boolean": "true or false", "object": "an object", "array": "an array"}


def _describe_arguments(spec: ToolSpec) -> str:
    props = spec.parameters.get("properties", {})
    required = set(spec.parameters.get("required", ()))
    if not props:
        return f"{spec.name} takes no arguments"
    parts = []
    for key, schema in props.items():
        kind = schema.get("type", "any")
        if "enum" in schema:
            kind = " | ".join(json.dumps(v) for v in schema["enum"])
        parts.append(f"{key} ({kind}{', required' if key in required else ', optional'})")
    return f"{spec.name} expects: " + ", ".join(parts)


def _coerce(value: Any, kind: str | None) -> tuple[bool, Any]:
    """``(ok, value)``: ``value`` checked against a JSON-schema type, with the lenient conversions
    models need (``"10"`` for 10, ``10.0`` for an integer, ``"true"`` for a boolean)."""
    if kind is None:
        return True, value
    if kind == "string":
        return isinstance(value, str), value
    if kind == "boolean":
        if isinstance(value, bool):
            return True, value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return True, value.strip().lower() == "true"
        return False, value
    if kind in ("integer", "number"):
        if isinstance(value, str):
            try:
                value = float(value.strip()) if kind == "number" else int(value.strip())
            except ValueError:
                return False, value
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False, value
        if kind == "integer":
            if value != int(value):
                return False, value
            return True, int(value)
        return True, value
    if kind == "object":
        return isinstance(value, Mapping), value
    if kind == "array":
        return isinstance(value, list | tuple), value
    return True, value


def _validate(spec: ToolSpec, arguments: Any) -> dict[str, Any]:
    """The checked arguments, or a ToolError that lists what the tool expects."""
    expected = _describe_arguments(spec)
    if not isinstance(arguments, Mapping):
        raise ToolError(f"the arguments of {spec.name} must be a JSON object; {expected}")
    props: Mapping[str, Any] = spec.parameters.get("properties", {})
    required = list(spec.parameters.get("required", ()))
    args = {k: v for k, v in arguments.items() if v is not None}
    unknown = sorted(set(args) - set(props))
    if unknown:
        raise ToolError(f"{spec.name} got unknown argument{'s' if len(unknown) > 1 else ''} "
                        f"{', '.join(unknown)}; {expected}")
    missing = [k for k in required if k not in args]
    if missing:
        raise ToolError(f"{spec.name} is missing required argument{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(missing)}; {expected}")
    checked: dict[str, Any] = {}
    for key, value in args.items():
        schema = props[key]
        kind = schema.get("type")
        ok, converted = _coerce(value, kind)
        if not ok:
            raise ToolError(f"{spec.name}: {key} must be {_TYPE_NAMES.get(kind, kind)}, got {value!r}; {expected}")
        if "enum" in schema and converted not in schema["enum"]:
            allowed = ", ".join(json.dumps(v) for v in schema["enum"])
            raise ToolError(f"{spec.name}: {key} must be one of {allowed}, got {value!r}")
        checked[key] = converted
    return checked


# -- file tools --------------------------------------------------------------------------------

def _file_raw(result: ws.FileResult) -> ToolResult:
    return ToolResult(result.text, data=dict(result.data))


async def _read_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    return _file_raw(await asyncio.to_thread(ws.read_file, ctx.workspace, args["path"], args.get("start_line"),
                                             args.get("end_line"), ctx.config.max_output_chars))


async def _write_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    return _file_raw(await asyncio.to_thread(ws.write_file, ctx.workspace, args["path"], args["content"]))


async def _edit_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    return _file_raw(await asyncio.to_thread(ws.edit_file, ctx.workspace, args["path"], args["old"], args["new"],
                                             bool(args.get("replace_all", False))))


async def _list_files(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    return _file_raw(await asyncio.to_thread(ws.list_files, ctx.workspace, args.get("path", ".")))


async def _glob(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    return _file_raw(await asyncio.to_thread(ws.glob_files, ctx.workspace, args["pattern"]))


async def _grep(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    cancel = ctx.cancel
    return _file_raw(await asyncio.to_thread(ws.grep_files, ctx.workspace, args["pattern"], args.get("path", "."),
                                             args.get("glob"), (lambda: cancel.cancelled) if cancel else None))


# -- shell and python (the execution itself lives in .shell and .pyexec) -----------------------

async def _shell(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    timeout = float(args.get("timeout_sec") or ctx.config.shell_timeout_sec)
    if timeout <= 0:
        raise ToolError(f"timeout_sec must be greater than 0, got {args.get('timeout_sec')!r}")
    before = await asyncio.to_thread(observe.snapshot, ctx.workspace)
    # what import would find, before and after a sandboxed command: the approval gate reviews a change
    importable = await asyncio.to_thread(import_guard.take, ctx.workspace) if ctx.config.sandbox == "bwrap" else None
    result = await run_shell(args["command"], ctx.workspace, timeout, hidden_env=ctx.hidden_env, cancel=ctx.cancel,
                             sandbox=ctx.config.sandbox, transcript=ctx.store.file if ctx.store is not None else None,
                             sandbox_extra_env=ctx.config.sandbox_env)
    changes = observe.diff(before, await asyncio.to_thread(observe.snapshot, ctx.workspace))
    data = {**result.data, "files_changed": changes.to_json()}
    if importable is not None:
        after = await asyncio.to_thread(import_guard.take, ctx.workspace, keep=False, roots=importable.roots)
        data[import_guard.PLANTED_KEY] = import_guard.planted(importable, after)
    return ToolResult(result.text, result.is_error, data, result.footer)


async def _python(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    before = await asyncio.to_thread(observe.snapshot, ctx.workspace)
    result = await run_python(args["code"], ctx.python_namespace, ctx.cancel)
    changes = observe.diff(before, await asyncio.to_thread(observe.snapshot, ctx.workspace))
    return ToolResult(result.text, result.is_error, {**result.data, "files_changed": changes.to_json()}, result.footer)


# -- session tools -----------------------------------------------------------------------------

async def _recall(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    entry_id = str(args["entry_id"]).strip()
    store = ctx.store
    if store is None:
        raise ToolError("recall is unavailable: this agent has no session store")
    if entry_id not in store:
        with contextlib.suppress(SessionError):
            store.refresh()  # another writer may have appended it
    if entry_id not in store:
        raise ToolError(f"no entry with id {entry_id!r} in session {store.id}; ids appear in the context "
                        f"capsule and in recalled entries' parentId")
    entry = store.get(entry_id)
    return ToolResult(json.dumps(entry.to_json(), ensure_ascii=False), data={"entry_id": entry_id, "type": entry.type})


async def _checkpoint(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    kind, note = args["kind"], args["note"]
    if ctx.append_checkpoint is None and ctx.record_intent is None:
        raise ToolError("checkpoints are unavailable in this context (no session to record them in)")
    if ctx.append_checkpoint is not None:
        ctx.append_checkpoint(kind, note)
    recorded = bool(ctx.record_intent(kind, note)) if ctx.record_intent is not None else False
    label = "milestone" if kind == "milestone" else "plan pivot"
    if recorded:
        tail = "a compaction intent was recorded; it is considered before the next model request"
    else:
        tail = ("no compaction intent was recorded: compaction on checkpoints is disabled by config "
                "(compaction.compactOnMilestone or compaction.auto is false)")
    return ToolResult(f"{label} checkpoint recorded; {tail}", data={"kind": kind, "intent_recorded": recorded})


def _require_skills(ctx: ToolContext) -> SkillRegistry:
    if ctx.skills is None:
        raise ToolError("skills are unavailable in this context")
    return ctx.skills


async def _activate_skill(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    skills = _require_skills(ctx)
    name = args["name"].strip()
    before = skills.active()
    active = skills.activate(name)
    if name in before:
        text = f"skill {name} was already active; active skills: {', '.join(active)}"
    else:
        text = (f"activated skill {name}; its instructions are part of the system prompt from the next request "
                f"on. Active skills: {', '.join(active)}")
    return ToolResult(text, data={"activeSkills": list(active), "changed": active != before})


async def _deactivate_skill(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    skills = _require_skills(ctx)
    name = args["name"].strip()
    before = skills.active()
    active = skills.deactivate(name)
    rest = ", ".join(active) or "none"
    text = (f"deactivated skill {name}; active skills: {rest}" if name in before
            else f"skill {name} was not active; active skills: {rest}")
    return ToolResult(text, data={"activeSkills": list(active), "changed": active != before})


# -- schemas -----------------------------------------------------------------------------------

def _schema(required: Iterable[str] = (), **props: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": dict(props), "required": list(required), "additionalProperties": False}


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


_PATH = "Path relative to the workspace root (absolute paths must lie inside it)."

_TOOLS: tuple[Tool, ...] = (
    Tool(ToolSpec("read_file", "Read a text file from the workspace. Lines come back numbered from 1; use "
                  "start_line/end_line to read part of a long file.",
                  _schema(["path"], path=_string(_PATH),
                          start_line={"type": "integer", "description": "First line to show (1-based)."},
                          end_line={"type": "integer", "description": "Last line to show (inclusive)."})),
         _read_file),
    Tool(ToolSpec("write_file", "Create or overwrite a file with the given content (parent directories are "
                  "created). Prefer edit_file for changes to an existing file.",
                  _schema(["path", "content"], path=_string(_PATH), content=_string("The complete new file text."))),
         _write_file, "allow_write"),
    Tool(ToolSpec("edit_file", "Replace an exact piece of text in a file. old must match the file exactly "
                  "(including indentation) and be unique unless replace_all is true.",
                  _schema(["path", "old", "new"], path=_string(_PATH), old=_string("The exact text to replace."),
                          new=_string("The replacement text."),
                          replace_all={"type": "boolean", "description": "Replace every occurrence."})),
         _edit_file, "allow_write"),
    Tool(ToolSpec("list_files", "List one directory of the workspace: subdirectories (ending in /) and files "
                  "with their sizes.",
                  _schema([], path=_string("Directory relative to the workspace root; default: the root."))),
         _list_files),
    Tool(ToolSpec("glob", "Find workspace files by glob pattern, e.g. **/*.py or src/**/*.{ts,tsx}. Skips .git, "
                  "virtualenvs, node_modules and caches unless the pattern names them.",
                  _schema(["pattern"], pattern=_string("Glob relative to the workspace root; ** spans directories."))),
         _glob),
    Tool(ToolSpec("grep", "Search text files for a regular expression (Python syntax). Prints file:line: text "
                  "for each matching line, up to 500 matches.",
                  _schema(["pattern"], pattern=_string("Regular expression."),
                          path=_string("File or directory to search; default: the workspace root."),
                          glob=_string("Only search files matching this glob, e.g. *.py."))),
         _grep),
    Tool(ToolSpec("shell", "Run a bash command (bash -c) in the workspace directory. Output (stdout and stderr "
                  "together) ends with [exit code N]. Not sandboxed. No stdin: do not start interactive programs.",
                  _schema(["command"], command=_string("The bash command."),
                          timeout_sec={"type": "number", "description": "Seconds before the command is killed; "
                                       "default from config."})),
         _shell, "allow_shell", runs_code=True),
    Tool(ToolSpec("python", "Run Python code in the notebook's namespace (variables persist between calls). "
                  "Printed output is returned, plus the repr of a trailing expression, like a REPL.",
                  _schema(["code"], code=_string("Python source to execute."))),
         _python, "allow_python", runs_code=True),
    Tool(ToolSpec("recall", "Read one stored transcript entry by id, exactly as it was recorded, including "
                  "history that has been compacted out of the context.",
                  _schema(["entry_id"], entry_id=_string("The entry id."))),
         _recall),
    Tool(ToolSpec("checkpoint", "Mark a milestone (a unit of work is done and verified) or a plan_pivot (the plan "
                  "changed). Lets context be compacted at a good moment.",
                  _schema(["kind", "note"], kind={"type": "string", "enum": list(CHECKPOINT_KINDS),
                                                  "description": "milestone or plan_pivot."},
                          note=_string("One line: what was achieved or what changed."))),
         _checkpoint),
    Tool(ToolSpec("activate_skill", "Activate a skill: its instructions join the system prompt until deactivated.",
                  _schema(["name"], name=_string("Skill name."))),
         _activate_skill),
    Tool(ToolSpec("deactivate_skill", "Deactivate an active skill.", _schema(["name"], name=_string("Skill name."))),
         _deactivate_skill),
)

_SWITCH_KEYS = {"allow_shell": "tools.allowShell", "allow_write": "tools.allowWrite",
                "allow_python": "tools.allowPython"}
_BUILTIN = {tool.name: tool for tool in _TOOLS}


# -- registry ----------------------------------------------------------------------------------

class ToolRegistry:
    """An ordered set of tools: their specs for the request, and ``run`` to execute a call."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def unregister(self, name: str) -> None:
        """Remove a tool (an MCP server's, when the server exited); absent names are ignored."""
        self._tools.pop(name, None)

    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(tool.spec for tool in self._tools.values())

    def _disabled_message(self, name: str, switch: str) -> str:
        return (f"tool {name} is disabled by config ({_SWITCH_KEYS.get(switch, switch)} is false); "
                f"it cannot be used in this session")

    async def run(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Run one call. Never raises for a bad call: every failure is an error outcome.

        (Only the cancellation of the awaiting task itself propagates, after a running shell
        command's process group has been killed.)
        """
        if ctx.cancel is not None and ctx.cancel.cancelled:
            return ToolOutcome(f"[cancelled: {name} was not run]", True, data={"cancelled": True})
        tool = self._tools.get(name)
        if tool is None and name in TOOL_NAMES and not ctx.config.offers(name):
            return ToolOutcome(f"tool {name} is not offered in this session (tools.enabled / tools.disabled); "
                               f"available tools: {', '.join(self._tools) or 'none'}", True, data={"refused": True})
        if tool is None:
            builtin = _BUILTIN.get(name)
            if builtin is not None and builtin.requires is not None:
                return ToolOutcome(self._disabled_message(name, builtin.requires), True, data={"refused": True})
            available = ", ".join(self._tools) or "none"
            return ToolOutcome(f"unknown tool {name!r}; available tools: {available}", True)
        if tool.requires is not None and not getattr(ctx.config, tool.requires, False):
            return ToolOutcome(self._disabled_message(name, tool.requires), True, data={"refused": True})
        try:
            args = _validate(tool.spec, arguments)
            raw = await tool.handler(args, ctx)
        except ToolError as exc:
            raw = ToolResult(str(exc), is_error=True)
        except OSError as exc:
            detail = exc.strerror or str(exc)
            where = f" ({ws.display_path(ctx.workspace, Path(exc.filename))})" if exc.filename else ""
            raw = ToolResult(f"{name} failed: {detail}{where}", is_error=True)
        except (ValueError, TypeError, UnicodeError, KeyError) as exc:
            raw = ToolResult(f"{name} failed: {type(exc).__name__}: {exc}", is_error=True)
        except Exception as exc:  # a bug in a tool must not end the turn; report it to the model
            raw = ToolResult(f"{name} failed with an internal error: {type(exc).__name__}: {exc}", is_error=True)
        if tool.runs_code and ctx.refresh_secrets is not None:
            ctx.refresh_secrets()  # os.environ["X_API_KEY"] = ...; print(...) in this very run
        scrubber = ctx.scrubber if ctx.scrubber is not None else Scrubber.from_environ()
        # scrubbed first: the spill file under .soba/outputs must never hold a secret
        content, full_chars, spill = bound_output(scrubber.text(raw.text), ctx.config.max_output_chars,
                                                  ctx.spill_dir, ctx.workspace, label=name,
                                                  footer=scrubber.text(raw.footer))
        data = dict(raw.data)
        if spill is not None:
            data["spill_path"] = spill
        return ToolOutcome(content, raw.is_error, full_chars, data, raw.images)


def default_tools(config: ToolsConfig) -> ToolRegistry:
    """The built-in tools the config enables, ``variables`` (:mod:`.kernel_state`) and the notebook tools."""
    from .kernel_state import VARIABLES_TOOL
    from .notebook_run import NOTEBOOK_RUN_TOOL
    from .notebook_tools import notebook_aware, notebook_tools

    chosen = [notebook_aware(t) for t in _TOOLS if t.requires is None or getattr(config, t.requires)]
    tools = [*with_sandbox_note(chosen, config.sandbox), VARIABLES_TOOL, *notebook_tools(config),
             *([NOTEBOOK_RUN_TOOL] if config.allow_python else [])]
    return ToolRegistry(t for t in tools if config.offers(t.name))
