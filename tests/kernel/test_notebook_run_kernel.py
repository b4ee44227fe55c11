"""``notebook_run`` in a real kernel with no front end: a scripted model (loopback server) runs cells
of a notebook on disk; the outputs land in the file (validated by nbformat), a cell's error stops
the run, ``stale`` and ``from`` choose the right cells, and the stop button interrupts a long cell."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from kernel_support import Kernel, fake_server_project, script_tool_calls

CELLS = {"setup": "x = 6\nprint('set up', x)",
         "show": "from IPython.display import HTML, display\ndisplay(HTML('<b>bold</b>'))\nx * 7",
         "warn": "import sys\nprint('careful', file=sys.stderr)\nx"}


def _write(path: Path, cells: dict[str, str]) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title")]
    nb.cells[0]["id"] = "title"
    for cid, source in cells.items():
        cell = nbformat.v4.new_code_cell(source)
        cell["id"] = cid
        nb.cells.append(cell)
    nbformat.write(nb, path)


@pytest.fixture
def kernel(tmp_path: Path, fake_server: FakeServer) -> Iterator[tuple[Kernel, Path]]:
    project = fake_server_project(tmp_path, fake_server.openai_base_url)
    config = json.loads((project / ".soba" / "config.json").read_text())
    config["tools"] = {"notebookRunTimeoutSec": 60}
    (project / ".soba" / "config.json").write_text(json.dumps(config))
    _write(project / "work.ipynb", CELLS)
    kernel = Kernel(project, tmp_path / "home", env={"SOBA_TEST_KEY": "sk-test-not-secret"})
    try:
        yield kernel, project / "work.ipynb"
    finally:
        kernel.close()


_script = script_tool_calls


def _results(fake_server: FakeServer) -> list[str]:
    body = fake_server.requests[-1].body
    return [str(m.get("content")) for m in body["messages"] if m.get("role") == "tool"]


def _cells(path: Path) -> dict[str, Any]:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    return {c["id"]: c for c in nb.cells}


def _read(path: str = "work.ipynb") -> tuple[str, dict[str, Any]]:
    return ("notebook_read", {"path": path})


def test_run_all_puts_counts_streams_displays_and_results_into_the_file(kernel: tuple[Kernel, Path],
                                                                      fake_server: FakeServer) -> None:
    k, path = kernel
    _script(fake_server, [_read(), ("notebook_run", {"path": "work.ipynb", "scope": "all"})])
    status, text = k.run("%soba run the whole notebook")
    assert status == "ok", text
    result = _results(fake_server)[1]
    assert "ran 3 cells of work.ipynb" in result and "[stdout]\nset up 6" in result, result
    assert "[display] <IPython.core.display.HTML object>" in result and "[result] 42" in result, result
    assert "[stderr]\ncareful" in result, result
    cells = _cells(path)
    counts = [cells[c]["execution_count"] for c in ("setup", "show", "warn")]
    assert counts[0] is not None and counts == [counts[0], counts[0] + 1, counts[0] + 2], counts
    assert cells["setup"]["outputs"] == [{"output_type": "stream", "name": "stdout", "text": "set up 6\n"}]
    kinds = [o["output_type"] for o in cells["show"]["outputs"]]
    assert kinds == ["display_data", "execute_result"], kinds
    assert cells["show"]["outputs"][0]["data"]["text/html"] == "<b>bold</b>"
    assert cells["show"]["outputs"][1]["data"]["text/plain"] == "42"
    assert [o["name"] for o in cells["warn"]["outputs"] if o["output_type"] == "stream"] == ["stderr"]
    assert k.value("x") == "6"  # the cells ran in the kernel's own namespace
    # the next user cell continues the count: no number is used twice
    assert int(k.value("get_ipython().execution_count")) > counts[2]


def test_run_by_ids_runs_only_those_cells_in_notebook_order(kernel: tuple[Kernel, Path],
                                                            fake_server: FakeServer) -> None:
    k, path = kernel
    _script(fake_server, [_read(), ("notebook_run", {"path": "work.ipynb", "cell_ids": ["warn", "setup"]})])
    status, text = k.run("%soba run two cells")
    assert status == "ok", text
    result = _results(fake_server)[1]
    assert result.index("## cell setup") < result.index("## cell warn") and "## cell show" not in result, result
    cells = _cells(path)
    assert cells["show"]["execution_count"] is None and cells["show"]["outputs"] == []
    assert cells["warn"]["execution_count"] == cells["setup"]["execution_count"] + 1


def test_an_error_stops_the_run_and_is_the_result(tmp_path: Path, kernel: tuple[Kernel, Path],
                                                  fake_server: FakeServer) -> None:
    k, path = kernel
    _write(path, {"one": "a = 1", "boom": "print('before')\n1 / 0", "after": "b = 2"})
    _script(fake_server, [_read(), ("notebook_run", {"path": "work.ipynb", "scope": "all"})])
    status, text = k.run("%soba run all")
    assert status == "ok", text
    result = _results(fake_server)[1]
    assert "cell boom of work.ipynb raised ZeroDivisionError; the run stopped there" in result, result
    assert "not run: after" in result
    cells = _cells(path)
    error = cells["boom"]["outputs"][-1]
    assert error["output_type"] == "error" and error["ename"] == "ZeroDivisionError"
    assert any("1 / 0" in line for line in error["traceback"]), error
    assert cells["after"]["execution_count"] is None and k.value("'b' in dir()") == "False"


def test_stale_runs_the_changed_cell_and_the_cells_below_it_and_from_runs_from_a_cell(
        kernel: tuple[Kernel, Path], fake_server: FakeServer) -> None:
    k, path = kernel
    _script(fake_server, [
        _read(), ("notebook_run", {"path": "work.ipynb", "scope": "all"}),
        ("notebook_run", {"path": "work.ipynb", "scope": "stale"}),
        ("notebook_edit", {"path": "work.ipynb", "cell_id": "show", "action": "replace", "source": "x * 2"}),
        ("notebook_run", {"path": "work.ipynb", "scope": "stale"}),
        ("notebook_run", {"path": "work.ipynb", "scope": "from", "cell_ids": ["warn"]}),
    ])
    status, text = k.run("%soba rerun what changed")
    assert status == "ok", text
    results = _results(fake_server)
    assert "no cell of work.ipynb needed running" in results[2], results[2]
    assert "ran 2 cells" in results[4] and "## cell show" in results[4] and "## cell warn" in results[4]
    assert "## cell setup" not in results[4] and "[result] 12" in results[4], results[4]
    assert "ran 1 cell of work.ipynb" in results[5] and "## cell warn" in results[5], results[5]
    cells = _cells(path)
    assert cells["show"]["outputs"][0]["data"]["text/plain"] == "12"
    assert cells["warn"]["execution_count"] > cells["show"]["execution_count"] > cells["setup"]["execution_count"]


def test_a_run_of_a_file_changed_since_the_read_is_refused(kernel: tuple[Kernel, Path],
                                                           fake_server: FakeServer) -> None:
    k, path = kernel
    _script(fake_server, [_read(), ("shell", {"command": "touch -d '2001-01-01' work.ipynb && echo >> work.ipynb"}),
                          ("notebook_run", {"path": "work.ipynb", "scope": "all"})])
    status, text = k.run("%soba run")
    assert status == "ok", text
    assert "changed since you last read it" in _results(fake_server)[2]
    assert _cells(path)["setup"]["execution_count"] is None


def test_the_stop_button_interrupts_a_long_cell_and_the_turn(kernel: tuple[Kernel, Path],
                                                             fake_server: FakeServer) -> None:
    k, path = kernel
    marker = path.parent / "started.txt"
    _write(path, {"long": f"open({str(marker)!r}, 'w').close()\nimport time\nfor _ in range(600):\n"
                          f"    time.sleep(0.1)", "after": "late = 1"})
    _script(fake_server, [_read(), ("notebook_run", {"path": "work.ipynb", "scope": "all"})])
    msg_id = k.submit("%soba run the long cell")
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline, "the long cell never started"
        time.sleep(0.05)
    k.km.interrupt_kernel()
    k.wait(msg_id)
    cells = _cells(path)
    assert cells["long"]["outputs"][-1]["ename"] == "KeyboardInterrupt", cells["long"]["outputs"]
    assert cells["after"]["execution_count"] is None and k.value("'late' in dir()") == "False"
    (session,) = (path.parent / ".soba" / "sessions").glob("*.jsonl")
    text = session.read_text()
    assert "stopped (cancelled) while running cell long of work.ipynb" in text, text[-3000:]
