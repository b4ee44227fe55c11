"""Costs that stay linear as sessions grow, and fleet analysis: the ratios of issue 16, in one run.

Run: .venv/bin/python bench/bench_linear.py [--repeat 5] [--only simulate_path]
Needs ../shared/data/transcripts beside the repository for the pi-mono, import and fleet figures.

Every figure is the best of ``--repeat`` runs (the machine is shared; the best run is the one the
other jobs disturbed least). Prints one line per figure, each with its ratio and goal.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_foundation import write_big_session
from bench_views import generate

from soba_notebook import views
from soba_notebook.analysis._common import clear_caches
from soba_notebook.analysis.simulation import simulation_config
from soba_notebook.compaction import CompactionEngine
from soba_notebook.compaction.simulate import replay
from soba_notebook.config import SobaConfig
from soba_notebook.importers import import_transcript, import_transcripts
from soba_notebook.session import Entry, SessionStore, user_message
from soba_notebook.session.context import build_context
from soba_notebook.tokens import TokenCounter

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "transcripts"
PI = SHARED / "pi-mono" / "large-session.jsonl"


def best(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return min(samples)


def verdict(ratio: float, goal: float) -> str:
    return f"goal <= {goal:g}x: {'met' if ratio <= goal else 'NOT met'}"


# -- 1. simulate pi-mono replicated ----------------------------------------------------------------
def bench_simulate(tmp: Path, repeat: int) -> None:
    store = SessionStore.open(import_transcript(PI, tmp / "pi"))
    path = [e for e in store.path() if e.type not in ("capsule", "leaf", "session")]

    def replicated(k: int) -> list[Entry]:
        return [Entry(e.type, e.data, f"r{r}-{e.id}", None, e.ts) for r in range(k) for e in path]

    config = simulation_config({"contextWindow": 65000, "maxOutputTokens": 8000})
    sources = {k: replicated(k) for k in (1, 16)}
    times = {k: float("inf") for k in sources}
    for _ in range(repeat):  # interleaved, so a burst of load from other jobs hits both sizes alike
        for k, source in sources.items():
            # a fresh counter each run: no token count is cached from an earlier run
            start = time.perf_counter()
            replay(source, config, counter=TokenCounter("gpt-4o"))
            times[k] = min(times[k], time.perf_counter() - start)
    ratio = times[16] / times[1]
    print(f"simulate pi-mono at 65k: 1x ({len(path):,} entries) {times[1]:.2f} s, 16x {times[16]:.2f} s, "
          f"ratio {ratio:.1f}x (linear = 16x; {verdict(ratio, 20)})")


# -- 1b. the path users call: views.simulate(file), 32x against 2x, process time -------------------
def bench_simulate_path(tmp: Path, repeat: int) -> None:
    """``views.simulate(path)`` (open the file, replay, DataFrame) of pi-mono replicated 2x and 32x
    into pi files (bench_pi.replicate_pi) and imported, in a warm process; process time, so the
    other jobs of a loaded machine count less than on a wall clock."""
    from bench_pi import replicate_pi

    files = {}
    for k in (2, 32):
        files[k] = import_transcript(replicate_pi(PI, tmp / f"pi-{k}x.jsonl", k), tmp / f"sim-{k}x")
    views.simulate(files[2], 65000, 8000)  # warm: imports, encodings, the first DataFrame
    times = {k: float("inf") for k in files}
    for _ in range(repeat):  # interleaved, as above
        for k, file in files.items():
            start = time.process_time()
            views.simulate(file, 65000, 8000)
            times[k] = min(times[k], time.process_time() - start)
    ratio = times[32] / times[2]
    print(f"views.simulate(path) of pi-mono at 65k, process time: 2x {times[2]:.2f} s, 32x {times[32]:.2f} s, "
          f"ratio {ratio:.1f}x (linear = 16x; {verdict(ratio, 17.5)}; load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())})")


# -- 2. request build and 3. first budget check after open -----------------------------------------
def bench_request_and_reopen(tmp: Path, repeat: int) -> None:
    config = SobaConfig()
    file_100k = generate(tmp / "s100k", 100_000, 0)
    file_1k = generate(tmp / "s1k", 1_000, 0)
    store = SessionStore.open(file_100k)
    engine = CompactionEngine(store, config, TokenCounter("gpt-4o"))
    engine.model_messages()
    samples = []
    for i in range(300):
        store.append(user_message(f"one more {i}"))
        start = time.perf_counter()
        engine.model_messages()
        samples.append(time.perf_counter() - start)
    held = len(engine.model_messages())
    full = best(lambda: build_context(store.path()), 3)
    print(f"request build at 100k entries with a capsule ({held} messages in the request): median "
          f"{statistics.median(samples) * 1e3:.3f} ms, best {min(samples) * 1e3:.3f} ms (goal <= 1 ms: "
          f"{'met' if statistics.median(samples) <= 1e-3 else 'NOT met'}); a full rebuild from the path "
          f"costs {full * 1e3:.1f} ms")

    def first_check(file: Path) -> float:
        samples = []
        for _ in range(repeat):
            opened = SessionStore.open(file)
            eng = CompactionEngine(opened, config, TokenCounter("gpt-4o"))  # nothing counted yet
            start = time.perf_counter()
            eng.measure()
            samples.append(time.perf_counter() - start)
        return min(samples)

    t1k, t100k = first_check(file_1k), first_check(file_100k)
    ratio = t100k / t1k
    print(f"first budget check after open: 1k entries {t1k * 1e3:.2f} ms, 100k entries with a capsule "
          f"{t100k * 1e3:.2f} ms, ratio {ratio:.2f}x ({verdict(ratio, 10)})")


# -- 4. peak memory of open -------------------------------------------------------------------------
# VmHWM (the peak resident set of this process image): ru_maxrss would carry the parent's peak over exec
_HWM = "h=lambda:int([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]);"
_BARE = ("import json,sys;" + _HWM + "b=h();x=[json.loads(l) for l in open(sys.argv[1],'rb')];print(h()-b)")
_OPEN = ("import sys;from soba_notebook.session import SessionStore;" + _HWM +
         "b=h();s=SessionStore.open(sys.argv[1]);print(h()-b)")


def bench_memory(tmp: Path, repeat: int) -> None:
    path = tmp / "big.jsonl"
    n = write_big_session(path, 100)
    with open(path, "a", encoding="utf-8") as fh:  # one emoji: a whole decoded text would be 4 bytes a char
        fh.write(json.dumps({"type": "message", "id": "emoji", "parentId": f"e{n - 1:08d}",
                             "ts": "2026-01-01T00:00:00.000Z", "message": {"role": "user", "content": "🎉"}},
                            ensure_ascii=False) + "\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}

    def peak(code: str) -> float:  # growth of the max resident set while loading, in MB
        return min(int(subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                                      env=env, check=True).stdout) / 1024 for _ in range(repeat))

    bare, opened = peak(_BARE), peak(_OPEN)
    ratio = opened / bare
    print(f"open {path.stat().st_size / 1e6:.0f} MB ({n + 1:,} entries) peak memory: {opened:.0f} MB, the bare "
          f"json.loads loop keeping its objects {bare:.0f} MB, ratio {ratio:.2f}x ({verdict(ratio, 1.5)})")


# -- 5. import against the floor ---------------------------------------------------------------------
def bench_import(tmp: Path, repeat: int) -> None:
    def floor() -> None:  # parse every line, write every record back as one JSON line, in one write
        out = Path(tempfile.mkdtemp(dir=tmp)) / "floor.jsonl"
        records = [json.loads(line) for line in PI.read_bytes().splitlines() if line.strip()]
        data = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records).encode()
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    t_floor = t_import = float("inf")
    for _ in range(repeat * 2):  # interleaved, as above
        t_floor = min(t_floor, best(floor, 1))
        t_import = min(t_import, best(lambda: import_transcript(PI, Path(tempfile.mkdtemp(dir=tmp))), 1))
    lines = sum(1 for line in PI.read_bytes().splitlines() if line.strip())
    ratio = t_import / t_floor
    print(f"import pi-mono ({lines:,} lines): {t_import * 1e3:.1f} ms ({t_import / lines * 1e6:.1f} µs a line), "
          f"floor (parse + serialize + one write) {t_floor * 1e3:.1f} ms, ratio {ratio:.2f}x ({verdict(ratio, 2)})")


# -- 6. simulate_many: 2 processes against serial ----------------------------------------------------
def bench_fleet(tmp: Path, repeat: int) -> None:
    sessions: list[Path] = []
    for copy in range(2):  # two imports of every shared transcript: distinct sessions, 100 of them
        sessions += import_transcripts(SHARED, tmp / f"fleet{copy}", progress=False).sessions
    sessions = sessions[:100]
    configs = {"48k": {"contextWindow": 48000}, "65k": {"contextWindow": 65000},
               "128k keep 8k": {"contextWindow": 128000, "keepRecentTokens": 8000}}

    def serial() -> None:
        clear_caches()  # nothing counted or imported before: the same cold start a worker has
        with concurrent.futures.ThreadPoolExecutor(1) as one:
            views.simulate_many(sessions, configs, one, progress=False)

    def pool() -> None:
        with concurrent.futures.ProcessPoolExecutor(2) as two:
            views.simulate_many(sessions, configs, two, progress=False)

    t_serial, t_pool = best(serial, repeat), best(pool, repeat)
    ratio = t_pool / t_serial
    print(f"simulate_many over {len(sessions)} sessions x {len(configs)} configs: serial {t_serial:.2f} s, 2 "
          f"processes {t_pool:.2f} s, ratio {ratio:.2f}x ({verdict(ratio, 0.65)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", choices=("simulate", "simulate_path", "request", "memory", "import", "fleet"))
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, best of {args.repeat} runs")
    with tempfile.TemporaryDirectory(prefix="soba-bench-") as tmp_name:
        tmp = Path(tmp_name)
        shared = PI.exists()
        for name, fn, needs_shared in (("simulate", bench_simulate, True), ("simulate_path", bench_simulate_path, True),
                                       ("request", bench_request_and_reopen, False),
                                       ("memory", bench_memory, False), ("import", bench_import, True),
                                       ("fleet", bench_fleet, True)):
            if args.only not in (None, name):
                continue
            if needs_shared and not shared:
                print(f"skipped {name}: {SHARED} is absent")
                continue
            fn(tmp, args.repeat)


if __name__ == "__main__":
    main()
