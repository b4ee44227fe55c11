"""What a shell command line did to files, and which verification it ran.

The deterministic extractor (:mod:`.extract`) has to know, from a transcript alone, which files
an agent read or changed and which test, lint, type-check or build commands it ran. Much of that
work happens through ``shell``/``bash`` tool calls, so this module owns the static reading of a
command string:

* :func:`classify_shell_command` splits a command line (``&&``, ``||``, ``;``, ``|``, newlines,
  ``( … )``), follows ``cd dir && …`` for relative paths, drops heredoc bodies, and reports the
  files read (``cat``, ``head``, ``grep FILE``, ``sed -n`` …) and written (``sed -i``,
  redirections, ``tee``, ``mv``, ``cp``, ``rm``, ``touch`` …) plus the verification command it
  found, normalized so that later runs of the same check compare equal.

Which simple command counts as a check, and how a check's output reads as ``passed`` /
``failed`` / ``unknown``, is :mod:`.verification`'s knowledge; this module asks it about each
simple command.

Everything here is a pure function of its input. Nothing is executed and the filesystem is never
touched; unknown or malformed input yields empty effects rather than an exception, because the
extractor runs inside compaction, where a crash would cost the user their session's continuity.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .shell_syntax import Segment, split_commands
from .verification import check_text, positionals, program_name, verification_kind

__all__ = [
    "ShellEffects",
    "classify_shell_command",
    "normalize_path",
]

#: Longest command text analysed; the rest of a pathological command is ignored.
MAX_COMMAND_CHARS = 50_000
_MAX_PATH_CHARS = 300


@dataclass(frozen=True, slots=True)
class ShellEffects:
    """The file and verification effects of one shell command line.

    ``reads`` and ``writes`` are normalized paths in the order they appear (``writes`` includes
    deleted paths, which are also listed in ``deletes``). ``verification`` is true when the line
    runs a test, lint, type-check or build command; ``kind`` is that of the first one and
    ``check`` the verification part of the line, normalized (``cd pkg && pytest -q`` for
    ``cd pkg && pytest -q 2>&1 | tail -5``) so that reruns compare equal. ``exit_code_reliable``
    is false when the line's exit status is not the check's own (piped into a filter, followed by
    ``;``, ``||`` or backgrounded). ``artifacts`` are notebooks executed by ``jupyter nbconvert
    --execute``, ``jupyter execute`` or ``papermill``.
    """

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    verification: bool = False
    kind: str | None = None  # "test" | "lint" | "build" | "typecheck"
    check: str = ""
    exit_code_reliable: bool = True
    deletes: tuple[str, ...] = ()
    artifacts: tuple[str, ...] = ()


# -- paths -------------------------------------------------------------------------------------

_NOT_A_PATH = re.compile(r"[*?\[\]{}$`\n\r\t\x00]|^-|^&\d*$|^\d+$|://")


def normalize_path(path: str, cwd: str = "") -> str | None:
    """``path`` cleaned up textually (``./`` stripped, ``a/../b`` collapsed), joined to ``cwd``
    when relative; ``None`` for what is not a concrete file path (globs, variables, options,
    ``/dev/*``, ``-``)."""
    if not isinstance(path, str):
        return None
    path = path.strip()
    if not path or len(path) > _MAX_PATH_CHARS or _NOT_A_PATH.search(path):
        return None
    if cwd and not path.startswith(("/", "~")):
        path = posixpath.join(cwd, path)
    path = posixpath.normpath(path)
    if path.startswith("//"):
        path = "/" + path.lstrip("/")
    if path in (".", "..", "/", "~") or path.startswith(("/dev/", "/proc/")) or path == "/dev":
        return None
    return path


# -- command knowledge -------------------------------------------------------------------------

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
#: wrapper -> options of that wrapper that take a value
_WRAPPERS: dict[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-U"}),
    "env": frozenset({"-u", "-C", "-S"}),
    "time": frozenset({"-f", "-o"}),
    "nohup": frozenset(),
    "nice": frozenset({"-n"}),
    "ionice": frozenset({"-c", "-n"}),
    "command": frozenset(),
    "exec": frozenset({"-a"}),
    "builtin": frozenset(),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "caffeinate": frozenset(),
}




def _strip_wrappers(words: list[str]) -> list[str]:
    """Drop ``VAR=value`` prefixes and wrappers (``sudo``, ``env``, ``timeout 60``…)."""
    i = 0
    n = len(words)
    while i < n:
        word = words[i]
        if _ASSIGNMENT.match(word):
            i += 1
            continue
        name = program_name(word)
        if name in _WRAPPERS:
            takes_value = _WRAPPERS[name]
            i += 1
            while i < n and (words[i].startswith("-") or (name == "env" and _ASSIGNMENT.match(words[i]))):
                i += 2 if words[i] in takes_value else 1
            continue
        if name in ("timeout", "gtimeout"):
            i += 1
            while i < n and words[i].startswith("-"):
                i += 2 if words[i] in ("-s", "-k", "--signal", "--kill-after") else 1
            i += 1  # the duration
            continue
        break
    return words[i:]




def _short_flags(args: Sequence[str]) -> set[str]:
    flags: set[str] = set()
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("--"):
            flags.add(arg.split("=", 1)[0])
        elif arg.startswith("-") and len(arg) > 1:
            flags.update(f"-{c}" for c in arg[1:] if c.isalpha())
    return flags




_HEAD_TAIL_VALUES = frozenset({"-n", "-c", "--lines", "--bytes", "-s", "--pid", "--sleep-interval"})
_GREP_VALUES = frozenset({"-e", "-f", "-m", "-A", "-B", "-C", "-d", "-D", "--regexp", "--file", "--max-count",
                          "--after-context", "--before-context", "--context", "--include", "--exclude",
                          "--exclude-dir", "--label", "--color", "--colour"})
_RG_VALUES = frozenset({"-e", "-f", "-m", "-A", "-B", "-C", "-g", "-t", "-T", "--glob", "--type", "--regexp",
                        "--max-count", "--context", "-M", "--max-columns"})
_SED_VALUES = frozenset({"-e", "-f", "-l", "--expression", "--file", "--line-length"})
_AWK_VALUES = frozenset({"-F", "-v", "-f", "-i", "--field-separator", "--assign", "--file", "--include"})
_READ_COMMANDS = {"cat": frozenset(), "tac": frozenset(), "less": frozenset({"-x", "-p", "-j"}),
                  "more": frozenset(), "nl": frozenset({"-b", "-v", "-i", "-w", "-s", "-n"}),
                  "wc": frozenset(), "head": _HEAD_TAIL_VALUES, "tail": _HEAD_TAIL_VALUES,
                  "bat": frozenset({"-r", "--line-range", "-l", "--language", "--theme"}),
                  "batcat": frozenset({"-r", "--line-range", "-l", "--language"}), "diff": frozenset(),
                  "cmp": frozenset()}


@dataclass(slots=True)
class _Effects:
    reads: list[str]
    writes: list[str]
    deletes: list[str]
    artifacts: list[str]

    def read(self, path: str, cwd: str) -> None:
        p = normalize_path(path, cwd)
        if p is not None:
            self.reads.append(p)

    def write(self, path: str, cwd: str, *, deleted: bool = False) -> None:
        p = normalize_path(path, cwd)
        if p is not None:
            self.writes.append(p)
            if deleted:
                self.deletes.append(p)


def _sed(args: Sequence[str], cwd: str, fx: _Effects) -> None:
    in_place = False
    scripts = False
    pos: list[str] = []
    i = 0
    n = len(args)
    while i < n:
        arg = args[i]
        if arg == "--":
            pos.extend(args[i + 1:])
            break
        if arg == "-i" or arg == "--in-place":
            in_place = True
            # BSD: ``-i ''`` or ``-i .bak`` (a suffix word); GNU takes the next word as the script
            if i + 1 < n and (args[i + 1] == "" or re.fullmatch(r"\.[\w.~-]*", args[i + 1])):
                i += 1
        elif arg.startswith("--in-place="):
            in_place = True
        elif arg.startswith("-") and not arg.startswith("--") and len(arg) > 1 and arg != "-":
            body = arg[1:]
            if "i" in body:
                in_place = True
                body = body[: body.index("i")]  # what follows ``i`` is a backup suffix
            if body.endswith(("e", "f")) or arg in _SED_VALUES:
                scripts = True
                i += 1  # the script (or script file) is the next word
        elif arg.startswith("--expression") or arg.startswith("--file"):
            scripts = True
            if "=" not in arg:
                i += 1
        elif not arg.startswith("-") or arg == "-":
            pos.append(arg)
        i += 1
    files = pos if scripts else pos[1:]
    for f in files:
        if in_place:
            fx.write(f, cwd)
        else:
            fx.read(f, cwd)


def _perl(args: Sequence[str], cwd: str, fx: _Effects) -> None:
    flags = [a for a in args if a.startswith("-") and not a.startswith("--")]
    in_place = any(re.match(r"^-[a-zA-Z]*i", f) for f in flags)
    has_e = any(re.match(r"^-[a-zA-Z]*[eE]$", f) for f in flags)
    if not in_place:
        return
    pos: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("-") and arg != "-":
            i += 2 if re.match(r"^-[a-zA-Z]*[eE]$", arg) else 1
            continue
        pos.append(arg)
        i += 1
    for f in pos if has_e else pos[1:]:
        fx.write(f, cwd)


def _grep(name: str, args: Sequence[str], cwd: str, fx: _Effects) -> None:
    flags = _short_flags(args)
    if name in ("rg", "ag"):
        pos = positionals(args, _RG_VALUES)
        explicit = "-e" in flags or "-f" in flags or "--regexp" in flags
        for f in pos if explicit else pos[1:]:
            if posixpath.splitext(f)[1]:  # a file, not a directory searched recursively
                fx.read(f, cwd)
        return
    if flags & {"-r", "-R", "--recursive", "--dereference-recursive"}:
        return  # directories, not files
    pos = positionals(args, _GREP_VALUES)
    explicit = bool(flags & {"-e", "-f", "--regexp", "--file"}) or any(
        a.startswith(("--regexp=", "--file=")) for a in args)
    for f in pos if explicit else pos[1:]:
        fx.read(f, cwd)


def _move_or_copy(name: str, args: Sequence[str], cwd: str, fx: _Effects) -> None:
    target_dir = None
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-t", "--target-directory"):
            target_dir = args[i + 1] if i + 1 < len(args) else None
            i += 2
            continue
        if arg.startswith("--target-directory="):
            target_dir = arg.split("=", 1)[1]
        elif arg == "--":
            rest.extend(args[i + 1:])
            break
        elif not arg.startswith("-"):
            rest.append(arg)
        elif arg in ("-S", "--suffix"):
            i += 1
        i += 1
    if target_dir is None:
        if len(rest) < 2:
            return
        *sources, dest = rest
    else:
        sources, dest = rest, target_dir
    into_dir = target_dir is not None or len(sources) > 1 or dest.endswith("/") or dest in (".", "..")
    for src in sources:
        if name == "mv":
            fx.write(src, cwd, deleted=True)
        fx.write(posixpath.join(dest, posixpath.basename(src.rstrip("/"))) if into_dir else dest, cwd)


def _git(args: Sequence[str], cwd: str, fx: _Effects) -> None:
    i = 0
    while i < len(args) and args[i].startswith("-"):  # ``git -C dir …``
        if args[i] == "-C" and i + 1 < len(args):
            cwd = normalize_path(args[i + 1], cwd) or cwd
            i += 1
        elif args[i] == "-c":
            i += 1
        i += 1
    if i >= len(args):
        return
    sub, rest = args[i], args[i + 1:]
    if sub == "mv":
        for f in positionals(rest):
            fx.write(f, cwd)
    elif sub == "rm":
        if "--cached" not in rest:
            for f in positionals(rest):
                fx.write(f, cwd, deleted=True)
    elif sub == "restore":
        if "--staged" not in rest or "--worktree" in rest or "-W" in rest:
            for f in positionals(rest, frozenset({"-s", "--source"})):
                fx.write(f, cwd)
    elif sub == "checkout" and "--" in rest:
        for f in rest[rest.index("--") + 1:]:
            fx.write(f, cwd)
    elif sub == "apply":
        for f in positionals(rest, frozenset({"-p", "--directory", "--exclude", "--include"})):
            fx.read(f, cwd)


def _file_effects(words: Sequence[str], cwd: str, fx: _Effects) -> None:
    name = program_name(words[0])
    args = words[1:]
    if name in _READ_COMMANDS:
        for f in positionals(args, _READ_COMMANDS[name]):
            if f != "-":
                fx.read(f, cwd)
    elif name in ("grep", "egrep", "fgrep", "rg", "ag"):
        _grep(name, args, cwd, fx)
    elif name in ("sed", "gsed"):
        _sed(args, cwd, fx)
    elif name in ("awk", "gawk"):
        pos = positionals(args, _AWK_VALUES)
        explicit = "-f" in args or any(a.startswith("--file") for a in args)
        in_place = any(args[k] == "-i" and k + 1 < len(args) and args[k + 1] == "inplace" for k in range(len(args)))
        for f in pos if explicit else pos[1:]:
            if in_place:
                fx.write(f, cwd)
            else:
                fx.read(f, cwd)
    elif name == "perl":
        _perl(args, cwd, fx)
    elif name == "tee":
        for f in positionals(args, frozenset({"--output-error"})):
            fx.write(f, cwd)
    elif name in ("mv", "cp"):
        _move_or_copy(name, args, cwd, fx)
    elif name in ("rm", "unlink"):
        for f in positionals(args):
            fx.write(f, cwd, deleted=True)
    elif name == "touch":
        for f in positionals(args, frozenset({"-d", "-t", "-r", "--date", "--reference"})):
            fx.write(f, cwd)
    elif name == "truncate":
        for f in positionals(args, frozenset({"-s", "--size", "-r", "--reference"})):
            fx.write(f, cwd)
    elif name == "patch":
        for k, arg in enumerate(args):
            if arg == "-i" and k + 1 < len(args):
                fx.read(args[k + 1], cwd)
            elif arg.startswith("--input="):
                fx.read(arg.split("=", 1)[1], cwd)
    elif name == "git":
        _git(args, cwd, fx)
    elif name == "jupyter" and args:
        sub, rest = args[0], args[1:]
        if (sub == "nbconvert" and "--execute" in rest) or sub == "execute":
            for f in positionals(rest, frozenset({"--to", "--output", "--output-dir", "--ExecutePreprocessor.timeout",
                                                   "--kernel_name", "--kernel"})):
                if f.endswith(".ipynb"):
                    p = normalize_path(f, cwd)
                    if p:
                        fx.artifacts.append(p)
                        if "--inplace" in rest:
                            fx.writes.append(p)
    elif name == "papermill":
        pos = positionals(args, frozenset({"-p", "-r", "-y", "-f", "-k", "--parameters", "--kernel", "--cwd"}))
        if len(pos) >= 2:
            fx.read(pos[0], cwd)
            fx.write(pos[1], cwd)
            p = normalize_path(pos[1], cwd)
            if p:
                fx.artifacts.append(p)




def _iter_segments(command: str) -> Iterator[Segment]:
    if not isinstance(command, str):
        return iter(())
    command = command[:MAX_COMMAND_CHARS].replace("\\\r\n", " ").replace("\\\n", " ")
    return iter(split_commands(command))


def classify_shell_command(command: str) -> ShellEffects:
    """Files read and written and the verification run by one shell command line.

    Pure and total: any text (or a non-string) yields a :class:`ShellEffects`, never an exception.
    Results are memoized for ordinary-sized commands: agents rerun the same lines a lot.
    """
    if not isinstance(command, str):
        return ShellEffects()
    if len(command) <= _CACHED_COMMAND_CHARS:
        return _classify_cached(command)
    return _classify_safely(command)


_CACHED_COMMAND_CHARS = 4000


@lru_cache(maxsize=4096)
def _classify_cached(command: str) -> ShellEffects:
    return _classify_safely(command)


def _classify_safely(command: str) -> ShellEffects:
    try:
        return _classify(command)
    except Exception:  # a parser bug must not break compaction: report no known effects
        return ShellEffects()


def _classify(command: str) -> ShellEffects:
    fx = _Effects([], [], [], [])
    cwd = ""
    cwd_stack: list[str] = []
    checks: list[tuple[str, str]] = []
    kinds: list[str] = []
    reliable = True
    seen_check = False
    previous_end = ""
    for segment in _iter_segments(command):
        words = _strip_wrappers(segment.words)
        name = program_name(words[0]) if words else ""
        is_patch = name == "patch" or (name == "git" and "apply" in words[1:3])
        for op, target in segment.redirects:
            if op.startswith("<<"):
                continue  # heredoc delimiter or here-string: not a file
            if "<" in op and ">" not in op:
                if target and (is_patch or name in _READ_COMMANDS):
                    fx.read(target, cwd)
                continue
            if not target or target.isdigit() or target == "-":
                continue  # ``2>&1``, ``>&-``
            fx.write(target, cwd)
        if words and name in ("cd", "pushd"):
            dest = next((w for w in words[1:] if not w.startswith("-") or w == "-"), "~")
            if dest == "-" or _NOT_A_PATH.search(dest.lstrip("-")):
                cwd = ""
            elif dest.startswith(("/", "~")):
                cwd = posixpath.normpath(dest)
            else:
                cwd = posixpath.normpath(posixpath.join(cwd, dest)) if cwd else posixpath.normpath(dest)
                if cwd == ".":
                    cwd = ""
        elif words and name == "popd":
            cwd = ""
        elif words:
            kind = verification_kind(words)
            if kind is not None:
                checks.append((cwd, shlex.join(segment.words)))
                kinds.append(kind)
                seen_check = True
                if segment.end in ("|", "||", ";", "&"):
                    reliable = False
            elif seen_check and previous_end in ("|", ";", "||", "&"):
                reliable = False  # a later command's status replaces the check's
            if name != "xargs" and name != "find":
                _file_effects(words, cwd, fx)
        if segment.end == "(":
            cwd_stack.append(cwd)
        elif segment.end == ")":
            cwd = cwd_stack.pop() if cwd_stack else cwd
        previous_end = segment.end
    if checks and previous_end == "&":
        reliable = False
    check = check_text(checks) if checks else ""
    return ShellEffects(
        reads=tuple(dict.fromkeys(fx.reads)),
        writes=tuple(dict.fromkeys(fx.writes)),
        verification=bool(checks),
        kind=kinds[0] if kinds else None,
        check=check,
        exit_code_reliable=reliable if checks else True,
        deletes=tuple(dict.fromkeys(fx.deletes)),
        artifacts=tuple(dict.fromkeys(fx.artifacts)),
    )


