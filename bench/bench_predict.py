"""Thrown-away soft summaries (issue 20 item 8): the miss rate of the post-generation ROI on
replays of the shared real transcripts, without and with the prediction before generation.

Run: .venv/bin/python bench/bench_predict.py [--only tier4k]
Needs ../shared/data/transcripts beside the repository.

A *miss* is a soft summary that was requested and then skipped by the post-generation ROI
(seed section 6); the miss rate is misses / soft summaries requested. Every transcript is
replayed through the real preflight barrier (``compaction.simulate.replay``) with a stand-in
model: the deterministic capsule of the request, padded with prose to ``ratio`` times its size
(the deterministic capsule itself at 1.0, where the prediction is exact by construction; a
constant 1.3x; a ratio drawn at random between 1.0x and 2.0x per request, seeded by the request,
so every run prints the same figures). "before" is the seed's pre-generation gate alone
(``predict=False``); "after" adds the prediction with its learned model-capsule factor. Every
figure is counted from the flight records, through ``views.flight_records``: the columns the
real-model tier is counted with.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from soba_notebook import views
from soba_notebook.compaction import Capsule, SummaryRequest, render
from soba_notebook.compaction.extract import deterministic_capsule
from soba_notebook.compaction.simulate import replay
from soba_notebook.config import load_config
from soba_notebook.errors import SessionError
from soba_notebook.flight import FlightRecorder
from soba_notebook.importers import import_transcript
from soba_notebook.session import SessionStore
from soba_notebook.tokens import TokenCounter

TRANSCRIPTS = Path(__file__).resolve().parents[2] / "shared" / "data" / "transcripts"
SOFT = ("milestone", "plan_pivot", "turn_complete", "auto_threshold")

#: The real-model tier's thresholds (tests/realmodel_support.py, 4,096-token server), a mid-sized
#: window like the compaction tests', and the seed's defaults at 65k.
CONFIGS: dict[str, dict[str, dict[str, int | float]]] = {
    "tier4k": {"model": {"contextWindow": 4096, "maxOutputTokens": 64},
               "compaction": {"safetyReserveTokens": 256, "keepRecentTokens": 600, "minTokensForAutoCompact": 2400,
                              "minReclaimableTokens": 300, "minSavingsRatio": 0.1}},
    "window20k": {"model": {"contextWindow": 20000, "maxOutputTokens": 2000},
                  "compaction": {"safetyReserveTokens": 1000, "keepRecentTokens": 4000,
                                 "minTokensForAutoCompact": 8000, "minReclaimableTokens": 2000}},
    "seed65k": {"model": {"contextWindow": 65000, "maxOutputTokens": 8000}, "compaction": {}},
}


def _fixed(ratio: float) -> Callable[[SummaryRequest], float]:
    return lambda request: ratio


def _drawn(low: float, high: float) -> Callable[[SummaryRequest], float]:
    def ratio(request: SummaryRequest) -> float:
        ends = request.entries[:1] + request.entries[-1:]  # by content: imported entry ids differ between runs
        key = "|".join(e.text[:200] for e in ends) + str(len(request.entries))
        unit = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2 ** 64
        return low + (high - low) * unit
    return ratio


NOISE: dict[str, Callable[[SummaryRequest], float]] = {
    "exact (1.0x)": _fixed(1.0), "1.3x": _fixed(1.3), "random 1.0-2.0x": _drawn(1.0, 2.0)}


class PaddedModel:
    """A stand-in model: the request's deterministic capsule, padded with prose to ``ratio(request)``
    times its rendered size. Prose survives grounding (only files, checks and skills are replaced)."""

    def __init__(self, counter: TokenCounter, ratio: Callable[[SummaryRequest], float]) -> None:
        self.counter, self.ratio = counter, ratio

    def _cost(self, capsule: Capsule) -> int:
        return self.counter.count_text(render(capsule, checkpoint_id="ck_0000000000", quality="ok"))

    async def summarize(self, request: SummaryRequest, progress: Callable[[float], None]) -> Capsule:
        local = deterministic_capsule(list(request.entries), request.previous)
        extra = math.ceil((self.ratio(request) - 1.0) * self._cost(local))
        if extra <= 0:
            return local
        return replace(local, done=(*local.done, "model prose:" + " note" * extra))  # " note": one token


@dataclass(frozen=True)
class Figures:
    soft_requested: int
    misses: int
    predicted_skips: int
    soft_completed: int
    hard_limit: int
    wasted_tokens: int

    @property
    def miss_rate(self) -> float:
        return self.misses / self.soft_requested if self.soft_requested else 0.0


def figures(frame: pd.DataFrame) -> Figures:
    comp = frame[frame["kind"] == "compaction"]
    soft = comp[comp["trigger"].isin(SOFT)]
    requested = soft[soft["generated"].fillna(False).astype(bool)]
    misses = requested[requested["outcome"] == "skipped"]
    predicted = soft[soft["reason"].fillna("").str.startswith("predicted reclaimed")]
    return Figures(len(requested), len(misses), len(predicted), int((soft["outcome"] == "completed").sum()),
                   int(((comp["trigger"] == "hard_limit") & (comp["outcome"] == "completed")).sum()),
                   int(misses["wasted_tokens"].fillna(0).sum()))


def sessions(tmp: Path) -> list[Path]:
    out = []
    for i, source in enumerate(sorted(p for p in TRANSCRIPTS.rglob("*") if p.suffix in (".jsonl", ".json", ".traj"))):
        try:
            out.append(import_transcript(source, tmp / "imported" / str(i)))
        except SessionError:
            continue  # not a transcript (a data file beside one)
    return out


def run(config_name: str, paths: list[Path], tmp: Path, counter: TokenCounter) -> None:
    config = load_config(home=tmp, project_dir=tmp, overrides=CONFIGS[config_name])
    print(f"\n{config_name}: window {config.model.context_window:,}, hard {config.hard_limit:,}, soft "
          f"{config.soft_limit:,}, keepRecent {config.compaction.keep_recent_tokens:,}, minReclaimable "
          f"{config.compaction.min_reclaimable_tokens:,}, minSavingsRatio {config.compaction.min_savings_ratio}")
    print(f"{'model capsule':<17} {'':<7} {'requested':>9} {'misses':>6} {'miss rate':>9} {'predicted skips':>15} "
          f"{'soft done':>9} {'hard done':>9} {'tokens of misses':>16}")
    for noise, ratio in NOISE.items():
        for label, predict in (("before", False), ("after", True)):
            flight = tmp / f"{config_name}-{noise}-{label}.jsonl".replace(" ", "_")
            for n, path in enumerate(paths):
                replay(SessionStore.open(path).path(), config, counter=counter, workdir=tmp / "replays" / str(n),
                       summarizer=PaddedModel(counter, ratio), predict=predict,
                       flight=FlightRecorder(flight, f"s{n}"))
            f = figures(views.flight_records(flight))
            print(f"{noise:<17} {label:<7} {f.soft_requested:>9,} {f.misses:>6,} {f.miss_rate:>9.1%} "
                  f"{f.predicted_skips:>15,} {f.soft_completed:>9,} {f.hard_limit:>9,} {f.wasted_tokens:>16,}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--only", choices=sorted(CONFIGS), help="one configuration instead of all")
    args = parser.parse_args()
    if not TRANSCRIPTS.exists():
        sys.exit(f"{TRANSCRIPTS}: the shared transcripts are absent")
    counter = TokenCounter("gpt-4o")
    with tempfile.TemporaryDirectory() as tmp:
        paths = sessions(Path(tmp))
        print(f"{len(paths)} real transcripts from {TRANSCRIPTS}")
        for name in ([args.only] if args.only else CONFIGS):
            run(name, paths, Path(tmp), counter)


if __name__ == "__main__":
    main()
