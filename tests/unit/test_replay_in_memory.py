"""A replay runs in memory: no file opened, no lock taken, whatever the session's length; and the
in-memory store it appends to keeps exactly what the file store would (ids, parents, lines, leaf,
text with UTF-16 surrogates cleaned), so no figure moves."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from soba_notebook import locking
from soba_notebook.compaction.simulate import replay
from soba_notebook.config import SobaConfig
from soba_notebook.errors import SessionError, StaleLeafError
from soba_notebook.session import Entry, SessionStore, ToolCall, assistant_message, tool_result, user_message
from soba_notebook.session import store as store_module
from soba_notebook.session.memory_store import MemoryStore, holds_surrogates
from soba_notebook.tokens import TokenCounter

CONFIG = SobaConfig().with_overrides({"model": {"contextWindow": 3000, "maxOutputTokens": 200},
                                      "compaction": {"safetyReserveTokens": 300, "minTokensForAutoCompact": 1000,
                                                     "keepRecentTokens": 500, "minReclaimableTokens": 300}})
COUNTER = TokenCounter("gpt-4o")


def _source(turns: int) -> list[Entry]:
    """``turns`` turns of a user question, a reply with a tool call, its result and an answer."""
    entries: list[Entry] = []
    parent = None
    for t in range(turns):
        for entry in (user_message(f"question {t} " + "word " * 300),
                      assistant_message("let me look", [ToolCall(f"c{t}", "read_file", {"path": f"f{t}.py"})]),
                      tool_result(f"c{t}", "read_file", "line\n" * 200),
                      assistant_message(f"answer {t} " + "word " * 50)):
            eid = f"e{len(entries)}"
            entries.append(Entry(entry.type, entry.data, eid, parent, "2026-01-01T00:00:00Z"))
            parent = eid
    return entries


class _Counted:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.opens = self.locks = 0
        real_open, real_lock = os.open, locking.lock_exclusive

        def counted_open(*args: object, **kwargs: object) -> int:
            self.opens += 1
            return real_open(*args, **kwargs)  # type: ignore[arg-type]

        def counted_lock(*args: object, **kwargs: object) -> bool:
            self.locks += 1
            return real_lock(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(store_module.os, "open", counted_open)
        monkeypatch.setattr(store_module, "lock_exclusive", counted_lock)


def test_a_replay_opens_no_file_and_takes_no_lock_for_any_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    source = _source(12)
    counted = _Counted(monkeypatch)
    result = replay(source, CONFIG, counter=COUNTER)
    assert result.capsules, "the session must compact, so the engine's own appends are counted too"
    assert (counted.opens, counted.locks) == (0, 0)
    assert result.session_path is None  # nothing written, nothing to open afterwards


def test_a_replay_leaves_nothing_for_the_cyclic_gc_and_runs_without_it() -> None:
    """Its engine's reference cycles (and the replayed session hanging off them) are broken as it
    ends, so pausing the collector for its length leaves no garbage behind."""
    source = _source(200)
    collections: list[int] = []

    def started(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()
    gc.callbacks.append(started)
    try:
        result = replay(source, CONFIG, counter=COUNTER)
    finally:
        gc.callbacks.remove(started)
    assert result.capsules and gc.isenabled()
    assert collections == []  # 800 entries re-appended, capsules built: not one collection
    gc.disable()
    try:
        replay(source, CONFIG, counter=COUNTER)
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_a_replay_into_a_directory_writes_the_replayed_session_once(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    source = _source(12)
    in_memory = replay(source, CONFIG, counter=COUNTER)
    counted = _Counted(monkeypatch)
    written = replay(source, CONFIG, counter=COUNTER, workdir=tmp_path / "replay")
    assert counted.locks == 1  # the one append of the whole session, not one per entry
    assert written.inferences == in_memory.inferences
    assert written.session_path is not None and written.session_path.parent == tmp_path / "replay"
    reopened = SessionStore.open(written.session_path).entries()
    assert [e.type for e in reopened].count("capsule") == len(written.capsules)
    assert [e.id for e in reopened if e.type != "capsule"] == [e.id for e in source]
    capsules = [e for e in reopened if e.type == "capsule"]
    assert [(e.parent_id, e.line, dict(e.data)) for e in capsules] == \
        [(e.parent_id, e.line, dict(e.data)) for e in written.capsule_entries]


_APPENDS = (user_message("plain"),
            assistant_message("an emoji split in two escapes \ud83d\ude00 and a lone half \ud83d."),
            Entry("message", {"message": {"role": "tool", "content": "ok", "toolCallId": "c\udc00"}}),
            Entry("custom", {"k\ud800ey": ["x", {"y": ("\udfff",)}]}))


def test_the_memory_store_keeps_what_the_file_store_keeps_surrogates_cleaned(tmp_path: Path) -> None:
    on_disk = SessionStore.create(tmp_path, session_id="s")
    in_memory = MemoryStore.create_in_memory(session_id="s")
    for entry in _APPENDS:
        ts = "2026-01-01T00:00:00Z"
        a = on_disk.append(Entry(entry.type, entry.data, None, None, ts))
        b = in_memory.append(Entry(entry.type, entry.data, a.id, None, ts))
        assert (b.type, dict(b.data), b.id, b.parent_id, b.ts, b.line, b.role) == \
            (a.type, dict(a.data), a.id, a.parent_id, a.ts, a.line, a.role)
    assert in_memory.leaf_id == on_disk.leaf_id and in_memory.path_ids() == on_disk.path_ids()
    assert in_memory.version == len(_APPENDS) and in_memory.refresh() == []
    assert "\ud83d\ude00" not in str(in_memory.entries()[1].data) and "\U0001f600" in str(in_memory.entries()[1].data)


def test_the_memory_store_refuses_what_the_file_store_refuses() -> None:
    store = MemoryStore.create_in_memory()
    first = store.append(user_message("one"))
    with pytest.raises(SessionError, match="already exists"):
        store.append(Entry("message", first.data, first.id))
    with pytest.raises(StaleLeafError):
        store.append(user_message("two"), expect_leaf="somewhere-else")
    with pytest.raises(SessionError, match="already exists"):
        store.append_many([user_message("three"), Entry("message", first.data, first.id)])
    assert len(store) == 1  # a refused batch appends nothing
    with pytest.raises(SessionError, match="memory only"):
        store.claim()


@pytest.mark.parametrize(("value", "held"), [
    ("ascii", False), ("émoji 😀", False), ("lone \ud83d", True), ({"k\udc00": 1}, True), ([1, ("\udfff",)], True),
    ({"a": [{"b": None, "c": 2.5}]}, False),
])
def test_surrogates_are_found_wherever_json_would_write_them(value: object, held: bool) -> None:
    assert holds_surrogates(value) is held
