"""The offline model's demo project: the tasks it builds, one per prompt, and their file texts.

The scripted model (:mod:`.scenario` decides, :mod:`.scripted` serves) continues one demo
project, a calculator package in ``calc_demo/`` (a subdirectory, so that a real project's own
files and ``tests/`` are never touched). This module owns *what* gets built; how the next step is
chosen is :mod:`.scenario`'s. One task per user prompt:

1. ``calc`` — the arithmetic core with a deliberate bug (floor instead of true division) that the
   first test run exposes and an ``edit_file`` fixes; then a ``milestone`` checkpoint.
2. ``parser`` — a tokenizer and a recursive-descent parser. The first tokenizer is one regular
   expression; its test failures lead to a ``plan_pivot`` checkpoint ("switch from regex to a
   hand-written tokenizer") and a rewrite.
3. ``cli`` — ``python3 -m calc``; a formatting bug found with ``grep`` and a ranged ``read_file``.
4. ``session`` — variables and ``ans``; a shared-dict bug.

After the four tasks, every further prompt runs :data:`REVIEW` (list, grep, full test run).
Tests use ``python3 -m unittest`` (standard library only).

Each :class:`Task` lists its :class:`Change` s (new files and edits, grouped into parallel
steps), the :class:`Fix` its first test run calls for, and every text the model says about it.
The demo project's file contents are verbatim Python that the scenario's own tests run; they are
package data in ``scenario_files/``, loaded once into the constants below (``OPS_V1``,
``TEST_OPS``…). Everything here is data: changing a text changes the scripted model's output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

__all__ = [
    "DEMO_PROMPTS",
    "PROGRESS_PATH",
    "PROJECT_DIR",
    "REVIEW",
    "SURVEY_COMMAND",
    "TASKS",
    "TEST_COMMAND",
    "Change",
    "Fix",
    "Task",
]

PROJECT_DIR = "calc_demo"
PROGRESS_PATH = f"{PROJECT_DIR}/PROGRESS.md"
TEST_COMMAND = f"cd {PROJECT_DIR} && python3 -m unittest discover -s tests -v"
SURVEY_COMMAND = (f"cat {PROGRESS_PATH} 2>/dev/null || echo '(no {PROGRESS_PATH} yet)'; "
                  f"echo '--- python files in {PROJECT_DIR} ---'; "
                  f"find {PROJECT_DIR} -name '*.py' -not -path '*/__pycache__/*' 2>/dev/null | sort")
#: Prompts that read naturally with the scenario, in order (any prompt works).
DEMO_PROMPTS = (
    "Create a tiny calculator package and make its tests pass.",
    "Add a parser so that expressions like 2 * (3 + 4) can be evaluated.",
    "Add a command-line interface, so I can run python3 -m calc '1 + 2'.",
    "Add sessions with variables and ans that persist between lines.",
)


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


# -- the demo project's files, verbatim; the broken versions are what the script writes first --
#
# The texts are package data in ``scenario_files/`` (plain ``.txt``, so neither ruff nor pytest
# treats them as code): one file per stored version, named after the demo path with ``/`` written
# as ``__`` (``calc_demo__calc__ops.py.v1.txt`` is the first, buggy ``calc_demo/calc/ops.py``).
# ``.v1`` marks a version the script later edits or fixes; the tokenizer has two whole versions.

_FILES = "scenario_files"


@cache
def _demo_file(name: str) -> str:
    """The verbatim text of one stored demo file (read once from the package data)."""
    package = __name__.rpartition(".")[0]  # soba_notebook.demo
    return resources.files(package).joinpath(_FILES).joinpath(name).read_text(encoding="utf-8")


INIT_V1 = _demo_file("calc_demo__calc____init__.py.v1.txt")
OPS_V1 = _demo_file("calc_demo__calc__ops.py.v1.txt")
TEST_OPS = _demo_file("calc_demo__tests__test_ops.py.txt")
TOKENIZER_REGEX = _demo_file("calc_demo__calc__tokenizer.py.regex.txt")
TOKENIZER_SCANNER = _demo_file("calc_demo__calc__tokenizer.py.scanner.txt")
PARSER = _demo_file("calc_demo__calc__parser.py.txt")
TEST_PARSER = _demo_file("calc_demo__tests__test_parser.py.txt")
CLI_V1 = _demo_file("calc_demo__calc__cli.py.v1.txt")
MAIN = _demo_file("calc_demo__calc____main__.py.txt")
TEST_CLI = _demo_file("calc_demo__tests__test_cli.py.txt")
SESSION_V1 = _demo_file("calc_demo__calc__session.py.v1.txt")
TEST_SESSION = _demo_file("calc_demo__tests__test_session.py.txt")


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
