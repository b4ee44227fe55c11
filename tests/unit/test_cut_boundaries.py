"""A tool call is never separated from its result by a cut (seed section 2), whatever lies
between them: user messages (two kernels on one session, imported transcripts), config changes,
checkpoints. Property-tested over generated interleavings."""

from __future__ import annotations

import asyncio
from pathlib import Path

from compaction_support import FakeSummarizer, make_engine, small_config, text_of
from hypothesis import given, settings
from hypothesis import strategies as st

from soba_notebook.compaction import CompactionEngine, EngineParts, Trigger
from soba_notebook.compaction.planner import find_cut_point, valid_boundaries
from soba_notebook.session import SessionStore, ToolCall, assistant_message, tool_result, user_message
from soba_notebook.session.context import build_context, pair_problems
from soba_notebook.session.entries import Entry, checkpoint, config_change

NOISE = ("user", "config", "checkpoint", "text")
# an op: what to append next, and a number (calls in a batch, or which open call gets its result)
op = st.tuples(st.sampled_from(("calls", "result", "result", *NOISE)), st.integers(0, 7))


def _build(ops: list[tuple[str, int]], answer_rest: bool) -> list[Entry]:
    entries: list[Entry] = [user_message("start")]
    open_calls: list[str] = []
    made = 0
    for kind, n in ops:
        if kind == "calls":
            ids = [f"c{made + k}" for k in range(1 + n % 3)]
            made += len(ids)
            entries.append(assistant_message("", [ToolCall(i, "read_file", {"path": f"{i}.py"}) for i in ids]))
            open_calls.extend(ids)
        elif kind == "result" and open_calls:
            cid = open_calls.pop(n % len(open_calls))
            entries.append(tool_result(cid, "read_file", f"content of {cid}"))
        elif kind == "user":
            entries.append(user_message(f"typed meanwhile {n}"))
        elif kind == "config":
            entries.append(config_change({"compaction.auto": bool(n % 2)}))
        elif kind == "checkpoint":
            entries.append(checkpoint("milestone", f"m{n}"))
        elif kind == "text":
            entries.append(assistant_message(f"thinking aloud {n}"))
    if answer_rest:  # else the rest stay abandoned (an aborted reply): no result anywhere
        entries.extend(tool_result(cid, "read_file", "late") for cid in open_calls)
    else:
        entries.append(user_message("moving on"))
    return entries


def _separated(entries: list[Entry], cut: int) -> list[str]:
    """Calls before ``cut`` whose result is at or after it."""
    before = {c.id for e in entries[:cut] if e.role == "assistant" for c in e.tool_calls}
    return [e.tool_call_id for e in entries[cut:] if e.role == "tool" and e.tool_call_id in before]


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=40), st.booleans())
def test_no_cut_boundary_separates_a_tool_call_from_its_result_whatever_lies_between(ops, answer_rest) -> None:
    entries = _build(ops, answer_rest)
    valid, end_valid = valid_boundaries(entries)
    for cut in valid:
        assert _separated(entries, cut) == [], f"cut {cut} separates a call from its result"
        assert entries[cut].role != "tool" and entries[cut].is_model_input
    assert end_valid
    tokens = [5] * len(entries)
    for keep in (0, 5, 20, 60):
        cut = find_cut_point(entries, tokens, keep)
        if cut is not None:
            assert _separated(entries, cut) == []


def test_user_message_from_another_kernel_between_call_and_result_is_not_a_cut(tmp_path: Path) -> None:
    """Two kernels on one session: a user message lands between a call and its result."""
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path, keepRecentTokens=1500), FakeSummarizer())
    other = SessionStore.open(store.file)
    # earlier work, so that a capsule replaces more than it costs (a compact that would grow the
    # context appends nothing, and then no cut is made at all)
    store.append(user_message("survey the project. " + text_of(2000)))
    store.append(assistant_message("surveyed. " + text_of(2000, 3)))
    store.append(user_message("read the big file"))
    store.append(assistant_message("", [ToolCall("big", "read_file", {"path": "big.py"})]))
    other.append(user_message("typed in the second kernel"))
    store = SessionStore.open(store.file)
    store.append(tool_result("big", "read_file", text_of(6000)))
    store.append(assistant_message("read it. " + text_of(1000)))
    engine = CompactionEngine(store, engine.config, engine.counter, EngineParts(summarizer=FakeSummarizer()))
    outcome = asyncio.run(engine.compact(Trigger.USER))
    ctx = build_context(SessionStore.open(store.file).path())
    assert pair_problems(ctx.messages) == []
    assert outcome.outcome == "completed"
    kept = [e.id for e in ctx.messages]
    result = next(e for e in store.path() if e.role == "tool")
    call = next(e for e in store.path() if e.tool_calls)
    assert (call.id in kept) == (result.id in kept), "the call and its result are on one side of the cut"
