"""A notebook with outputs: ``notebook_read``, ``notebook_run`` of 20 cells and the request build stay linear.

Run: .venv/bin/python bench/bench_notebook.py [--repeat 3] [--cells 50,100,200]

The notebook has N code cells, each with outputs as a data scientist's has: printed text (20
lines), every third cell a DataFrame (pandas' ``<table class="dataframe">`` HTML with its
``text/plain`` repr), every fifth a small PNG figure (real PNG bytes, 64×48). For each size it
times, best of ``--repeat`` (the machine is shared; the best run is the one other jobs disturbed
least):

* ``notebook_read`` of the whole notebook with ``include_images`` (parse, render, figures);
* ``notebook_run`` of 20 cells spread over the notebook, with no front end: each cell runs in the
  tool's own namespace (:class:`~soba_notebook.agent.cell_exec.PlainCells`) and the outputs are
  written into the ``.ipynb`` on disk, atomically;
* the request build: a session that read the notebook and ran it all, 20 cells a call (N / 20
  ``notebook_run`` results with their tables and figures), opened afresh; then the context builder,
  the image rule (old figures become their one-line description) and the first budget check
  (every message and image counted).

It prints each figure and its ratio to the smallest size, as wall-clock time and as this process's
CPU time (all its threads: the cell runner's and ``asyncio.to_thread``'s included, a file's fsync
wait not): linear means the ratio stays near the ratio of the sizes (2x, 4x), never above it by
much. On a shared 2-core machine the wall-clock ratios move with the other jobs' load; the CPU
ratios are the steadier measure of the work done.
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import sys
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))

import time

from _common import timed

from soba_notebook.agent.tools import ToolContext, ToolOutcome, default_tools
from soba_notebook.compaction import CompactionEngine
from soba_notebook.config import SobaConfig
from soba_notebook.session import SessionStore, ToolCall, assistant_message, tool_result, user_message
from soba_notebook.tokens import TokenCounter

RUN_CELLS = 20


def best(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """The best wall-clock time and the best CPU time of this process (every thread) over ``repeat`` runs."""
    wall = timed(fn, repeat)[1]
    cpu = min(_cpu(fn) for _ in range(repeat))
    return wall, cpu


def _cpu(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def png(width: int, height: int) -> bytes:
    """A real PNG: signature, IHDR, one IDAT of grey rows, IEND."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    rows = b"".join(b"\x00" + bytes([(x * 4) % 256 for x in range(width)]) for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


FIGURE = __import__("base64").b64encode(png(64, 48)).decode()


def frame(i: int) -> dict[str, Any]:
    rows = [(r, r * 3, r * i % 97, f"name {r}") for r in range(20)]
    html = ('<div><table border="1" class="dataframe">\n<thead><tr><th></th><th>a</th><th>b</th><th>c</th></tr>'
            "</thead><tbody>" + "".join(f"<tr><th>{r}</th><td>{a}</td><td>{b}</td><td>{c}</td></tr>"
                                        for r, a, b, c in rows) + "</tbody></table></div>")
    plain = "     a   b        c\n" + "\n".join(f"{r:<4} {a:>3} {b:>3}  {c}" for r, a, b, c in rows)
    return {"text/html": html, "text/plain": plain + "\n\n[20 rows x 3 columns]"}


def notebook(path: Path, cells: int) -> list[str]:
    """The notebook of module docstring at ``path``; its code cells' ids."""
    nb = nbformat.v4.new_notebook()
    for i in range(cells):
        cell = nbformat.v4.new_code_cell(f"x{i} = {i}\nfor k in range(20):\n    print('row', k, x{i} * k)",
                                         id=f"c{i}", execution_count=i + 1)
        outputs = [nbformat.v4.new_output("stream", name="stdout",
                                          text="".join(f"row {k} {i * k}\n" for k in range(20)))]
        if i % 3 == 0:
            outputs.append(nbformat.v4.new_output("execute_result", data=frame(i), execution_count=i + 1))
        if i % 5 == 0:
            outputs.append(nbformat.v4.new_output("display_data", data={"image/png": FIGURE,
                                                                        "text/plain": "<Figure size 64x48>"}))
        cell.outputs = outputs
        nb.cells.append(cell)
    nbformat.write(nb, path)
    return [f"c{i}" for i in range(cells)]


