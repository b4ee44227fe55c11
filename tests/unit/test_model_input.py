"""The incremental model-input builder always answers what a full rebuild from the path answers,
and the budget tracker counts only what the model input holds."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soba_notebook.budget import BudgetTracker
from soba_notebook.compaction.planner import context_slice
from soba_notebook.errors import SessionWarning
from soba_notebook.session import Entry, SessionStore, ToolCall, assistant_message, tool_result, user_message
from soba_notebook.session.context import build_context
from soba_notebook.session.entries import checkpoint
from soba_notebook.session.model_input import ModelInputBuilder
from soba_notebook.tokens import TokenCounter

COUNTER = TokenCounter("gpt-4o")

# one operation on the session: (kind, a number used to pick a size, an entry or a tool call)
op = st.tuples(st.sampled_from(["user", "assistant", "call", "result", "checkpoint", "capsule", "capsule_bad",
                                "rewind", "branch", "reopen"]),
               st.integers(0, 10_000))


def _capsule(first_kept: str | None) -> Entry:
    return Entry("capsule", {"checkpointId": "ck_x", "firstKeptEntryId": first_kept, "state": {"goal": "g"},
                             "quality": "degraded"})


def _apply(store: SessionStore, kind: str, n: int, open_calls: list[str]) -> SessionStore:
    path = store.path()
    if kind == "user":
        store.append(user_message(f"user {n}"))
    elif kind == "assistant":
        store.append(assistant_message(f"reply {n}"))
    elif kind == "call":
        cid = f"c{n}-{len(store)}"
        store.append(assistant_message("calling", [ToolCall(cid, "read_file", {"path": f"f{n}"})]))
        open_calls.append(cid)
    elif kind == "result" and open_calls:
        store.append(tool_result(open_calls.pop(), "read_file", "x " * (n % 50)))
    elif kind == "checkpoint":
        store.append(checkpoint("milestone", "m"))
    elif kind == "capsule" and path:
        store.append(_capsule(path[n % len(path)].id))
    elif kind == "capsule_bad":
        store.append(_capsule("no-such-entry"))
    elif kind == "rewind" and path:
        store.rewind(path[n % len(path)].id)
    elif kind == "branch" and path:
        # an entry whose parent is an earlier entry: the path jumps to a new branch
        store.append(Entry("message", {"message": {"role": "user", "content": f"branch {n}"}},
                           parent_id=path[n % len(path)].id))
    elif kind == "reopen":
        return SessionStore.open(store.file)
    return store


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=40))
def test_builder_equals_a_full_rebuild_after_any_appends_leaf_moves_and_capsules(ops) -> None:
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", SessionWarning)
        store = SessionStore.create(Path(tmp))
        builder = ModelInputBuilder(store)
        tracker = BudgetTracker(store, COUNTER, context_window=10**6, hard_limit=10**6, soft_limit=10**6 - 1,
                                base_tokens=7, inputs=builder)
        open_calls: list[str] = []
        for kind, n in ops:
            reopened = _apply(store, kind, n, open_calls)
            if reopened is not store:
                store = reopened
                builder = ModelInputBuilder(store)
                tracker = BudgetTracker(store, COUNTER, context_window=10**6, hard_limit=10**6, soft_limit=10**6 - 1,
                                        base_tokens=7, inputs=builder)
            path = store.path()
            full = build_context(path)
            got = builder.context()
            assert got == full
            assert [e.id for e in got.messages] == [e.id for e in full.messages]
            assert builder.context_slice() == context_slice(path)
            fresh = BudgetTracker(store, COUNTER, context_window=10**6, hard_limit=10**6, soft_limit=10**6 - 1,
                                  base_tokens=7)
            assert tracker.check() == fresh.check()
            start = full.first_kept_index
            capsule_cost = COUNTER.count_text(str(full.capsule.data.get("state", ""))) if full.capsule else 0
            assert tracker.estimate_raw() == 7 + capsule_cost + sum(COUNTER.count_entry(e) for e in path[start:]) + 3


def _long_compacted_session(directory: Path, entries: int, tail: int) -> SessionStore:
    store = SessionStore.create(directory)
    ids = []
    for i in range(entries - tail - 1):
        ids.append(store.append(user_message(f"old history entry {i} " * 5)).id)
    store.append(_capsule(ids[-3]))
    for i in range(tail):
        store.append(assistant_message(f"recent entry {i}"))
    return store


def test_first_budget_check_after_open_counts_only_the_capsule_and_its_tail(tmp_path) -> None:
    store = _long_compacted_session(tmp_path, 600, 20)
    reopened = SessionStore.open(store.file)
    counter = TokenCounter("gpt-4o")
    builder = ModelInputBuilder(reopened)
    tracker = BudgetTracker(reopened, counter, context_window=10**6, hard_limit=10**6, soft_limit=10**6 - 1,
                            inputs=builder)
    tracker.check()
    # the three kept entries before the capsule, the capsule entry itself, and the 20 after it
    assert len(counter._entry_cache) == 3 + 1 + 20
    assert builder.rebuilds == 1
    reopened.append(user_message("one more"))
    tracker.check()
    assert len(counter._entry_cache) == 25 and builder.rebuilds == 1, "an append is counted, nothing rebuilt"


def test_builder_rebuilds_only_on_leaf_moves_and_new_capsules(tmp_path) -> None:
    store = _long_compacted_session(tmp_path, 50, 5)
    builder = ModelInputBuilder(store)
    builder.context()
    for i in range(10):
        store.append(user_message(f"m{i}"))
        builder.context()
    assert builder.rebuilds == 1
    kept = store.path()[-4].id
    store.append(_capsule(kept))
    assert builder.context().capsule is not None and builder.rebuilds == 2
    store.rewind(store.path()[10].id)
    assert builder.context().capsule is None and builder.rebuilds == 3
