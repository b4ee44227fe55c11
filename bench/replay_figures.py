"""Every figure a replay produces, dumped and compared: the check that a change to the replay's
machinery (not its policy) leaves every number as it was.

Run from the repository root (PYTHONPATH=.: its package is the one imported):
     PYTHONPATH=. .venv/bin/python bench/replay_figures.py dump before.pkl     (on the code before)
     PYTHONPATH=. .venv/bin/python bench/replay_figures.py dump after.pkl      (on the code after)
     PYTHONPATH=. .venv/bin/python bench/replay_figures.py compare before.pkl after.pkl

What is dumped, for the pi-mono session and eight mini-swe-agent and SWE-agent transcripts from
../shared/data/transcripts, each at two windows: the full ``views.simulate(...).inferences``
DataFrame, every capsule (its fields and the capsule entry's data, less the operation id and
timestamp, which are random or the clock by design) and the ``views.simulate_many`` rows over
all of them (a thread pool). Exits 1 when anything differs, naming it.
"""

from __future__ import annotations

import concurrent.futures
import pickle
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from soba_notebook import views

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "transcripts"
SESSIONS = [
    "pi-mono/large-session.jsonl",
    *(f"mini-swe-agent-deepseek/deepseek_chat_dev/{n}/{n}.traj.json" for n in (
        "sqlfluff__sqlfluff-1733", "pvlib__pvlib-python-1606", "pylint-dev__astroid-1196",
        "pydicom__pydicom-1694", "marshmallow-code__marshmallow-1359")),
]
WINDOWS = ((65000, 8000, 20000), (24000, 4000, 6000), (16000, 2000, 3000))  # window, max output, keep recent


def _swe_agent() -> list[str]:
    found = sorted((SHARED / "swe-agent").rglob("*.traj"), key=lambda p: (-p.stat().st_size, str(p)))
    return [str(p.relative_to(SHARED)) for p in found[:3]]


def _capsules(sim: Any) -> list[dict[str, Any]]:
    out = []
    for view, entry in zip(sim.capsules, sim.result.capsule_entries, strict=True):
        data = dict(entry.data)
        data.pop("operationId", None)
        out.append({"view": repr(view), "entry": repr(data), "parent": entry.parent_id, "line": entry.line})
    return out


def dump(out: Path) -> None:
    figures: dict[str, Any] = {}
    names = [*SESSIONS, *_swe_agent()]
    for name in names:
        for window, output, keep in WINDOWS:
            sim = views.simulate(SHARED / name, window, output, keep_recent_tokens=keep)
            figures[f"{name} @ {window}"] = (sim.inferences, _capsules(sim))
            print(f"{name} @ {window}: {len(sim.inferences):,} inferences, {len(sim.capsules)} capsules", flush=True)
    configs = {f"{w}": {"context_window": w, "max_output_tokens": o, "keep_recent_tokens": k} for w, o, k in WINDOWS}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        figures["simulate_many"] = views.simulate_many([SHARED / n for n in names], configs, pool, progress=False)
    out.write_bytes(pickle.dumps(figures))


def compare(a_path: Path, b_path: Path) -> int:
    a, b = pickle.loads(a_path.read_bytes()), pickle.loads(b_path.read_bytes())
    problems = [f"only in one: {k}" for k in sorted(set(a) ^ set(b))]
    for key in sorted(set(a) & set(b)):
        if key == "simulate_many":
            if not a[key].equals(b[key]):
                problems.append(f"simulate_many rows differ:\n{a[key].compare(b[key])}")
            continue
        (fa, ca), (fb, cb) = a[key], b[key]
        if not fa.equals(fb) or list(fa.dtypes) != list(fb.dtypes):
            problems.append(f"{key}: inferences differ:\n{fa.compare(fb) if fa.shape == fb.shape else 'shape'}")
        if ca != cb:
            problems.append(f"{key}: capsules differ ({len(ca)} vs {len(cb)})")
    counted = sum(len(v[0]) for k, v in a.items() if k != "simulate_many")
    capsules = sum(len(v[1]) for k, v in a.items() if k != "simulate_many")
    print(f"{len(a) - 1} replays ({counted:,} inferences, {capsules} capsules) and "
          f"{len(a['simulate_many'])} simulate_many rows compared: "
          f"{'identical' if not problems else f'{len(problems)} differences'}")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    pd.set_option("display.width", 200)
    if sys.argv[1] == "dump":
        dump(Path(sys.argv[2]))
    else:
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
