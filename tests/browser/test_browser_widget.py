"""The budget widget renders for real: JupyterLab 4 + anywidget in Debian's Chromium.

Runs tests/data/widget_demo.ipynb (a synthetic session fed from a background thread) through
"Run > Run All Cells", records what the widget's root element showed while the compaction ran,
then checks the final numbers (tokens, and the cost of every request priced as gpt-4o-mini from the
bundled genai-prices table) and saves test-artifacts/budget_widget.png.

Needs /usr/bin/chromium, playwright and jupyterlab: run scripts/install-browser.sh. When they are
missing this test FAILS with that instruction; it is never skipped.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from browser_support import (
    ARTIFACTS,
    REPO,
    BrowserUnavailable,
    LabNotebook,
    open_notebook_in_lab,
    require_browser,
    run_notebook_in_lab,
)

DEMO = REPO / "tests" / "data" / "widget_demo.ipynb"
ROOT = ".soba-budget[data-soba-budget]"
DONE = f"{ROOT}[data-phase='completed'][data-checkpoint]:not([data-checkpoint=''])"

# Records every state the widget root went through (attribute changes), from the page side.
RECORDER = """
() => {
  window.__sobaSeen = [];
  const take = (node) => {
    const d = node.dataset;
    const text = node.querySelector('.soba-budget__progress-text');
    window.__sobaSeen.push({phase: d.phase, progress: Number(d.progress), version: Number(d.version),
                            text: text ? text.textContent : ''});
  };
  new MutationObserver((records) => {
    for (const r of records) {
      const node = r.target;
      if (node instanceof HTMLElement && node.matches('.soba-budget') && r.attributeName === 'data-version') {
        take(node);
      }
    }
  }).observe(document.body, {subtree: true, attributes: true, attributeFilter: ['data-version']});
}
"""


def _require_browser() -> None:
    """Fail (never skip) with the install instruction when the browser stack is missing."""
    try:
        require_browser()
    except BrowserUnavailable as exc:
        message = str(exc)
    else:
        return
    pytest.fail(message, pytrace=False)


def _shoot_while_compacting(notebook: LabNotebook) -> None:
    notebook.page.wait_for_selector(f"{ROOT}[data-phase='compacting']", state="visible", timeout=120_000)
    notebook.screenshot(ARTIFACTS / "budget_widget_compacting.png", ROOT)


def _inspect(notebook: LabNotebook) -> dict[str, Any]:
    root = notebook.page.locator(ROOT).first
    attrs = root.evaluate("(el) => Object.assign({}, el.dataset)")
    return {
        "attrs": attrs,
        "numbers": root.locator(".soba-budget__numbers").inner_text(),
        "source": root.locator(".soba-budget__source").inner_text(),
        "last": root.locator(".soba-budget__last-text").inner_text(),
        "cost": root.locator(".soba-budget__cost").inner_text(),
        "progress_hidden": root.locator(".soba-budget__progress").evaluate("(el) => el.hidden"),
        "spark_points": root.locator(".soba-budget__spark-line").get_attribute("points") or "",
        "seen": notebook.page.evaluate("() => window.__sobaSeen || []"),
        "widget_count": notebook.page.locator(ROOT).count(),
    }


def test_budget_widget_renders_live_compaction_and_final_numbers_in_jupyterlab(tmp_path: Path) -> None:
    _require_browser()
    run = run_notebook_in_lab(
        DEMO, DONE, tmp_path,
        before_run=lambda nb: nb.page.evaluate(RECORDER),
        after_run=_shoot_while_compacting,
        inspect=_inspect,
        screenshot=ARTIFACTS / "budget_widget.png",
    )
    result = run.value
    (ARTIFACTS / "budget_widget.txt").write_text(repr(result) + "\n" + "\n".join(run.console))

    attrs = result["attrs"]
    assert result["widget_count"] == 1
    assert {k: attrs.get(k) for k in ("effective", "hard", "soft", "window", "source", "phase", "progress",
                                      "outcome", "status", "checkpoint", "reclaimed", "reclaimedPercent",
                                      "quality", "zone")} == {
        "effective": "13402", "hard": "48808", "soft": "39046", "window": "65000", "source": "provider_usage",
        "phase": "completed", "progress": "100", "outcome": "completed", "status": "completed",
        "checkpoint": "ck_ab12cd", "reclaimed": "28353", "reclaimedPercent": "68.8", "quality": "ok",
        "zone": "ok",
    }
    assert result["numbers"].replace("\n", "") == (
        "13,402 / 48,808 tokens (27.5%) · next request · soft 39,046 · window 65,000")  # after a compaction
    assert result["source"] == "provider usage"
    # gpt-4o-mini: $0.15/MTok input, $0.075/MTok cached input, $0.60/MTok output (genai-prices 0.2.5).
    # The summary: 41,230 in × 0.15/1e6 + 1,800 out × 0.6/1e6 = 0.0061845 + 0.00108 = $0.0072645.
    assert result["last"] == ("auto_threshold · 41,230 → 12,877 tokens · reclaimed 68.8% · ck_ab12cd"
                              " · summary cost $0.0073")
    # 14 requests, half of each prompt cached: 174,712 uncached × 0.15/1e6 = 0.0262068, 174,710 cached
    # × 0.075/1e6 = 0.01310325, 5,600 out × 0.6/1e6 = 0.00336, plus the summary: $0.04993455.
    # The last turn: the summary and one request of 13,402 (6,701 + 6,701 cached, 400 out): $0.009012225.
    assert result["cost"] == "Cost: $0.0499 this session, $0.0090 last turn"
    assert attrs.get("cost") == "priced"
    assert result["progress_hidden"] is True
    assert len(result["spark_points"].split()) == 14  # one point per inference

    # While compacting, the view showed the live line, and progress only ever went up.
    seen = result["seen"]
    compacting = [s for s in seen if s["phase"] == "compacting"]
    assert compacting, f"the compaction was never visible in the browser; states seen: {seen[-5:]}"
    for state in compacting:
        assert re.fullmatch(r"Compacting context before response · \d{1,3}%", state["text"]), state
        assert state["text"].endswith(f" · {state['progress']}%")
    progresses = [s["progress"] for s in compacting]
    assert progresses == sorted(progresses)
    # The throttle batched ~4,000 progress events into a handful of renders.
    assert len(seen) < 400, f"{len(seen)} renders for ~4,000 events: updates were not batched"

    assert not [e for e in run.page_errors if "soba" in e.lower() or "anywidget" in e.lower()], run.page_errors
    assert (ARTIFACTS / "budget_widget.png").stat().st_size > 10_000


def _luminance(css_color: str) -> float:
    r, g, b = (int(v) for v in re.findall(r"\d+", css_color)[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def _colors(notebook: LabNotebook) -> dict[str, str]:
    return notebook.page.locator(ROOT).first.evaluate("""(el) => {
      const style = (sel) => getComputedStyle(sel ? el.querySelector(sel) : el);
      return {background: style().backgroundColor, text: style().color,
              fill: style('.soba-budget__fill').backgroundColor,
              track: style('.soba-budget__bar').backgroundColor};
    }""")


def test_budget_widget_follows_the_jupyterlab_dark_theme(tmp_path: Path) -> None:
    _require_browser()
    run = run_notebook_in_lab(DEMO, DONE, tmp_path, theme="JupyterLab Dark", inspect=_colors,
                              screenshot=ARTIFACTS / "budget_widget_dark.png", screenshot_selector=ROOT)
    colors = run.value
    assert _luminance(colors["background"]) < 0.3, colors  # dark surface from --jp-layout-color1
    assert _luminance(colors["text"]) > 0.6, colors  # light text from --jp-ui-font-color1
    assert colors["fill"] != colors["track"], colors  # the bar stays readable


# -- the ES module alone, in Chromium, with a stand-in model -------------------------------------

HOST = """
async ({esm, css, states}) => {
  const style = document.createElement('style');
  style.textContent = css;
  document.head.appendChild(style);
  const url = URL.createObjectURL(new Blob([esm], {type: 'text/javascript'}));
  const mod = await import(url);
  window.__sobaSent = [];
  window.__sobaModels = [];
  for (const [i, initial] of states.entries()) {
    const el = document.createElement('div');
    el.id = `w${i}`;
    el.style.margin = '6px';
    document.body.appendChild(el);
    const listeners = {};
    const model = {
      state: initial,
      get(key) { return key === 'state' ? this.state : undefined; },
      on(name, cb) { (listeners[name] = listeners[name] || []).push(cb); },
      off(name, cb) { listeners[name] = (listeners[name] || []).filter((f) => f !== cb); },
      send(msg) { window.__sobaSent.push(msg); },
      set(state) { this.state = state; (listeners['change:state'] || []).forEach((cb) => cb()); },
    };
    window.__sobaModels.push(model);
    await mod.default.render({model, el});
  }
}
"""

STYLE_OF = """(el) => {
  const s = (sel) => getComputedStyle(el.querySelector(sel));
  return {...el.dataset,
          lastText: el.querySelector('.soba-budget__last-text').textContent,
          lastHidden: el.querySelector('.soba-budget__last').hidden,
          skipText: el.querySelector('.soba-budget__skip').textContent,
          skipHidden: el.querySelector('.soba-budget__skip').hidden,
          chips: [...el.querySelectorAll('.soba-budget__chip')].map((c) => c.textContent),
          lastBorder: s('.soba-budget__last').borderLeftColor,
          lastColor: s('.soba-budget__last-text').color,
          fill: s('.soba-budget__fill').backgroundColor,
          progressText: el.querySelector('.soba-budget__progress-text').textContent,
          progressHidden: el.querySelector('.soba-budget__progress').hidden,
          progressWidth: el.querySelector('.soba-budget__progress-fill').style.width,
          softLeft: el.querySelector('.soba-budget__soft-mark').style.left};
}"""


def _state(*events: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    from soba_notebook.events import Event
    from soba_notebook.notebook.display import BudgetState

    state = BudgetState()
    for kind, data in events:
        state.apply(Event(kind, data))
    return state.snapshot()


def _budget(effective: int) -> tuple[str, dict[str, Any]]:
    return ("budget", {"session_id": "s", "effective": effective, "hard_limit": 48_808, "soft_limit": 39_046,
                       "context_window": 65_000, "source": "estimated", "inference": 1})


_START = ("compaction_start", {"operation_id": "op", "trigger": "hard_limit", "tokens_before": 50_000})


def _end(**fields: Any) -> tuple[str, dict[str, Any]]:
    base = {"operation_id": "op", "trigger": "hard_limit", "outcome": "completed", "tokens_before": 50_000,
            "tokens_after": 14_000, "checkpoint_id": "ck_1", "quality": "ok"}
    return ("compaction_end", base | fields)


def test_es_module_marks_degraded_skipped_and_failed_compactions_and_updates_live(tmp_path: Path) -> None:
    from browser_support import chromium_context

    from soba_notebook.notebook.widget import CSS_NAME, ESM_NAME, asset_path

    _require_browser()
    states = [
        _state(_budget(41_000), _START, _end()),
        _state(_budget(41_000), _START, _end(quality="degraded")),
        _state(_budget(41_000), _START, _end(outcome="skipped", reason="ROI below minimum", tokens_after=None,
                                             checkpoint_id=None, quality=None)),
        _state(_budget(41_000), _START, _end(outcome="failed", reason="summarizer error", tokens_after=None,
                                             checkpoint_id=None, quality=None)),
        _state(_budget(50_000), _START, ("compaction_progress", {"operation_id": "op", "percent": 82.4})),
        _state(),
    ]
    with chromium_context(tmp_path / "profile", viewport=(720, 900)) as context:
        page = context.new_page()
        page.set_content("<!doctype html><html><body></body></html>")
        page.evaluate(HOST, {"esm": asset_path(ESM_NAME).read_text(), "css": asset_path(CSS_NAME).read_text(),
                             "states": states})
        seen = [page.locator(f"#w{i} .soba-budget").evaluate(STYLE_OF) for i in range(len(states))]
        page.screenshot(path=str(ARTIFACTS / "budget_widget_outcomes.png"), full_page=True)
        sent = page.evaluate("() => window.__sobaSent")

        # A state change re-renders in place: the compacting widget completes.
        page.evaluate("(s) => window.__sobaModels[4].set(s)", _state(_budget(50_000), _START, _end()))
        updated = page.locator("#w4 .soba-budget").evaluate(STYLE_OF)

    ok, degraded, skipped, failed, compacting, empty = seen
    assert [w["status"] for w in seen] == ["completed", "degraded", "", "failed", "", ""]
    assert degraded["lastText"].endswith("· degraded (local fallback capsule)")
    # A skip is one quiet line; it never claims the "Last compaction" slot.
    assert skipped["lastHidden"] is True and skipped["skipHidden"] is False
    assert skipped["skipText"] == "ROI below minimum"
    assert ok["chips"] == ["hard_limit −72.0%"] and degraded["chips"] == ["hard_limit −72.0% (degraded)"]
    assert skipped["chips"] == [] and failed["chips"] == []
    assert failed["lastText"].startswith("hard_limit · failed: summarizer error")
    # Each non-ok outcome is styled differently from an ok one, and failed is not merely a warning.
    assert ok["lastBorder"] != degraded["lastBorder"] != failed["lastBorder"] != ok["lastBorder"]
    assert failed["lastColor"] != ok["lastColor"] and degraded["lastColor"] != ok["lastColor"]

    assert compacting["phase"] == "compacting" and compacting["progress"] == "82"
    assert compacting["progressText"] == "Compacting context before response · 82%"
    assert compacting["progressHidden"] is False and compacting["progressWidth"] == "82%"
    assert compacting["lastHidden"] is True
    assert compacting["zone"] == "over" and compacting["fill"] != ok["fill"]
    assert float(ok["softLeft"].rstrip("%")) == pytest.approx(100 * 39_046 / 48_808, abs=0.01)

    assert empty["phase"] == "idle" and empty["effective"] == "" and empty["zone"] == "unknown"
    assert sent == [{"type": "soba:rendered"}] * len(states)

    assert updated["phase"] == "completed" and updated["progressHidden"] is True
    assert updated["checkpoint"] == "ck_1" and updated["lastHidden"] is False


# -- the real thing: the quickstart notebook, opened interactively, on the offline scripted model ----

QUICKSTART = REPO / "notebooks" / "quickstart.ipynb"
ANALYSIS = REPO / "notebooks" / "analysis.ipynb"

# Records every state of the widget views OUTSIDE the notebook (the side panel) as they change.
SIDE_RECORDER = """
() => {
  window.__sobaSide = [];
  new MutationObserver((records) => {
    for (const r of records) {
      const node = r.target;
      if (node instanceof HTMLElement && node.matches('.soba-budget') && r.attributeName === 'data-version'
          && !node.closest('.jp-Notebook')) {
        const d = node.dataset;
        window.__sobaSide.push({version: Number(d.version), turn: d.turn, effective: d.effective,
                                compactions: Number(d.compactions || 0)});
      }
    }
  }).observe(document.body, {subtree: true, attributes: true, attributeFilter: ['data-version']});
}
"""


def _side_panel_state(notebook: LabNotebook) -> dict[str, Any]:
    page = notebook.page
    in_notebook = page.locator(".jp-Notebook .soba-budget[data-soba-budget]")
    side_roots = page.locator(".soba-budget[data-soba-budget]").evaluate_all(
        "(els) => els.filter((el) => !el.closest('.jp-Notebook')).map((el) => Object.assign({}, el.dataset))")
    chips = page.locator(".soba-budget__chip").evaluate_all(
        "(els) => els.filter((el) => !el.closest('.jp-Notebook')).map((el) => el.textContent)")
    tools = page.locator(".jp-Notebook details.soba-tool").evaluate_all(
        "(els) => els.map((el) => ({summary: el.querySelector('summary').textContent,"
        " body: el.querySelector('pre').textContent}))")
    notes = page.locator(".jp-Notebook .soba-note").evaluate_all(
        "(els) => els.map((el) => ({text: el.textContent,"
        " stderr: Boolean(el.closest('[data-mime-type=\"application/vnd.jupyter.stderr\"]'))}))")
    return {"side": side_roots, "chips": chips, "inline": in_notebook.count(), "tools": tools, "notes": notes,
            "seen": page.evaluate("() => window.__sobaSide || []")}


# Where the side panel sits and how wide the notebook is: the budget must dock in Lab's right
# sidebar (#jp-right-stack), never split the main dock panel beside the notebook.
LAYOUT = """
() => {
  const width = (el) => el ? Math.round(el.getBoundingClientRect().width) : null;
  const side = [...document.querySelectorAll('.soba-budget[data-soba-budget]')]
    .filter((el) => !el.closest('.jp-Notebook'));
  const right = document.querySelector('#jp-right-stack');
  return {
    notebook: width(document.querySelector('#jp-main-dock-panel .jp-NotebookPanel')),
    dock: width(document.querySelector('#jp-main-dock-panel')),
    right: right && right.offsetParent !== null ? width(right) : 0,
    tabBars: document.querySelectorAll('#jp-main-dock-panel .lm-DockPanel-tabBar').length,
    inRight: side.map((el) => Boolean(el.closest('#jp-right-stack'))),
    inMain: side.map((el) => Boolean(el.closest('#jp-main-dock-panel'))),
  };
}
"""


def _shoot_states(notebook: LabNotebook) -> None:
    """Screenshots of the widget in its states, saved as artifacts (one goes into docs/)."""
    page = notebook.page
    side = page.locator(".soba-budget[data-soba-budget]").filter(has_not=page.locator(".jp-Notebook")).first
    page.wait_for_selector(".soba-budget__chip", state="attached", timeout=180_000)
    side.screenshot(path=str(ARTIFACTS / "budget_side_panel_first_compaction.png"))


def test_quickstart_opened_in_jupyterlab_keeps_the_budget_in_a_side_panel_with_history_and_clipped_tools(
        tmp_path: Path) -> None:
    """The first hour: open the quickstart in Lab and run it. The live budget sits in a side panel
    and updates during the turns, the history strip lists the compactions, a long tool output shows
    head, tail, the omitted-lines marker and its exit line, the offline notice is a styled note; then
    analysis.ipynb, opened next to it, analyses the session the quickstart just recorded."""
    _require_browser()
    from playwright.sync_api import expect
    home = tmp_path / "home"
    home.mkdir()
    with open_notebook_in_lab(QUICKSTART, tmp_path, env={"HOME": str(home)}, extra_files=[ANALYSIS],
                              timeout=180) as notebook:
        page = notebook.page
        page.evaluate(SIDE_RECORDER)
        before = page.evaluate(LAYOUT)
        notebook.run_all_cells()
        _shoot_states(notebook)
        page.wait_for_selector(".jp-RenderedImage img", state="attached", timeout=300_000)
        found = _side_panel_state(notebook)
        layout = page.evaluate(LAYOUT)
        page.screenshot(path=str(ARTIFACTS / "quickstart_in_lab.png"))
        side = page.locator(".soba-budget[data-soba-budget]").filter(has_not=page.locator(".jp-Notebook")).first
        side.screenshot(path=str(ARTIFACTS / "budget_side_panel.png"))
        first_tool = page.locator(".jp-Notebook details.soba-tool").filter(has_text="lines omitted").first
        first_tool.locator("summary").click()
        first_tool.screenshot(path=str(ARTIFACTS / "tool_output_clipped.png"))

        # analysis.ipynb next to it (a second tab, as a user would open it): it must pick the
        # quickstart's session, not a demo.
        second = page.context.new_page()
        second.goto(notebook.server.url("lab/tree/analysis.ipynb"))
        analysis = LabNotebook(page=second, server=notebook.server, name="analysis.ipynb")
        second.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=120_000)
        analysis.wait_kernel_idle(120)
        analysis.run_all_cells()
        second.wait_for_selector(".jp-OutputArea-output:has-text('analysing')", state="attached", timeout=300_000)
        # Run All leaves the last cell in view, and Lab (windowing: content-visibility) does not render
        # cells out of view, so the first cell's output has no text on screen until it is scrolled to,
        # as a user would.
        said = second.locator(".jp-OutputArea-output:has-text('analysing')").first
        said.scroll_into_view_if_needed()
        expect(said).to_contain_text("analysing", use_inner_text=True, timeout=30_000)
        analysing = said.inner_text()
        second.screenshot(path=str(ARTIFACTS / "analysis_in_lab.png"))
    (ARTIFACTS / "quickstart_in_lab.txt").write_text(repr(found) + "\n" + repr((before, layout)) + "\n" + analysing
                                                     + "\n" + "\n".join(notebook.console[-60:]))

    assert len(found["side"]) == 1, found["side"]  # the live budget is in a side panel, once
    # docked in the right sidebar, not split beside the notebook in the main area
    assert layout["inRight"] == [True] and layout["inMain"] == [False], layout
    # no split: one tab area, and the notebook fills the dock panel as before (less the same padding)
    assert layout["tabBars"] == 1, layout
    assert layout["dock"] - layout["notebook"] == before["dock"] - before["notebook"], (before, layout)
    # the notebook loses only the sidebar's width (a split took half of it)
    assert layout["right"] > 0 and layout["notebook"] >= before["notebook"] - layout["right"] - 4, (before, layout)
    assert layout["notebook"] > 0.6 * before["notebook"], (before, layout)
    final = found["side"][0]
    assert final["phase"] != "compacting" and final["checkpoint"].startswith("ck_")
    assert int(final["effective"]) <= int(final["hard"])
    assert found["inline"] == 1  # only the explicit %budget cell shows it inline; turns keep summaries
    during = [s for s in found["seen"] if s["turn"] == "1"]
    assert len({s["effective"] for s in during}) > 3, "the side panel did not update during the turns"
    assert len(found["chips"]) >= 3 and all(re.search(r" −\d+\.\d%", c) for c in found["chips"]), found["chips"]
    clipped = [t for t in found["tools"] if "lines omitted" in t["body"]]
    shells = [t for t in clipped if t["summary"].startswith("shell")]
    assert shells, "no long shell output was shown"
    for tool in clipped:
        assert re.search(r"… [\d,]+ lines omitted …", tool["body"])
    for tool in shells:  # a failing test run: its summary and its exit line are never the part cut
        assert re.fullmatch(r"\[exit code \d+\]", tool["body"].splitlines()[-1])
        assert "[exit code" in tool["summary"]
    assert found["notes"] and "fixed offline demo script" in found["notes"][0]["text"]
    assert not any(n["stderr"] for n in found["notes"])
    assert "/soba-quickstart/" in analysing and "demo session" not in analysing, analysing
    for name in ("budget_side_panel.png", "budget_side_panel_first_compaction.png", "tool_output_clipped.png"):
        assert (ARTIFACTS / name).stat().st_size > 2_000
