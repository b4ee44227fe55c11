"""In a real kernel, a turn's end-of-turn line, the widget under it, ``%soba status`` and
``views.budget_history`` show one figure, the next request, and say so.

The model is the loopback server, which reports usage like a real one, so the figure is the
provider's count of the last request plus the reply and tool result appended since: the case where
the end-of-turn line said 2,798 (the request sent) and the widget 2,862 (the next one).
"""

from __future__ import annotations

import re
from pathlib import Path

from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from kernel_support import Kernel, fake_server_project

SESSION = ("[m for m in get_ipython().magics_manager.registry.values() if hasattr(m, 'session')][0]"
           ".session")


def _run(kernel: Kernel, code: str) -> str:
    status, text = kernel.run(code)
    assert status == "ok", text
    return text


def test_a_turns_end_shows_one_figure_of_the_next_request_in_every_place(
        tmp_path: Path, fake_server: FakeServer) -> None:
    q = fake_server.openai
    q.enqueue(tool_calls=[{"id": "w1", "name": "write_file",
                           "arguments": {"path": "notes.txt", "content": "a line of notes\n" * 40}}])
    q.enqueue(text="I wrote notes.txt. " * 30)
    project = fake_server_project(tmp_path, fake_server.openai_base_url)
    kernel = Kernel(project, tmp_path / "home", env={"SOBA_TEST_KEY": "k" * 12})
    try:
        turn = _run(kernel, "%soba -- write the notes")
        status = _run(kernel, "%soba status")
        widget = kernel.value(f"(lambda s: (s['effective'], s['request_words'], s['source']))({SESSION}.display.state)")
        _run(kernel, "from soba_notebook import views")
        history = kernel.value("(lambda f: (int(f['tokens_after'].iloc[-1]), str(f['event'].iloc[-1])))("
                               f"views.budget_history({SESSION}.handle.store.file))")
    finally:
        kernel.close()
    line = re.search(r"After this turn: context ([\d,]+) / [\d,]+ tokens \([\d.]+%\), (next request)", turn)
    assert line is not None, turn
    figure = int(line.group(1).replace(",", ""))
    told = re.search(r"^context\s+([\d,]+) / [\d,]+ tokens, next request \(soft [\d,]+, provider_usage\)", status,
                     re.MULTILINE)
    assert told is not None, status
    assert int(told.group(1).replace(",", "")) == figure
    assert widget == repr((figure, "next request", "provider_usage"))
    assert history == repr((figure, "next_request"))
    sent = [r.body for r in fake_server.requests]
    assert len(sent) == 2, "a tool call and the reply"
