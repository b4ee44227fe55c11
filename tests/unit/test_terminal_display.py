"""TerminalBudgetDisplay and detect_frontend: plain IPython gets text, never widget reprs."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from soba_notebook.events import EventBus
from soba_notebook.notebook.display import TerminalBudgetDisplay, detect_frontend

REPO = Path(__file__).resolve().parents[2]
CLEAR = "\r\x1b[2K"

START = {"operation_id": "op1", "trigger": "auto_threshold", "tokens_before": 41_230,
         "hard_limit": 48_808, "soft_limit": 39_046}
END = {"operation_id": "op1", "trigger": "auto_threshold", "outcome": "completed", "reason": None,
       "tokens_before": 41_230, "tokens_after": 12_877, "reclaimed_tokens": 28_353,
       "reclaimed_percent": 68.77, "checkpoint_id": "ck_ab12cd", "duration_ms": 900, "quality": "ok",
       "source": "provider_usage"}
COMPLETION = "✓ Context compaction · auto_threshold · 41,230 → 12,877 tokens · reclaimed 68.8% · ck_ab12cd"


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def run_compaction(bus: EventBus, steps: int = 10_000, end: dict[str, Any] | None = None) -> None:
    bus.emit("budget", session_id="s", effective=41_230, hard_limit=48_808, soft_limit=39_046,
             context_window=65_000, source="provider_usage", inference=3)
    bus.emit("compaction_start", **START)
    for i in range(steps):
        bus.emit("compaction_progress", operation_id="op1", phase="summarizing", percent=100 * i / steps)
    bus.emit("compaction_end", **(end or END))


def test_progress_rewrites_one_line_in_place_with_carriage_return_and_clear() -> None:
    out = TTY()
    bus = EventBus()
    TerminalBudgetDisplay(out).attach(bus)
    bus.emit("budget", session_id="s", effective=41_230, hard_limit=48_808, soft_limit=39_046,
             context_window=65_000, source="provider_usage", inference=3)
    bus.emit("compaction_start", **START)
    for i in range(10_000):
        bus.emit("compaction_progress", operation_id="op1", phase="summarizing", percent=i / 100)

    text = out.getvalue()
    assert "\n" not in text  # still one line on screen
    updates = text.split(CLEAR)[1:]
    assert text.startswith(CLEAR)
    assert updates[0] == "Compacting context before response · 0%"
    assert updates[-1] == "Compacting context before response · 99%"
    assert len(updates) == 100  # written only when the text changes, not per event


def test_completion_replaces_the_progress_line_and_persists_on_its_own_line() -> None:
    out = TTY()
    bus = EventBus()
    TerminalBudgetDisplay(out).attach(bus)
    run_compaction(bus, steps=50)
    bus.emit("budget", session_id="s", effective=13_402, hard_limit=48_808, soft_limit=39_046,
             context_window=65_000, source="provider_usage", inference=4)
    bus.emit("turn_end", outcome="completed")

    text = out.getvalue()
    assert text.endswith(CLEAR + COMPLETION + "\n")
    assert text.count("\n") == 1  # budget events and the turn's end print nothing more


def test_a_non_terminal_stream_pads_over_the_old_line_instead_of_escape_codes() -> None:
    out = io.StringIO()
    bus = EventBus()
    TerminalBudgetDisplay(out).attach(bus)
    run_compaction(bus, steps=3, end={**END, "outcome": "skipped", "reason": "ROI below minimum",
                                      "tokens_after": None, "checkpoint_id": None, "quality": None})
    text = out.getvalue()
    assert "\x1b" not in text
    lines = text.split("\r")[1:]
    assert lines[0] == "Compacting context before response · 0%"
    assert lines[1] == "Compacting context before response · 33%"
    assert lines[-1].endswith("\n") and lines[-1].rstrip() == "· ROI below minimum"  # a skip: one quiet line


def test_degraded_and_failed_completions_are_marked() -> None:
    out = TTY()
    bus = EventBus()
    TerminalBudgetDisplay(out).attach(bus)
    run_compaction(bus, steps=2, end={**END, "quality": "degraded"})
    run_compaction(bus, steps=2, end={**END, "outcome": "failed", "reason": "summarizer error"})
    lines = [line.split(CLEAR)[-1] for line in out.getvalue().split("\n")]
    assert lines[0].startswith("⚠ ") and lines[0].endswith("degraded (local fallback capsule)")
    assert lines[1].startswith("✗ ") and "failed: summarizer error" in lines[1]


def test_an_interrupted_progress_line_is_closed_when_the_turn_ends() -> None:
    out = TTY()
    bus = EventBus()
    TerminalBudgetDisplay(out).attach(bus)
    bus.emit("compaction_start", **START)
    bus.emit("compaction_progress", operation_id="op1", phase="summarizing", percent=40)
    bus.emit("turn_end", outcome="cancelled")
    assert out.getvalue() == (CLEAR + "Compacting context before response · 0%"
                              + CLEAR + "Compacting context before response · 40%\n")


def test_default_stream_is_sys_stdout_at_write_time(capsys: pytest.CaptureFixture[str]) -> None:
    bus = EventBus()
    TerminalBudgetDisplay(ansi=True).attach(bus)
    run_compaction(bus, steps=1)
    assert capsys.readouterr().out.endswith(CLEAR + COMPLETION + "\n")


def test_detach_stops_output() -> None:
    out = TTY()
    bus = EventBus()
    display = TerminalBudgetDisplay(out).attach(bus)
    display.detach()
    run_compaction(bus, steps=5)
    assert out.getvalue() == ""


class ZMQInteractiveShell:
    kernel = object()


class TerminalInteractiveShell:
    kernel = None


class OtherShell:
    def __init__(self, kernel: object | None) -> None:
        self.kernel = kernel


def test_detect_frontend_tells_a_kernel_from_a_terminal() -> None:
    assert detect_frontend(ZMQInteractiveShell()) == "widget"
    assert detect_frontend(TerminalInteractiveShell()) == "terminal"
    assert detect_frontend(None) == "terminal"
    assert detect_frontend(OtherShell(kernel=None)) == "terminal"


def test_detect_frontend_accepts_another_shell_only_with_a_loaded_ipykernel(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ipykernel", sys.modules.get("ipykernel") or object())
    assert detect_frontend(OtherShell(kernel=object())) == "widget"
    monkeypatch.delitem(sys.modules, "ipykernel")
    assert detect_frontend(OtherShell(kernel=object())) == "terminal"


def test_detect_frontend_outside_ipython_is_terminal() -> None:
    assert detect_frontend() == "terminal"  # pytest runs no IPython shell


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def test_terminal_ipython_shows_text_and_never_a_widget_repr() -> None:
    code = (
        "from soba_notebook.events import EventBus\n"
        "from soba_notebook.notebook.display import detect_frontend\n"
        "from soba_notebook.notebook.widget import BudgetWidget, attach_budget_display\n"
        "print('frontend', detect_frontend())\n"
        "bus = EventBus()\n"
        "display = attach_budget_display(bus, 'tty')\n"
        "print('display', type(display).__name__)\n"
        "bus.emit('compaction_start', operation_id='op1', trigger='hard_limit', tokens_before=50000)\n"
        "bus.emit('compaction_end', operation_id='op1', trigger='hard_limit', outcome='completed',"
        " tokens_before=50000, tokens_after=10000, checkpoint_id='ck_x', quality='ok')\n"
        "print()\n"
        "w = BudgetWidget('tty')\n"
        "w\n"
    )
    result = subprocess.run([sys.executable, "-m", "IPython", "--no-banner", "--simple-prompt", "--colors=nocolor",
                             "-c", code], capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120,
                            check=False)
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert "frontend terminal" in out
    assert "display TerminalBudgetDisplay" in out
    assert "hard_limit · 50,000 → 10,000 tokens · reclaimed 80.0% · ck_x" in out
    assert "soba budget [tty] · Context budget: no measurement yet" in out
    for widget_text in ("BudgetWidget(", "model_id", "application/vnd.jupyter.widget-view", "object at 0x"):
        assert widget_text not in out
