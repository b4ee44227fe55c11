"""A session to analyse when you have none: the offline scripted agent, else a synthetic one.

:func:`demo_session` first asks the agent package to run a few turns against the offline
scripted model; if that run fails or does not finish in time, it writes a
synthetic session with the store API and runs the real compaction engine over it: a realistic
mix of user turns, assistant replies with tool calls and provider usage, tool results of varied
size, a milestone checkpoint, capsules and flight records, under a small window so several
compactions happen in a few dozen entries. Everything is deterministic for a given ``seed``.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..compaction.barrier import CompactionEngine
from ..compaction.operation import EngineParts
from ..compaction.triggers import Trigger, TurnState
from ..config import SobaConfig, load_config
from ..errors import CompactionFailed
from ..flight import FlightRecorder
from ..session.entries import ToolCall, Usage, assistant_message, checkpoint, tool_result, user_message
from ..session.listing import list_sessions
from ..session.store import SessionStore
from ..tokens import TokenCounter
from ._common import run_blocking

__all__ = ["AGENT_SETTINGS", "DEMO_SETTINGS", "DemoSession", "demo_session", "newest_session", "synthetic_session"]

#: The synthetic session's config: window 16000, output 2000, reserve 1000 -> hard 13000, soft 10400.
DEMO_SETTINGS: dict[str, dict[str, Any]] = {
    "model": {"contextWindow": 16_000, "maxOutputTokens": 2_000, "model": "claude-sonnet-4-5"},
    "compaction": {"safetyReserveTokens": 1_000, "minTokensForAutoCompact": 6_000, "keepRecentTokens": 3_000,
                   "minReclaimableTokens": 2_000, "minSavingsRatio": 0.25, "compactOnTurnComplete": False},
}

#: The scripted agent's config: window 20000, output 2000, reserve 2000 -> hard 16000, soft 12800,
#: small enough that the scenario's four tasks compact a few times.
AGENT_SETTINGS: dict[str, dict[str, Any]] = {
    "model": {"provider": "scripted", "contextWindow": 20_000, "maxOutputTokens": 2_000},
    "compaction": {"safetyReserveTokens": 2_000, "minTokensForAutoCompact": 8_000, "keepRecentTokens": 4_000,
                   "minReclaimableTokens": 3_000},
}

_TASKS = [
    ("Fix the failing parser test: `parse_header` rejects headers with a trailing space.", "src/parser.py",
     "tests/test_parser.py"),
    ("Add a `--json` flag to the CLI so the report can be piped into jq.", "src/cli.py", "tests/test_cli.py"),
    ("The cache never expires entries; add a TTL and cover it with a test.", "src/cache.py", "tests/test_cache.py"),
    ("Refactor the retry loop in the HTTP client into a helper with backoff.", "src/http.py", "tests/test_http.py"),
    ("Document the config keys in the README and check every default is right.", "README.md",
     "tests/test_config.py"),
    ("Speed up `load_rows`: it re-reads the file for every chunk.", "src/loader.py", "tests/test_loader.py"),
]
_NAMES = ["header", "row", "chunk", "token", "entry", "cache", "retry", "value", "path", "report", "config", "item"]


@dataclass(frozen=True, slots=True)
class DemoSession:
    """Where the demo session is, which way it was made (``scripted agent`` or ``synthetic``),
    and why the agent was not used when it was not."""

    path: Path
    kind: str
    note: str = ""


def _code(rng: random.Random, lines: int) -> str:
    out = []
    for i in range(lines):
        a, b = rng.choice(_NAMES), rng.choice(_NAMES)
        out.append(rng.choice([
            f"def {a}_{i}({b}):",
            f"    {a} = load_{b}({b}, strict=True)",
            f"    if not {a}:\n        raise ValueError('empty {a}: ' + repr({b}))",
            f"    return [{a}.strip() for {a} in {b}_{i} if {a}]",
            f"# {a} and {b} must stay in sync (see issue #{rng.randint(10, 999)})",
        ]))
    return "\n".join(out)


def _test_output(rng: random.Random, test_file: str, passed: bool) -> str:
    count = rng.randint(8, 40)
    if passed:
        return f"{'.' * count}\n{count} passed in {rng.uniform(0.2, 3):.2f}s"
    return (f"{'.' * (count - 1)}F\n=== FAILURES ===\n_ test_{rng.choice(_NAMES)} _\n"
            f"{_code(rng, 6)}\nE   AssertionError: expected {rng.randint(1, 9)} got {rng.randint(10, 99)}\n"
            f"FAILED {test_file}::test_{rng.choice(_NAMES)}\n1 failed, {count - 1} passed")


async def _write_synthetic(store: SessionStore, engine: CompactionEngine, rng: random.Random, turns: int) -> None:
    prev_prompt = 0
    prev_key = ""
    call_no = 0

    async def infer(turn: TurnState, text: str, calls: list[ToolCall]) -> None:
        nonlocal prev_prompt, prev_key
        try:
            check = await engine.preflight(turn)
        except CompactionFailed:
            check = engine.measure()
        turn.inferences += 1
        key = engine.tracker.context_key
        prompt = max(1, round(check.estimated * 1.12) + rng.randint(-15, 15))
        cached = min(prev_prompt, prompt) if key == prev_key else 0
        fresh = rng.randint(3, 40)
        usage = Usage(input=fresh, output=rng.randint(40, 600), cache_read=max(0, cached - fresh),
                      cache_write=prompt - max(0, cached - fresh) - fresh)
        store.append(assistant_message(text, calls, usage=usage, model="claude-sonnet-4-5", provider="anthropic",
                                       stop_reason="toolUse" if calls else "stop", context_key=key))
        engine.tracker.observe_usage(check.estimated, prompt)
        prev_prompt, prev_key = prompt, key

    for t in range(turns):
        task, source_file, test_file = _TASKS[t % len(_TASKS)]
        store.append(user_message(task if t < len(_TASKS) else f"Follow-up on: {task} Also keep the style."))
        turn = TurnState()
        if t:
            engine.record_intent(Trigger.TURN_COMPLETE)
        for step in range(rng.randint(2, 4)):
            call_no += 1
            if step == 0:
                call = ToolCall(f"call_{call_no}", "read_file", {"path": source_file})
                result = _code(rng, rng.randint(25, 110) if rng.random() > 0.15 else rng.randint(200, 260))
            elif step % 2:
                call = ToolCall(f"call_{call_no}", "shell", {"command": f"pytest -q {test_file}"})
                result = _test_output(rng, test_file, passed=step > 1)
            else:
                call = ToolCall(f"call_{call_no}", "edit_file", {"path": source_file, "old": "x", "new": "y"})
                result = f"edited {source_file}: 1 replacement"
            await infer(turn, f"Step {step + 1}: " + rng.choice(["let me look at", "checking", "now changing"])
                        + f" {source_file}.", [call])
            store.append(tool_result(call.id, call.name, result))
        await infer(turn, f"Done: {task.split(':')[0].lower()}. " + _code(rng, rng.randint(2, 8)), [])
        if t % 5 == 4:
            store.append(checkpoint("milestone", f"finished {source_file}"))
            engine.record_intent(Trigger.MILESTONE, f"finished {source_file}")


def synthetic_session(directory: str | Path, *, turns: int = 14, seed: int = 0,
                      config: SobaConfig | None = None) -> Path:
    """Write a synthetic session under ``<directory>/.soba/`` and return its path.

    The session and ``.soba/flight.jsonl`` are produced by the real store and compaction engine
    (deterministic capsules, no model), with :data:`DEMO_SETTINGS` unless ``config`` is given.
    """
    root = Path(directory)
    cfg = config or load_config(home=root / ".no-home", project_dir=root, overrides=DEMO_SETTINGS)
    rng = random.Random(seed)
    moment = [datetime(2025, 1, 6, 9, 0, tzinfo=UTC)]

    def clock() -> datetime:
        moment[0] += timedelta(seconds=rng.randint(2, 40))
        return moment[0]

    store = SessionStore.create(root / ".soba" / "sessions", cwd=str(root), clock=clock,
                                session_id=f"demo-{seed}")
    counter = TokenCounter(cfg.model.model)
    flight = FlightRecorder(root / ".soba" / "flight.jsonl", store.id)
    engine = CompactionEngine(store, cfg, counter, EngineParts(flight=flight), base_tokens=600)
    run_blocking(lambda: asyncio.run(_write_synthetic(store, engine, rng, turns)))
    return store.file


def _agent_session(root: Path, timeout: float) -> tuple[Path | None, str]:
    """Run a few turns with the offline scripted model; ``(None, why)`` when it fails or is too slow."""
    from ..agent import open_agent  # here, not at the top: only this path runs an agent
    from ..demo.scenario import DEMO_PROMPTS as prompts

    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            handle = open_agent(root, new=True, overrides=AGENT_SETTINGS)
            for prompt in prompts:
                asyncio.run(handle.agent.run_turn(prompt))
            outcome["path"] = handle.store.file
        except Exception as exc:  # any failure means: use the synthetic session instead
            outcome["error"] = f"{type(exc).__name__}: {exc}"

    worker = threading.Thread(target=run, name="soba-demo-agent", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        return None, f"the scripted agent did not finish within {timeout:g}s"
    if "error" in outcome:
        return None, f"the scripted agent failed ({outcome['error']})"
    path = outcome.get("path")
    if not isinstance(path, Path):
        return None, "the scripted agent produced no session"
    replies = sum(1 for e in SessionStore.open(path).entries() if e.role == "assistant")
    if replies < 2:
        return None, f"the scripted agent's session has only {replies} replies"
    return path, ""


#: Where notebooks/quickstart.ipynb creates its project: one folder per run, next to the notebook.
QUICKSTART_DIR = "soba-quickstart"


def session_roots(*roots: str | Path) -> list[Path]:
    """Each root, then each quickstart project under ``<root>/soba-quickstart/`` (newest first)."""
    found: list[Path] = []
    for root in map(Path, roots):
        found.append(root)
        quick = root / QUICKSTART_DIR
        if quick.is_dir():
            found += sorted((p for p in quick.iterdir() if p.is_dir()), reverse=True)
    return found


def newest_session(*roots: str | Path) -> Path | None:
    """The most recently modified SOBA session under ``<root>/.soba/sessions/`` of any root, or of a
    quickstart project under ``<root>/soba-quickstart/<run>/`` (so the analysis notebook, run next to
    the quickstart, finds the session the quickstart just recorded)."""
    found: list[tuple[float, Path]] = []
    for root in session_roots(*roots):
        for info in list_sessions(root / ".soba" / "sessions"):
            found.append((info.modified, info.path))
    return max(found)[1] if found else None


def demo_session(directory: str | Path | None = None, *, prefer_agent: bool = True, turns: int = 14, seed: int = 0,
                 agent_timeout: float = 60.0,
                 agent: Callable[[Path, float], tuple[Path | None, str]] | None = None) -> DemoSession:
    """A session to analyse: the scripted agent's when it can run, else :func:`synthetic_session`.

    ``directory`` is the project directory to create it in (default: a new temporary one).
    """
    root = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="soba-demo-"))
    note = "synthetic session requested"
    if prefer_agent:
        path, note = (agent or _agent_session)(root / "agent", agent_timeout)
        if path is not None:
            return DemoSession(path, "scripted agent")
    return DemoSession(synthetic_session(root / "synthetic", turns=turns, seed=seed), "synthetic", note)
