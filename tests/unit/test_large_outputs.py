"""Large outputs never block a read: a 50 MB output and a 10,000-row DataFrame reach the model
clipped, the omission counted, never whole (``notebook_read`` and ``notebook_run`` on real files,
the DataFrame a real pandas one with its shape and dtypes)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pandas as pd

from soba_notebook.agent.cell_outputs import outputs_for_model
from soba_notebook.agent.table_facts import table_metadata
from soba_notebook.agent.tools import ToolContext
from unit.test_notebook_tools import run

LINE = "0123456789" * 5  # 50 characters, 51 with its newline


def _notebook(path: Path, *cells: nbformat.NotebookNode) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    nbformat.write(nb, path)


def test_a_50_mb_output_is_read_as_a_few_lines_with_the_omission_counted(tmp_path: Path) -> None:
    lines = 50 * 1024 * 1024 // (len(LINE) + 1)
    many = nbformat.v4.new_code_cell("print(...)", id="many")
    many.outputs = [nbformat.v4.new_output("stream", name="stdout", text=(LINE + "\n") * lines)]
    one = nbformat.v4.new_code_cell("print(...)", id="one")
    one.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "x" * (50 * 1024 * 1024)},
                                          execution_count=2)]
    _notebook(tmp_path / "big.ipynb", many, one)
    assert (tmp_path / "big.ipynb").stat().st_size > 100 * 1024 * 1024

    for include_images in (False, True):
        text = run("notebook_read", {"path": "big.ipynb", "include_images": include_images},
                   ToolContext(tmp_path)).content
        assert len(text) < 12_000, len(text)
        assert "## cell one" in text  # a large output does not push the cells after it out of the read
        omitted = re.search(r"… ([\d,]+) lines omitted …", text)
        assert omitted is not None, text
        shown = text.count(LINE)
        assert int(omitted[1].replace(",", "")) + shown == lines  # every line is counted: shown or omitted
        chars = re.search(r"… ([\d,]+) characters omitted …", text)
        assert chars is not None and int(chars[1].replace(",", "")) > 50 * 1024 * 1024 - 2_000


def test_a_10000_row_dataframe_is_its_shape_dtypes_and_head_rows_never_its_html() -> None:
    frame = pd.DataFrame({"city": [f"city {i}" for i in range(10_000)], "price": [i * 0.5 for i in range(10_000)],
                          "sold": range(10_000)})
    html = frame.to_html()  # every row: about a megabyte of HTML
    assert len(html) > 500_000
    output = {"output_type": "execute_result", "execution_count": 1, "metadata": table_metadata(frame),
              "data": {"text/html": html, "text/plain": repr(frame)}}
    text, images = outputs_for_model([output])
    assert images == ()
    dtypes = ", ".join(f"{name} {dtype}" for name, dtype in frame.dtypes.items())  # city: object or str (pandas 3)
    assert dtypes.startswith("city ") and dtypes.endswith(", price float64, sold int64")
    assert text.startswith(f"[table 10,000 rows × 3 columns]\ndtypes: {dtypes}\n"), text
    assert "<table" not in text and "city 9999" not in text and "… first 6 rows shown" in text
    assert len(text) < 1_000


def test_a_run_cell_showing_a_dataframe_gives_its_dtypes_and_saves_them_in_its_output_metadata(tmp_path: Path) -> None:
    source = ("import pandas as pd\n"
              "df = pd.DataFrame({'price': [i / 4 for i in range(10_000)], 'n': range(10_000)})\n"
              "df")
    _notebook(tmp_path / "t.ipynb", nbformat.v4.new_code_cell(source, id="frame"))
    ctx = ToolContext(tmp_path)
    run("notebook_read", {"path": "t.ipynb"}, ctx)
    result = run("notebook_run", {"path": "t.ipynb", "cell_ids": ["frame"]}, ctx)
    assert "[table 10,000 rows × 2 columns]\ndtypes: price float64, n int64\n" in result.content, result.content
    assert "9999" not in result.content.split("dtypes:", 1)[1]
    saved = nbformat.read(tmp_path / "t.ipynb", as_version=4).cells[0].outputs[0]
    assert saved.metadata["soba"]["table"] == {"shape": [10_000, 2], "dtypes": [["price", "float64"], ["n", "int64"]]}
    assert nbformat.validate(nbformat.read(tmp_path / "t.ipynb", as_version=4)) is None
    again = run("notebook_read", {"path": "t.ipynb"}, ctx).content  # a later read shows them too
    assert "[result] [table 10,000 rows × 2 columns] dtypes: price float64, n int64\n" in again, again
