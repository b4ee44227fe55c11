"""notebook_edit against saves made while it works: a multi-MB notebook, a writer racing the edit.

JupyterLab saves a notebook whenever the user presses save (or autosave fires), without any lock
of ours. An edit of a multi-MB notebook takes most of a second, so such a save can land while
the edit works. The rule: every edit ends either applied on top of the version it read, with the
racing save not lost, or as a tool error saying the file changed since it was read, the save's
bytes intact on disk. Never a silent overwrite.

The racer is a thread that saves the notebook as Jupyter Server does (a ``.~`` backup copy, then
the file rewritten in place and fsynced), or as editors that write a temporary file and rename
it, after a delay drawn across the edit's duration. No assertion depends on timing: each run's
outcome is checked, and the counts only require that the race was met at all.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nbformat
import pytest

from soba_notebook.agent.tools import ToolContext, ToolOutcome, default_tools

RUNS = 50


def run(name: str, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
    return asyncio.run(asyncio.wait_for(default_tools(ctx.config).run(name, args, ctx), 120))


def big_notebook(cells: int = 240, output_chars: int = 12_000) -> nbformat.NotebookNode:
    """About 3 MB: code cells each with a large text output, as a data notebook has."""
    rng = random.Random(7)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    for i in range(cells):
        text = "".join(rng.choice("0123456789abcdef ") for _ in range(output_chars))
        nb.cells.append(nbformat.v4.new_code_cell(f"x{i} = compute({i})\nx{i}", execution_count=i + 1, outputs=[
            nbformat.v4.new_output("execute_result", execution_count=i + 1, data={"text/plain": text})]))
    return nb


def jupyter_save(path: Path, text: str) -> None:
    """As Jupyter Server's atomic_writing saves: back up to ``.~name``, rewrite in place, fsync."""
    backup = path.with_name(".~" + path.name)
    shutil.copy2(path, backup)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    backup.unlink()


