"""Issue 20 as a person sees it: JupyterLab 4 in Debian's Chromium, items 2, 4, 9 and 10.

The behaviours are proved in real kernels elsewhere (tests/unit/test_magic_prompts.py,
tests/kernel/test_kernel_background_cell.py, tests/kernel/test_kernel_waiting.py, tests/unit/test_live_cell.py); these
tests open a notebook built here with nbformat in JupyterLab, "Run > Run All Cells" as a user would,
and read what each cell's output area holds in the page. Waits are on DOM state only (Playwright
``wait_for_function``, generous timeouts for a busy 2-core machine). Lab renders cells out of view
with ``content-visibility``, so texts are read with ``textContent`` (layout-independent) and a cell is
scrolled into view before it is photographed. Screenshots go to test-artifacts/real_hour_*.png.

Needs /usr/bin/chromium, playwright and jupyterlab (scripts/install-browser.sh); when missing the
tests FAIL with that instruction, never skip.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import nbformat
from browser_support import ARTIFACTS, LabNotebook, open_notebook_in_lab
from fakeserver import FakeServer, Reply, fake_server_fixture  # noqa: F401  (the `fake_server` fixture)

from browser.test_browser_widget import _require_browser

#: how long a whole Run All may take on a busy 2-core machine (kernel start, offline turns)
RUN_TIMEOUT_MS = 300_000

# The code cells of the open notebook, in order (Lab keeps every cell attached in its default
# content-visibility windowing, so index i is the i-th code cell).
_CELLS = "document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-CodeCell')"

# True once code cell ``index``'s output area text matches ``pattern`` (a JS regular expression).
_CELL_MATCHES = f"""
([index, pattern]) => {{
  const cell = {_CELLS}[index];
  const out = cell && cell.querySelector('.jp-OutputArea');
  return Boolean(out && new RegExp(pattern).test(out.textContent));
}}
"""

# What one code cell's output area holds, read from the DOM.
_CELL_VIEW = f"""
(index) => {{
  const cell = {_CELLS}[index];
  const out = cell.querySelector('.jp-OutputArea');
  const all = (sel) => [...out.querySelectorAll(sel)];
  return {{
    text: out.textContent,
    tools: all('details.soba-tool').map((el) => el.querySelector('summary').textContent),
    summaries: all('.soba-summary').map((el) => el.textContent),
    activities: all('.soba-activity').map((el) => el.textContent),
    notes: all('.soba-note').map((el) => el.textContent),
    stderr: all('[data-mime-type="application/vnd.jupyter.stderr"]').map((el) => el.textContent),
    errors: all('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]').length,
    widgetErrors: all('.soba-budget__error').filter((el) => !el.hidden || el.textContent).map((el) => el.textContent),
    widgetNotices: all('.soba-budget[data-notice="1"]').length,
    widgets: all('.soba-budget[data-soba-budget]').length,
  }};
}}
"""

# Is JupyterLab's help pager / inspector showing anything? (`?` help goes to the pager.)
_INSPECTOR = """
() => [...document.querySelectorAll('.jp-Inspector, .jp-Inspector-content')]
  .filter((el) => el.offsetParent !== null).map((el) => el.textContent.trim()).filter(Boolean)
"""


# How code cell ``index`` shows the "running in the background" line: its element's computed
# wrapping, and whether it sits in a <pre> (a stream output: monospace, ``word-break: break-all``).
_BACKGROUND_LINE = f"""
(index) => {{
  const out = {_CELLS}[index].querySelector('.jp-OutputArea');
  const el = out.querySelector('.soba-background');
  if (!el) return null;
  const style = getComputedStyle(el);
  return {{text: el.textContent, inPre: Boolean(el.closest('pre')), wordBreak: style.wordBreak,
           whiteSpace: style.whiteSpace, font: style.fontFamily}};
}}
"""


def _write_notebook(path: Path, *sources: str) -> Path:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, path)
    return path


def _wait_cell(notebook: LabNotebook, index: int, pattern: str, timeout_ms: int = RUN_TIMEOUT_MS) -> None:
    """Wait until code cell ``index`` shows text matching ``pattern``; on timeout, say what the page had."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        notebook.page.wait_for_function(_CELL_MATCHES, arg=[index, pattern], timeout=timeout_ms)
    except PlaywrightTimeout as exc:
        notebook.screenshot(ARTIFACTS / f"real_hour_timeout_cell{index}.png")
        shown = notebook.page.evaluate(_CELL_VIEW, index)
        raise AssertionError(f"cell {index} never showed /{pattern}/; it shows {shown!r}"
                             f"{notebook.diagnostics()}") from exc


def _cell(notebook: LabNotebook, index: int) -> dict[str, Any]:
    return dict(notebook.page.evaluate(_CELL_VIEW, index))


