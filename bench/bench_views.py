"""Benchmark the pandas views on a generated 100k-entry session.

    python bench/bench_views.py [--entries 100000] [--seed 0] [--repeat 3]

Writes a session of user / assistant (tool calls, provider usage) / tool-result entries with a
capsule every 2000 entries into a temporary directory, then times: opening the store, the
transcript frame with a cold and a warm token-count cache, the same from the file path, and the
other views. Prints one line per figure; nothing is written outside the temporary directory.

The session lines are produced by ``Entry.to_json`` (the exact form ``SessionStore.append``
writes) and written in one go, because appending 100k entries one lock-and-write at a time
measures the store, not the views.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from soba_notebook import views
from soba_notebook.analysis._common import clear_caches
from soba_notebook.compaction.capsule import Capsule, EntryRange, Verification
from soba_notebook.session import SessionStore, ToolCall, Usage, assistant_message, tool_result, user_message
from soba_notebook.session.entries import Entry, new_id

WORDS = ("the", "parser", "rejects", "headers", "with", "a", "trailing", "space", "so", "we", "strip",
         "before", "split", "then", "check", "cache", "def", "return", "self", "value", "path", "file",
         "test", "import", "class", "load", "rows", "chunk", "retry", "config")
CAPSULE_EVERY = 2000


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def generate(directory: Path, entries: int, seed: int) -> Path:
    """A session file with ``entries`` entries (header excluded)."""
    rng = random.Random(seed)
    store = SessionStore.create(directory, session_id="bench")
    lines: list[str] = []
    parent: str | None = None
    ids: list[str] = []
    prompt = 2_000
    call = ""
    for i in range(entries):
        kind = i % 4
        if i and i % CAPSULE_EVERY == 0:
            capsule = Capsule(goal="benchmark", files_read=(f"src/m{i}.py",), files_modified=(f"src/m{i}.py",),
                              verification=(Verification("pytest -q", "passed"),),
                              covers=EntryRange(ids[0], ids[-1], len(ids)))
            entry = Entry("capsule", {"checkpointId": f"ck_{i:010d}", "firstKeptEntryId": ids[-8 - kind],
                                      "trigger": "auto_threshold", "quality": "degraded", "state": capsule.to_json(),
                                      "tokensBefore": 40_000, "tokensAfter": 21_000, "source": "provider_usage",
                                      "operationId": f"op_{i:012d}", "summarizedEntries": CAPSULE_EVERY})
        elif kind == 0:
            entry = user_message(_text(rng, rng.randint(10, 60)))
        elif kind == 1:
            call = f"call_{i}"
            prompt += rng.randint(100, 900)
            entry = assistant_message(_text(rng, rng.randint(5, 40)),
                                      [ToolCall(call, rng.choice(("read_file", "shell")), {"path": f"src/f{i}.py"})],
                                      usage=Usage(input=20, output=200, cache_read=prompt - 20), model="gpt-4o")
        elif kind == 2:
            entry = tool_result(call, "read_file", _text(rng, rng.randint(40, 400)))
        else:
            entry = assistant_message(_text(rng, rng.randint(10, 80)), model="gpt-4o")
        eid = new_id()
        entry = entry.with_ids(eid, parent, f"2025-01-01T00:{(i // 60) % 60:02d}:{i % 60:02d}.000Z")
        lines.append(json.dumps(entry.to_json(), ensure_ascii=False, separators=(",", ":")))
        parent = eid
        ids.append(eid)
    with open(store.file, "a", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    return store.file


def timed(label: str, fn: Callable[[], object], repeat: int = 1, setup: Callable[[], None] | None = None) -> object:
    results: list[float] = []
    value: object = None
    for _ in range(repeat):
        if setup is not None:
            setup()
        start = time.perf_counter()
        value = fn()
        results.append(time.perf_counter() - start)
    best, median = min(results), statistics.median(results)
    print(f"{label:<52} best {best:7.3f} s   median {median:7.3f} s   (n={repeat})")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="soba-bench-") as tmp:
        start = time.perf_counter()
        path = generate(Path(tmp), args.entries, args.seed)
        size = path.stat().st_size / 1e6
        print(f"generated {args.entries} entries ({size:.1f} MB) in {time.perf_counter() - start:.2f} s: {path}")
        store = timed("SessionStore.open(path)", lambda: SessionStore.open(path), args.repeat)
        assert isinstance(store, SessionStore)
        frame = timed("transcript(store), cold token cache", lambda: views.transcript(store), args.repeat,
                      setup=clear_caches)
        timed("transcript(store), warm token cache", lambda: views.transcript(store), args.repeat)
        timed("transcript(path) = open + frame, warm cache", lambda: views.transcript(path), args.repeat)
        timed("capsules(store)", lambda: views.capsules(store), args.repeat)
        timed("budget_history(store) (session walk)", lambda: views.budget_history(store), args.repeat)
        timed("flight_records(store)", lambda: views.flight_records(store), args.repeat)
        print(f"transcript frame: {len(frame)} rows x {len(frame.columns)} columns, "  # type: ignore[attr-defined]
              f"{int(frame['tokens'].sum()):,} tokens, "  # type: ignore[index]
              f"{int(frame['in_context'].sum())} in context, "  # type: ignore[index]
              f"{int(frame['covered_by'].notna().sum())} covered by a capsule")  # type: ignore[index]


if __name__ == "__main__":
    main()