def rename_save(path: Path, text: str) -> None:
    """As editors that write a temporary file and rename it over the notebook save."""
    tmp = path.with_name(f".{path.name}.editor-tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class Racer(threading.Thread):
    """Saves ``text`` to ``path`` after ``delay`` seconds; records what the file held just before."""

    def __init__(self, path: Path, text: str, delay: float, in_place: bool) -> None:
        super().__init__(daemon=True)
        self.path, self.text, self.delay, self.in_place = path, text, delay, in_place
        self.saw = b""

    def run(self) -> None:
        time.sleep(self.delay)
        self.saw = self.path.read_bytes()
        (jupyter_save if self.in_place else rename_save)(self.path, self.text)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def test_a_save_racing_notebook_edit_is_never_silently_overwritten(ws: Path) -> None:
    path = ws / "big.ipynb"
    base_nb = big_notebook()
    base = nbformat.writes(base_nb) + "\n"
    assert len(base) > 2_500_000
    target = base_nb.cells[5].id
    edit = {"path": "big.ipynb", "cell_id": target, "action": "replace", "source": "x5 = compute(5) * 2"}

    path.write_text(base)  # one edit without a racer: what a successful edit writes, and how long it takes
    calm = ToolContext(ws)
    run("notebook_read", {"path": "big.ipynb"}, calm)
    started = time.monotonic()
    assert not run("notebook_edit", edit, calm).is_error
    span = time.monotonic() - started
    edited = path.read_bytes()

    rng = random.Random(37)
    outcomes = {"refused": 0, "saved after the edit": 0}
    for i in range(RUNS):
        path.write_text(base)
        ctx = ToolContext(ws)
        assert not run("notebook_read", {"path": "big.ipynb"}, ctx).is_error
        theirs = base_nb.copy()
        theirs.cells = list(base_nb.cells)
        theirs.cells[0] = nbformat.v4.new_markdown_cell(f"saved in JupyterLab, run {i}")
        saved = nbformat.writes(theirs) + "\n"
        racer = Racer(path, saved, rng.uniform(0, span * 1.1), in_place=i % 2 == 0)
        racer.start()
        out = run("notebook_edit", edit, ctx)
        racer.join(60)
        assert not racer.is_alive()
        kept = path.read_text() == saved  # compared as a flag: a diff of two 3 MB texts helps nobody
        assert kept, f"run {i}: the racing save was lost ({'refused' if out.is_error else 'edit saved'} over it)"
        if out.is_error:
            assert "big.ipynb changed since you last read it" in out.content, out.content
            assert "read it again with notebook_read" in out.content and "nothing was written" in out.content
            outcomes["refused"] += 1
        else:
            # the edit was applied on top of the version it read; the save came after and holds on disk
            assert racer.saw in (base.encode(), edited), f"run {i}: the racer saved over an unexpected file"
            outcomes["saved after the edit"] += 1
        assert not list(ws.glob(".*soba-tmp*")), f"run {i}: a temporary file was left behind"
    assert outcomes["refused"] >= 1, outcomes  # the race was met, not only saves after the edit
    assert sum(outcomes.values()) == RUNS


def test_two_agents_editing_one_notebook_at_once_one_edit_lands_the_other_is_refused(ws: Path) -> None:
    path = ws / "big.ipynb"
    base_nb = big_notebook(cells=120)
    base = nbformat.writes(base_nb) + "\n"
    first, second = base_nb.cells[1].id, base_nb.cells[2].id
    for i in range(6):
        path.write_text(base)
        agents = [ToolContext(ws), ToolContext(ws)]
        for ctx in agents:
            run("notebook_read", {"path": "big.ipynb"}, ctx)
        results: list[ToolOutcome | None] = [None, None]

        def edit(k: int, cell: str, agent: ToolContext, run_no: int = i,
                 results: list[ToolOutcome | None] = results) -> None:
            results[k] = run("notebook_edit", {"path": "big.ipynb", "cell_id": cell, "action": "replace",
                                               "source": f"agent {k}, run {run_no}"}, agent)

        threads = [threading.Thread(target=edit, args=(k, cell, agent))
                   for k, (cell, agent) in enumerate(zip((first, second), agents, strict=True))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert all(r is not None for r in results)
        landed = [k for k, r in enumerate(results) if r is not None and not r.is_error]
        assert len(landed) == 1, [r.content[:200] for r in results if r is not None]
        refused = results[1 - landed[0]]
        assert refused is not None and "changed since you last read it" in refused.content
        cells = nbformat.reads(path.read_text(), as_version=4).cells
        sources = {c.id: c.source for c in cells}
        assert sources[(first, second)[landed[0]]] == f"agent {landed[0]}, run {i}"
        assert sources[(first, second)[1 - landed[0]]] == base_nb.cells[2 - landed[0]].source


@pytest.mark.parametrize("save", [jupyter_save, rename_save], ids=["in place", "renamed over"])
def test_a_save_landing_between_the_last_check_and_the_swap_gets_its_name_back_and_the_edit_is_refused(
        ws: Path, monkeypatch: pytest.MonkeyPatch, save: Any) -> None:
    """The gap a check-then-rename leaves, hit on purpose: the save lands right after the last
    check passed. The exchange finds it in the file it displaced and puts it back."""
    from soba_notebook.agent import file_version

    path = ws / "nb.ipynb"
    base_nb = big_notebook(cells=8, output_chars=200)
    path.write_text(nbformat.writes(base_nb) + "\n")
    theirs = base_nb.copy()
    theirs.cells = [nbformat.v4.new_markdown_cell("saved in JupyterLab in the gap"), *base_nb.cells[1:]]
    saved = nbformat.writes(theirs) + "\n"
    real_check = file_version.check_unchanged

    def check_then_save(*args: Any) -> None:
        real_check(*args)
        save(path, saved)

    monkeypatch.setattr(file_version, "check_unchanged", check_then_save)
    ctx = ToolContext(ws)
    assert not run("notebook_read", {"path": "nb.ipynb"}, ctx).is_error
    out = run("notebook_edit", {"path": "nb.ipynb", "cell_id": base_nb.cells[3].id, "action": "replace",
                                "source": "x3 = 0"}, ctx)
    assert out.is_error and "nb.ipynb changed since you last read it" in out.content, out.content
    assert path.read_text() == saved
    assert sorted(p.name for p in ws.iterdir()) == ["nb.ipynb"], "no temporary file is left"
