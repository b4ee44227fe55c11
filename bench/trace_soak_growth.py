"""What a soak turn leaves behind once the store's budget is full: Python allocations traced.

Run: PYTHONPATH=. .venv/bin/python bench/trace_soak_growth.py 120 240

Runs bench_soak's offline agent with the session store's budget of whole entries cut to 256 KiB
(so it is full within the first turns), takes a tracemalloc snapshot after turn A and after turn B,
and prints the traced growth a turn and the allocation sites that grew most (8 frames each). The
snapshots themselves take memory, so VmRSS in this run says nothing; bench_soak.py measures it.
"""

import sys, tracemalloc, tempfile, gc, linecache
from pathlib import Path
sys.path.insert(0, "bench")
import bench_soak
from soba_notebook.session.store import SessionStore
SessionStore._keep_bytes = 256 << 10   # the budget fills within the first turns
A, B = int(sys.argv[1]), int(sys.argv[2])
snaps = {}
def progress(turn, r):
    if turn + 1 in (A, B):
        gc.collect()
        snaps[turn + 1] = tracemalloc.take_snapshot()
        print(f"turn {turn+1}: VmRSS {r.rss_kib[-1]/1024:.1f} MiB, traced {tracemalloc.get_traced_memory()[0]/1024:.0f} KiB", flush=True)
tracemalloc.start(8)
with tempfile.TemporaryDirectory() as d:
    bench_soak.soak(Path(d) / "p", B, warmup=20, progress=progress, seed=5)
    tracemalloc.stop()
diff = snaps[B].compare_to(snaps[A], "traceback")
n = B - A
tot = sum(s.size_diff for s in diff)
print(f"traced growth {tot/1024:.0f} KiB over {n} turns = {tot/n:.0f} B/turn")
for s in diff[:14]:
    if s.size_diff <= 0: continue
    print(f"\n{s.size_diff/n:8.0f} B/turn {s.count_diff/n:6.1f} blocks/turn")
    for fr in list(s.traceback)[-8:]:
        if "soba_notebook" in fr.filename or "bench" in fr.filename or "asyncio" in fr.filename:
            print(f"     {fr.filename.split('/')[-2]}/{fr.filename.split('/')[-1]}:{fr.lineno} {linecache.getline(fr.filename, fr.lineno).strip()[:90]}")
