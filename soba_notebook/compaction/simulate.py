"""Replay a recorded session through the compaction policy, with no model.

Every assistant message in the source is an inference. Before each one the replay runs the real
preflight barrier (same engine, same rules) with deterministic capsules, then appends the
source entry, so a user can see where each trigger would fire, what each compaction would
reclaim, and whether any request would have exceeded the hard limit, for any window and any
thresholds, on their own sessions or on sessions recorded by other agents.

By default the capsules are the deterministic ones (no summarizer); a caller may pass a
``summarizer`` (a stand-in for a model, e.g. one whose capsules are larger than the
deterministic ones, as ``bench/bench_predict.py`` does), switch off the prediction before soft
summaries (``predict=False``: only the seed's pre-generation gate), and collect the engine's
flight records (``flight``).

Provider usage recorded in the source describes the *uncompacted* history, so it is trusted only
until the first simulated capsule changes the model input (its ``contextKey`` stays ``root``).

A replay is a pure function of its source, config and options, whatever ran before it and wherever
it runs (a thread, a process pool, a Dask worker): everything the engine would draw from the
moment or the machine and that reaches a measured capsule is fixed here. Checkpoint ids are
numbered (:func:`replay_checkpoint_ids`; a random id's text tokenizes to a different length each
time, and the capsule's id is part of what is measured), and capsules are scrubbed of token
shapes only, never of the running environment's secrets (a worker with another environment
would otherwise render other capsules).
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..config import SobaConfig
from ..errors import CompactionFailed
from ..events import Event, EventBus
from ..flight import FlightRecorder
from ..scrub import Scrubber
from ..session.entries import Entry
from ..session.memory_store import MemoryStore
from ..session.payloads import checkpoint_data
from ..tokens import TokenCounter
from .barrier import CompactionEngine
from .capsule import Capsule
from .capsule_entry import capsule_of
from .operation import EngineParts
from .predict import SavingsPredictor
from .summarize import Summarizer
from .triggers import TurnState

__all__ = ["InferenceRecord", "SimulationResult", "replay", "replay_checkpoint_ids"]


@dataclass(frozen=True, slots=True)
class InferenceRecord:
    index: int
    entry_id: str | None
    turn: int
    effective_tokens: int
    source: str
    hard_limit: int
    soft_limit: int
    trigger: str | None
    outcome: str | None
    reason: str | None
    tokens_after: int
    reclaimed_tokens: int
    checkpoint_id: str | None
    quality: str | None
    oversized: bool
    pairs_intact: bool
    blocked: bool


@dataclass(frozen=True, slots=True)
class SimulationResult:
    inferences: tuple[InferenceRecord, ...]
    capsules: tuple[Capsule, ...]
    capsule_entries: tuple[Entry, ...] = field(default=())
    session_path: Path | None = None


def replay_checkpoint_ids() -> Callable[[], str]:
    """The checkpoint ids of one replay, in order: shaped like the engine's random ones (``ck_`` and
    ten hex digits, so a capsule renders to a typical size) but the same in every replay."""
    numbers = itertools.count(1)
    return lambda: "ck_" + hashlib.sha256(b"soba replay checkpoint %d" % next(numbers)).hexdigest()[:10]


def _dangling_calls(entries: Sequence[Entry]) -> set[str]:
    """Calls that never get a result anywhere in the source: not the replay's fault."""
    answered = {e.tool_call_id for e in entries if e.role == "tool"}
    return {c.id for e in entries if e.role == "assistant" for c in e.tool_calls if c.id not in answered}


class _PairCheck:
    """Whether the model input's calls and results pair up (as ``pair_problems`` would find), kept up
    to date as the replay appends to it.

    Recomputed only when the builder starts over (a capsule moved the start of the input); in
    between the input only grows, so each inference checks just the entries appended since. A call in
    ``dangling`` (never answered anywhere in the source) is not the replay's fault: it is never opened,
    so a session with many of them costs no more per inference than one with none.
    """

    def __init__(self, engine: CompactionEngine, dangling: set[str]) -> None:
        self.inputs = engine.inputs
        self._dangling = dangling
        self._rebuilds = -1
        self._seen = 0
        self._open: set[str] = set()
        self._calls: set[str] = set()
        self._orphans = 0

    def intact(self) -> bool:
        """No tool result without its call before it, and no call (but a dangling one) without its result."""
        messages = self.inputs.messages()
        if self.inputs.rebuilds != self._rebuilds or len(messages) < self._seen:
            self._rebuilds, self._seen = self.inputs.rebuilds, 0
            self._open, self._calls, self._orphans = set(), set(), 0
        for e in messages[self._seen:]:
            role = e.role
            if role == "assistant":
                for call in e.tool_calls:
                    self._calls.add(call.id)
                    if call.id not in self._dangling:
                        self._open.add(call.id)
            elif role == "tool":
                cid = e.tool_call_id or ""
                if cid not in self._calls:
                    self._orphans += 1
                self._open.discard(cid)
        self._seen = len(messages)
        return not self._orphans and not self._open