def call(name: str, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    return asyncio.run(default_tools(ctx.config).run(name, args, ctx))


def spread(ids: list[str], n: int) -> list[str]:
    return [ids[i * len(ids) // n] for i in range(n)]


def session(directory: Path, workspace: Path, ids: list[str]) -> Path:
    """A session that read the notebook, then ran all of it, :data:`RUN_CELLS` cells a call."""
    ctx = ToolContext(workspace)
    store = SessionStore.create(directory)
    store.append(user_message("run the whole notebook and tell me what the figures show"))
    calls: list[tuple[str, dict[str, Any]]] = [("notebook_read", {"path": "nb.ipynb", "include_images": True})]
    calls += [("notebook_run", {"path": "nb.ipynb", "cell_ids": ids[at:at + RUN_CELLS]})
              for at in range(0, len(ids), RUN_CELLS)]
    for n, (name, args) in enumerate(calls):
        tool_call = ToolCall(f"call_{n}", name, args)
        store.append(assistant_message("", [tool_call]))
        out = call(name, args, ctx)
        store.append(tool_result(tool_call.id, name, out.content, is_error=out.is_error, images=out.images,
                                 files_changed=out.data.get("files_changed"), cell_runs=out.data.get("cell_runs")))
        store.append(assistant_message(f"Cells {args.get('cell_ids', ['all'])[0]}…: the figures are grey ramps."))
    return Path(store.file)


def measure(tmp: Path, cells: int, repeat: int) -> dict[str, Any]:
    work = tmp / f"n{cells}"
    work.mkdir(parents=True)
    tmp = work
    ids = notebook(work / "nb.ipynb", cells)
    ctx = ToolContext(work)
    read = best(lambda: call("notebook_read", {"path": "nb.ipynb", "include_images": True}, ctx), repeat)
    chosen = spread(ids, RUN_CELLS)

    def run_twenty() -> None:
        out = call("notebook_run", {"path": "nb.ipynb", "cell_ids": chosen}, ctx)
        assert not out.is_error and "outputs are saved" in out.content, out.content[:400]

    run = best(run_twenty, repeat)
    file = session(tmp / f"s{cells}", work, ids)
    config = SobaConfig()

    def request() -> None:
        engine = CompactionEngine(SessionStore.open(file), config, TokenCounter("gpt-4o"))
        engine.model_messages()
        engine.measure()

    return {"read": read, "run": run, "request": best(request, repeat), "session_kb": file.stat().st_size / 1024,
            "notebook_kb": (work / "nb.ipynb").stat().st_size / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cells", default="50,100,200")
    args = parser.parse_args()
    sizes = [int(n) for n in args.cells.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        measure(Path(tmp) / "warm-up", sizes[0], 1)  # imports, the tokenizer's tables, first-call caches
        found = {n: measure(Path(tmp), n, args.repeat) for n in sizes}
    base = sizes[0]
    names = {"read": "notebook_read (include_images)", "run": f"notebook_run of {RUN_CELLS} cells, saved on disk",
             "request": "request build (open, context, images, first budget check)"}
    for key, label in names.items():
        for at, clock in ((0, "wall"), (1, "cpu")):
            parts = [f"{n:,} cells {found[n][key][at] * 1e3:,.1f} ms" + ("" if n == base else
                     f" ({found[n][key][at] / found[base][key][at]:.2f}x for {n / base:g}x cells)") for n in sizes]
            print(f"{label}, {clock}: " + ", ".join(parts))
    print("sizes: " + ", ".join(f"{n:,} cells: notebook {found[n]['notebook_kb']:,.0f} KB, session "
                                 f"{found[n]['session_kb']:,.0f} KB" for n in sizes))


if __name__ == "__main__":
    main()
