"""What ``notebook_run`` gives the model, in a real kernel: a cell that prints, shows a pandas
DataFrame and displays a matplotlib PNG comes back as clipped text, a compact table (its shape and
dtypes, which the kernel adds to the output's metadata as it runs) and the figure as an image
attachment on the tool result (stored in the transcript with its size), and the request
to an OpenAI-shaped loopback server carries the figure as an ``image_url`` part; a model that takes
no images is sent the figure's one-line description."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from kernel_support import Kernel, fake_server_project, script_tool_calls

#: a 100×75 figure: 2×1.5 inches at 50 dpi, saved as PNG bytes and displayed
FIGURE = ("import io\nimport matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt\n"
          "import pandas as pd\nfrom IPython.display import Image, display\n"
          "print('drawing')\n"
          "display(pd.DataFrame({'a': range(10), 'b': [x * x for x in range(10)]}))\n"
          "fig, ax = plt.subplots(figsize=(2, 1.5), dpi=50)\nax.plot([1, 2, 3])\n"
          "buf = io.BytesIO()\nfig.savefig(buf, format='png', dpi=50)\nplt.close(fig)\n"
          "display(Image(buf.getvalue()))")


def _project(tmp_path: Path, fake_server: FakeServer, vision: str) -> Path:
    project = fake_server_project(tmp_path, fake_server.openai_base_url)
    config = json.loads((project / ".soba" / "config.json").read_text())
    config["model"]["vision"] = vision
    config["tools"] = {"notebookRunTimeoutSec": 60}
    (project / ".soba" / "config.json").write_text(json.dumps(config))
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(FIGURE)
    cell["id"] = "plot"
    frame = nbformat.v4.new_code_cell("prices = pd.DataFrame({'price': [1.5, 2.5, 4.0], 'n': [1, 2, 3]})\nprices")
    frame["id"] = "frame"
    nb.cells = [cell, frame]
    nbformat.write(nb, project / "work.ipynb")
    return project


@pytest.fixture
def start(tmp_path: Path, fake_server: FakeServer) -> Iterator[Any]:
    kernels: list[Kernel] = []

    def go(vision: str) -> tuple[Kernel, Path]:
        project = _project(tmp_path, fake_server, vision)
        kernels.append(Kernel(project, tmp_path / "home", env={"SOBA_TEST_KEY": "sk-test-not-secret"}))
        script_tool_calls(fake_server, [("notebook_read", {"path": "work.ipynb"}),
                                        ("notebook_run", {"path": "work.ipynb", "scope": "all"})])
        return kernels[-1], project
    try:
        yield go
    finally:
        for kernel in kernels:
            kernel.close()


def _run_entry(project: Path) -> dict[str, Any]:
    (session,) = (project / ".soba" / "sessions").glob("*.jsonl")
    entries = [json.loads(line) for line in session.read_text().splitlines() if line.strip()]
    tools = [e["message"] for e in entries if e.get("message", {}).get("role") == "tool"]
    return dict(tools[-1])


def test_a_run_cell_gives_text_a_table_summary_and_its_figure_as_an_image(start: Any,
                                                                         fake_server: FakeServer) -> None:
    kernel, project = start("on")
    status, text = kernel.run("%soba run the notebook")
    assert status == "ok", text
    message = _run_entry(project)
    content = str(message["content"])
    assert "ran 2 cells of work.ipynb" in content and "[stdout]\ndrawing" in content, content
    assert "[table 10 rows × 2 columns]\ndtypes: a int64, b int64\n   a   b\n0  0   0" in content, content
    assert "<table" not in content, content
    # a trailing expression's frame too, and the facts are saved with the output for a later read
    frame_block = content.split("## cell frame · ", 1)[1]
    assert "]\n[table 3 rows × 2 columns]\ndtypes: price float64, n int64\n   price  n\n" in frame_block, content
    saved = nbformat.read(project / "work.ipynb", as_version=4).cells[1].outputs[0]
    assert saved.metadata["soba"]["table"]["shape"] == [3, 2]
    (image,) = message["attachments"]
    assert (image["mime"], image["width"], image["height"], image["cellId"]) == ("image/png", 100, 75, "plot")
    assert "[image image/png 100×75 from cell plot" in content, content
    wire = fake_server.requests[-1].body["messages"]
    parts = [p for m in wire if m["role"] == "user" and isinstance(m["content"], list) for p in m["content"]
             if p.get("type") == "image_url"]
    assert [p["image_url"]["url"] for p in parts] == [f"data:image/png;base64,{image['data']}"]


def test_a_model_without_vision_is_sent_the_figure_as_its_description(start: Any, fake_server: FakeServer) -> None:
    kernel, project = start("off")
    status, text = kernel.run("%soba run the notebook")
    assert status == "ok", text
    assert len(_run_entry(project)["attachments"]) == 1  # the transcript keeps the figure
    wire = fake_server.requests[-1].body["messages"]
    assert not any(isinstance(m["content"], list) for m in wire), wire
    tool = [m for m in wire if m["role"] == "tool"][-1]
    assert "[image image/png 100×75 from cell plot" in tool["content"], tool
