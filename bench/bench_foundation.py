"""Foundation benchmarks: open a 100 MB session, a budget check at 1k/10k/100k entries, token counting.

Run: .venv/bin/python bench/bench_foundation.py [--size-mb 100]
Prints the figures recorded in docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import generate_session, text, timed

from soba_notebook.budget import BudgetTracker
from soba_notebook.session import SessionStore, user_message
from soba_notebook.tokens import TokenCounter, load_encoding


def write_big_session(path: Path, size_mb: int) -> int:
    """Write a session file of about ``size_mb`` MB directly (fast), in the store's format."""
    header = {"type": "session", "version": 1, "id": "bench", "created": "2026-01-01T00:00:00.000Z", "cwd": "/"}
    lines = [json.dumps(header)]
    target = size_mb * 1024 * 1024
    size, i, parent = 0, 0, None
    while size < target:
        eid = f"e{i:08d}"
        role = ("user", "assistant", "tool")[i % 3]
        msg = {"role": role, "content": text(120 + i % 200, i)}
        if role == "tool":
            msg.update(toolCallId=f"c{i}", name="read_file")
        line = json.dumps({"type": "message", "id": eid, "parentId": parent, "ts": "2026-01-01T00:00:00.000Z",
                           "message": msg}, separators=(",", ":"))
        lines.append(line)
        size += len(line) + 1
        parent = eid
        i += 1
    path.write_text("\n".join(lines) + "\n")
    return i


def bench_open(tmp: Path, size_mb: int) -> None:
    path = tmp / "big.jsonl"
    n = write_big_session(path, size_mb)
    real_mb = path.stat().st_size / 1e6

    def bare() -> None:
        with open(path, "rb") as fh:
            for line in fh:
                json.loads(line)

    def store_open() -> None:
        SessionStore.open(path)

    t_bare, _ = timed(bare, 3)
    t_open, _ = timed(store_open, 3)
    print(f"open {real_mb:.0f} MB session ({n:,} entries): {t_open:.2f} s "
          f"(bare json.loads loop {t_bare:.2f} s, ratio {t_open / t_bare:.2f}x)")


def bench_budget(tmp: Path) -> None:
    counter = TokenCounter("gpt-4o")
    for n in (1_000, 10_000, 100_000):
        store = generate_session(tmp / f"b{n}", n)
        tracker = BudgetTracker(store, counter, context_window=10**9, hard_limit=10**9, soft_limit=10**9 - 1)
        tracker.check()  # first check counts the history once
        samples = []
        for i in range(200):
            store.append(user_message(f"one more {i}"))
            start = time.perf_counter()
            tracker.check()
            samples.append(time.perf_counter() - start)
        samples.sort()
        print(f"budget check at {n:>7,} entries: median {samples[len(samples) // 2] * 1e6:7.1f} µs, "
              f"p95 {samples[int(len(samples) * 0.95)] * 1e6:7.1f} µs (one new entry per check)")


def bench_tokens() -> None:
    enc = load_encoding("o200k_base")
    counter = TokenCounter("gpt-4o")
    sample = (Path(__file__).resolve().parents[1] / "soba_notebook" / "compaction" / "barrier.py").read_text()
    corpus = [sample[i:i + 2000] for i in range(0, len(sample), 2000)] * 40
    chars = sum(len(c) for c in corpus)
    t_raw, _ = timed(lambda: [len(enc.encode(c, disallowed_special=())) for c in corpus], 5)
    t_soba, _ = timed(lambda: [counter.count_text(c) for c in corpus], 5)
    print(f"token counting: soba {chars / t_soba / 1e6:.2f} M chars/s, raw tiktoken {chars / t_raw / 1e6:.2f} "
          f"M chars/s, ratio {t_soba / t_raw:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=int, default=100)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    with tempfile.TemporaryDirectory() as tmp:
        bench_open(Path(tmp), args.size_mb)
        bench_budget(Path(tmp))
    bench_tokens()


if __name__ == "__main__":
    main()
