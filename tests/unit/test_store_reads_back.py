"""A long session's memory stays flat: the file store keeps only a bounded set of entries whole
and reads the others back from their lines (issue 25 item 7).

Counted, never timed: the Entry objects alive in the process, the store's own read-back counter.
Most tests make the store keep a handful of entries, so every query below reads back for real.
"""

from __future__ import annotations

import gc
import json
import warnings
from pathlib import Path

import pytest

from soba_notebook.agent.approval import Rule
from soba_notebook.agent.approval_gate import ApprovalGate, rules_on_path
from soba_notebook.config import ToolsConfig
from soba_notebook.errors import SessionError, SessionWarning
from soba_notebook.relearn import reported_replies
from soba_notebook.session import Entry, SessionStore, ToolCall, Usage, assistant_message, tool_result, user_message
from soba_notebook.session import store as store_module
from soba_notebook.session.memory_store import MemoryStore

KEEP = 8


@pytest.fixture
def few_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """File stores keep only :data:`KEEP` entries whole by themselves."""
    monkeypatch.setattr(SessionStore, "_keep", KEEP)


def _alive() -> int:
    """Entry objects alive in the process, whoever holds them."""
    return sum(1 for obj in gc.get_objects() if obj.__class__ is Entry)


def _turn(store: SessionStore, i: int) -> None:
    """One exchange: a question, a tool call, its result, an answer (nothing returned is kept)."""
    store.append(user_message(f"question {i} ✓ \u2028 🎉"))
    store.append(assistant_message("", [ToolCall(f"c{i}", "read_file", {"path": f"f{i}.py", "n": [1, {"x": None}]})],
                                   model="m"))
    store.append(tool_result(f"c{i}", "read_file", f"text {i}\n" * 3))
    store.append(assistant_message(f"answer {i}", model="m"))


BUDGET = 16 * 1024  # bytes of lines kept whole in the budget tests


def _newest_within(store: SessionStore, budget: int) -> int:
    """How many of the session's newest lines fit in ``budget`` bytes (newlines excluded)."""
    lines = store.file.read_bytes().split(b"\n")[1:-1]
    count = total = 0
    for line in reversed(lines):
        total += len(line)
        if total > budget:
            break
        count += 1
    return count


def test_a_long_session_keeps_whole_only_its_newest_entries_within_the_byte_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SessionStore, "_keep_bytes", BUDGET)
    store = SessionStore.create(tmp_path, session_id="long")
    before = _alive()
    for i in range(100):
        _turn(store, i)
    assert store.file.stat().st_size > 4 * BUDGET
    first = _alive() - before
    assert 0 < first <= _newest_within(store, BUDGET) < len(store) // 2  # the newest, not the transcript
    for i in range(100, 200):
        _turn(store, i)
    assert len(store) == 800
    assert _alive() - before <= _newest_within(store, BUDGET) <= first + 4  # twice as long, no more whole


def test_a_session_within_the_default_budget_reads_its_whole_path_from_memory(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path, session_id="usual")
    for i in range(500):
        _turn(store, i)
    assert store.file.stat().st_size < store_module.KEPT_BYTES
    reads = store.read_back
    assert len(store.path()) == 2_000 and len(store.entries()) == 2_000
    assert store.read_back == reads, "a session of usual size is held whole: its path is read from memory"
    reopened = SessionStore.open(store.file)
    assert len(reopened.path()) == 2_000 and reopened.read_back == 0


def test_old_entries_read_back_equal_what_was_appended(tmp_path: Path, few_kept: None) -> None:
    store = SessionStore.create(tmp_path, session_id="back")
    written = []
    for i in range(20):
        _turn(store, i)
    for e in store.path():  # the JSON form of each entry as appended: what a read back must give
        written.append((e.id, e.line, json.dumps(e.to_json(), ensure_ascii=False)))
    reads = store.read_back
    for eid, line, text in written[:40]:
        entry = store.get(eid)
        assert (entry.line, json.dumps(entry.to_json(), ensure_ascii=False)) == (line, text)
    assert store.read_back > reads  # they were read back, not kept
    assert [(e.id, e.line, json.dumps(e.to_json(), ensure_ascii=False)) for e in store.entries()] == written
    lines = store.file.read_text(encoding="utf-8").split("\n")[1:-1]
    assert [json.loads(line)["id"] for line in lines] == [eid for eid, _, _ in written]


def test_an_entry_someone_holds_is_the_same_object_when_asked_again(tmp_path: Path, few_kept: None) -> None:
    store = SessionStore.create(tmp_path, session_id="same")
    first = store.append(user_message("kept by the caller"))
    for i in range(10):
        _turn(store, i)
    reads = store.read_back
    assert store.get(first.id or "") is first
    assert store.path()[0] is first
    assert store.read_back == reads + len(store) - KEEP - 1  # the path read back all but it and the kept


def test_a_rewind_to_an_entry_no_longer_kept_moves_the_leaf_and_the_path_reads_back(tmp_path: Path,
                                                                                    few_kept: None) -> None:
    store = SessionStore.create(tmp_path, session_id="rewind")
    for i in range(10):
        _turn(store, i)
    ids = list(store.path_ids())
    store.rewind(ids[5])
    after = store.append(user_message("on a new branch"))
    assert store.path_ids() == [*ids[:6], after.id]
    assert [e.id for e in store.path()] == [*ids[:6], after.id]
    assert [e.id for e in store.children(ids[5])] == [ids[6], after.id]
    assert store.leaf() == after
    reopened = SessionStore.open(store.file)
    assert [e.id for e in reopened.path()] == [*ids[:6], after.id]
    assert [e.id for e in reopened.path(ids[-1])] == ids  # the old branch reads back whole


