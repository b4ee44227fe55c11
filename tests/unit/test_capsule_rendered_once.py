"""A compaction renders each capsule it measures once (issue 25 item 6).

The engine measures the same capsule several times on the way to appending it: fitted to its
reserve, priced by the soft gate, fitted again as the summary's answer, measured as the
continuation, and counted by the server as it is written. Each measure used to render the capsule
and count its text again; near its caps a capsule is hundreds of items, and in a replay of a long
session those renders grew faster than the session (docs/BENCHMARKS.md). Counted, not timed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from compaction_support import FakeSummarizer, capsules, fill, make_engine, small_config

from soba_notebook.compaction import Capsule, Trigger, TurnState, capsule_renders
from soba_notebook.compaction.operation import Operation

#: a render: the capsule object's id, its checkpoint id and its quality
Render = tuple[int, object, object]


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> list[Render]:
    """Every render: (the capsule object's id, its checkpoint id, its quality)."""
    seen: list[Render] = []
    real = capsule_renders.render

    def counting(capsule: Capsule, **kw: object) -> str:
        seen.append((id(capsule), kw.get("checkpoint_id"), kw.get("quality")))
        return real(capsule, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(capsule_renders, "render", counting)
    return seen


def test_a_local_compaction_renders_its_capsule_once(tmp_path: Path, renders: list[Render]) -> None:
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path))
    fill(store, 14000)
    after = asyncio.run(engine.preflight(TurnState()))
    (capsule,) = capsules(store)
    assert capsule.data["quality"] == "degraded" and rec.of("compaction_end")[-1]["outcome"] == "completed"
    assert len(renders) == 1, renders
    # the figure the single render gave is the one the context now measures
    assert capsule.data["tokensAfter"] == after.effective


def test_a_model_compaction_renders_each_distinct_capsule_once(tmp_path: Path, renders: list[Render]) -> None:
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), FakeSummarizer())
    fill(store, 14000)
    asyncio.run(engine.preflight(TurnState()))
    (capsule,) = capsules(store)
    assert capsule.data["quality"] == "ok"
    # the local capsule, the prediction's baseline and the model's answer, each with the
    # checkpoint id it is written with, and the last two once more as the prediction compares them
    # (with a placeholder id): no capsule is rendered twice the same way
    assert len(renders) == len(set(renders)) == 5, renders


def test_a_count_the_server_gives_after_a_render_still_sizes_the_capsule(tmp_path: Path) -> None:
    async def server_count(t: str) -> int:
        return 3 * engine.counter.count_text(t)

    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), FakeSummarizer(), count_text=server_count)
    fill(store, 14000)
    capsule = Capsule(goal="parse the config", done=("read the parser",))
    op = Operation("op_test", Trigger.USER, engine.measure(), 0.0, checkpoint_id="ck_0123456789")
    before = engine._rendered_tokens(op, capsule, "ok")
    text = engine._capsule_text(op, capsule, "ok")
    asyncio.run(engine.text_counts.learn(text))
    # the same capsule, not rendered again, now carries the server's count
    assert engine._rendered_tokens(op, capsule, "ok") > before
