"""Helpers for compaction tests: small configs, transcript builders, controllable summarizers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from soba_notebook.compaction import Capsule, CompactionEngine, EngineParts, SummaryRequest
from soba_notebook.config import SobaConfig, load_config
from soba_notebook.events import Event, EventBus
from soba_notebook.flight import FlightRecorder
from soba_notebook.session import SessionStore, ToolCall, assistant_message, tool_result, user_message
from soba_notebook.tokens import TokenCounter

COUNTER = TokenCounter("gpt-4o")
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]


def text_of(tokens: int, seed: int = 0) -> str:
    """Roughly ``tokens`` tokens of text (each word here is one o200k token plus a space)."""
    return " ".join(WORDS[(seed + i) % len(WORDS)] for i in range(tokens))


def small_config(tmp: Path, **compaction: Any) -> SobaConfig:
    """Window 20000, output 2000, reserve 1000: hard 17000, soft 13600 unless overridden."""
    base = {"safetyReserveTokens": 1000, "keepRecentTokens": 4000, "minTokensForAutoCompact": 8000,
            "minReclaimableTokens": 2000, "minSavingsRatio": 0.25, "timeoutMs": 2000}
    base.update(compaction)
    return load_config(home=tmp / "home", project_dir=tmp / "proj",
                       overrides={"model": {"contextWindow": 20000, "maxOutputTokens": 2000},
                                  "compaction": base})


def add_exchange(store: SessionStore, n: int, size: int = 300, calls: int = 1) -> None:
    """One user message, an assistant with ``calls`` parallel tool calls, and their results."""
    store.append(user_message(f"step {n}: " + text_of(size // 4, n)))
    tcs = [ToolCall(f"c{n}_{k}", "read_file", {"path": f"src/mod{n}_{k}.py"}) for k in range(calls)]
    store.append(assistant_message(f"reading {n}", tcs))
    for tc in tcs:
        store.append(tool_result(tc.id, "read_file", text_of(size, n + 7)))
    store.append(assistant_message(f"done with step {n}. " + text_of(size // 4, n + 3)))


def fill(store: SessionStore, target_tokens: int, size: int = 300, calls: int = 1) -> int:
    """Append exchanges until the history holds about ``target_tokens``; returns exchanges added."""
    n = 0
    total = 0
    while total < target_tokens:
        add_exchange(store, n, size, calls)
        total = sum(COUNTER.count_entry(e) for e in store.path())
        n += 1
    return n


class FakeSummarizer:
    """A summarizer the test controls: delay, failure, hang, a fixed answer, progress.

    ``started`` is set when a summary starts; with ``wait_release`` it then waits for
    ``release`` (an asyncio event the test sets), so tests synchronize on events, not sleeps.
    """

    def __init__(self, *, delay: float = 0.0, fail: Exception | None = None, hang: bool = False,
                 answer: Callable[[SummaryRequest], Capsule] | None = None, ignore_cancel: bool = False,
                 wait_release: bool = False) -> None:
        self.delay, self.fail, self.hang, self.answer, self.ignore_cancel = delay, fail, hang, answer, ignore_cancel
        self.wait_release = wait_release
        self.calls: list[SummaryRequest] = []
        self.cancelled = False
        self.finished = False
        self.started = threading.Event()
        self.release = asyncio.Event()

    async def wait_started(self) -> None:
        """Yield to the loop until a summary has started."""
        while not self.started.is_set():
            await asyncio.sleep(0)

    async def summarize(self, request: SummaryRequest, progress: Callable[[float], None]) -> Capsule:
        self.calls.append(request)
        self.started.set()
        try:
            progress(0.3)
            if self.hang:
                await asyncio.Event().wait()
            if self.wait_release:
                await self.release.wait()
            if self.delay:
                await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled = True
            if not self.ignore_cancel:
                raise
            await asyncio.sleep(self.delay)  # finishes anyway, after the cancel
        if self.fail:
            raise self.fail
        progress(1.0)
        self.finished = True
        if self.answer:
            return self.answer(request)
        # a complete answer (goal and next steps) that claims nothing about files, checks or skills:
        # those come from the history, so a claim here would be dropped as ungrounded
        return Capsule(goal="model goal", done=("model summary",), next_steps=("model next step",))


class Recorder:
    def __init__(self, bus: EventBus) -> None:
        self.events: list[Event] = []
        bus.subscribe(self.events.append)

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.type == kind]


def make_engine(tmp: Path, config: SobaConfig, summarizer: Any = None, *, flight: bool = True,
                **parts: Any) -> tuple[SessionStore, CompactionEngine, Recorder]:
    """An engine on a new store, its events recorded; ``parts``: more of its :class:`EngineParts`."""
    store = SessionStore.create(tmp / "sessions")
    bus = EventBus()
    rec = Recorder(bus)
    engine = CompactionEngine(store, config, COUNTER, EngineParts(
        bus, summarizer, flight=FlightRecorder(tmp / "flight.jsonl", store.id) if flight else None, **parts))
    return store, engine, rec


def capsules(store: SessionStore) -> list[Any]:
    return [e for e in store.entries() if e.type == "capsule"]
