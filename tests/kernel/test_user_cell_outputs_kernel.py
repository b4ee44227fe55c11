"""The user's own runs are context too, in a real kernel: the note of the cells the user ran since
the last turn carries each cell's output summary (printed text clipped with a marker, a DataFrame
as a table, a figure as its one-line description and never as an image), and a cell that sets a
secret-looking variable shows neither its input nor its output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from kernel_support import Kernel, fake_server_project

USER_CELLS = (
    "print('hello from the user')",
    "import pandas as pd\npd.DataFrame({'a': [1, 2, 3], 'b': [4, 5, 6]})",
    "import io\nimport matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt\n"
    "from IPython.display import Image, display\nfig, ax = plt.subplots(figsize=(2, 1.5), dpi=50)\n"
    "buf = io.BytesIO()\nfig.savefig(buf, format='png', dpi=50)\nplt.close(fig)\ndisplay(Image(buf.getvalue()))",
    "for i in range(2000):\n    print('line', i)",
    "MY_API_TOKEN = 'not-a-real-one'\nprint('token is', MY_API_TOKEN)",
)


@pytest.fixture
def kernel(tmp_path: Path, fake_server: FakeServer) -> Iterator[Kernel]:
    project = fake_server_project(tmp_path, fake_server.openai_base_url)
    config = json.loads((project / ".soba" / "config.json").read_text())
    config["model"]["vision"] = "on"
    (project / ".soba" / "config.json").write_text(json.dumps(config))
    fake_server.handler = lambda path, body: {"text": "noted", "usage": False}
    kernel = Kernel(project, tmp_path / "home", env={"SOBA_TEST_KEY": "sk-test-not-secret"})
    try:
        yield kernel
    finally:
        kernel.close()


def _note(fake_server: FakeServer) -> str:
    messages: list[dict[str, Any]] = fake_server.requests[-1].body["messages"]
    assert not any(isinstance(m.get("content"), list) for m in messages), "no image is attached to the note"
    notes = [str(m["content"]) for m in messages if str(m.get("content", "")).startswith("<user_cells>")]
    return notes[-1]  # this turn's (an earlier turn's note stays in the conversation)


def test_the_note_of_the_users_cells_carries_their_output_summaries(kernel: Kernel, fake_server: FakeServer) -> None:
    for code in USER_CELLS:
        status, text = kernel.run(code)
        assert status == "ok", (code, text)
    status, text = kernel.run("%soba what did I just do?")
    assert status == "ok", text
    note = _note(fake_server)
    hello = note[note.index("print('hello from the user')"):]
    assert hello.startswith("print('hello from the user')\nOut:\n[stdout]\nhello from the user"), note
    assert "Out:\n[table 3 rows]\n   a  b\n0  1  4" in note, note
    assert "display(Image(buf.getvalue()))\nOut:\n[image image/png 100×75: figure 100×75]" in note, note
    assert "lines omitted" in note and "line 1999" in note and "line 1000\n" not in note, note
    assert "not-a-real-one" not in note and "token is" not in note, note
    assert len(note) < 4_000, len(note)


def test_outputs_are_noted_once_then_the_next_turn_hears_only_new_cells(kernel: Kernel,
                                                                          fake_server: FakeServer) -> None:
    for code in ("print('first')", "%soba one", "print('second')", "%soba two"):
        status, text = kernel.run(code)
        assert status == "ok", (code, text)
    note = _note(fake_server)
    assert "Out:\n[stdout]\nsecond" in note and "print('first')" not in note, note
