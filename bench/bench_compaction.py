"""Compaction benchmarks: plan + deterministic capsule on the real pi-mono session, and the
preflight barrier's overhead per inference when no compaction is due.

Run: .venv/bin/python bench/bench_compaction.py
Needs ../shared/data/transcripts (the pi-mono session) beside the repository.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import generate_session, timed

from soba_notebook.compaction import CompactionEngine, Trigger, TurnState
from soba_notebook.compaction.extract import deterministic_capsule
from soba_notebook.compaction.simulate import replay
from soba_notebook.config import load_config
from soba_notebook.importers import import_transcript
from soba_notebook.session import SessionStore, user_message
from soba_notebook.tokens import TokenCounter

PI = Path(__file__).resolve().parents[2] / "shared" / "data" / "transcripts" / "pi-mono" / "large-session.jsonl"


def bench_pi(tmp: Path) -> None:
    if not PI.exists():
        print(f"skipped pi-mono figures: {PI} is absent")
        return
    store = SessionStore.open(import_transcript(PI, tmp / "pi"))
    config = load_config(home=tmp, project_dir=tmp, overrides={"model": {"contextWindow": 65000,
                                                                         "maxOutputTokens": 8000}})
    counter = TokenCounter("gpt-4o")
    engine = CompactionEngine(store, config, counter)
    check = engine.measure()  # counts the history once (the per-entry cache is warm afterwards)

    def plan_and_capsule() -> None:
        plan = engine.plan(Trigger.USER, check)
        assert not isinstance(plan, str)
        deterministic_capsule(list(plan.summarize), plan.previous_capsule)

    median, best = timed(plan_and_capsule, 7)
    plan = engine.plan(Trigger.USER, check)
    assert not isinstance(plan, str)
    print(f"pi-mono ({len(store):,} entries, {check.effective:,} tokens): plan + deterministic capsule "
          f"median {median * 1e3:.1f} ms (best {best * 1e3:.1f} ms), summarizing {plan.entry_count} entries")
    start = time.perf_counter()
    result = replay(store.path(), config, counter=counter, workdir=tmp / "replay")
    elapsed = time.perf_counter() - start
    done = sum(1 for r in result.inferences if r.outcome == "completed")
    print(f"pi-mono replay at 65k: {len(result.inferences)} inferences, {done} compactions, {elapsed:.2f} s "
          f"({elapsed / len(result.inferences) * 1e3:.2f} ms per inference, compactions included)")


def bench_barrier(tmp: Path) -> None:
    counter = TokenCounter("gpt-4o")
    config = load_config(home=tmp, project_dir=tmp, overrides={"model": {"contextWindow": 10_000_000,
                                                                         "maxOutputTokens": 8000}})
    for n in (1_000, 10_000):
        store = generate_session(tmp / f"barrier{n}", n)
        engine = CompactionEngine(store, config, counter)

        async def run(store: SessionStore, engine: CompactionEngine, n_checks: int = 300) -> list[float]:
            turn = TurnState()
            await engine.preflight(turn)
            samples = []
            for i in range(n_checks):
                store.append(user_message(f"next {i}"))
                start = time.perf_counter()
                await engine.preflight(turn)
                samples.append(time.perf_counter() - start)
            return sorted(samples)

        samples = asyncio.run(run(store, engine))
        print(f"preflight with nothing due at {n:>6,} entries: median {samples[len(samples) // 2] * 1e6:.1f} µs, "
              f"p95 {samples[int(len(samples) * 0.95)] * 1e6:.1f} µs")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bench_pi(Path(tmp))
        bench_barrier(Path(tmp))


if __name__ == "__main__":
    main()
