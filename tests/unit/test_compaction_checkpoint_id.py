"""A capsule's checkpoint id is part of the text it sends, so the hard-limit check must measure
the capsule with the id it is appended with (seed section 4: the hard limit is never exceeded,
and a compaction at the hard limit makes room).

Found by bench/bench_soak.py: a turn failed with "the next request needs 14002 tokens, over the
hard limit 14000, and compaction (completed: ...) could not bring it under": the capsule was
measured at 13,999 tokens with a placeholder id, then appended with a random id that cost three
tokens more.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest
from compaction_support import FakeSummarizer, capsules, fill, make_engine, small_config, text_of

from soba_notebook.compaction import Capsule, TurnState
from soba_notebook.session import entries

#: shaped like the engine's random ids (``ck_`` and ten hex digits), and one of the costliest of
#: them in a capsule's opening tag: six tokens more than an id of zeros
COSTLY_ID = "ck_0a8c5a7f1d"


#: a capsule of about 10,000 tokens: the base tokens that bring it to the hard limit leave the
#: retained tail its room, so the same history is cut at the same place in every run below
GOAL = text_of(4000)


def _hard_limit_preflight(tmp: Path, base_tokens: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int, dict]:
    """A session over the hard limit, compacted by the preflight, with ``base_tokens`` of system
    prompt and tools: (effective tokens after, hard limit, the capsule's data).

    Every session gets the same entry ids: the capsule names the first and last entry it covers,
    and random hex ids cost a varying number of tokens (the CI run on 31ba7a5 drew ids three
    tokens costlier than the probe's, so every base of the walk was already past the edge)."""
    counter = itertools.count(1)
    monkeypatch.setattr(entries, "_urandom", lambda n: next(counter).to_bytes(n, "big"))
    summarizer = FakeSummarizer(answer=lambda r: Capsule(goal=GOAL, done=("model summary",),
                                                         next_steps=("model next step",)))
    store, engine, _ = make_engine(tmp, small_config(tmp), summarizer, flight=False, checkpoint_ids=lambda: COSTLY_ID)
    engine.base_tokens = base_tokens
    fill(store, 17500, size=1000)
    assert engine.measure().over_hard
    after = asyncio.run(engine.preflight(TurnState()))  # raises CompactionFailed when it cannot make room
    (capsule,) = capsules(store)
    assert capsule.data["trigger"] == "hard_limit" and capsule.data["checkpointId"] == COSTLY_ID
    return after.effective, after.hard_limit, dict(capsule.data)


def test_a_hard_limit_capsule_is_measured_with_the_checkpoint_id_it_is_appended_with(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # each base token moves the continuation by one: find the base that fills the hard limit
    # exactly, then walk across that edge a token at a time (wider than the id's extra cost)
    first, hard, _ = _hard_limit_preflight(tmp_path / "probe", 0, monkeypatch)
    edge = hard - first
    shrunk = 0
    for base in range(edge - 2, edge + 8):
        effective, hard, data = _hard_limit_preflight(tmp_path / f"base{base}", base, monkeypatch)
        assert effective <= hard, f"base {base:,}: {effective:,} tokens sent, over the hard limit {hard:,}"
        assert data["tokensAfter"] == effective, "the capsule records what the next request measures"
        shrunk += data["quality"] == "degraded"
    # the model's capsule fits up to the edge; past it, the tail is shrunk to make room
    assert 0 < shrunk < 10, f"{shrunk} of 10 capsules shrunk: the walk did not cross the edge"
