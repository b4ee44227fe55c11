"""Issue 24, item 4 as a person sees it: the agent edits the notebook open in JupyterLab, in place.

JupyterLab 4 in Debian's Chromium with SOBA's prebuilt extension (``soba_notebook/labextension/``,
put where JupyterLab finds user extensions), the quickstart notebook open in a project whose model
is a loopback server. The user types an unsaved edit into one cell, then runs a ``%soba`` cell
whose model calls ``notebook_read`` and two ``notebook_edit``s (insert a cell after the
``%load_ext`` cell, replace a markdown heading) during that foreground turn. The page must then
show the new and the changed cell, marked, with no "File Changed" dialog, the user's unsaved edit
intact and the file on disk untouched; Ctrl+Z in the heading's editor takes its replacement back
and Z in command mode (JupyterLab's "undo cell action") the insert. Screenshots: test-artifacts/live_notebook_*.png.

Needs /usr/bin/chromium, playwright and jupyterlab (scripts/install-browser.sh); when missing the
test FAILS with that instruction, never skips.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from browser_support import ARTIFACTS, REPO, LabNotebook, open_notebook_in_lab
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401  (the `fake_server` fixture)

from browser.test_browser_widget import _require_browser
from soba_notebook.notebook.labextension import BUILD_DIR, NAME

QUICKSTART = REPO / "notebooks" / "quickstart.ipynb"
LOAD_EXT, SOBA_CELL, HEADING, USER_CELL = "436b393d", "b3d1fa86", "b4b909c7", "47d83de7"
INSERTED = "print('a cell SOBA added')"
NEW_HEADING = "## Where the budget stands (heading rewritten by SOBA)"
TYPED = "  # the user's unsaved note"

# Every cell of the open notebook, in order, as the page shows it.
_CELLS = """
() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell')].map((el) => ({
  markdown: el.classList.contains('jp-MarkdownCell'),
  marked: el.classList.contains('soba-agent-changed'),
  change: el.dataset.sobaChange || null,
  editor: [...el.querySelectorAll('.jp-InputArea-editor .cm-line')].map((l) => l.textContent).join('\\n'),
  rendered: (el.querySelector('.jp-RenderedMarkdown') || {}).textContent || '',
}))
"""
_DIALOGS = "() => [...document.querySelectorAll('.jp-Dialog')].map((el) => el.textContent)"


def _tool_texts(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body["messages"] if m.get("role") == "tool"]


def _model(path: str, body: dict[str, Any]) -> dict[str, Any]:
    done = len(_tool_texts(body))
    calls = [{"name": "notebook_read", "arguments": {}},
             {"name": "notebook_edit",
              "arguments": {"cell_id": LOAD_EXT, "action": "insert_after", "source": INSERTED}},
             {"name": "notebook_edit", "arguments": {"cell_id": HEADING, "action": "replace", "source": NEW_HEADING}}]
    if done < len(calls):
        return {"tool_calls": [{"id": f"c{done}", **calls[done]}], "usage": False}
    return {"text": "Added a cell and rewrote a heading.", "usage": False}


def _cell(notebook: LabNotebook, index: int) -> Any:
    return notebook.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell").nth(index)


def _index(cells: list[dict[str, Any]], text: str) -> int:
    """The first cell showing ``text`` (a markdown cell by its rendered text)."""
    return next(i for i, c in enumerate(cells) if text in c["editor"] or text in c["rendered"])


def _code(cells: list[dict[str, Any]], start: str) -> int:
    """The first code cell whose source starts with ``start``."""
    return next(i for i, c in enumerate(cells) if not c["markdown"] and c["editor"].startswith(start))


def _run_cell(notebook: LabNotebook, index: int) -> None:
    """Click into cell ``index``'s editor, Shift+Enter, and wait until it has run (``[N]:``)."""
    cell = _cell(notebook, index)
    cell.locator(".cm-content").click()
    notebook.page.keyboard.press("Shift+Enter")
    cell.locator(".jp-InputPrompt").filter(has_text=re.compile(r"\[\d+\]")).wait_for(state="attached",
                                                                                    timeout=300_000)


def _shoot(notebook: LabNotebook, index: int, name: str) -> Path:
    _cell(notebook, index).evaluate("(el) => el.scrollIntoView({block: 'center'})")
    notebook.page.wait_for_timeout(300)  # one paint after the scroll (a photograph, not an assertion)
    return notebook.screenshot(ARTIFACTS / name)


