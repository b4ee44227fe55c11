"""Soak: thousands of offline turns at a small window, to show that nothing grows per turn.

Run: .venv/bin/python bench/bench_soak.py [--turns 2000] [--warmup 100] [--seed N --dir DIR] [--show-incomplete]

One agent on a fresh project drives the offline scripted model (``ScriptedModel``, the real
agent loop, real tools, real compactions through the preflight barrier) for ``--turns`` turns
of one session. After the scripted demo project is built (the first few turns) every turn is
the same steady work: survey the workspace, glob, grep and run the project's tests. The shell
tool runs each distinct command for real once after warm-up and replays its answer from then on
(the workspace no longer changes), so a turn's time is SOBA's, not a ``python -m unittest``
subprocess's; before warm-up every command runs.

It prints, per block of turns: process time per turn (``time.process_time``: other jobs on a
loaded machine do not count), resident memory (VmRSS), compactions, and the entries of the
session and of its model input; then the goal figures: the mean process time of the last 100
turns against the first 100 after warm-up (goal: within 1.2x), resident memory from the end of
warm-up to the end (goal: flat), requests over the hard limit (goal: none; every request the
model receives is counted with tiktoken, as the scripted model counts its usage), and the turns
that did not complete, counted by outcome and reason (goal: none; ``--show-incomplete`` prints
each as it happens). Entry and checkpoint ids are random, and their token counts decide which
turn meets which edge: ``--seed`` draws them from a seed and ``--dir`` keeps the project (its path
is in the tool results), so a run that shows a failure can be repeated and its session read.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from soba_notebook.agent import open_agent
from soba_notebook.agent.tools import ToolContext, ToolOutcome, ToolRegistry, default_tools
from soba_notebook.config import load_config
from soba_notebook.demo.scripted import ScriptedModel
from soba_notebook.providers.base import ModelRequest, ModelResponse
from soba_notebook.session import entries as session_entries
from soba_notebook.session.entries import Entry

#: the small window of the soak: a compaction every few turns
CONFIG = {"model": {"contextWindow": 16000, "maxOutputTokens": 1000},
          "compaction": {"safetyReserveTokens": 1000, "keepRecentTokens": 3000, "minTokensForAutoCompact": 4000,
                         "minReclaimableTokens": 1000}}
#: unattended: no one answers an approval, and the soak measures the agent, not the questions. The
#: soak's own argument, not its project's config: a project's config cannot turn approvals off unless
#: the user trusts it (docs/SECURITY.md, "Workspace trust")
UNATTENDED = {"tools": {"approval": "never"}}


class ReplayedShell(ToolRegistry):
    """The default tools; once ``replay`` is set, each distinct shell command runs once more and
    its outcome is replayed after that (the soak's workspace no longer changes)."""

    def __init__(self, base: ToolRegistry) -> None:
        super().__init__(base._tools.values())
        self.replay = False
        self._answers: dict[str, ToolOutcome] = {}

    async def run(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        if name != "shell" or not self.replay:
            return await super().run(name, arguments, ctx)
        key = json.dumps(dict(arguments), sort_keys=True)
        if key not in self._answers:
            self._answers[key] = await super().run(name, arguments, ctx)
        return self._answers[key]


class SizeCheckingModel:
    """The scripted model, counting every agent request it receives against the hard limit
    (system prompt, messages and tool schemas, with tiktoken, as the model counts its usage)."""

    name, label, offline = ScriptedModel.name, ScriptedModel.label, True

    def __init__(self, hard_limit: int, context_window: int) -> None:
        self.inner = ScriptedModel(context_window=context_window)
        self.hard_limit = hard_limit
        self.requests = 0
        self.oversized = 0
        self.largest = 0

    async def complete(self, request: ModelRequest, *, on_event: Any = None) -> ModelResponse:
        if request.purpose == "agent":  # a summary request is sized by the summarizer's own budget
            size = ScriptedModel.count_input(request)
            self.requests += 1
            self.largest = max(self.largest, size)
            self.oversized += size > self.hard_limit
        return await self.inner.complete(request, on_event=on_event)

    async def aclose(self) -> None:
        await self.inner.aclose()


def resident_kib() -> int:
    """VmRSS of this process in KiB (0 where /proc is absent)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


@dataclass
class SoakResult:
    """Per-turn figures of one soak."""

    warmup: int
    seconds: list[float] = field(default_factory=list)  # process time per turn
    rss_kib: list[int] = field(default_factory=list)  # after each turn
    inferences: int = 0
    compactions: int = 0
    requests: int = 0
    oversized: int = 0
    largest_request: int = 0
    hard_limit: int = 0
    failed_turns: int = 0
    #: every turn that did not complete: (turn, outcome, the turn's error)
    not_completed: list[tuple[int, str, str]] = field(default_factory=list)
    session_entries: int = 0
    session_bytes: int = 0  # size of the session file at the end
    largest_model_input: int = 0  # entries in the model input, the most at any turn end
    counts_kept: int = 0  # running token totals the model input holds at the end
    tracker_counts: int = 0  # the budget tracker's running totals at the end
    capsule_costs: int = 0  # rendered capsule sizes the engine keeps at the end
    entries_alive: int = 0  # Entry objects alive at the end, less those before the run (the store's and everyone's)
    read_back: int = 0  # entries the session store read back from its file during the run

    def block_mean(self, start: int, size: int = 100) -> float:
        return statistics.fmean(self.seconds[start:start + size])

    @property
    def growth(self) -> float:
        """Mean process time of the last 100 turns over the first 100 after warm-up."""
        return self.block_mean(len(self.seconds) - 100) / self.block_mean(self.warmup)


def seed_ids(seed: int) -> Callable[[], str]:
    """Entry ids from a seeded generator instead of the OS's, and a checkpoint-id maker from the
    same: with the same project directory, a seeded soak sends the same requests (ids are in the
    model input and their token counts differ, so they decide which turn meets which edge)."""
    rng = random.Random(seed)
    session_entries._urandom = rng.randbytes  # type: ignore[attr-defined]
    return lambda: "ck_" + rng.randbytes(5).hex()


def soak(directory: Path, turns: int, *, warmup: int = 100, config: Mapping[str, Any] = CONFIG,
         progress: Callable[[int, SoakResult], None] | None = None, seed: int | None = None) -> SoakResult:
    """Run ``turns`` offline turns in a new project in ``directory`` (it must be empty); with
    ``seed``, ids are drawn from a seeded generator (see :func:`seed_ids`)."""
    checkpoint_ids = seed_ids(seed) if seed is not None else None
    (directory / ".soba").mkdir(parents=True)
    (directory / ".soba" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    loaded = load_config(project_dir=directory, overrides=UNATTENDED)
    model = SizeCheckingModel(loaded.hard_limit, loaded.model.context_window)
    tools = ReplayedShell(default_tools(loaded.tools))
    handle = open_agent(directory, config=loaded, provider=model, tools=tools)  # type: ignore[arg-type]
    agent = handle.agent
    if checkpoint_ids is not None:
        agent.engine.parts = replace(agent.engine.parts, checkpoint_ids=checkpoint_ids)  # an agent open_agent built
    result = SoakResult(warmup=warmup, hard_limit=loaded.hard_limit)
    alive_before = entries_alive()  # a test process may hold other sessions' entries
    try:
        for turn in range(turns):
            tools.replay = turn >= warmup // 2  # the scripted project is built long before this
            started = time.process_time()
            done = asyncio.run(agent.run_turn(f"Turn {turn:,}: carry on with the project."))
            result.seconds.append(time.process_time() - started)
            result.rss_kib.append(resident_kib())
            result.inferences += done.inferences
            if done.outcome != "completed":
                result.failed_turns += 1
                result.not_completed.append((turn, done.outcome, done.error or ""))
            result.largest_model_input = max(result.largest_model_input, len(agent.engine.inputs.context_entries()))
            if progress is not None:
                progress(turn, result)
        result.entries_alive = entries_alive() - alive_before
        result.read_back = handle.store.read_back
        result.compactions = len(handle.store.entries_of_type("capsule"))
        result.requests, result.oversized, result.largest_request = model.requests, model.oversized, model.largest
        result.session_entries, result.session_bytes = len(handle.store), handle.store.file.stat().st_size
        result.counts_kept = len(agent.engine.inputs.cumulative_tokens())
        result.tracker_counts, result.capsule_costs = len(agent.engine.tracker._cum), len(agent.engine._capsule_cost)
    finally:
        handle.close()
        if seed is not None:
            session_entries._urandom = os.urandom  # type: ignore[attr-defined]
    return result


def entries_alive() -> int:
    """How many transcript entries are whole objects in this process (held by anyone)."""
    return sum(1 for obj in gc.get_objects() if obj.__class__ is Entry)


def reason_kinds(not_completed: Sequence[tuple[int, str, str]]) -> Counter[str]:
    """The non-completed turns counted by outcome and reason, numbers blanked so that the same
    reason at different sizes counts once."""
    return Counter(f"{outcome}: {re.sub(r'[0-9]+(?:,[0-9]{3})*', 'N', error)}" for _, outcome, error in not_completed)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--every", type=int, default=200, help="print a line every N turns")
    parser.add_argument("--seed", type=int, default=None,
                        help="draw entry and checkpoint ids from this seed (with --dir: a repeatable run)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="run in this new directory and keep it (the session of a turn that failed, to read)")
    parser.add_argument("--show-incomplete", action="store_true",
                        help="print each turn that does not complete as it happens: its outcome and reason")
    args = parser.parse_args(argv)
    if args.turns < args.warmup + 200:
        parser.error("--turns must leave at least 200 turns after --warmup")

    def report(turn: int, r: SoakResult) -> None:
        if args.show_incomplete and r.not_completed and r.not_completed[-1][0] == turn:
            print(f"turn {turn:,} {r.not_completed[-1][1]}: {r.not_completed[-1][2]}", flush=True)
        if (turn + 1) % args.every == 0:
            block = r.seconds[turn + 1 - args.every:turn + 1]
            print(f"turns {turn + 2 - args.every:,}-{turn + 1:,}: {statistics.fmean(block) * 1e3:,.1f} ms a turn "
                  f"(median {statistics.median(block) * 1e3:,.1f}), VmRSS {r.rss_kib[-1] / 1024:,.1f} MiB, "
                  f"{r.inferences:,} inferences so far", flush=True)

    wall = time.perf_counter()
    if args.dir is not None:
        r = soak(args.dir, args.turns, warmup=args.warmup, progress=report, seed=args.seed)
    else:
        with tempfile.TemporaryDirectory(prefix="soba-soak-") as tmp:
            r = soak(Path(tmp) / "project", args.turns, warmup=args.warmup, progress=report, seed=args.seed)
    wall = time.perf_counter() - wall
    first, last = r.block_mean(r.warmup), r.block_mean(len(r.seconds) - 100)
    rss_start, rss_end = r.rss_kib[r.warmup - 1], r.rss_kib[-1]
    print(f"{len(r.seconds):,} turns, {r.inferences:,} inferences, {r.compactions:,} compactions, "
          f"{r.failed_turns:,} turns not completed; {wall:,.0f} s wall; load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    for kind, count in sorted(reason_kinds(r.not_completed).items(), key=lambda kv: -kv[1]):
        print(f"  not completed: {count:,} x {kind}")
    print(f"process time a turn: first 100 after warm-up {first * 1e3:,.1f} ms, last 100 {last * 1e3:,.1f} ms, "
          f"ratio {r.growth:.2f}x (goal <= 1.2x)")
    print(f"VmRSS: end of warm-up {rss_start / 1024:,.1f} MiB, end {rss_end / 1024:,.1f} MiB "
          f"({(rss_end - rss_start) / 1024:+,.1f} MiB over {len(r.seconds) - r.warmup:,} turns), "
          f"peak {max(r.rss_kib) / 1024:,.1f} MiB")
    print(f"agent requests over the hard limit ({r.hard_limit:,}): {r.oversized:,} of {r.requests:,}; largest "
          f"{r.largest_request:,} tokens")
    grown = len(r.seconds) - r.warmup
    print(f"VmRSS growth a turn after warm-up {(rss_end - rss_start) / grown:,.1f} KiB; the session file grows "
          f"{r.session_bytes / len(r.seconds) / 1024:,.1f} KiB a turn ({r.session_bytes / 2**20:,.1f} MiB in all)")
    print(f"entries whole in memory at the end: {r.entries_alive:,} of {r.session_entries:,}; read back from the "
          f"file during the run: {r.read_back:,}")
    print(f"session: {r.session_entries:,} entries; model input at most {r.largest_model_input:,} entries; "
          f"running token totals at the end: {r.counts_kept:,} with the model input, "
          f"{r.tracker_counts:,} in the budget tracker; rendered capsule sizes kept: {r.capsule_costs:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