def replay(source: Sequence[Entry], config: SobaConfig, *, counter: TokenCounter | None = None,
           base_tokens: int = 0, workdir: str | Path | None = None, summarizer: Summarizer | None = None,
           predict: bool = True, flight: FlightRecorder | None = None) -> SimulationResult:
    """Replay ``source`` (entries on a root-to-leaf path) and report every inference.

    The replay appends to a session in memory (:class:`~soba_notebook.session.memory_store.MemoryStore`:
    no file, no lock, no encoding per entry); with ``workdir`` the replayed session is also
    written there, in one append at the end, and ``session_path`` names its file.
    """
    counter = counter or TokenCounter(config.model.model)
    engine_options = _EngineOptions(summarizer, predict, flight)
    store = MemoryStore.create_in_memory(meta={"simulation": True})
    # The cyclic GC off while the replay runs (as SessionStore.open and the importers do while they
    # load): a replay builds an entry per source entry while the source is alive, and the collector
    # rescanned that growing heap over and over (a full collection or two at 32x the pi session,
    # none at 2x: the excess over linear). Nothing a replay builds is left in a cycle (_replay frees
    # its engine's), so reference counting frees it all; the collector is back on as it ends.
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        result = asyncio.run(_replay(source, store, config, counter, base_tokens, engine_options))
    finally:
        if paused:
            gc.enable()
    if workdir is None:
        return result
    written = store.save(workdir)
    return SimulationResult(result.inferences, result.capsules, result.capsule_entries, written.file)


@dataclass(frozen=True, slots=True)
class _EngineOptions:
    summarizer: Summarizer | None = None
    predict: bool = True
    flight: FlightRecorder | None = None


async def _replay(source: Sequence[Entry], store: MemoryStore, config: SobaConfig, counter: TokenCounter,
                  base_tokens: int, options: _EngineOptions) -> SimulationResult:
    bus = EventBus()
    ends: list[Event] = []
    bus.subscribe(lambda e: ends.append(e) if e.type == "compaction_end" else None)
    parts = EngineParts(bus, options.summarizer, SavingsPredictor() if options.predict else None, options.flight,
                        checkpoint_ids=replay_checkpoint_ids(),
                        scrub=Scrubber().json)  # token shapes only: the same capsules on a machine with other secrets
    engine = CompactionEngine(store, config, counter, parts, base_tokens=base_tokens)
    try:
        pairs = _PairCheck(engine, _dangling_calls(source))
        records: list[InferenceRecord] = []
        turn, turn_no, inference = TurnState(), 0, 0
        for entry in source:
            if entry.role == "user" and entry.message.get("source") is None and records:
                engine.record_turn_complete()
                turn, turn_no = TurnState(), turn_no + 1
            if entry.type == "checkpoint" and (mark := checkpoint_data(entry)).get("kind") in ("milestone",
                                                                                                "plan_pivot"):
                engine.record_intent(str(mark["kind"]), str(mark.get("note", "")))
            if entry.role == "assistant":
                before = engine.measure()
                ends.clear()
                blocked = False
                try:
                    after = await engine.preflight(turn)
                except CompactionFailed:
                    after, blocked = engine.measure(), True
                end = ends[-1].data if ends else None
                records.append(InferenceRecord(
                    index=inference, entry_id=entry.id, turn=turn_no, effective_tokens=before.effective,
                    source=before.source, hard_limit=before.hard_limit, soft_limit=before.soft_limit,
                    trigger=end["trigger"] if end else None, outcome=end["outcome"] if end else None,
                    reason=end["reason"] if end else None, tokens_after=after.effective,
                    reclaimed_tokens=end["reclaimed_tokens"] if end else 0,
                    checkpoint_id=end["checkpoint_id"] if end else None, quality=end["quality"] if end else None,
                    oversized=not blocked and after.effective > after.hard_limit, pairs_intact=pairs.intact(),
                    blocked=blocked))
                inference += 1
                turn.inferences += 1
            if entry.type in ("capsule", "leaf", "session"):
                continue  # the source's own compactions and rewinds are not replayed
            data = entry.data  # shared, not copied: an entry's data is never changed in place
            if entry.role == "assistant":
                message = dict(entry.message)
                message["contextKey"] = message.get("contextKey") or "root"
                data = {**data, "message": message}
            store.append(Entry(entry.type, data, entry.id if entry.id not in store else None, None, entry.ts))
    finally:
        # The engine's callbacks (lambdas over itself, its bound methods) make reference cycles, and
        # the replayed session hangs off them: left to the cyclic GC, a replay's whole store (an
        # entry per source entry, and its capsules) waited for a full collection, which then
        # scanned it inside whatever ran next. Emptied here, it is freed by reference counting as the replay ends.
        engine.__dict__.clear()
    capsule_entries = tuple(store.entries_of_type("capsule"))
    return SimulationResult(tuple(records), tuple(capsule_of(e) for e in capsule_entries), capsule_entries)