def live_lab_root(tmp_path: Path, fake_server: FakeServer, tools: dict[str, Any]) -> Path:
    """The Lab root (``tmp_path/lab-root``) of a project whose model is ``fake_server`` with ``tools``
    settings, for a JupyterLab that has SOBA's extension and never autosaves (so the file on disk
    shows whether anything but the user wrote it); fails with the install instruction without a browser."""
    _require_browser()
    # SOBA's extension where this private JupyterLab finds user extensions (JUPYTER_DATA_DIR)
    shutil.copytree(BUILD_DIR, tmp_path / "lab-state" / "data" / "labextensions" / NAME)
    docmanager = tmp_path / "lab-state" / "lab-settings" / "@jupyterlab" / "docmanager-extension"
    docmanager.mkdir(parents=True)
    (docmanager / "plugin.jupyterlab-settings").write_text(json.dumps({"autosave": False}))
    root = tmp_path / "lab-root"
    (root / ".soba").mkdir(parents=True)
    (root / ".soba" / "config.json").write_text(json.dumps({"model": {
        "provider": "openai", "model": "gpt-4o-mini", "baseUrl": fake_server.openai_base_url,
        "apiKeyEnv": "SOBA_TEST_KEY", "contextWindow": 128000, "maxOutputTokens": 4000}, "tools": tools}))
    return root


def test_the_agent_edits_the_open_notebook_in_place_during_a_foreground_turn(
        tmp_path: Path, fake_server: FakeServer) -> None:
    # the quickstart's own `%soba approval never` cell is skipped here (its setup cell too)
    root = live_lab_root(tmp_path, fake_server, {"approval": "never"})
    fake_server.handler = _model
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "NO_PROXY": "*", "SOBA_TEST_KEY": "k" * 16}
    with open_notebook_in_lab(QUICKSTART, tmp_path, env=env, timeout=180) as notebook:
        on_disk = (root / QUICKSTART.name).read_bytes()
        page = notebook.page
        page.set_default_timeout(60_000)
        cells = page.evaluate(_CELLS)
        _run_cell(notebook, _code(cells, "%load_ext soba_notebook"))
        # the user's unsaved edit in a third cell
        user = next(i for i, c in enumerate(cells) if c["editor"] == "%budget")
        _cell(notebook, user).locator(".cm-content").click()
        page.keyboard.press("End")
        page.keyboard.type(TYPED)
        page.keyboard.press("Escape")
        # the agent inserts a cell above it: wait for the turn's summary line, not for a cell index
        _cell(notebook, _code(cells, "%soba Create a tiny calculator")).locator(".cm-content").click()
        page.keyboard.press("Shift+Enter")
        try:
            page.locator(".jp-OutputArea").filter(has_text="After this turn").first.wait_for(
                state="attached", timeout=300_000)
        except Exception:
            notebook.screenshot(ARTIFACTS / "live_notebook_timeout.png")
            raise AssertionError(f"the %soba turn never ended{notebook.diagnostics()}") from None
        after = page.evaluate(_CELLS)
        dialogs = page.evaluate(_DIALOGS)
        new, heading = _code(after, INSERTED), _index(after, "heading rewritten by SOBA")
        _shoot(notebook, new, "live_notebook_inserted.png")
        _shoot(notebook, heading, "live_notebook_replaced.png")
        file_after_turn = (root / QUICKSTART.name).read_bytes()

        # Ctrl+Z in the rewritten heading's editor: the cell's own undo takes the replacement back
        _cell(notebook, heading).dblclick()
        page.keyboard.press("Control+z")
        page.wait_for_function(f"() => ({_CELLS})()[{heading}].editor === '## Where the budget stands'",
                               timeout=30_000)
        page.keyboard.press("Escape")
        # Z in command mode with the new cell selected (JupyterLab's "undo cell action"): the insert goes
        _cell(notebook, new).locator(".jp-InputPrompt").click()
        page.keyboard.press("Escape")
        page.keyboard.press("z")
        page.wait_for_function(f"() => !({_CELLS})().some((c) => c.editor.includes({json.dumps(INSERTED)}))",
                               timeout=30_000)
        undone = page.evaluate(_CELLS)
        _shoot(notebook, heading - 1, "live_notebook_undone.png")
        diagnostics = notebook.diagnostics()
    (ARTIFACTS / "live_notebook.json").write_text(json.dumps({"after": after, "undone": undone}, indent=1))

    texts = _tool_texts(fake_server.requests[-1].body)
    assert "open in JupyterLab, unsaved changes included" in texts[0] and TYPED.strip() in texts[0], texts[0]
    assert all("changed in the open notebook" in t for t in texts[1:]), texts
    assert dialogs == [], f"a dialog showed: {dialogs}"
    assert file_after_turn == on_disk, "the agent wrote the file behind JupyterLab's back"
    load_ext = _code(after, "%load_ext soba_notebook")
    assert new == load_ext + 1 and after[new]["marked"] and after[new]["change"] == "new", after[new]
    assert after[heading]["marked"] and after[heading]["change"] == "changed"
    assert NEW_HEADING.lstrip("# ") in after[heading]["rendered"] + after[heading]["editor"], after[heading]
    assert sum(c["marked"] for c in after) == 2, "only the two cells the agent changed are marked"
    assert any(c["editor"] == "%budget" + TYPED for c in after), "the user's unsaved edit survived"
    assert len(undone) == len(after) - 1, diagnostics
    assert not any(c["marked"] for c in undone)
    assert any(c["editor"] == "%budget" + TYPED for c in undone), "undo took back the agent's edits only"
