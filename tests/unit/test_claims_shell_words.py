"""A decision or next step that names a command the history ran is grounded however the command
is written: shell quotes, globs, regular expressions, ``./`` and ``~/`` paths, trailing prose
punctuation and backticks are read as the shell and the prose mean them (compaction/claims.py;
docs/CAPSULE_FORMAT.md "Grounding"). A file or command the history never shows is still dropped.

The history is made the way a compaction sees it: the model's tool calls, their JSON arguments
(where a double quote is escaped) and their results, through :func:`grounding.history_of`."""

from __future__ import annotations

import pytest

from soba_notebook.compaction.capsule import Capsule, Decision
from soba_notebook.compaction.claims import Mention, unsupported_mentions
from soba_notebook.compaction.grounding import ground, history_of
from soba_notebook.session import Entry, ToolCall, assistant_message, tool_result, user_message

RAN = ("pytest -k \"test_*\" -q", "ls \"*.py\" src", "rg \"foo.*bar\" src", "rg 'def parse_rows' src/",
       "./run.sh --fast", "cat ~/.config/app/settings.toml", "pytest tests/test_parser.py::test_empty -q",
       "python3 -m pytest tests/test_parser.py", "rg \"parse_rows\\(\" src")
FILES = ("src/parser.py", "src/app.py", "tests/test_parser.py", "/tmp/report.csv")


def _entries() -> list[Entry]:
    entries = [user_message("Fix the parser; keep the API.")]
    for i, command in enumerate(RAN):
        entries.append(assistant_message("", [ToolCall(f"c{i}", "shell", {"command": command})]))
        entries.append(tool_result(f"c{i}", "shell", "ok\n", exit_code=0))
    for i, path in enumerate(FILES):
        entries.append(assistant_message("", [ToolCall(f"r{i}", "read_file", {"path": path})]))
        entries.append(tool_result(f"r{i}", "read_file", "x = 1\n"))
    return entries


def _history() -> str:
    return history_of(_entries()).text


@pytest.mark.parametrize("item", [
    "Rerun `pytest -k 'test_*' -q` after the fix",  # quoted differently from the history's command
    "Run pytest -k 'test_*' -q again",
    "Decided to list with `ls \"*.py\" src` first",  # the very command, its quotes escaped in the history
    "Search with `rg 'foo.*bar' src/`",  # a regex in quotes, a directory with its trailing slash
    "Search with `rg \"def parse_rows\" src`",  # a quoted phrase is one shell word
    "Run pytest on `tests/test_*.py`",  # a glob naming files the history shows
    "Run `./run.sh --fast` before committing",
    "Run `run.sh --fast` before committing",
    "Check `~/.config/app/settings.toml` and ./src/parser.py.",
    "Run 'pytest tests/test_parser.py::test_empty -q'.",  # quoted in prose, trailing punctuation
    "Run \"python3 -m pytest tests/test_parser.py\", then fix src/app.py:12",
    "Fix `src/parser.py:40` (the empty-row branch).",
    "Write the summary to /tmp/report.csv.",
    "Look at `ls src/[ap]*.py` again",  # a glob set
    "Search with `rg 'parse_rows\\(' src/`",  # a backslash, doubled in the history's JSON
])
def test_a_command_or_path_the_history_shows_is_grounded_however_it_is_quoted_or_punctuated(item: str) -> None:
    assert unsupported_mentions(item, _history()) == ()


@pytest.mark.parametrize(("item", "missing"), [
    ("Run `pytest -k 'test_*' --lf`", Mention("command", "--lf")),  # a flag never used
    ("Run `ls \"*.ipynb\"`", Mention("command", "*.ipynb")),  # a glob nothing in the history matches
    ("Search with `rg 'baz.*qux' src/`", Mention("command", "baz.*qux")),
    ("Run `./deploy.sh --fast`", Mention("command", "./deploy.sh")),
    ("Delete ~/data/old_cache.csv first", Mention("file", "~/data/old_cache.csv")),
    ("Write the summary to /tmp/summary.csv.", Mention("file", "/tmp/summary.csv")),
    ("Run `make lint`", Mention("command", "make")),
    ("Look at `ls src/[xz]*.py`", Mention("command", "src/[xz]*.py")),
    ("Rewrite src/legacy_loader.py as a class", Mention("file", "src/legacy_loader.py")),
])
def test_a_command_file_or_pattern_the_history_never_shows_is_still_unsupported(item: str, missing: Mention) -> None:
    assert missing in unsupported_mentions(item, _history())


def test_a_capsule_keeps_quoted_glob_steps_and_drops_only_the_invented_one() -> None:
    summary = Capsule(goal="Fix the parser",
                      decisions=(Decision("Select the parser tests with `pytest -k 'test_*'`", "the slow ones"),),
                      next_steps=("Run `rg 'foo.*bar' src/` to find the other callers",
                                  "Run pytest -k 'test_*' -q again", "Run `./deploy.sh --fast`"))
    grounded = ground(summary, Capsule(), history=history_of(_entries()))
    assert grounded.capsule.decisions == summary.decisions
    assert grounded.capsule.next_steps == summary.next_steps[:2]
    assert grounded.by_field == (("nextSteps", 1),) and grounded.quality == "ok"
