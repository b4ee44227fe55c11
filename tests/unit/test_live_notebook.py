"""The notebook open in JupyterLab, live, without a kernel: the open document is found by any path to
its file, never edited without a read (a refusal is an error, not a write to the file), and a notebook
the front end does not hold falls back to the file, saying why once per reason. The turns in a real
kernel against a loopback front end are in ``tests/kernel/test_live_notebook_kernel.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.agent.notebook_access import ReadStamp
from soba_notebook.agent.notebook_doc import NotebookEdit, cell_source, source_hash
from soba_notebook.errors import ToolError
from soba_notebook.notebook.live_channel import Reply
from soba_notebook.notebook.live_notebook import LiveNotebooks

UNSAVED = "total = 10  # typed in JupyterLab, not saved"


def _notebook(path: Path) -> dict[str, Any]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Totals"), nbformat.v4.new_code_cell("total = 1"),
                nbformat.v4.new_code_cell("print(total)")]
    for cell, cid in zip(nb.cells, ("intro", "setup", "show"), strict=True):
        cell["id"] = cid
    nbformat.write(nb, path)
    return json.loads(path.read_text())


def _tool_texts(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body["messages"] if m.get("role") == "tool"]


def _script(*calls: dict[str, Any]) -> Any:
    """A model that makes ``calls`` one per request, then answers in text."""
    def handler(path: str, body: dict[str, Any]) -> dict[str, Any]:
        done = len(_tool_texts(body))
        if done < len(calls):
            return {"tool_calls": [{"id": f"c{done}", **calls[done]}], "usage": False}
        return {"text": "Done.", "usage": False}
    return handler


# -- the kernel-side rules without a kernel -----------------------------------------------------


class _Front:
    """A front end as a request function: knows notebooks by the paths in ``docs``."""

    def __init__(self, docs: dict[str, dict[str, Any]]) -> None:
        self.docs = docs
        self.sent: list[dict[str, Any]] = []

    def __call__(self, request: Any) -> Reply:
        self.sent.append(dict(request))
        doc = self.docs.get(request["path"])
        if doc is None:
            return Reply({"found": False, "open": sorted(self.docs)})
        if request["op"] == "read":
            return Reply({"found": True, "notebook": doc})
        return Reply({"found": True, "ok": True})


def test_a_notebook_the_front_end_names_by_another_path_to_the_same_file_is_found(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    doc = _notebook(real / "a.ipynb")
    (tmp_path / "link").symlink_to(real)
    front = _Front({str(tmp_path / "link" / "a.ipynb"): doc})  # the server root is the link
    nb = LiveNotebooks(front).read((real / "a.ipynb").resolve())
    assert nb is not None and [c["id"] for c in nb.cells] == ["intro", "setup", "show"]
    assert [r["path"] for r in front.sent] == [str(real / "a.ipynb"), str(tmp_path / "link" / "a.ipynb")]


def test_an_open_notebook_is_never_edited_without_a_read_and_a_refusal_is_an_error_not_the_file(
        tmp_path: Path) -> None:
    path = tmp_path / "a.ipynb"
    doc = _notebook(path)
    live = LiveNotebooks(_Front({str(path): doc}))
    edit = NotebookEdit("replace", "show", "print(2)")
    with pytest.raises(ToolError, match=r"read a\.ipynb with notebook_read before editing it"):
        live.apply(path, edit, None)
    seen = ReadStamp(0, 0, "", {c["id"]: source_hash(cell_source(c)) for c in doc["cells"]}, live=True)
    refused = LiveNotebooks(lambda request: Reply({"found": True, "notebook": doc}) if request["op"] == "read"
                            else Reply({"found": True, "ok": False, "error": "cell show changed"}))
    with pytest.raises(ToolError, match=r"JupyterLab refused the edit of a\.ipynb: cell show changed"):
        refused.apply(path, edit, seen)


def test_a_notebook_not_open_in_the_front_end_falls_back_to_the_file_and_says_why_once_per_reason(
        tmp_path: Path) -> None:
    path = tmp_path / "a.ipynb"
    _notebook(path)
    live = LiveNotebooks(_Front({}))
    assert live.read(path) is None
    assert live.fallback_note(path) == "(not the live JupyterLab document: a.ipynb is not open in JupyterLab; the " \
                                       "file was used)"
    assert live.read(path) is None and live.fallback_note(path) is None
