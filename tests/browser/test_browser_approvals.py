"""Approval cards as a person answers them: JupyterLab 4 in Debian's Chromium (issue 23, item 2).

A loopback model asks for shell commands and a write. The foreground ``%soba`` cell shows a card
per question while the kernel is busy; the test clicks **Allow once** (on a long command, which the
card shows whole, in a scrolling block), **Allow for this session** (the next ``touch`` runs without
a card) and **Deny** with a typed reason on the write's diff. A background cell's turn then asks
while other cells run: **Deny** with a reason, **Allow once**, **Allow for this session** (the next
``cp`` runs by the rule). While a card waits, the cell's live line says so; once answered, the card
shows the decision and its buttons are gone. Markers on disk and the transcript say what ran.
Every wait is for something on the page (a card, a decision, a cell's text), bounded only to fail.
Screenshots: test-artifacts/approvals_*.png.

Needs /usr/bin/chromium, playwright and jupyterlab (scripts/install-browser.sh); when missing the
test FAILS with that instruction, never skips.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from browser_support import ARTIFACTS, LabNotebook, open_notebook_in_lab
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401  (the `fake_server` fixture)

from browser.test_browser_real_hour import _lab_env, _wait_cell, _write_notebook
from browser.test_browser_widget import _require_browser

#: bounds a failure only (a busy 2-core machine runs the kernel, Lab and Chromium beside others)
WAIT_MS = 240_000

#: a command longer and taller than the card's code block: shown whole, the block scrolls
LONG_COMMAND = "touch fg-once.txt &&\n" + " &&\n".join(
    f"echo 'step {i:02d} of a long command the card must show whole, never cut: {'x' * 40}'" for i in range(24))


def _shell(call_id: str, command: str) -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "name": "shell", "arguments": {"command": command}}]}


def _card(notebook: LabNotebook, cell: int, call_id: str) -> Any:
    """The card of tool call ``call_id`` in code cell ``cell``, once it is there and pending,
    scrolled into view (Lab does not paint cells out of view: content-visibility)."""
    code_cell = notebook.page.locator(".jp-Notebook .jp-CodeCell").nth(cell)
    card = code_cell.locator(f".soba-approval[data-call='{call_id}'][data-state='pending']")
    card.wait_for(state="attached", timeout=WAIT_MS)
    card.evaluate("(el) => el.scrollIntoView({block: 'center'})")
    card.wait_for(state="visible", timeout=WAIT_MS)
    return code_cell.locator(f".soba-approval[data-call='{call_id}']")


def _answer(notebook: LabNotebook, cell: int, call_id: str, answer: str, *, reason: str = "",
            shot: str | None = None) -> Any:
    """Answer call ``call_id``'s card as a person does (after the cell's live line says it waits),
    wait until the card shows the decision, and return the card."""
    card = _card(notebook, cell, call_id)
    came_at = _offset_in_cell(notebook, cell, card)
    _wait_cell(notebook, cell, "waiting for your approval · ", WAIT_MS)
    # nothing above a waiting card changes height: a card that moves under the pointer loses a click
    assert _offset_in_cell(notebook, cell, card) == came_at, f"card {call_id} moved while it waited"
    if shot is not None:
        _shoot(card, shot)
    if reason:
        card.locator(".soba-approval__reason").fill(reason)
    card.locator(f"[data-answer='{answer}']").click()
    verdict = card.locator(f".soba-approval__decision--{answer}")
    try:
        verdict.wait_for(state="attached", timeout=WAIT_MS)
    except Exception as exc:  # Playwright's timeout: say which side dropped the answer
        raise AssertionError(f"card {call_id} never showed the answer {answer!r} after its click; the "
                             f"card's comm messages:\n{_card_comms(notebook, call_id)}"
                             f"{notebook.diagnostics()}") from exc
    assert card.locator("button").count() == 0, "a decided card has no buttons left"
    return card


def _offset_in_cell(notebook: LabNotebook, cell: int, card: Any) -> float:
    """How far below the top of its code cell the card is drawn, in CSS pixels."""
    code_cell = notebook.page.locator(".jp-Notebook .jp-CodeCell").nth(cell)
    return float(card.evaluate("(el, cell) => el.getBoundingClientRect().top - cell.getBoundingClientRect().top",
                               code_cell.element_handle()))


def _card_comms(notebook: LabNotebook, call_id: str) -> str:
    """Every comm message of call ``call_id``'s card, both ways, one a line (its comm is the one
    whose ``comm_open`` state asks about that call)."""
    opened = [m["comm_id"] for m in notebook.comm_log if m["msg_type"] == "comm_open"
              and ((m.get("data") or {}).get("state") or {}).get("request", {}).get("call_id") == call_id]
    lines = [f"{m['t']:>8.2f}s {m['dir']:<8} {m['msg_type']:<10} subshell={m['subshell_id']} "
             f"{json.dumps(m.get('data'))[:300]}" for m in notebook.comm_log if m["comm_id"] in opened]
    return "\n".join(lines) or f"(no comm of a card for {call_id} in {len(notebook.comm_log):,} comm messages)"


def _shoot(card: Any, name: str) -> Path:
    path = ARTIFACTS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    card.evaluate("(el) => el.scrollIntoView({block: 'center'})")
    card.screenshot(path=str(path))
    return path


def _shoot_cell(notebook: LabNotebook, cell: int, name: str) -> None:
    code_cell = notebook.page.locator(".jp-Notebook .jp-CodeCell").nth(cell)
    code_cell.evaluate("(el) => el.scrollIntoView({block: 'start'})")
    notebook.screenshot(ARTIFACTS / name)


def _transcript(root: Path) -> list[dict[str, Any]]:
    (path,) = (root / ".soba" / "sessions").glob("*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _lab_root(tmp_path: Path, fake_server: FakeServer) -> Path:
    """The Lab root (the notebook's folder beside it) of a project whose model is ``fake_server``
    and whose every shell, python and write asks; fails with the install instruction without a browser."""
    _require_browser()
    root = tmp_path / "lab-root"
    (root / ".soba").mkdir(parents=True)
    (root / ".soba" / "config.json").write_text(json.dumps({
        "model": {"provider": "openai", "model": "gpt-4o-mini", "baseUrl": fake_server.openai_base_url,
                  "apiKeyEnv": "SOBA_TEST_KEY", "contextWindow": 128000, "maxOutputTokens": 4000},
        "tools": {"approval": "ask"}}))
    return root


def test_cards_are_answered_by_clicks_in_a_foreground_and_a_background_turn(tmp_path: Path,
                                                                           fake_server: FakeServer) -> None:
    root = _lab_root(tmp_path, fake_server)
    (root / "notes.txt").write_text("keep this line\nold plan\n")
    q = fake_server.openai
    # the foreground turn
    q.enqueue(**_shell("c1", LONG_COMMAND))
    q.enqueue(**_shell("c2", "touch fg-rule.txt"))
    q.enqueue(**_shell("c3", "touch fg-by-rule.txt"))
    q.enqueue(tool_calls=[{"id": "c4", "name": "write_file",
                           "arguments": {"path": "notes.txt", "content": "keep this line\nnew plan\n"}}])
    q.enqueue(text="foreground done")
    # the background turn (no command of it is covered by the foreground's rule "shell: touch …")
    q.enqueue(**_shell("c5", "mkdir bg-denied && touch bg-denied/x"))
    q.enqueue(**_shell("c6", "cp notes.txt bg-once.txt"))
    q.enqueue(**_shell("c7", "cp notes.txt bg-rule.txt"))
    q.enqueue(**_shell("c8", "cp notes.txt bg-by-rule.txt"))
    q.enqueue(text="background done")
    source = _write_notebook(tmp_path / "approvals.ipynb", "%load_ext soba_notebook", "%soba make the files",
                             "%%soba --background\nand in the background", "print('other cells run')")
    env = _lab_env(tmp_path, SOBA_TEST_KEY="k" * 16)
    with open_notebook_in_lab(source, tmp_path, env=env, timeout=180) as notebook:
        notebook.run_all_cells()
        card = _card(notebook, 1, "c1")
        body = card.locator(".soba-approval__body")
        assert body.text_content() == LONG_COMMAND, "the full command, never cut"
        scroll = body.evaluate("(el) => [el.scrollHeight > el.clientHeight, el.scrollWidth > el.clientWidth, "
                               "getComputedStyle(el).overflow]")
        assert scroll[0] and not scroll[1] and scroll[2] == "auto", scroll  # it scrolls down, never sideways
        more = card.locator(".soba-approval__body + .soba-approval__more")
        more.wait_for(state="visible", timeout=WAIT_MS)  # and says so, scrollbars hidden or not
        assert more.text_content() == "25 lines: scroll the block to read all of it"
        _answer(notebook, 1, "c1", "once", shot="approvals_shell_card.png")
        short = _card(notebook, 1, "c2")
        assert short.locator(".soba-approval__more").first.is_hidden(), "a block that fits says nothing"
        session = short.locator("[data-answer='session']")
        assert session.text_content() == "Allow for this session: shell: touch …"
        _answer(notebook, 1, "c2", "session")
        card = _card(notebook, 1, "c4")  # c3 ran by the rule: the next card is the write's diff
        assert "notes.txt" in card.text_content() and "+new plan" in card.text_content()
        decided = _answer(notebook, 1, "c4", "deny", reason="keep the old plan", shot="approvals_diff_card.png")
        assert decided.locator(".soba-approval__decision").text_content() == "Denied: keep the old plan"
        _shoot(decided, "approvals_diff_card_denied.png")
        _wait_cell(notebook, 1, "foreground done", WAIT_MS)
        _shoot_cell(notebook, 1, "approvals_foreground_cell.png")
        _answer(notebook, 2, "c5", "deny", reason="no new folders", shot="approvals_background_card.png")
        _answer(notebook, 2, "c6", "once")
        _answer(notebook, 2, "c7", "session")
        _wait_cell(notebook, 2, "background done", WAIT_MS)
        _wait_cell(notebook, 3, "other cells run", WAIT_MS)
        _shoot_cell(notebook, 2, "approvals_background_cell.png")
        states = notebook.page.evaluate(
            "() => [...document.querySelectorAll('.soba-approval')].map((el) => [el.dataset.call, el.dataset.state])")
        errors = list(notebook.page_errors)
    assert states == [["c1", "once"], ["c2", "session"], ["c4", "deny"], ["c5", "deny"], ["c6", "once"],
                      ["c7", "session"]], states
    assert errors == [], errors
    assert all((root / name).exists() for name in ("fg-once.txt", "fg-rule.txt", "fg-by-rule.txt"))
    assert (root / "notes.txt").read_text() == "keep this line\nold plan\n"
    assert not (root / "bg-denied").exists()
    assert all((root / name).exists() for name in ("bg-once.txt", "bg-rule.txt", "bg-by-rule.txt"))
    entries = _transcript(root)
    results = [e["message"]["content"] for e in entries if e.get("message", {}).get("role") == "tool"]
    assert "denied by the user: keep the old plan" in results and "denied by the user: no new folders" in results
    verdicts = [(e["tool"], e["verdict"], e["decidedBy"]) for e in entries if e["type"] == "approval"]
    assert verdicts == [("shell", "once", "user"), ("shell", "session", "user"), ("shell", "once", "rule"),
                        ("write_file", "deny", "user"), ("shell", "deny", "user"), ("shell", "once", "user"),
                        ("shell", "session", "user"), ("shell", "once", "rule")]
