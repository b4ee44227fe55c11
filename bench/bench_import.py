"""Import speed against the floor, per source format: pi, Claude Code, mini-swe-agent.

Run: .venv/bin/python bench/bench_import.py [--repeat 15]
Needs ../shared/data/transcripts beside the repository.

The floor is the bare JSON loop an import cannot beat: parse the source (every line of a JSONL
file, or the one JSON document), serialize every record back as one JSON line, one write. Each
figure is the median process time (``time.process_time``: CPU of this process, less disturbed by
other jobs on a shared machine than wall time) of ``--repeat`` runs, import and floor interleaved.
The Claude Code source is the test fixture replicated 50 times (fresh uuids per copy, each copy
chained to the one before): the shared data holds no real Claude Code session.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from soba_notebook.importers import import_transcript

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "transcripts"
PI = SHARED / "pi-mono" / "large-session.jsonl"
MINI = (SHARED / "mini-swe-agent-deepseek" / "deepseek_reasoner_dev" / "sqlfluff__sqlfluff-1733"
        / "sqlfluff__sqlfluff-1733.traj.json")
CLAUDE_FIXTURE = ROOT / "tests" / "data" / "importers" / "claude_code_session.jsonl"
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def claude_code_file(directory: Path, copies: int = 50) -> Path:
    """The Claude Code fixture ``copies`` times over, one conversation chained end to end."""
    text = CLAUDE_FIXTURE.read_text(encoding="utf-8")
    last = [u for u in _UUID.findall(text)][-1]
    parts = []
    for k in range(copies):
        copy = _UUID.sub(lambda m, k=k: f"{m.group(0)[:-4]}{k:04d}", text)
        if k:
            copy = copy.replace('"parentUuid":null', f'"parentUuid":"{last[:-4]}{k - 1:04d}"', 1)
        parts.append(copy if copy.endswith("\n") else copy + "\n")
    out = directory / "claude_code_x50.jsonl"
    out.write_text("".join(parts), encoding="utf-8")
    return out


def floor(source: Path, out_dir: Path) -> None:
    """Parse, serialize every record back as one line, one write."""
    raw = source.read_bytes()
    if source.suffix == ".jsonl":
        records = [json.loads(line) for line in raw.splitlines() if line.strip()]
    else:
        records = json.loads(raw)["messages"]
    data = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records).encode()
    fd = os.open(Path(tempfile.mkdtemp(dir=out_dir)) / "floor.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def cpu(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        sources = {"pi-mono": PI, "Claude Code (fixture x50)": claude_code_file(tmp), "mini-swe-agent": MINI}
        for label, source in sources.items():
            lines = sum(1 for line in source.read_bytes().splitlines() if line.strip())
            import_transcript(source, tmp / "warm")  # converters are imported lazily: not part of the figure
            t_floor: list[float] = []
            t_import: list[float] = []
            for _ in range(args.repeat):
                t_floor.append(cpu(lambda s=source: floor(s, tmp)))
                t_import.append(cpu(lambda s=source: import_transcript(s, tempfile.mkdtemp(dir=tmp))))
            f, i = statistics.median(t_floor), statistics.median(t_import)
            print(f"import {label} ({source.stat().st_size / 1e6:.2f} MB, {lines:,} lines): {i * 1e3:.1f} ms, "
                  f"floor {f * 1e3:.1f} ms, ratio {i / f:.2f}x (goal <= 1.5x: {'met' if i / f <= 1.5 else 'NOT met'})")


if __name__ == "__main__":
    main()
