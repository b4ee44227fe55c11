"""The cut point read from the tail (compaction/tail_cut.py) is the whole-context cut point,
exactly: the reference :func:`find_cut_point` is kept and every case here compares against it,
over random interleavings (calls, results in any order, user messages between a call and its
result, abandoned calls, ids out of order), two writers on one session and imported transcripts.
It reads the tail only: counted, not timed."""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import overload

import pytest
from conftest import PI_SESSION, TRANSCRIPTS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soba_notebook.compaction.planner import context_slice, find_cut_point
from soba_notebook.compaction.tail_cut import tail_cut_point
from soba_notebook.errors import SessionWarning
from soba_notebook.importers import import_transcript
from soba_notebook.session import Entry, SessionStore, ToolCall, assistant_message, tool_result, user_message
from soba_notebook.session.entries import checkpoint, config_change
from soba_notebook.session.model_input import ModelInputBuilder
from soba_notebook.session.tool_index import ToolCallIndex
from soba_notebook.tokens import TokenCounter

COUNTER = TokenCounter("gpt-4o")
KINDS = ("calls", "result", "result", "result", "user", "text", "config", "checkpoint",
         "early_result", "dup_call", "orphan_result", "empty_id_call", "empty_id_result")
op = st.tuples(st.sampled_from(KINDS), st.integers(0, 7), st.integers(0, 60))


def _entries(ops: list[tuple[str, int, int]], disorder: bool) -> list[Entry]:
    entries: list[Entry] = []
    open_calls: list[str] = []
    made = 0
    for kind, n, _ in ops:
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
        elif kind == "text":
            entries.append(assistant_message(f"thinking aloud {n}"))
        elif kind == "config":
            entries.append(config_change({"compaction.auto": bool(n % 2)}))
        elif kind == "checkpoint":
            entries.append(checkpoint("milestone", f"m{n}"))
        elif not disorder:
            continue
        elif kind == "early_result":  # the result lands before its call (a merged transcript)
            entries.append(tool_result(f"c{made}", "read_file", "early"))
        elif kind == "dup_call" and made:  # an id called a second time
            cid = f"c{n % made}"
            entries.append(assistant_message("", [ToolCall(cid, "read_file", {})]))
            open_calls.append(cid)
        elif kind == "orphan_result":
            entries.append(tool_result(f"nobody{n}", "read_file", "?"))
        elif kind == "empty_id_call":
            entries.append(assistant_message("", [ToolCall("", "read_file", {})]))
        elif kind == "empty_id_result":
            entries.append(Entry("message", {"message": {"role": "tool", "name": "read_file", "content": "?"}}))
    return entries


def _cum(tokens: Sequence[int]) -> list[int]:
    cum = [0]
    for t in tokens:
        cum.append(cum[-1] + t)
    return cum


def _index(entries: Sequence[Entry]) -> ToolCallIndex:
    index = ToolCallIndex()
    for i, e in enumerate(entries):
        index.add(i, e)
    return index


def _assert_same_cuts(entries: Sequence[Entry], tokens: Sequence[int], index: ToolCallIndex) -> None:
    cum = _cum(tokens)
    total = cum[-1]
    keeps = {0, 1, total // 3, total // 2, total - 1, total, total + 1, 20_000}
    for keep in sorted(keeps):
        for max_tail in (None, 0, keep // 2, keep, total // 4, total, -1):
            want = find_cut_point(entries, tokens, keep, max_tail_tokens=max_tail)
            got = tail_cut_point(entries, cum, index, keep, max_tail_tokens=max_tail)
            assert got == want, f"keep={keep} max_tail={max_tail}: tail cut {got}, whole-context cut {want}"


@settings(max_examples=400, deadline=None)
@given(st.lists(op, max_size=60), st.booleans(), st.booleans())
def test_tail_cut_point_equals_the_whole_context_cut_point_over_any_interleaving(ops, disorder, abandon) -> None:
    entries = [user_message("start"), *_entries(ops, disorder)]
    if abandon:  # an aborted reply: its calls never get a result, and the user moves on
        entries.append(user_message("moving on"))
    tokens = [w for _, _, w in ops][: len(entries)]
    tokens += [7] * (len(entries) - len(tokens))
    _assert_same_cuts(entries, tokens, _index(entries))


def test_ids_called_again_and_results_before_their_call_are_read_from_the_tail() -> None:
    """Servers that number calls afresh in every reply repeat ids; a merged file may put a result
    first. The open calls at a window start still come from the index, no whole walk needed."""
    again = [user_message("go"), assistant_message("", [ToolCall("call_0", "f", {})]), tool_result("call_0", "f", "x"),
             user_message("more"), assistant_message("", [ToolCall("call_0", "f", {})]), user_message("typed"),
             tool_result("call_0", "f", "y"), assistant_message("done")]
    index = _index(again)
    assert index.open_at(5) == {"call_0"} and index.open_at(3) == set()
    early = [user_message("go"), tool_result("a", "f", "early"), assistant_message("", [ToolCall("a", "f", {})]),
             user_message("then"), assistant_message("ok")]
    index = _index(early)
    assert index.open_at(3) == {"a"} and index.stuck == {"a": 2}  # open to the end: no result follows the call
    for entries in (again, early):
        _assert_same_cuts(entries, [10] * len(entries), _index(entries))


def _builder_cuts_match(builder: ModelInputBuilder, store: SessionStore) -> None:
    entries, _ = context_slice(store.path())
    assert list(builder.context_entries()) == entries
    tokens = [COUNTER.count_entry(e) for e in entries]
    assert list(builder.cumulative_tokens()) == _cum(tokens)
    _assert_same_cuts(builder.context_entries(), tokens, builder.tool_index)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(("a", "b")), st.sampled_from(("user", "call", "result", "text", "capsule"))),
                max_size=40))
