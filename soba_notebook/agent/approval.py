"""Approval policy: which tool calls ask the user first, and the session rules that stop asking.

Pure and UI-free. :func:`needs_approval` decides from the mode (``tools.approval``), the sandbox
(``tools.sandbox``), the session's :class:`Rule` values and one call whether the call may run or
must ask. The notebook answers through an :class:`Approver` (a card in the cell, a terminal
prompt); the agent side (:mod:`.approval_gate`) asks it, records the answer and turns a denial
into the call's result.

Modes (the issue's contract, README "Approvals"):

* ``"ask"`` (default): ``shell``, ``python`` and every write ask; reads never ask. A ``shell``
  command runs without asking only when ``tools.sandbox`` is ``"bwrap"`` *and*
  ``tools.sandboxSkipsApproval`` is true (default false: the sandbox limits what a command reaches,
  the card still says what runs); ``python`` runs in the kernel, so it always asks.
* ``"edits"``: writes inside the workspace run, except to a file Python in this kernel would import
  (a top-level module, package ``__init__``, ``.pth`` or bytecode in a ``sys.path`` folder inside the
  workspace: the caller says so with ``imported_here``), which asks as under ``"ask"``; ``shell``
  (unless sandboxed and skipping, as above) and ``python`` ask.

:func:`runs_without_asking` says it in one sentence for the current settings.
* ``"never"``: nothing asks.

A session rule ("Allow for this session") is, for ``shell``, a command prefix: the program and,
for programs that have them, the subcommand (``git status`` is not ``git push``; ``pytest …``
covers every ``pytest`` run). A command matches only when *every* simple command in it matches a
rule and it has no redirection or substitution, so ``pytest && rm -rf ~`` still asks. Allowing a
chain for the session adds one rule per program in it (``cd . && rm -f x``: ``cd …`` and ``rm …``),
and from then on every command made only of covered programs runs unasked, chained or not. A
program that runs whatever follows it (:data:`RUNS_ANY_COMMAND`: ``sudo``, ``env``, ``bash``, shell
keywords) is never a rule, and a command with one always asks; :func:`no_rule_reason` says why a
card offers no rule. For writes a rule is a file or a folder of the workspace; for ``python`` it is
the tool itself. An MCP server's tool (``mcp__<server>__<tool>``) runs another program's code: it asks
in "ask" and "edits", and its rule is that one tool. ``notebook_run`` runs notebook cells in the
kernel: it asks exactly as ``python`` does, and the ``python`` rule covers it (either runs any code in the kernel).
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ..cancel import CancelToken

__all__ = [
    "CODE_TOOLS",
    "EDIT_TOOLS",
    "MCP_PREFIX",
    "MODES",
    "READ_TOOLS",
    "RUNS_ANY_COMMAND",
    "ApprovalRequest",
    "Approver",
    "Decision",
    "Mode",
    "Rule",
    "Verdict",
    "matches",
    "needs_approval",
    "no_rule_reason",
    "runs_without_asking",
    "shell_prefixes",
    "suggested_rules",
]

Mode = Literal["ask", "edits", "never"]
MODES: tuple[Mode, ...] = ("ask", "edits", "never")

#: Tools that run code: they ask in "ask" and "edits".
CODE_TOOLS = frozenset({"shell", "python", "notebook_run"})
#: Tools that write files of the workspace: they ask in "ask" only.
EDIT_TOOLS = frozenset({"write_file", "edit_file", "notebook_edit"})
#: The name prefix of an MCP server's tool (``mcp__<server>__<tool>``): another program's action, so it
#: asks like ``shell`` in "ask" and "edits"; its session rule is the tool itself.
MCP_PREFIX = "mcp__"
#: Tools that change nothing outside the session: they never ask.
READ_TOOLS = frozenset({"read_file", "list_files", "glob", "grep", "recall", "checkpoint", "activate_skill",
                        "deactivate_skill", "variables", "notebook_read"})

#: Programs whose second word is a subcommand that changes what they do (``git status`` / ``git push``).
_SUBCOMMAND_PROGRAMS = frozenset({
    "git", "pip", "pip3", "uv", "npm", "npx", "pnpm", "yarn", "cargo", "go", "docker", "podman", "kubectl",
    "conda", "mamba", "poetry", "make", "apt", "apt-get", "brew", "dotnet", "gh", "hg", "svn", "jupyter",
    "systemctl", "helm", "terraform", "rustup", "hatch", "pdm", "tox", "nox",
})
#: Shell keywords and programs that run the command (or code) that follows them: a rule naming one
#: would cover every command (``sudo …``, ``env …``, ``then …`` of ``if x; then rm -rf ~; fi``).
RUNS_ANY_COMMAND = frozenset({
    "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "case", "esac", "select",
    "function", "time", "coproc", "!", "{", "}", "[[", "]]",
    "env", "sudo", "doas", "su", "runuser", "exec", "eval", "command", "builtin", "source", ".", "xargs",
    "nohup", "nice", "ionice", "timeout", "stdbuf", "setsid", "chroot", "unshare", "nsenter", "flock", "watch",
    "parallel", "find", "sh", "bash", "zsh", "dash", "ksh", "fish", "csh", "tcsh", "busybox", "strace", "ltrace",
    "script", "ssh", "chrt", "taskset", "fakeroot", "bwrap", "firejail",
})
#: Shell syntax a rule never covers: redirections, substitutions, background jobs, subshells.
_UNSAFE = re.compile(r"[<>`]|\$\(|\$\{|(?<![&|])&(?![&>])|\(|\)")
_SEPARATORS = re.compile(r"&&|\|\||[;|\n]")
_HARMLESS = re.compile(r"\s[12]?>&[12]\b")  # 2>&1: output joined, nothing written


@dataclass(frozen=True, slots=True)
class Rule:
    """One "Allow for this session" rule: ``tool`` is ``"shell"``, ``"edits"`` or ``"python"``;
    ``pattern`` a command prefix (shell), a workspace path, ``dir/`` for a folder (edits), or ``*``."""

    tool: str
    pattern: str

    def describe(self) -> str:
        if self.tool == "shell":
            return f"shell: {self.pattern} …"
        if self.tool == "edits":
            where = "the workspace" if self.pattern in ("", "./") else self.pattern
            return f"edits in {where}" if self.pattern.endswith("/") or not self.pattern else f"edits of {where}"
        if self.tool.startswith(MCP_PREFIX):
            return f"{self.tool}: every call"
        return f"{self.tool}: any code"

    def to_json(self) -> dict[str, str]:
        return {"tool": self.tool, "pattern": self.pattern}

    @classmethod
    def from_json(cls, raw: Any) -> Rule | None:
        if isinstance(raw, Mapping) and isinstance(raw.get("tool"), str) and isinstance(raw.get("pattern"), str):
            return cls(raw["tool"], raw["pattern"])
        return None


Verdict = Literal["once", "session", "deny", "timeout", "cancelled"]


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer to one request. ``once`` and ``session`` allow (``session`` adds ``rules``);
    ``deny`` (the user, with an optional ``reason``), ``timeout`` (no answer in time) and
    ``cancelled`` (the stop button) do not. ``by`` says who answered (``"user"``, ``"timeout"``)."""

    verdict: Verdict
    reason: str = ""
    rules: tuple[Rule, ...] = ()
    by: str = "user"

    @property
    def allowed(self) -> bool:
        return self.verdict in ("once", "session")


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What the user is asked about: the call, the full text it would run (``body``: the command,
    the code, the path), for writes a unified ``diff``, the rules "Allow for this session" would
    add, and how long the answer is waited for."""

    call_id: str
    tool: str
    body: str
    diff: str | None
    rules: tuple[Rule, ...]
    timeout_s: float
    mode: str = "ask"
    #: why "Allow for this session" is not offered, in one line ("" when it is: :func:`no_rule_reason`)
    no_rule: str = ""
    #: what the card asks, after "SOBA asks to" ("": run the call's tool); a question about something
    #: other than running the call (keeping files it left) says so in its own title
    asks: str = ""
    #: why this call asks although the mode lets its kind run (a write in "edits" to a file this kernel imports)
    why: str = ""

    @property
    def rule_text(self) -> str:
        return ", ".join(rule.describe() for rule in self.rules)


class Approver(Protocol):
    """Whoever answers requests (the notebook's card or terminal prompt). ``ask`` returns when
    answered; it may return ``timeout`` or ``cancelled`` itself, and the gate enforces both anyway."""

    async def ask(self, request: ApprovalRequest, cancel: CancelToken) -> Decision: ...


# -- shell prefixes ------------------------------------------------------------------------------

def _simple_commands(command: str) -> list[str] | str:
    """The simple commands of ``command`` split at ``&&``, ``||``, ``;``, ``|`` and newlines, or why
    a rule can never cover it (redirection, substitution, ``&``, subshells)."""
    text = _HARMLESS.sub(" ", command)
    if _UNSAFE.search(text):
        return ("it has a redirection, substitution, background job or subshell, which no rule covers, so it asks "
                "every time")
    parts = [part.strip() for part in _SEPARATORS.split(text)]
    return [part for part in parts if part] or "it is empty"


def _prefix(simple: str) -> str:
    """The program (and its subcommand, for programs that have them) of one simple command; raises
    ValueError saying why no rule may name it."""
    try:
        words = shlex.split(simple)
    except ValueError:
        raise ValueError("its quoting cannot be read, so no rule can name its program") from None
    if not words:
        raise ValueError("it is empty")
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):  # an assignment can change what any program does
        raise ValueError(f"an environment assignment in front ({words[0].partition('=')[0]}=…) can change what "
                         f"any program does, so no rule covers it")
    program = words[0]
    if posixpath.basename(program) in RUNS_ANY_COMMAND:
        raise ValueError(f"`{program}` runs whatever command or code follows it, so a rule for it would cover "
                         f"every command")
    if posixpath.basename(program) in _SUBCOMMAND_PROGRAMS and len(words) > 1 \
            and re.fullmatch(r"[A-Za-z][A-Za-z0-9_:.-]*", words[1]):
        return f"{program} {words[1]}"
    return program


def _shell_rules(command: str) -> tuple[str, ...] | str:
    """The prefixes of every simple command in ``command`` (in order, once each), or why a rule
    can never cover it."""
    parts = _simple_commands(command)
    if isinstance(parts, str):
        return parts
    prefixes: list[str] = []
    for part in parts:
        try:
            prefix = _prefix(part)
        except ValueError as why:
            return str(why)
        if prefix not in prefixes:
            prefixes.append(prefix)
    return tuple(prefixes)


def shell_prefixes(command: str) -> tuple[str, ...] | None:
    """The prefixes of every simple command in ``command`` (in order, once each), or None when a
    rule can never cover it (:func:`no_rule_reason` says why)."""
    found = _shell_rules(command)
    return None if isinstance(found, str) else found


def _edit_path(arguments: Mapping[str, Any]) -> str | None:
    path = arguments.get("path")
    if not isinstance(path, str) or not path.strip():
        return None
    norm = posixpath.normpath(path.strip().replace("\\", "/"))
    if norm.startswith("/") or norm == ".." or norm.startswith("../"):
        return None  # outside the workspace: the tool refuses it anyway, and no rule covers it
    return norm


# -- the policy ----------------------------------------------------------------------------------

def suggested_rules(tool: str, arguments: Mapping[str, Any]) -> tuple[Rule, ...]:
    """The rules "Allow for this session" adds for this call (empty: only "Allow once" makes sense)."""
    if tool == "shell":
        prefixes = shell_prefixes(str(arguments.get("command", "")))
        return tuple(Rule("shell", p) for p in prefixes or ())
    if tool in ("python", "notebook_run"):  # both run any code in the kernel: one rule covers both
        return (Rule("python", "*"),)
    if tool.startswith(MCP_PREFIX):
        return (Rule(tool, "*"),)
    if tool in EDIT_TOOLS:
        path = _edit_path(arguments)
        if path is None:
            return ()
        folder = posixpath.dirname(path)
        return (Rule("edits", f"{folder}/" if folder else path),)
    return ()


def no_rule_reason(tool: str, arguments: Mapping[str, Any]) -> str:
    """Why "Allow for this session" is not offered for this call, in one line ("" when it is)."""
    if suggested_rules(tool, arguments):
        return ""
    if tool == "shell":
        found = _shell_rules(str(arguments.get("command", "")))
        return f"No “Allow for this session”: {found}." if isinstance(found, str) else ""
    if tool in EDIT_TOOLS:
        if tool == "notebook_edit" and not str(arguments.get("path") or "").strip():
            return "No “Allow for this session”: no path was given (the kernel’s own notebook), and a rule names files."
        return "No “Allow for this session”: the path is not inside the workspace, so no rule covers it."
    return ""


def matches(rules: tuple[Rule, ...] | frozenset[Rule], tool: str, arguments: Mapping[str, Any]) -> bool:
    """Whether the session's ``rules`` allow this call without asking."""
    if tool == "shell":
        prefixes = shell_prefixes(str(arguments.get("command", "")))
        allowed = {rule.pattern for rule in rules if rule.tool == "shell"}
        return bool(prefixes) and all(p in allowed for p in prefixes or ())
    if tool in ("python", "notebook_run"):
        return any(rule.tool == "python" for rule in rules)
    if tool.startswith(MCP_PREFIX):
        return any(rule.tool == tool for rule in rules)
    if tool in EDIT_TOOLS:
        path = _edit_path(arguments)
        if path is None:
            return False
        for rule in rules:
            if rule.tool != "edits":
                continue
            if rule.pattern.endswith("/") and (path + "/").startswith(rule.pattern):
                return True
            if rule.pattern == path:
                return True
    return False


def needs_approval(mode: str, sandbox: str, rules: tuple[Rule, ...] | frozenset[Rule], tool: str,
                   arguments: Mapping[str, Any], *, sandbox_skips_approval: bool = False,
                   imported_here: bool = False) -> bool:
    """True when this call must ask the user before it runs (module docstring). ``imported_here``:
    the write's target is a file Python in this kernel would import (:func:`.import_guard.import_reason`)."""
    if mode == "never" or tool in READ_TOOLS:
        return False
    if tool in EDIT_TOOLS:
        if mode == "edits" and _edit_path(arguments) is not None and not imported_here:
            return False
    elif tool == "shell":
        if sandbox == "bwrap" and sandbox_skips_approval:  # it cannot write outside the workspace
            return False
    elif tool not in ("python", "notebook_run") and not tool.startswith(MCP_PREFIX):
        return False  # a tool registered by the user's own code: theirs to trust
    return not matches(rules, tool, arguments)


def runs_without_asking(mode: str, sandbox: str, sandbox_skips_approval: bool) -> str:
    """One sentence: what runs without asking under ``mode`` with these sandbox settings (the line
    ``%soba approval`` and ``%soba status`` both show, so where the mode is set says it too)."""
    sandboxed = sandbox == "bwrap"
    if mode == "never":
        shell = f"shell{' (sandboxed)' if sandboxed else ''}"
        return f"nothing asks: {shell}, python, MCP tools and every write run at once"
    shell_free = sandboxed and sandbox_skips_approval
    free = ["reads", *(["writes in the workspace"] if mode == "edits" else []),
            *(["sandboxed shell (tools.sandboxSkipsApproval)"] if shell_free else [])]
    shell = "shell (sandboxed; tools.sandboxSkipsApproval is false)" if sandboxed else "shell"
    asks = [*([] if shell_free else [shell]), "python",
            "every write" if mode == "ask" else "writes to files Python in this kernel imports", "MCP tools"]
    return f"runs without asking: {', '.join(free)}; asks first: {', '.join(asks)}"