def test_refresh_reads_back_another_writers_entries_by_their_offsets(tmp_path: Path, few_kept: None) -> None:
    reader = SessionStore.create(tmp_path, session_id="two")
    writer = SessionStore.open(reader.file)
    for i in range(10):
        _turn(writer, i)
    assert len(reader.refresh()) == 40
    _turn(reader, 10)  # the reader appends too: its offsets follow the other writer's lines
    assert writer.refresh()[0].text.startswith("question 10")
    expected = [json.dumps(e.to_json()) for e in SessionStore.open(reader.file).entries()]
    assert [json.dumps(reader.get(e.id or "").to_json()) for e in reader.entries()] == expected
    assert [json.dumps(e.to_json()) for e in writer.entries()] == expected


def test_entries_after_a_torn_line_read_back_from_their_own_offsets(tmp_path: Path, few_kept: None) -> None:
    store = SessionStore.create(tmp_path, session_id="torn")
    for i in range(5):
        _turn(store, i)
    with open(store.file, "ab") as fh:
        fh.write(b'{"type":"message","id":"half","message":{"role":"us')  # a writer killed mid-line
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SessionWarning)
        reopened = SessionStore.open(store.file)
    for i in range(5, 10):
        _turn(reopened, i)  # the first starts on a fresh line after the torn one
    texts = [e.text for e in reopened.path() if e.role == "user"]
    assert texts == [f"question {i} ✓ \u2028 🎉" for i in range(10)]
    assert "half" not in reopened
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SessionWarning)  # the torn line, now followed by others
        again = SessionStore.open(store.file)
    assert [e.to_json() for e in again.entries()] == [e.to_json() for e in reopened.entries()]


def test_a_line_changed_in_place_is_an_error_naming_the_line_not_a_wrong_entry(tmp_path: Path,
                                                                                few_kept: None) -> None:
    store = SessionStore.create(tmp_path, session_id="changed")
    for i in range(5):
        _turn(store, i)
    first = store.path_ids()[0]
    raw = store.file.read_bytes()
    store.file.write_bytes(raw.replace(first.encode(), b"x" * len(first), 1))  # same length, another id
    with pytest.raises(SessionError, match=r":2: the line of entry .* changed in place"):
        store.get(first)


def test_a_memory_store_keeps_every_entry_whole(few_kept: None) -> None:
    store = MemoryStore.create_in_memory(session_id="mem")
    first = store.append(user_message("first"))
    first_id = first.id or ""
    del first
    for i in range(10):
        _turn(store, i)
    assert store.get(first_id).text == "first"
    assert len(store.entries()) == 41 and store.read_back == 0


def test_turn_start_reads_back_only_the_approval_entries_it_has_not_read(tmp_path: Path, few_kept: None) -> None:
    store = SessionStore.create(tmp_path, session_id="rules")
    rule = Rule("shell", "ls *")
    store.append(Entry("approval", {"verdict": "session", "rules": [rule.to_json()]}))
    for i in range(10):
        _turn(store, i)
    gate = ApprovalGate(tmp_path, ToolsConfig, store.append)
    gate.follow(store)
    assert gate.rules == (rule,)
    assert store.read_back == 1  # the approval entry, none of the 40 others
    branch = store.path_ids()[-1]
    later = Rule("shell", "cat *")
    store.append(Entry("approval", {"verdict": "session", "rules": [later.to_json()]}))
    _turn(store, 10)  # a turn's entries, fewer than the store keeps
    reads = store.read_back
    gate.follow(store)
    assert gate.rules == (rule, later)
    assert store.read_back == reads  # only new entries were looked at, and they are kept
    store.rewind(branch)  # before the later rule: it no longer holds
    gate.follow(store)
    assert gate.rules == (rule,) == rules_on_path(store.path())


def test_the_walk_for_reported_replies_reads_back_only_assistant_messages(tmp_path: Path, few_kept: None) -> None:
    store = SessionStore.create(tmp_path, session_id="replies")
    for i in range(30):
        _turn(store, i)  # two assistant replies a turn, neither with reported usage (an offline model)
        if i in (3, 17):
            store.append(assistant_message(f"reported {i}", usage=Usage(input=100 + i), model="m"))
    path = store.path_ids()
    naive = [p for p in range(len(path) - 1, -1, -1)
             if store.get(path[p]).role == "assistant" and store.get(path[p]).usage is not None
             and store.get(path[p]).usage.reported]  # type: ignore[union-attr]
    reads = store.read_back
    replies, low = reported_replies(store, path, 32)
    assert replies == naive and len(replies) == 2 and low == 0
    assistants = sum(1 for eid in path if store.role_of(eid) == "assistant")
    assert assistants == len(path) - 60  # 30 questions and 30 tool results besides them
    assert store.read_back - reads <= assistants  # never a question or a tool result
    assert reported_replies(store, path, 1) == (naive[:1], naive[0])  # stops at the newest one
