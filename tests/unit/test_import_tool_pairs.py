"""The import's tool-pair check on trees: a result is paired with the deepest call of its id on its
own root-to-entry path, whatever the shape of the tree (retries and edits branch a Claude Code
session; the check finds most pairs without a depth-first walk, and must agree with one).

The expected answer is computed here by walking each result's ancestors, not by the importer.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soba_notebook.importers import _check_tool_pairs
from soba_notebook.importers._common import ImportLog
from soba_notebook.session.entries import Entry

_IDS = ("a", "b", "c")


@st.composite
def trees(draw: st.DrawFn) -> list[Entry]:
    n = draw(st.integers(1, 30))
    entries: list[Entry] = []
    for i in range(n):
        parent = draw(st.one_of(st.none(), st.integers(0, i - 1))) if i else None
        if i and draw(st.booleans()):  # most entries continue the one before them
            parent = i - 1
        kind = draw(st.sampled_from(["user", "assistant", "tool"]))
        if kind == "assistant":
            calls = [{"id": c, "name": "t", "arguments": {}} for c in draw(st.lists(st.sampled_from(_IDS), max_size=2))]
            message: dict[str, object] = {"role": "assistant", "content": "", "toolCalls": calls}
        elif kind == "tool":
            message = {"role": "tool", "toolCallId": draw(st.sampled_from(_IDS)), "name": "t", "content": ""}
        else:
            message = {"role": "user", "content": "hi"}
        entries.append(Entry("message", {"message": message}, f"e{i}", None if parent is None else f"e{parent}",
                             "2025-01-01T00:00:00.000Z"))
    return entries


def expected(entries: list[Entry]) -> tuple[int, int, int, int, Counter[str]]:
    by_id = {e.id: e for e in entries}
    answered: set[tuple[str | None, str]] = set()
    problems: Counter[str] = Counter()
    results = orphans = 0
    for e in entries:
        if e.role != "tool":
            continue
        results += 1
        cid = e.tool_call_id or ""
        up = by_id.get(e.parent_id or "")
        while up is not None and not (up.role == "assistant" and cid in up.tool_call_ids):
            up = by_id.get(up.parent_id or "")
        if up is None:
            orphans += 1
            problems[f"f:{e.id}: tool result for call {cid!r} has no matching call before it; kept as it is"] += 1
        else:
            answered.add((up.id, cid))
    calls = unpaired = 0
    for e in entries:
        for cid in e.tool_call_ids if e.role == "assistant" else ():
            calls += 1
            if (e.id, cid) not in answered:
                unpaired += 1
                problems[f"f:{e.id}: tool call {cid!r} (t) has no result in the source; kept, no result invented"] += 1
    return calls, results, unpaired, orphans, problems


@pytest.mark.slow  # 400 generated trees: seconds
@settings(max_examples=400, deadline=None)
@given(trees())
def test_each_result_pairs_with_the_deepest_call_of_its_id_on_its_path(entries: list[Entry]) -> None:
    log = ImportLog("f")
    counts = _check_tool_pairs(entries, {e.id or "": f"f:{e.id}" for e in entries}, log)
    *want, problems = expected(entries)
    assert counts == tuple(want)
    assert Counter(log.problems) == problems
