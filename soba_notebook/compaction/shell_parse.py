"""What a shell command line did to files, and whether it checked the work.

The deterministic extractor (:mod:`.extract`) has to know, from a transcript alone, which files
an agent read or changed and which test, lint, type-check or build commands it ran. Much of that
work happens through ``shell``/``bash`` tool calls, so this module owns the static reading of a
command string:

* :func:`classify_shell_command` splits a command line (``&&``, ``||``, ``;``, ``|``, newlines,
  ``( … )``), follows ``cd dir && …`` for relative paths, drops heredoc bodies, and reports the
  files read (``cat``, ``head``, ``grep FILE``, ``sed -n`` …) and written (``sed -i``,
  redirections, ``tee``, ``mv``, ``cp``, ``rm``, ``touch`` …) plus the verification command it
  found, normalized so that later runs of the same check compare equal;
* :func:`verification_status` reads a tool result's text (exit-code markers of SOBA, pi and
  mini-swe-agent, and the summaries of common test runners and linters) into
  ``passed`` / ``failed`` / ``unknown``.

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

__all__ = [
    "ShellEffects",
    "classify_shell_command",
    "normalize_path",
    "verification_outcome",
    "verification_status",
]

#: Longest command text analysed; the rest of a pathological command is ignored.
MAX_COMMAND_CHARS = 50_000
#: Longest normalized verification command kept.
MAX_CHECK_CHARS = 200
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


# -- tokenizing --------------------------------------------------------------------------------

_OPERATOR_CHARS = frozenset(";&|<>()\n")
_HEREDOC = re.compile(r"<<-?[ \t]*(?:'([^'\n]+)'|\"([^\"\n]+)\"|\\?([A-Za-z_][\w.-]*))")
_FALLBACK_TOKEN = re.compile(r"&&|\|\||>>|&>>?|>&|<<<|<<-?|[;|&<>()\n]|(?:[^\s;|&<>()\"']|\"[^\"]*\"?|'[^']*'?)+")


def _strip_heredocs(command: str) -> str:
    """Drop heredoc bodies (their text is data, not commands); keep the ``<<`` and delimiter."""
    if "<<" not in command:
        return command
    lines = command.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        delimiters = [m.group(1) or m.group(2) or m.group(3) for m in _HEREDOC.finditer(line)
                      if not line[m.start():].startswith("<<<") and line[m.start() - 1: m.start()] != "<"]
        for delimiter in delimiters:
            end = next((j for j in range(i, len(lines)) if lines[j].strip() == delimiter), None)
            if end is None:  # not a heredoc after all (``<<`` inside a string): keep the text
                break
            i = end + 1
    return "\n".join(out)


def _tokens(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|<>()\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes or a trailing escape: split without quoting rules
        return [_unquote(t) for t in _FALLBACK_TOKEN.findall(command)]


def _unquote(token: str) -> str:
    if token and all(c in _OPERATOR_CHARS for c in token):
        return token
    return token.replace('"', "").replace("'", "")


def _is_operator(token: str) -> bool:
    return bool(token) and all(c in _OPERATOR_CHARS for c in token)


@dataclass(slots=True)
class _Segment:
    """One simple command: its words, its redirections, and the operator that ends it."""

    words: list[str]
    redirects: list[tuple[str, str]]
    end: str  # "&&", "||", ";", "|", "&", "(", ")" or "" at the end of the line


def _segments(tokens: Sequence[str]) -> list[_Segment]:
    segments: list[_Segment] = []
    words: list[str] = []
    redirects: list[tuple[str, str]] = []
    i = 0
    n = len(tokens)
    while i < n:
        token = tokens[i]
        if not _is_operator(token):
            words.append(token)
            i += 1
            continue
        if ">" in token or "<" in token:
            target = tokens[i + 1] if i + 1 < n and not _is_operator(tokens[i + 1]) else ""
            if words and words[-1].isdigit() and ">" in token:
                words.pop()  # ``2>file``: the fd number is not an argument
            redirects.append((token, target))
            i += 2 if target else 1
            continue
        segments.append(_Segment(words, redirects, _separator(token)))
        words, redirects = [], []
        i += 1
    if words or redirects:
        segments.append(_Segment(words, redirects, ""))
    return segments


def _separator(token: str) -> str:
    for op in ("&&", "||", "(", ")", "|", ";", "&"):
        if op in token:
            return op
    return ";"  # newline(s)


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
_RUNNERS = {"npx", "bunx", "pnpx", "uvx"}
_RUN_PREFIXES = {("uv", "run"), ("poetry", "run"), ("pipenv", "run"), ("pdm", "run"), ("hatch", "run"),
                 ("pnpm", "exec"), ("pnpm", "dlx"), ("yarn", "dlx"), ("yarn", "exec"), ("pipx", "run"),
                 ("rye", "run"), ("conda", "run")}
_PYTHON = re.compile(r"^(?:python|python[23](?:\.\d+)?|pypy3?)(?:\.exe)?$")

_TEST_TOOLS = {"pytest", "py.test", "tox", "nox", "jest", "vitest", "mocha", "ctest", "phpunit", "rspec",
               "ava", "tap", "karma", "playwright", "cypress"}
_LINT_TOOLS = {"ruff", "flake8", "pylint", "eslint", "biome", "golangci-lint", "shellcheck", "stylelint",
               "rubocop", "pycodestyle", "pydocstyle", "bandit", "markdownlint", "hadolint", "oxlint"}
_TYPE_TOOLS = {"mypy", "pyright", "basedpyright", "tsc", "tsgo", "vue-tsc", "pytype", "pyre"}
_CHECK_FLAG_TOOLS = {"black", "isort", "prettier"}  # lint only with --check / --check-only
_PY_MODULES = {"pytest": "test", "unittest": "test", "tox": "test", "nox": "test", "mypy": "typecheck",
               "pyright": "typecheck", "ruff": "lint", "flake8": "lint", "pylint": "lint", "build": "build",
               "pycodestyle": "lint", "black": None, "isort": None, "compileall": "build"}
_SCRIPT_KINDS = (
    (re.compile(r"^(?:test|tests|t|unit|e2e|spec)(?:[:-].*)?$"), "test"),
    (re.compile(r"^(?:typecheck|type-check|types|tsc|check-types|check:types|typecheck:.*)$"), "typecheck"),
    (re.compile(r"^(?:lint|check|lint[:-].*|check[:-].*|format:check|fmt:check)$"), "lint"),
    (re.compile(r"^(?:build|compile|build[:-].*)$"), "build"),
)
_PACKAGE_MANAGERS = {"npm", "yarn", "pnpm", "bun"}
_MAKE_KINDS = {"test": "test", "tests": "test", "check": "test", "unittest": "test", "unit": "test",
               "lint": "lint", "typecheck": "typecheck", "mypy": "typecheck", "build": "build", "all": "build"}


def _basename(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _strip_wrappers(words: list[str]) -> list[str]:
    """Drop ``VAR=value`` prefixes and wrappers (``sudo``, ``env``, ``timeout 60``…)."""
    i = 0
    n = len(words)
    while i < n:
        word = words[i]
        if _ASSIGNMENT.match(word):
            i += 1
            continue
        name = _basename(word)
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


def _positionals(args: Sequence[str], takes_value: frozenset[str] = frozenset()) -> list[str]:
    """Non-option arguments; ``takes_value`` names options (``-n``) whose next word is a value.

    Combined short flags (``-nA 3``) take a value when their last letter does; ``--`` ends options.
    """
    out: list[str] = []
    i = 0
    n = len(args)
    while i < n:
        arg = args[i]
        if arg == "--":
            out.extend(args[i + 1:])
            break
        if arg.startswith("-") and arg != "-":
            if arg in takes_value or (not arg.startswith("--") and len(arg) > 2 and arg[1:].isalpha()
                                      and f"-{arg[-1]}" in takes_value):
                i += 2
                continue
            i += 1
            continue
        out.append(arg)
        i += 1
    return out


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


def _verification_kind(words: Sequence[str], depth: int = 0) -> str | None:
    """The kind of check ``words`` (a simple command without wrappers) runs, or ``None``."""
    if not words or depth > 3:
        return None
    name = _basename(words[0])
    args = list(words[1:])
    if _PYTHON.match(name):
        if "-m" in args:
            j = args.index("-m")
            module = args[j + 1] if j + 1 < len(args) else ""
            if module in _PY_MODULES:
                kind = _PY_MODULES[module]
                if kind is None:
                    return "lint" if any(a.startswith("--check") for a in args) else None
                return kind
            return None
        if "-c" in args:
            return None
        pos = [a for a in args if not a.startswith("-")]
        script = _basename(pos[0]) if pos else ""
        sub = pos[1] if len(pos) > 1 else ""
        if script == "runtests.py" or (script in ("setup.py", "manage.py") and sub == "test"):
            return "test"
        return "build" if script == "setup.py" and sub in ("build", "bdist_wheel", "sdist") else None
    if name in _RUNNERS:
        rest = [a for a in args if not a.startswith("-")]
        return _verification_kind(rest, depth + 1)
    if args and (name, args[0]) in _RUN_PREFIXES:
        rest = args[1:]
        while rest and rest[0].startswith("-"):
            rest = rest[1:]
        return _verification_kind(rest, depth + 1)
    if name in _TEST_TOOLS:
        return "test"
    if name in _TYPE_TOOLS:
        return "typecheck"
    if name in _LINT_TOOLS:
        if name == "ruff":
            pos = _positionals(args)
            if pos and pos[0] == "format" and "--check" not in args:
                return None  # ``ruff format`` rewrites files
        return "lint"
    if name in _CHECK_FLAG_TOOLS:
        return "lint" if any(a.startswith(("--check", "-c")) for a in args) else None
    if name in _PACKAGE_MANAGERS:
        pos = _positionals(args, frozenset({"--prefix", "-w", "--workspace", "--filter", "-C", "--cwd"}))
        if not pos:
            return None
        sub = pos[0]
        if sub in ("test", "t", "tst"):
            return "test"
        if sub in ("run", "run-script"):
            script = pos[1] if len(pos) > 1 else ""
        elif name != "npm":
            script = sub  # ``yarn build``, ``pnpm lint``
        else:
            return None
        for pattern, kind in _SCRIPT_KINDS:
            if pattern.match(script):
                return kind
        return None
    if name == "cargo":
        sub = next((a for a in args if not a.startswith(("-", "+"))), "")
        return {"test": "test", "nextest": "test", "build": "build", "check": "typecheck", "clippy": "lint",
                "bench": "test"}.get(sub) or ("lint" if sub == "fmt" and "--check" in args else None)
    if name == "go":
        sub = args[0] if args else ""
        return {"test": "test", "build": "build", "vet": "lint"}.get(sub)
    if name in ("make", "gmake"):
        targets = [a for a in _positionals(args, frozenset({"-C", "-f", "-j", "-l", "-o", "-W", "-I"}))
                   if "=" not in a]
        if not targets:
            return "build"
        return _MAKE_KINDS.get(targets[0]) or ("test" if targets[0].startswith("test") else None)
    if name in ("mvn", "mvnw"):
        goals = {a.split(":")[-1] for a in args if not a.startswith("-")}
        if goals & {"test", "verify", "integration-test"}:
            return "test"
        return "build" if goals & {"package", "compile", "install"} else None
    if name in ("gradle", "gradlew"):
        tasks = {a.split(":")[-1] for a in args if not a.startswith("-")}
        if tasks & {"test", "check", "connectedCheck"}:
            return "test"
        return "build" if tasks & {"build", "assemble", "compileJava"} else None
    if name == "dotnet":
        sub = args[0] if args else ""
        return {"test": "test", "build": "build"}.get(sub)
    if name == "cmake" and "--build" in args:
        return "build"
    if name in ("ninja", "bazel", "bazelisk"):
        if name == "ninja":
            return "build"
        sub = args[0] if args else ""
        return {"test": "test", "build": "build"}.get(sub)
    if name == "deno" and args and args[0] in ("test", "lint", "check"):
        return {"test": "test", "lint": "lint", "check": "typecheck"}[args[0]]
    return None


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
        pos = _positionals(args, _RG_VALUES)
        explicit = "-e" in flags or "-f" in flags or "--regexp" in flags
        for f in pos if explicit else pos[1:]:
            if posixpath.splitext(f)[1]:  # a file, not a directory searched recursively
                fx.read(f, cwd)
        return
    if flags & {"-r", "-R", "--recursive", "--dereference-recursive"}:
        return  # directories, not files
    pos = _positionals(args, _GREP_VALUES)
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
        for f in _positionals(rest):
            fx.write(f, cwd)
    elif sub == "rm":
        if "--cached" not in rest:
            for f in _positionals(rest):
                fx.write(f, cwd, deleted=True)
    elif sub == "restore":
        if "--staged" not in rest or "--worktree" in rest or "-W" in rest:
            for f in _positionals(rest, frozenset({"-s", "--source"})):
                fx.write(f, cwd)
    elif sub == "checkout" and "--" in rest:
        for f in rest[rest.index("--") + 1:]:
            fx.write(f, cwd)
    elif sub == "apply":
        for f in _positionals(rest, frozenset({"-p", "--directory", "--exclude", "--include"})):
            fx.read(f, cwd)


def _file_effects(words: Sequence[str], cwd: str, fx: _Effects) -> None:
    name = _basename(words[0])
    args = words[1:]
    if name in _READ_COMMANDS:
        for f in _positionals(args, _READ_COMMANDS[name]):
            if f != "-":
                fx.read(f, cwd)
    elif name in ("grep", "egrep", "fgrep", "rg", "ag"):
        _grep(name, args, cwd, fx)
    elif name in ("sed", "gsed"):
        _sed(args, cwd, fx)
    elif name in ("awk", "gawk"):
        pos = _positionals(args, _AWK_VALUES)
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
        for f in _positionals(args, frozenset({"--output-error"})):
            fx.write(f, cwd)
    elif name in ("mv", "cp"):
        _move_or_copy(name, args, cwd, fx)
    elif name in ("rm", "unlink"):
        for f in _positionals(args):
            fx.write(f, cwd, deleted=True)
    elif name == "touch":
        for f in _positionals(args, frozenset({"-d", "-t", "-r", "--date", "--reference"})):
            fx.write(f, cwd)
    elif name == "truncate":
        for f in _positionals(args, frozenset({"-s", "--size", "-r", "--reference"})):
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
            for f in _positionals(rest, frozenset({"--to", "--output", "--output-dir", "--ExecutePreprocessor.timeout",
                                                   "--kernel_name", "--kernel"})):
                if f.endswith(".ipynb"):
                    p = normalize_path(f, cwd)
                    if p:
                        fx.artifacts.append(p)
                        if "--inplace" in rest:
                            fx.writes.append(p)
    elif name == "papermill":
        pos = _positionals(args, frozenset({"-p", "-r", "-y", "-f", "-k", "--parameters", "--kernel", "--cwd"}))
        if len(pos) >= 2:
            fx.read(pos[0], cwd)
            fx.write(pos[1], cwd)
            p = normalize_path(pos[1], cwd)
            if p:
                fx.artifacts.append(p)


def _check_text(checks: Sequence[tuple[str, str]]) -> str:
    """The verification part of a line: ``(cwd, command)`` pairs joined by ``&&``, with one
    ``cd`` prefix when they share a directory, else a ``(cd dir && …)`` group per command."""
    commands = list(dict.fromkeys(checks))
    dirs = {cwd for cwd, _ in commands}
    if len(dirs) == 1:
        cwd = next(iter(dirs))
        text = " && ".join(command for _, command in commands)
        text = f"cd {shlex.quote(cwd)} && {text}" if cwd else text
    else:
        text = " && ".join(f"(cd {shlex.quote(cwd)} && {command})" if cwd else command for cwd, command in commands)
    return text if len(text) <= MAX_CHECK_CHARS else text[: MAX_CHECK_CHARS - 1] + "…"


def _iter_segments(command: str) -> Iterator[_Segment]:
    if not isinstance(command, str):
        return iter(())
    command = command[:MAX_COMMAND_CHARS].replace("\\\r\n", " ").replace("\\\n", " ")
    return iter(_segments(_tokens(_strip_heredocs(command))))


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
        name = _basename(words[0]) if words else ""
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
            kind = _verification_kind(words)
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
    check = _check_text(checks) if checks else ""
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


# -- results -----------------------------------------------------------------------------------

#: ``[exit code N]`` (SOBA's shell tool), ``Command exited with code N`` (pi), ``Exit code: N``…
_EXIT_LINE = re.compile(r"(?im)^[ \t]*\[?(?:command |process )?exit(?:ed with)?[ \t]+(?:code|status)[: =\t]*"
                        r"(-?\d+)\]?[ \t.]*$")
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")  # mini-swe-agent
_FAILING = re.compile("|".join((
    r"\b\d+ (?:failed|errors?)\b[^\n]*\bin [\d.]+m?s\b",  # pytest summary
    r"^=+ (?:FAILURES|ERRORS) =+$",
    r"^=*\s*\d+ (?:failed|errors?)(?:, \d+ \w+)*\s*=*$",  # pytest summary without timing
    r"^ERROR\s+\S+(?:::|\s+-\s)",  # pytest "ERROR tests/x.py - ImportError"
    r"^FAILED(?: \(|\s+\S+::)",  # unittest "FAILED (failures=1)", pytest "FAILED tests/x.py::t"
    r"\bFound [1-9]\d* errors?\b",  # ruff, mypy
    r"\berror TS\d+\b",  # tsc
    r"\btest result: FAILED\b",  # cargo
    r"^--- FAIL: ", r"^FAIL\b",  # go test, jest, vitest
    r"^\s*Tests?:?\s+[1-9]\d* failed\b", r"^\s*Test Files\s+[1-9]\d* failed\b",  # jest, vitest
    r"\berror(?:\[E\d+\])?: could not compile\b",
    r"^npm ERR! ", r"^npm error (?:code|Lifecycle|command failed)", r"^error Command failed with exit code",
    r"^make(?:\[\d+\])?: \*\*\* ",
    r"\u2716 [1-9]\d* problems?",  # eslint
    r"^[1-9]\d* errors?, \d+ warnings?",  # pyright
    r"\bBUILD FAILURE\b", r"^FAILURE: Build failed", r"\bBuild FAILED\b",
    r"^ERROR: InvocationError", r"^\s*\w+: (?:commands failed|FAIL)\b",  # tox
    r"^[1-9]\d* failing\b",  # mocha
)))
_PASSING = re.compile("|".join((
    r"\b\d+ passed\b[^\n]*\bin [\d.]+m?s\b",  # pytest
    r"^=*\s*\d+ passed(?:, \d+ \w+)*\s*=*$",
    r"\bAll checks passed!",  # ruff
    r"^Success: no issues found",  # mypy
    r"^0 errors?, \d+ warnings?",  # pyright
    r"^OK(?: \([^)\n]*\))?\s*$",  # unittest (with "Ran N tests")
    r"\btest result: ok\b",  # cargo
    r"^ok\s+\S+\s+(?:\(cached\)|[\d.]+s)",  # go test
    r"^PASS$",
    r"^\s*Tests?:?\s+(?:\d+ \w+, )*\d+ passed\b",  # jest
    r"\bBUILD SUCCESS(?:FUL)?\b", r"\bBuild succeeded\b",
    r"^\d+ passing\b",  # mocha
    r"^Successfully built ",  # python -m build
    r"congratulations :\)",  # tox
    r"^\d+ files? (?:left unchanged|would be left unchanged|already formatted)",
)))
_TAIL_CHARS = 6000
_UNITTEST_RAN = re.compile(r"^Ran \d+ tests? in ", re.MULTILINE)


def _exit_code(content: str) -> int | None:
    head = _RETURNCODE.search(content[:400])
    if head:
        return int(head.group(1))
    tail = content[-2000:]
    found = _last(_EXIT_LINE.finditer(tail))
    if found is not None:
        return int(found.group(1))
    returncodes = _RETURNCODE.findall(tail)
    return int(returncodes[-1]) if returncodes else None


def _last(matches: Iterator[re.Match[str]]) -> re.Match[str] | None:
    last = None
    for last in matches:  # noqa: B007 - keep the final match
        pass
    return last


def _summaries(text: str) -> tuple[str | None, str | None]:
    """The last failing and the last passing summary line of a runner's output (one pass from
    the end; a cheap substring test keeps the pattern off most lines)."""
    passing: str | None = None
    for line in reversed(text.splitlines()):
        low = line.lower()
        if ("fail" in low or "err" in low or "***" in line or "\u2716" in line) and _FAILING.search(line):
            return line.strip(" =\t")[:120], None
        if passing is None and ("pass" in low or "ok" in low or "succe" in low or "built" in low
                                or "congrat" in low or "unchanged" in low or "formatted" in low) \
                and _PASSING.search(line):
            passing = line.strip(" =\t")[:120]
    return None, passing


def verification_outcome(content: str, is_error: bool | None, *,
                         exit_code_reliable: bool = True) -> tuple[str, str]:
    """``(status, detail)`` of a verification run from its tool result.

    With a reliable exit status (the check is the line's last word on success): a tool error or
    a non-zero exit is ``failed``, exit 0 is ``passed``. Otherwise, and when no exit status is
    shown, the runner's own summary decides (a failing summary wins over a passing one). When the
    status belongs to a filter (``pytest | tail``), the tool's error flag is ignored too: it
    reports the filter (``grep`` finding nothing exits 1).
    """
    if not isinstance(content, str):
        content = ""
    text = content[-_TAIL_CHARS:]
    failing, passing = _summaries(text)
    if passing and passing.startswith("OK") and not _UNITTEST_RAN.search(text):
        passing = None
    if exit_code_reliable:
        code = _exit_code(content)
        if is_error is True:
            return "failed", failing or (f"exit {code}" if code not in (None, 0) else "tool error")
        if code is not None:
            if code == 0:
                return "passed", passing or "exit 0"
            return "failed", failing or f"exit {code}"
    if failing:
        return "failed", failing
    if passing:
        return "passed", passing
    return "unknown", ""


def verification_status(content: str, is_error: bool | None) -> str:
    """``passed`` | ``failed`` | ``unknown`` for a verification command's tool result."""
    return verification_outcome(content, is_error)[0]