def test_two_writers_on_one_session_cut_where_the_whole_context_cuts(steps) -> None:
    """Two kernels append to one file: each reopen sees the other's lines between a call and its result."""
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", SessionWarning)
        first = SessionStore.create(Path(tmp))
        first.append(user_message("start"))
        stores = {"a": first, "b": SessionStore.open(first.file)}
        open_calls: list[str] = []
        builder = ModelInputBuilder(stores["a"], count=COUNTER.count_entry)
        for i, (who, kind) in enumerate(steps):
            store = stores[who] = SessionStore.open(first.file)  # sees what the other wrote
            if kind == "user":
                store.append(user_message(f"{who} says {i} " + "word " * i))
            elif kind == "call":
                cid = f"{who}{i}"
                store.append(assistant_message("", [ToolCall(cid, "read_file", {"path": "x"})]))
                open_calls.append(cid)
            elif kind == "result" and open_calls:
                store.append(tool_result(open_calls.pop(0), "read_file", "line\n" * (i + 1)))
            elif kind == "text":
                store.append(assistant_message(f"{who} thinks {i}"))
            elif kind == "capsule" and len(store.path()) > 2:
                kept = store.path()[len(store.path()) // 2].id
                store.append(Entry("capsule", {"checkpointId": "ck_x", "firstKeptEntryId": kept,
                                               "state": {"goal": "g"}, "quality": "degraded"}))
            if who == "a":
                builder_store = store
                builder = builder if builder.store is store else ModelInputBuilder(store, count=COUNTER.count_entry)
                _builder_cuts_match(builder, builder_store)


def _real_transcripts() -> list[Path]:
    mini = sorted((TRANSCRIPTS / "mini-swe-agent-deepseek").rglob("*.traj.json"))[:4]
    local = Path(__file__).resolve().parents[1] / "data" / "importers"
    return [PI_SESSION, *mini, local / "claude_code_session.jsonl", local / "pi_v3_tree.jsonl"]


@pytest.mark.parametrize("index", range(7))
def test_imported_transcripts_cut_where_the_whole_context_cuts(tmp_path: Path, index: int) -> None:
    source = _real_transcripts()[index]
    store = SessionStore.open(import_transcript(source, tmp_path))
    builder = ModelInputBuilder(store, count=COUNTER.count_entry)
    _builder_cuts_match(builder, store)


class _CountingView(Sequence[Entry]):
    """A context whose reads are counted: how much of it a cut point looks at."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries, self.reads = entries, 0

    def __len__(self) -> int:
        return len(self.entries)

    @overload
    def __getitem__(self, i: int) -> Entry: ...
    @overload
    def __getitem__(self, i: slice) -> list[Entry]: ...

    def __getitem__(self, i: int | slice) -> Entry | list[Entry]:
        got = self.entries[i]
        self.reads += len(got) if isinstance(got, list) else 1
        return got


@pytest.mark.parametrize("call_id", ["c{}", "call_0"], ids=["distinct ids", "every reply's id call_0"])
def test_the_tail_cut_reads_the_kept_tail_not_the_history(call_id: str) -> None:
    turn = [user_message("next step"), assistant_message("done")]
    entries: list[Entry] = []
    for t in range(5_000):  # 20,000 entries
        cid = call_id.format(t)
        entries += [turn[0], assistant_message("", [ToolCall(cid, "read_file", {})]),
                    tool_result(cid, "read_file", "y"), turn[1]]
    tokens = [10] * len(entries)
    index = _index(entries)
    view = _CountingView(entries)
    cut = tail_cut_point(view, _cum(tokens), index, keep_recent_tokens=400)
    assert cut == find_cut_point(entries, tokens, 400) == len(entries) - 40
    assert view.reads <= 50, f"read {view.reads:,} of {len(entries):,} entries for a 40-entry tail"
    # a mandatory compaction that must keep less than keepRecentTokens reads no more
    view.reads = 0
    got = tail_cut_point(view, _cum(tokens), index, 400, max_tail_tokens=100)
    assert got == find_cut_point(entries, tokens, 400, max_tail_tokens=100) == len(entries) - 9
    assert view.reads <= 50


def test_an_id_called_twice_after_its_last_result_is_open_from_the_first_of_those_calls() -> None:
    # found by the property test above: c0 answered once, then called at 3 and again at 5; at the
    # user message 4 it is still open (call 3), so the cut may not move past 3
    entries = [user_message("start"), assistant_message("", [ToolCall("c0", "read_file", {})]),
               tool_result("c0", "read_file", "x"), assistant_message("", [ToolCall("c0", "read_file", {})]),
               user_message("next"), assistant_message("", [ToolCall("c0", "read_file", {})])]
    index = _index(entries)
    assert index.open_at(4) == {"c0"}
    _assert_same_cuts(entries, [0, 0, 0, 0, 0, 7], index)


def test_without_a_tail_limit_the_cut_reads_nothing_after_the_cut_it_returns() -> None:
    # the pi-mono shape: a user message, then a long run of calls and results to the leaf; the cut
    # wanted lies just after the user message, far from the end
    entries: list[Entry] = [user_message("start"), assistant_message("ok"), user_message("work on")]
    for t in range(500):
        entries += [assistant_message("", [ToolCall(f"c{t}", "read_file", {})]), tool_result(f"c{t}", "read_file", "y")]
    tokens = [10] * len(entries)
    view = _CountingView(entries)
    cut = tail_cut_point(view, _cum(tokens), _index(entries), keep_recent_tokens=len(entries) * 10 - 60)
    assert cut == find_cut_point(entries, tokens, len(entries) * 10 - 60) == 5
    assert view.reads <= 6, f"read {view.reads:,} entries for a cut at 5"
