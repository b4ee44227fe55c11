"""One way to parse magic arguments: declared tables, one parser, help made from the tables."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from kernel_support import trust_project_config

import soba_notebook
from soba_notebook.notebook import capsule_commands, soba_commands
from soba_notebook.notebook.magic_args import leading_options
from soba_notebook.notebook.magics import RUN_OPTIONS, SobaMagics
from unit.test_magics import shell  # noqa: F401  (the magics' one shell fixture)

NOTEBOOK = Path(soba_notebook.__file__).parent / "notebook"




def test_one_argument_parser_reads_every_magic() -> None:
    """No magic splits or parses its own line: only magic_args imports shlex, none uses argparse."""
    for path in NOTEBOOK.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
        assert "IPython.core.magic_arguments" not in imported and "argparse" not in imported, path.name
        if path.name != "magic_args.py":
            assert "shlex" not in imported, f"{path.name} splits a magic line itself"


def test_the_help_lists_exactly_the_subcommands_the_tables_dispatch() -> None:
    for doc, table in ((SobaMagics.soba.__doc__ or "", soba_commands.COMMANDS),
                       (SobaMagics.capsule.__doc__ or "", capsule_commands.COMMANDS)):
        listed = re.findall(rf"^  {re.escape(table.magic)} (\w+)", doc, flags=re.MULTILINE)
        assert listed == list(table.names)
        assert all(command.run is not None for command in table.commands)


def test_an_unknown_flag_is_a_usage_error_naming_the_commands_usage(shell: InteractiveShell) -> None:  # noqa: F811
    with pytest.raises(UsageError, match=re.escape("usage: %compact [--remember] [instructions]")):
        shell.run_line_magic("compact", "--fast focus")
    with pytest.raises(UsageError, match=re.escape("usage: %budget [--side]")):
        shell.run_line_magic("budget", "--wide")
    with pytest.raises(UsageError, match=re.escape("usage: %capsule show CK")):
        shell.run_line_magic("capsule", "show ck_1 --verbose")
    skill_usage = "usage: %soba skill activate|deactivate NAME  (or %soba skill list)"
    with pytest.raises(UsageError, match=re.escape(skill_usage)):
        shell.run_line_magic("soba", "skill list tdd")


def test_the_options_leading_a_prompt_are_read_and_the_rest_is_kept_as_typed() -> None:
    read = leading_options("%soba", RUN_OPTIONS, "--new --model m1  fix {this} 'it' --background")
    assert read.options == {"background": False, "model": "m1", "new": True}
    assert read.prompt == "fix {this} 'it' --background" and not read.verbatim
    after_dashes = leading_options("%soba", RUN_OPTIONS, "-- --new is a word")
    assert after_dashes.prompt == "--new is a word" and after_dashes.verbatim
    with pytest.raises(UsageError, match="--model needs a model name"):
        leading_options("%soba", RUN_OPTIONS, "--model")


def test_compact_instructions_are_free_text_with_quotes_kept_as_typed(shell: InteractiveShell, tmp_path: Path,  # noqa: F811
                                                                      fake_server: FakeServer,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An apostrophe or a lone quote in the instructions is prose, not a shell quote to balance."""
    monkeypatch.setenv("SOBA_TEST_KEY", "k" * 12)
    (tmp_path / ".soba").mkdir(exist_ok=True)
    (tmp_path / ".soba" / "config.json").write_text(json.dumps({
        "model": {"provider": "openai", "model": "gpt-4o-mini", "baseUrl": fake_server.openai_base_url,
                  "apiKeyEnv": "SOBA_TEST_KEY", "contextWindow": 128000, "maxOutputTokens": 4000},
        "compaction": {"keepRecentTokens": 200}}))
    trust_project_config(tmp_path, tmp_path / "home")
    for i in range(3):
        fake_server.openai.enqueue(text=f"answer {i} " + "words " * 400)
        shell.run_line_magic("soba", f"question {i}")
    fake_server.handler = lambda path, body: {"text": '{"goal": "answer questions"}'}
    shell.run_line_magic("compact", "focus on the user's \"parser --remember")
    assert "focus on the user's \"parser" in fake_server.requests[-1].body["messages"][-1]["content"]
