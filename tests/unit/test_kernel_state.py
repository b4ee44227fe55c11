"""Kernel state survives compaction; the variables tool; notes of the user's own cells."""

from __future__ import annotations

import asyncio
import json
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from soba_notebook.agent.kernel_state import KernelStateTracker, describe, inspect_variable, is_secret_name
from soba_notebook.agent.tools import ToolContext, default_tools
from soba_notebook.compaction.kernel_section import with_kernel_state
from soba_notebook.memory import handoff
from soba_notebook.notebook.cell_history import CellHistory, note_text
from soba_notebook.notebook.controller import NotebookSession


def test_describe_gives_type_and_shape_never_values() -> None:
    df = pd.DataFrame({"x": [1, 2, 3], "city": ["a", "b", "c"]})
    assert describe(df) == f"DataFrame shape (3, 2); columns: x int64, city {df.dtypes['city']}"
    assert describe(df["x"]) == "Series shape (3,) dtype int64"
    assert describe(np.zeros((2, 4), dtype="float32")) == "ndarray shape (2, 4) dtype float32"
    assert describe([1, 2]) == "list len 2" and describe({"a": 1}) == "dict len 1"
    assert describe("secret text") == "str len 11" and describe(3.5) == "float"
    assert describe(len) == "function" and describe(KernelStateTracker) == "class"


def test_tracker_lists_user_names_newest_first_without_modules_internals_or_secrets() -> None:
    ns = {"__name__": "__main__", "In": [], "Out": {}, "_": 1, "_i3": "x", "np": np, "get_ipython": print,
          "df": pd.DataFrame({"x": [1]}), "model": object(), "OPENAI_API_KEY": "sk-abcdefghijklmnopqrstu",
          "db_password": "hunter22", "cleaned": [1, 2, 3]}
    tracker = KernelStateTracker(ns)
    assert [line.split(":")[0] for line in tracker.lines()] == ["cleaned", "model", "df"]
    ns["df"] = pd.DataFrame({"x": [1, 2]})  # changed: first now
    assert tracker.lines()[0] == "df: DataFrame shape (2, 1); columns: x int64"
    assert is_secret_name("OPENAI_API_KEY") and is_secret_name("token") and not is_secret_name("monkey")
    assert KernelStateTracker({"open": print, "x": 1}, hidden={"open": print}).lines() == ["x: int"]
    many = {f"v{i}": i for i in range(70)}
    lines = KernelStateTracker(many).lines()
    assert len(lines) == 61 and lines[-1] == "(+10 more names not listed)"


def test_variables_tool_lists_and_inspects_bounded_and_refuses_secrets(tmp_path: Path) -> None:
    ns = {"df": pd.DataFrame({"x": range(100), "y": ["v"] * 100}), "API_TOKEN": "abc", "os": types}
    ctx = ToolContext(tmp_path, user_namespace=ns)
    tools = default_tools(ctx.config)
    listed = asyncio.run(tools.run("variables", {}, ctx))
    y = ns["df"].dtypes["y"]
    assert listed.content == f"df: DataFrame shape (100, 2); columns: x int64, y {y}"
    inspected = asyncio.run(tools.run("variables", {"name": "df"}, ctx))
    assert f"dtypes:\n  x: int64\n  y: {y}" in inspected.content and "head:" in inspected.content
    assert inspected.content.count("\n") < 20, "the head is a few rows"
    refused = asyncio.run(tools.run("variables", {"name": "API_TOKEN"}, ctx))
    assert refused.is_error and "abc" not in refused.content
    missing = asyncio.run(tools.run("variables", {"name": "nope"}, ctx))
    assert missing.is_error and "df" in missing.content
    ns["blob"] = "x" * 100_000
    assert len(inspect_variable(ns, "blob")) < 1_000


def test_a_compaction_records_the_kernel_state_and_the_next_input_shows_it(tmp_path: Path) -> None:
    (tmp_path / ".soba").mkdir()
    (tmp_path / ".soba" / "config.json").write_text(json.dumps({"compaction": {"keepRecentTokens": 500}}))
    ns = {"df": pd.DataFrame({"x": [1, 2, 3]})}
    session = NotebookSession(tmp_path, user_namespace=ns, frontend="jupyterlab",
                              overrides={"tools": {"approval": "never"}})  # no one answers here
    handle = session.ensure()
    assert session.runtime is not None  # the agent's thread runs its turns and compactions
    assert session.runtime.submit("Create a tiny calculator package and make its tests pass.").future.result(
        ).outcome == "completed"
    outcome = session.runtime.submit_job(lambda cancel: handle.agent.compact(None, cancel)).future.result()
    assert outcome.outcome == "completed"
    assert outcome.entry.data["kernelState"] == ["df: DataFrame shape (3, 1); columns: x int64"]
    first = handle.agent.engine.model_messages()[0]["content"]
    assert "## Kernel state (informative only" in first and "- df: DataFrame shape (3, 1)" in first
    assert first.endswith("</context_capsule>")
    # exported and loaded elsewhere, the section says these variables cannot be recreated
    path = handoff.export_checkpoint(handle.store, tmp_path, outcome.checkpoint_id, tmp_path / "h.capsule.md",
                                     kernel_state=session.kernel_state())
    new = handoff.load_into_new_session(path, tmp_path / "other")
    loaded = next(e for e in new.path() if e.type == "capsule")
    text = with_kernel_state("<context_capsule>\n</context_capsule>", loaded.data)
    assert "cannot recreate them" in text and "- df: DataFrame" in text
    session.close()


def _cell(number: int, source: str, error: BaseException | None = None) -> types.SimpleNamespace:
    return types.SimpleNamespace(info=types.SimpleNamespace(raw_cell=source), execution_count=number,
                                 error_in_exec=error, error_before_exec=None)


def test_the_note_of_the_users_cells_is_newest_first_bounded_and_scrubbed() -> None:
    history = CellHistory()
    history.record(_cell(1, "df = df[df.x > 1]"))
    history.record(_cell(2, "%soba plot it"))  # SOBA's own magic: not user work
    history.record(_cell(3, "df.loc[0, 'missing']", KeyError("missing")))
    history.record(_cell(4, 'OPENAI_API_KEY = "sk-abcdefghijklmnopqrstuvwx"'))
    history.record(_cell(5, "\n".join(f"row_{i} = {i}" for i in range(400))))
    cells, dropped = history.take()
    note = note_text(cells, dropped)
    assert note.index("In [5]") < note.index("In [3]") < note.index("In [1]")
    assert "In [3] → KeyError: 'missing'" in note and "In [1] → ok\ndf = df[df.x > 1]" in note
    assert "sk-abcdef" not in note and "input withheld" in note
    assert "lines, " in note and "elided" in note and "row_399 = 399" in note
    assert "%soba" not in note and len(note) < 4_000
    assert history.take() == ([], 0), "taken once"


@pytest.mark.parametrize(("frontend", "configured", "shared"), [
    ("jupyterlab", None, True), ("terminal", None, False), ("jupyterlab", False, False), ("terminal", True, True)])
def test_share_cell_history_defaults_on_in_notebooks_and_off_in_terminal_ipython(
        tmp_path: Path, frontend: str, configured: bool | None, shared: bool) -> None:
    overrides = {"notebook": {"shareCellHistory": configured}} if configured is not None else None
    session = NotebookSession(tmp_path, user_namespace={}, frontend=frontend, overrides=overrides)
    session.ensure()
    session.after_cell(_cell(7, "x = 1"))
    note = session.handle.agent.turn_note()
    assert (note is not None and "x = 1" in note) is shared
    session.close()
