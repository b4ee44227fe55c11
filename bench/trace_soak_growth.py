"""What a soak turn leaves behind once the store's budget is full: Python allocations traced.

Run: PYTHONPATH=. .venv/bin/python bench/trace_soak_growth.py [--from 120] [--to 240]

Runs bench_soak's offline agent with the session store's budget of whole entries cut to 256 KiB
(so it is full within the first turns), takes a tracemalloc snapshot after turn ``--from`` and
after turn ``--to``, and prints the traced growth a turn and the allocation sites that grew most
(the SOBA frames of each). The snapshots themselves take memory, so resident memory in this run
says nothing; ``bench_soak.py`` measures that.
"""

from __future__ import annotations

import argparse
import gc
import linecache
import sys
import tempfile
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_soak

from soba_notebook.session.store import SessionStore

#: the store's budget of whole entries for this run: full within the first turns
BUDGET = 256 << 10
FRAMES = 8


def _where(frame: tracemalloc.Frame) -> str:
    name = "/".join(Path(frame.filename).parts[-2:])
    return f"{name}:{frame.lineno} {linecache.getline(frame.filename, frame.lineno).strip()[:90]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="start", type=int, default=120)
    parser.add_argument("--to", dest="end", type=int, default=240)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    SessionStore._keep_bytes = BUDGET
    snapshots: dict[int, tracemalloc.Snapshot] = {}

    def progress(turn: int, result: bench_soak.SoakResult) -> None:
        if turn + 1 in (args.start, args.end):
            gc.collect()
            snapshots[turn + 1] = tracemalloc.take_snapshot()
            print(f"turn {turn + 1:,}: traced {tracemalloc.get_traced_memory()[0] / 1024:,.0f} KiB", flush=True)

    tracemalloc.start(FRAMES)
    with tempfile.TemporaryDirectory() as tmp:
        bench_soak.soak(Path(tmp) / "project", args.end, warmup=20, progress=progress, seed=5)
    tracemalloc.stop()
    turns = args.end - args.start
    diff = snapshots[args.end].compare_to(snapshots[args.start], "traceback")
    grown = sum(stat.size_diff for stat in diff)
    print(f"traced growth {grown / 1024:,.0f} KiB over {turns:,} turns: {grown / turns:,.0f} bytes a turn")
    for stat in [s for s in diff if s.size_diff > 0][:args.top]:
        print(f"\n{stat.size_diff / turns:8,.0f} B a turn, {stat.count_diff / turns:5.1f} blocks a turn")
        for frame in stat.traceback:
            if "soba_notebook" in frame.filename:
                print("    " + _where(frame))


if __name__ == "__main__":
    main()
