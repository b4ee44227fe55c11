"""Verification commands: recognising a test, lint, type-check or build run, and reading its result.

The deterministic extractor (:mod:`.extract`) keeps every check an agent ran and its last result,
so that a capsule never loses "``pytest -q`` failed" or "``ruff check .`` passed". This module
owns that knowledge, on both sides of a run:

* the command side: ``verification_kind`` says whether one simple command (its words, wrappers
  such as ``sudo`` or ``timeout`` already stripped) runs a check, and of which kind (``pytest``,
  ``python -m mypy``, ``npm test``, ``cargo clippy``, ``make lint`` …); ``check_text`` normalizes
  the check part of a command line (``cd pkg && pytest -q`` for ``cd pkg && pytest -q 2>&1 |
  tail -5``) so that reruns compare equal;
* the result side: :func:`verification_outcome` / :func:`verification_status` read a tool
  result's text (exit-code markers of SOBA, pi and mini-swe-agent, and the summaries of common
  test runners and linters) into ``passed`` / ``failed`` / ``unknown``.

Splitting a command line, following ``cd`` and finding the files it touches stay in
:mod:`.shell_parse`, which calls the command side for each simple command: ``verification_kind``
and ``check_text`` are this module's interface to it, with the two argv helpers ``program_name``
and ``positionals`` that its file-effect rules share. They live here because this module is the
leaf of the two: it must not import :mod:`.shell_parse`.

Everything here is a pure function of its input: nothing is executed and the filesystem is never
touched.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Sequence

from ..session.payloads import VerificationStatus

__all__ = [
    "MAX_CHECK_CHARS",
    "check_text",
    "positionals",
    "program_name",
    "verification_kind",
    "verification_outcome",
    "verification_status",
]

#: Longest normalized verification command kept.
MAX_CHECK_CHARS = 200


# -- commands ----------------------------------------------------------------------------------

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


def program_name(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def positionals(args: Sequence[str], takes_value: frozenset[str] = frozenset()) -> list[str]:
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


def verification_kind(words: Sequence[str], depth: int = 0) -> str | None:
    """The kind of check ``words`` (a simple command without wrappers) runs, or ``None``."""
    if not words or depth > 3:
        return None
    name = program_name(words[0])
    args = list(words[1:])
    if _PYTHON.match(name):
        return _python_kind(args)
    if name in _RUNNERS:
        rest = [a for a in args if not a.startswith("-")]
        return verification_kind(rest, depth + 1)
    if args and (name, args[0]) in _RUN_PREFIXES:
        rest = args[1:]
        while rest and rest[0].startswith("-"):
            rest = rest[1:]
        return verification_kind(rest, depth + 1)
    if name in _TEST_TOOLS:
        return "test"
    if name in _TYPE_TOOLS:
        return "typecheck"
    if name in _LINT_TOOLS:
        if name == "ruff":
            pos = positionals(args)
            if pos and pos[0] == "format" and "--check" not in args:
                return None  # ``ruff format`` rewrites files
        return "lint"
    if name in _CHECK_FLAG_TOOLS:
        return "lint" if any(a.startswith(("--check", "-c")) for a in args) else None
    if name in _PACKAGE_MANAGERS:
        return _package_script_kind(name, args)
    return _build_tool_kind(name, args)


def _python_kind(args: Sequence[str]) -> str | None:
    """``python -m pytest``, ``python -m black --check``, ``python setup.py test`` …"""
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
    script = program_name(pos[0]) if pos else ""
    sub = pos[1] if len(pos) > 1 else ""
    if script == "runtests.py" or (script in ("setup.py", "manage.py") and sub == "test"):
        return "test"
    return "build" if script == "setup.py" and sub in ("build", "bdist_wheel", "sdist") else None


def _package_script_kind(name: str, args: Sequence[str]) -> str | None:
    """``npm test``, ``npm run lint``, ``yarn build``, ``pnpm lint`` …: the script's kind."""
    pos = positionals(args, frozenset({"--prefix", "-w", "--workspace", "--filter", "-C", "--cwd"}))
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


def _build_tool_kind(name: str, args: Sequence[str]) -> str | None:
    """cargo, go, make, Maven, Gradle, dotnet, CMake, Ninja, Bazel and Deno: what the subcommand or target checks."""
    if name == "cargo":
        sub = next((a for a in args if not a.startswith(("-", "+"))), "")
        return {"test": "test", "nextest": "test", "build": "build", "check": "typecheck", "clippy": "lint",
                "bench": "test"}.get(sub) or ("lint" if sub == "fmt" and "--check" in args else None)
    if name == "go":
        sub = args[0] if args else ""
        return {"test": "test", "build": "build", "vet": "lint"}.get(sub)
    if name in ("make", "gmake"):
        targets = [a for a in positionals(args, frozenset({"-C", "-f", "-j", "-l", "-o", "-W", "-I"}))
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


def check_text(checks: Sequence[tuple[str, str]]) -> str:
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


#: What a status read from output text says when the line's exit status is not the check's own.
NOT_THE_CHECKS_STATUS = "the line's exit status belongs to its last command, not the check"


def verification_outcome(content: str, is_error: bool | None, *,
                         exit_code_reliable: bool = True, exit_code: int | None = None,
                         status_recorded: bool = False) -> tuple[VerificationStatus, str]:
    """``(status, detail)`` of a verification run from its tool result.

    The recorded exit status decides first, when the line's exit status is the check's own
    (``exit_code_reliable``): ``exit_code`` as the source recorded it (SOBA's shell tool,
    mini-swe-agent's return code), else the tool's error flag (``True`` always fails; ``False``
    is a success only when ``status_recorded``: pi records ``isError`` for every run, while most
    sources leave it ``False`` whatever happened), else an exit-status line in the text. Only
    when nothing records the status does the runner's own summary in the output decide (a
    failing summary wins over a passing one). When the status belongs to another
    command (``pytest | tail``: the pipe's status is ``tail``'s) the flag and the codes are
    ignored, the output text decides, and the detail says so rather than guess.
    """
    if not isinstance(content, str):
        content = ""
    text = content[-_TAIL_CHARS:]
    failing, passing = _summaries(text)
    if passing and passing.startswith("OK") and not _UNITTEST_RAN.search(text):
        passing = None
    if exit_code_reliable:
        code = exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None
        if code is None:
            code = _exit_code(content)
        if is_error is True:
            return "failed", failing or (f"exit {code}" if code not in (None, 0) else "tool error")
        if code is not None:
            if code == 0:
                return "passed", passing or "exit 0"
            return "failed", failing or f"exit {code}"
        if is_error is False and status_recorded:
            return "passed", passing or "recorded success"
    if failing:
        return "failed", failing if exit_code_reliable else f"{failing} (from output; {NOT_THE_CHECKS_STATUS})"
    if passing:
        return "passed", passing if exit_code_reliable else f"{passing} (from output; {NOT_THE_CHECKS_STATUS})"
    return "unknown", "" if exit_code_reliable else NOT_THE_CHECKS_STATUS


def verification_status(content: str, is_error: bool | None) -> VerificationStatus:
    """``passed`` | ``failed`` | ``unknown`` for a verification command's tool result."""
    return verification_outcome(content, is_error)[0]
