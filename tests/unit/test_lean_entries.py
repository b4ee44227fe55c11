"""Entries in memory stay lean: what a long session holds per entry, and what a walk over a
whole context touches (issue 25: the per-entry cost must not rise with the session's size).

Counted, never timed: shared objects are checked by identity, work by counting lookups.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from soba_notebook.session import Entry, SessionStore, ToolCall, assistant_message, tool_result, user_message
from soba_notebook.session.context import build_context


def _session(tmp_path: Path, turns: int = 20) -> Path:
    store = SessionStore.create(tmp_path, session_id="lean")
    for i in range(turns):
        store.append(user_message(f"question {i}"))
        store.append(assistant_message("", [ToolCall(f"c{i}", "read_file", {"path": f"f{i}.py"})], model="m"))
        store.append(tool_result(f"c{i}", "read_file", f"text {i}"))
        store.append(assistant_message(f"answer {i}", model="m"))
    return store.file


def test_entries_read_from_a_file_share_one_object_per_type_and_role(tmp_path: Path) -> None:
    entries = SessionStore.open(_session(tmp_path)).path()
    assert len({id(e.type) for e in entries}) == 1
    assert len({id(e.role) for e in entries if e.role == "assistant"}) == 1
    assert len({id(e.role) for e in entries if e.role == "tool"}) == 1


def test_the_model_input_of_a_just_opened_session_reads_no_entry_back_from_the_file(tmp_path: Path) -> None:
    store = SessionStore.open(_session(tmp_path))
    context = build_context(store.path())
    assert len(context.messages) == 80
    assert store.read_back == 0  # the newest entries are kept whole at open: nothing read twice
    assert [e.id for e in store.path()] == store.path_ids()


def test_the_path_kept_as_entries_follows_appends_and_rewinds(tmp_path: Path) -> None:
    store = SessionStore.open(_session(tmp_path, turns=3))
    ids = store.path_ids().copy()
    store.rewind(ids[5])
    assert [e.id for e in store.path()] == ids[:6]
    added = store.append(user_message("after the rewind"))
    assert [e.id for e in store.path()] == [*ids[:6], added.id]
    assert store.path() == [store.get(i) for i in store.path_ids()]


def test_shared_type_and_role_objects_change_neither_equality_nor_the_stored_line(tmp_path: Path) -> None:
    file = _session(tmp_path, turns=2)
    lines = file.read_text(encoding="utf-8").splitlines()[1:]
    for line, entry in zip(lines, SessionStore.open(file).entries(), strict=True):
        raw = json.loads(line)
        assert entry == Entry.from_json(raw)
        assert json.dumps(entry.to_json(), ensure_ascii=False, separators=(",", ":")) == line


def test_entries_read_from_a_file_share_one_object_per_key(tmp_path: Path) -> None:
    entries = SessionStore.open(_session(tmp_path)).path()
    keys = [k for e in entries for k in e.message]
    assert len(keys) > 100
    assert len({id(k) for k in keys}) == len(set(keys))  # one object per distinct key, not one per line


@pytest.mark.parametrize(("inserted", "skipped"), [
    ([""], 0),  # a blank line
    (["[1, 2]"], 1),  # a value that is not an entry
    (['{"type":"message","id":"t1","message":[{"a":1}', '{"b":2}]}'], 2),  # one value over two lines
    (['{"type":"message","id":"x"},{"type":"message","id":"y"}'], 1),  # two values on one line
    (['{"type":"message","id":"t2","message":{"role":"user","content":"torn'], 1),  # a torn write
])
def test_a_batch_with_a_line_that_is_not_one_entry_reads_line_by_line_as_before(
        tmp_path: Path, inserted: list[str], skipped: int) -> None:
    file = _session(tmp_path, turns=2)
    lines = file.read_text(encoding="utf-8").splitlines()
    file.write_text("\n".join([*lines[:3], *inserted, *lines[3:]]) + "\n", encoding="utf-8")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        store = SessionStore.open(file)
    after = len(inserted)
    assert [e.line for e in store.entries()] == [2, 3, *range(4 + after, len(lines) + after + 1)]
    assert len(store.problems) == skipped


def test_a_message_field_with_few_values_holds_one_object_per_value(tmp_path: Path) -> None:
    entries = SessionStore.open(_session(tmp_path)).path()
    for key in ("role", "model", "name"):
        values = [e.message[key] for e in entries if key in e.message]
        assert len(values) >= 20
        assert len({id(v) for v in values}) == len(set(values)), key
    assert all(e.message["role"] is e.role for e in entries)