def _shoot_cell(notebook: LabNotebook, index: int, name: str) -> Path:
    """Scroll code cell ``index``'s head into view (Lab paints only what is in view) and photograph the page."""
    cell = notebook.page.locator(".jp-Notebook .jp-CodeCell").nth(index)
    cell.locator(".jp-Cell-inputWrapper").scroll_into_view_if_needed()
    cell.evaluate("(el) => el.scrollIntoView({block: 'start'})")
    return notebook.screenshot(ARTIFACTS / name)


def _transcript(project: Path) -> list[dict[str, Any]]:
    """The messages of the project's one session, read straight from its JSONL transcript."""
    (path,) = (project / ".soba" / "sessions").glob("*.jsonl")
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e["message"] for e in entries if e.get("type") == "message"]


def _prompts(project: Path) -> list[str]:
    """The user prompts in the transcript (the notes on cells the user ran themselves left out)."""
    return [m["content"] for m in _transcript(project) if m["role"] == "user" and m.get("source") != "cell_history"]


def _tool_results_per_turn(project: Path) -> list[int]:
    """How many tool results each prompted turn has, in order."""
    counts: list[int] = []
    for message in _transcript(project):
        if message["role"] == "user" and message.get("source") != "cell_history":
            counts.append(0)
        elif message["role"] == "tool" and counts:
            counts[-1] += 1
    return counts


def _lab_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    home = tmp_path / "home"
    (home / ".soba").mkdir(parents=True, exist_ok=True)
    (home / ".soba" / "config.json").write_text('{"tools": {"approval": "never"}}')  # no one answers cards here
    return {"HOME": str(home), "NO_PROXY": "*", **extra}


# -- item 2 ----------------------------------------------------------------------------------------


def test_a_soba_line_ending_in_a_question_mark_runs_a_turn_in_lab_and_reaches_the_transcript_verbatim(
        tmp_path: Path) -> None:
    """`%soba what files are here?` in JupyterLab: the cell shows the agent's turn, never IPython's
    "Object `here` not found." nor a help pager, and the transcript's prompt is the line as typed."""
    _require_browser()
    source = _write_notebook(tmp_path / "question.ipynb", "%load_ext soba_notebook", "%soba what files are here?")
    with open_notebook_in_lab(source, tmp_path, env=_lab_env(tmp_path), timeout=180) as notebook:
        notebook.run_all_cells()
        _wait_cell(notebook, 1, "After this turn")
        shown = _cell(notebook, 1)
        inspector = notebook.page.evaluate(_INSPECTOR)
        whole = notebook.page.evaluate("() => document.querySelector('.jp-Notebook').textContent")
        _shoot_cell(notebook, 1, "real_hour_question_mark.png")
    project = tmp_path / "lab-root"
    (ARTIFACTS / "real_hour_question_mark.txt").write_text(json.dumps(shown, indent=1, ensure_ascii=False))

    assert "not found" not in whole and "Docstring" not in whole, whole[:2_000]
    assert inspector == [], "the help pager / inspector opened"
    assert shown["errors"] == 0 and shown["stderr"] == [], shown
    assert len(shown["summaries"]) == 1 and shown["tools"], "the cell shows the agent's turn"
    assert "You asked: “what files are here?”" in shown["text"], "the agent got the whole line"
    assert _prompts(project) == ["what files are here?"]


# -- item 4 ----------------------------------------------------------------------------------------

#: the offline model streams slowly enough that its first turn is still running when the next cell
#: starts (it sleeps between stream events: no CPU)
SLOW_OFFLINE_MODEL = """\
from soba_notebook.demo.scripted import ScriptedModel
from soba_notebook.notebook import current
current().ensure().agent.provider = ScriptedModel(stream_delay=0.03)
"""


