"""A real kernel: the offline model's session says what it cost — nothing, because it is local.

Turns and a ``%compact`` with the scripted model, then ``%soba status`` (the cost line), the
compaction's completion line (its summary's cost) and ``views`` (``cost_usd`` per reply, the
summary's cost in the flight records). Priced figures are checked by hand in tests/test_pricing.py
and in the browser widget test; here it is the wiring, end to end, in a kernel.
"""

from __future__ import annotations

from pathlib import Path

from kernel_support import Kernel


def _run(kernel: Kernel, code: str) -> str:
    status, text = kernel.run(code, timeout=180)
    assert status == "ok", text
    return text


def test_an_offline_session_says_local_in_status_compaction_line_and_views(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    kernel = Kernel(project, tmp_path / "home")
    try:
        before = _run(kernel, "%soba status")
        assert "no model requests yet" in before, before
        _run(kernel, "%soba Create a tiny calculator package and make its tests pass.")
        _run(kernel, "%soba Add a parser so that expressions like 2 * (3 + 4) can be evaluated.")
        compact = _run(kernel, "%compact focus on the parser")
        assert "summary cost $0 (local)" in compact, compact
        status = _run(kernel, "%soba status")
        (line,) = [line for line in status.splitlines() if line.startswith("cost ")]
        assert line.split(None, 1)[1] == "local: $0", status
        frame = _run(kernel, "from soba_notebook import views\n"
                             "import soba_notebook\n"
                             "t = views.transcript(soba_notebook.current_store())\n"
                             "a = t[t.role == 'assistant']\n"
                             "f = views.flight_records(soba_notebook.current_store())\n"
                             "c = f[f.kind == 'compaction']\n"
                             "c = c[c.generated.fillna(False).astype(bool)]\n"  # the ones that asked for a summary
                             "print(len(a) > 0, set(a.cost_status), a.cost_usd.sum(),"
                             " list(c.summary_cost_status), list(c.summary_cost_usd))")
        assert "True {'local'} 0.0 ['local'] [0.0]" in frame, frame
    finally:
        kernel.close()
