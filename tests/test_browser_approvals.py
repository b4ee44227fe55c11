"""Approval cards as a person answers them: JupyterLab 4 in Debian's Chromium (issue 23, item 2).

A loopback model asks for shell commands and a write. The foreground ``%soba`` cell shows a card
per question while the kernel is busy; the test clicks **Allow once**, **Allow for this session**
(the next ``touch`` runs without a card) and **Deny** with a typed reason on the write's diff. A
background cell's turn then asks while other cells run: **Deny** with a reason, then **Allow
once**. Markers on disk and the transcript say what ran. Screenshots: test-artifacts/approvals_*.png.

Needs /usr/bin/chromium, playwright and jupyterlab (scripts/install-browser.sh); when missing the
test FAILS with that instruction, never skips.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from browser_support import ARTIFACTS, LabNotebook, open_notebook_in_lab
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401  (the `fake_server` fixture)
from test_browser_real_hour import _lab_env, _wait_cell, _write_notebook
from test_browser_widget import _require_browser

pytestmark = pytest.mark.browser

_PENDING = ".soba-approval[data-state='pending']"


def _shell(call_id: str, command: str) -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "name": "shell", "arguments": {"command": command}}]}


def _card(notebook: LabNotebook, cell: int) -> Any:
    """The pending card in code cell ``cell``, once it is there, scrolled into view."""
    code_cell = notebook.page.locator(".jp-Notebook .jp-CodeCell").nth(cell)
    card = code_cell.locator(_PENDING).first
    # attached first: Lab does not paint cells out of view (content-visibility); then into view
    card.wait_for(state="attached", timeout=240_000)
    card.evaluate("(el) => el.scrollIntoView({block: 'center'})")
    card.wait_for(state="visible", timeout=60_000)
    return card


def _shoot(notebook: LabNotebook, card: Any, name: str) -> Path:
    path = ARTIFACTS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    card.screenshot(path=str(path))
    return path


def _transcript(root: Path) -> list[dict[str, Any]]:
    (path,) = (root / ".soba" / "sessions").glob("*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_cards_are_answered_by_clicks_in_a_foreground_and_a_background_turn(tmp_path: Path,
                                                                           fake_server: FakeServer) -> None:
    _require_browser()
    root = tmp_path / "lab-root"
    (root / ".soba").mkdir(parents=True)
    (root / ".soba" / "config.json").write_text(json.dumps({
        "model": {"provider": "openai", "model": "gpt-4o-mini", "baseUrl": fake_server.openai_base_url,
                  "apiKeyEnv": "SOBA_TEST_KEY", "contextWindow": 128000, "maxOutputTokens": 4000},
        "tools": {"approval": "ask"}}))
    (root / "notes.txt").write_text("keep this line\nold plan\n")
    q = fake_server.openai
    # the foreground turn
    q.enqueue(**_shell("c1", "touch fg-once.txt"))
    q.enqueue(**_shell("c2", "touch fg-rule.txt"))
    q.enqueue(**_shell("c3", "touch fg-by-rule.txt"))
    q.enqueue(tool_calls=[{"id": "c4", "name": "write_file",
                           "arguments": {"path": "notes.txt", "content": "keep this line\nnew plan\n"}}])
    q.enqueue(text="foreground done")
    # the background turn
    q.enqueue(**_shell("c5", "mkdir bg-denied && touch bg-denied/x"))
    q.enqueue(**_shell("c6", "touch bg-once.txt"))
    q.enqueue(text="background done")
    source = _write_notebook(tmp_path / "approvals.ipynb", "%load_ext soba_notebook", "%soba make the files",
                             "%%soba --background\nand in the background", "print('other cells run')")
    env = _lab_env(tmp_path, SOBA_TEST_KEY="k" * 16)
    with open_notebook_in_lab(source, tmp_path, env=env, timeout=180) as notebook:
        notebook.run_all_cells()
        card = _card(notebook, 1)
        _shoot(notebook, card, "approvals_shell_card.png")
        assert "touch fg-once.txt" in card.text_content()
        card.locator("[data-answer='once']").click()
        card = _card(notebook, 1)
        assert "touch fg-rule.txt" in card.text_content()
        session = card.locator("[data-answer='session']")
        assert "shell: touch" in session.text_content()
        session.click()
        card = _card(notebook, 1)  # fg-by-rule.txt ran by the rule: the next card is the write's diff
        assert "notes.txt" in card.text_content() and "+new plan" in card.text_content()
        _shoot(notebook, card, "approvals_diff_card.png")
        card.locator(".soba-approval__reason").fill("keep the old plan")
        card.locator("[data-answer='deny']").click()
        _wait_cell(notebook, 1, "foreground done")
        card = _card(notebook, 2)
        assert "mkdir bg-denied" in card.text_content()
        card.locator(".soba-approval__reason").fill("no new folders")
        card.locator("[data-answer='deny']").click()
        card = _card(notebook, 2)
        assert "touch bg-once.txt" in card.text_content()
        card.locator("[data-answer='once']").click()
        _wait_cell(notebook, 2, "background done")
        _wait_cell(notebook, 3, "other cells run")
        cell1 = notebook.page.locator(".jp-Notebook .jp-CodeCell").nth(1)
        cell1.evaluate("(el) => el.scrollIntoView({block: 'start'})")
        notebook.screenshot(ARTIFACTS / "approvals_foreground_cell.png")
        decided = notebook.page.evaluate(
            "() => [...document.querySelectorAll('.soba-approval')].map((el) => el.dataset.state)")
        errors = list(notebook.page_errors)
    assert (root / "fg-once.txt").exists() and (root / "fg-rule.txt").exists() and (root / "fg-by-rule.txt").exists()
    assert (root / "notes.txt").read_text() == "keep this line\nold plan\n"
    assert not (root / "bg-denied").exists() and (root / "bg-once.txt").exists()
    entries = _transcript(root)
    results = [e["message"]["content"] for e in entries if e.get("message", {}).get("role") == "tool"]
    assert "denied by the user: keep the old plan" in results and "denied by the user: no new folders" in results
    verdicts = [(e["tool"], e["verdict"], e["decidedBy"]) for e in entries if e["type"] == "approval"]
    assert verdicts == [("shell", "once", "user"), ("shell", "session", "user"), ("shell", "once", "rule"),
                        ("write_file", "deny", "user"), ("shell", "deny", "user"), ("shell", "once", "user")]
    assert "pending" not in decided and errors == [], (decided, errors)