def test_a_background_cell_keeps_its_own_tool_blocks_and_summary_and_the_queued_cell_shows_only_its_turn(
        tmp_path: Path) -> None:
    """`%%soba --background` then `%soba` at once (Run All): each cell's output area in the page holds
    exactly its own turn — the background cell its tool blocks and its "After this turn" line, the
    queued cell "queued", its own tool blocks (as many as the transcript's second turn has) and its
    own one summary."""
    _require_browser()
    source = _write_notebook(tmp_path / "background.ipynb", "%load_ext soba_notebook", SLOW_OFFLINE_MODEL,
                             "%%soba --background\nbuild the calculator", "%soba now read greet.py")
    with open_notebook_in_lab(source, tmp_path, env=_lab_env(tmp_path), timeout=180) as notebook:
        notebook.run_all_cells()
        _wait_cell(notebook, 3, "After this turn")
        _wait_cell(notebook, 2, "After this turn")
        first, second = _cell(notebook, 2), _cell(notebook, 3)
        background_line = notebook.page.evaluate(_BACKGROUND_LINE, 2)
        _shoot_cell(notebook, 2, "real_hour_background_cell.png")
        _shoot_cell(notebook, 3, "real_hour_queued_cell.png")
    (ARTIFACTS / "real_hour_background.txt").write_text(json.dumps([first, second], indent=1, ensure_ascii=False))

    tools = _tool_results_per_turn(tmp_path / "lab-root")
    assert len(tools) == 2 and tools[0] > 0, tools
    assert len(first["tools"]) == tools[0], "each of the background turn's tool blocks is in its own cell"
    assert len(second["tools"]) == tools[1], "the queued cell shows its own tool blocks only"
    assert len(first["summaries"]) == 1 and len(second["summaries"]) == 1
    assert "running in the background" in first["text"] and "running in the background" not in second["text"]
    assert re.search(r"queued: 1 turn\(s\) ahead", second["text"]), "the second cell did wait for the first turn"
    assert "queued" not in first["text"]
    # the background line wraps between words in the UI font, never mid-word in a monospace stream box
    assert background_line is not None, "the line is the styled soba-background element"
    assert background_line["inPre"] is False and background_line["wordBreak"] == "normal", background_line
    for shown in (first, second):
        assert shown["errors"] == 0 and shown["stderr"] == [], shown


# -- items 9 and 10 --------------------------------------------------------------------------------


def test_a_slow_first_byte_shows_a_counting_waiting_line_and_a_retried_reset_leaves_no_red_error_or_dict(
        tmp_path: Path, fake_server: FakeServer) -> None:
    """A loopback model server: the first turn's reply starts only after 5 s, and the cell says
    "waiting for gpt-4o-mini · N s" with N counting up (photographed while it waits), then the reply
    takes the line's place; the second turn's first connection is reset and the retry succeeds, and
    neither cell nor the budget widget shows a red error, a stderr box or a Python dict."""
    _require_browser()
    root = tmp_path / "lab-root"
    (root / ".soba").mkdir(parents=True)
    (root / ".soba" / "config.json").write_text(json.dumps({"model": {
        "provider": "openai", "model": "gpt-4o-mini", "baseUrl": fake_server.openai_base_url,
        "apiKeyEnv": "SOBA_TEST_KEY", "contextWindow": 128000, "maxOutputTokens": 4000}}))
    fake_server.openai.enqueue(text="the answer is 42", headers_delay=5.0)  # nothing at all for 5 s
    fake_server.enqueue("openai", Reply(reset=True))  # the second turn's first connection is reset
    fake_server.openai.enqueue(text="all good after the retry")
    source = _write_notebook(tmp_path / "slow.ipynb", "%load_ext soba_notebook", "%soba what is the answer?",
                             "%soba and now?")
    env = _lab_env(tmp_path, SOBA_TEST_KEY="k" * 16)
    with open_notebook_in_lab(source, tmp_path, env=env, timeout=180) as notebook:
        notebook.run_all_cells()
        # the counter has moved past 0 s while no byte has come: the line counts in place
        _wait_cell(notebook, 1, r"waiting for gpt-4o-mini · [1-9]\d* s", timeout_ms=120_000)
        waiting = _cell(notebook, 1)
        _shoot_cell(notebook, 1, "real_hour_waiting.png")
        _wait_cell(notebook, 2, "After this turn")
        _wait_cell(notebook, 1, "the answer is 42")
        answered, retried = _cell(notebook, 1), _cell(notebook, 2)
        whole = notebook.page.evaluate("() => document.querySelector('.jp-Notebook').textContent")
        _shoot_cell(notebook, 2, "real_hour_after_retry.png")
    (ARTIFACTS / "real_hour_slow_and_retry.txt").write_text(
        json.dumps([waiting, answered, retried], indent=1, ensure_ascii=False))

    assert len(fake_server.requests) == 3, "one request for the first turn, a reset and its retry for the second"
    assert [a for a in waiting["activities"] if a.startswith("waiting for gpt-4o-mini · ")], waiting
    assert "the answer is 42" not in waiting["text"], "the line showed before any model text"
    assert answered["activities"] == [] and retried["activities"] == [], "the waiting line never stays"
    assert "all good after the retry" in retried["text"]
    assert answered["widgets"] + retried["widgets"] >= 1, "the budget widget is in the notebook"
    for shown in (answered, retried):
        assert shown["errors"] == 0 and shown["stderr"] == [], shown
        assert shown["widgetErrors"] == [] and shown["widgetNotices"] == 0, shown
    assert "{'provider'" not in whole and "Error:" not in whole, whole[:2_000]
