"""A card for replacing a cell, as a person sees it: JupyterLab 4 in Debian's Chromium (issue 37,
item 10). The loopback model reads, then replaces the heading of the kernel's own notebook (open in Lab, so the
edit goes to the live document). Before anyone answers, the card shows the heading as it is
(``-# My analysis``) and as it would be (``+# My analysis (heading rewritten by the agent)``), not
an insert of the new text alone; **Allow once** then changes the heading in the open notebook.
Screenshot of the pending card: test-artifacts/approvals_replace_card.png.

Needs /usr/bin/chromium, playwright and jupyterlab (scripts/install-browser.sh); when missing the
test FAILS with that instruction, never skips.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from browser_support import open_notebook_in_lab
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401  (the `fake_server` fixture)

from browser.test_browser_approvals import WAIT_MS, _answer, _card, _lab_root
from browser.test_browser_real_hour import _lab_env, _wait_cell

NEW_HEADING = "# My analysis (heading rewritten by the agent)"


def test_a_replace_card_in_lab_shows_the_cells_old_and_new_text_before_the_answer(tmp_path: Path,
                                                                                   fake_server: FakeServer) -> None:
    _lab_root(tmp_path, fake_server)
    fake_server.openai.enqueue(tool_calls=[{"id": "c0", "name": "notebook_read", "arguments": {}}])
    fake_server.openai.enqueue(tool_calls=[{"id": "c1", "name": "notebook_edit", "arguments": {
        "action": "replace", "cell_id": "heading", "source": NEW_HEADING}}])
    fake_server.openai.enqueue(text="heading done")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# My analysis"), nbformat.v4.new_code_cell("%load_ext soba_notebook"),
                nbformat.v4.new_code_cell("%soba rewrite the heading")]
    nb.cells[0]["id"] = "heading"
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source = tmp_path / "live.ipynb"
    nbformat.write(nb, source)
    env = _lab_env(tmp_path, SOBA_TEST_KEY="k" * 16)
    with open_notebook_in_lab(source, tmp_path, env=env, timeout=180) as notebook:
        notebook.run_all_cells()
        card = _card(notebook, 1, "c1")
        lines = card.locator(".soba-approval__diff .soba-approval__line")
        removed = card.locator(".soba-approval__line--del").all_text_contents()
        added = card.locator(".soba-approval__line--add").all_text_contents()
        assert removed == ["-# My analysis\n"], lines.all_text_contents()
        assert added == [f"+{NEW_HEADING}\n"], lines.all_text_contents()
        assert "@@ -0,0" not in card.text_content()
        selectable = card.locator(".soba-approval__diff").evaluate("(el) => getComputedStyle(el).userSelect")
        assert selectable != "none"
        _answer(notebook, 1, "c1", "once", shot="approvals_replace_card.png")
        _wait_cell(notebook, 1, "heading done", WAIT_MS)
        _wait_cell(notebook, 1, "replaced cell heading", WAIT_MS)
        heading = notebook.page.locator(".jp-Notebook .jp-MarkdownCell").first.text_content() or ""
        errors = list(notebook.page_errors)
    assert "heading rewritten by the agent" in heading, heading
    assert errors == [], errors
