"""The append-only JSONL session store: round trip, tree, rewind, crash safety, concurrency."""

from __future__ import annotations

import json
import multiprocessing
import os
import warnings
from pathlib import Path

import pytest

from soba_notebook.errors import SessionError
from soba_notebook.session import (
    Entry,
    SessionStore,
    ToolCall,
    Usage,
    assistant_message,
    checkpoint,
    list_sessions,
    tool_result,
    user_message,
)
from soba_notebook.session.entries import leaf_marker
from soba_notebook.session.store import FORMAT_VERSION


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_header_carries_format_version_and_entries_round_trip(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path, session_id="s1")
    a = store.append(user_message("fix the parser"))
    b = store.append(assistant_message("reading", [ToolCall("c1", "read_file", {"path": "p.py"})],
                                       usage=Usage(100, 20, 5, 0), model="m"))
    c = store.append(tool_result("c1", "read_file", "print('hi')"))
    header = json.loads(_lines(store.file)[0])
    assert header["type"] == "session" and header["version"] == FORMAT_VERSION and header["id"] == "s1"
    reopened = SessionStore.open(store.file)
    assert reopened.entries() == [a, b, c]
    assert reopened.get(b.id).usage == Usage(100, 20, 5, 0)
    assert reopened.get(b.id).tool_calls == (ToolCall("c1", "read_file", {"path": "p.py"}),)
    assert reopened.get(c.id).tool_call_id == "c1"
    assert [e.parent_id for e in reopened.entries()] == [None, a.id, b.id]


def test_one_entry_is_exactly_one_line(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path)
    store.append(user_message("line one\nline two\n\u2028 unicode ✓"))
    assert len(_lines(store.file)) == 2


def test_path_follows_the_leaf_and_rewind_appends_a_leaf_entry(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path)
    a = store.append(user_message("a"))
    b = store.append(assistant_message("b"))
    c = store.append(user_message("c"))
    before = store.file.read_bytes()
    marker = store.rewind(a.id)
    assert store.file.read_bytes().startswith(before), "rewind must not change any earlier byte"
    assert marker.type == "leaf" and marker.data["targetId"] == a.id
    assert store.leaf_id == a.id
    d = store.append(assistant_message("d"))
    assert d.parent_id == a.id
    assert [e.id for e in store.path()] == [a.id, d.id]
    assert [e.id for e in store.path(c.id)] == [a.id, b.id, c.id]
    reopened = SessionStore.open(store.file)
    assert reopened.leaf_id == d.id
    assert [e.id for e in reopened.path()] == [a.id, d.id]


def test_rewind_to_unknown_entry_names_the_session(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path)
    with pytest.raises(SessionError, match="nope"):
        store.rewind("nope")


def test_unknown_entry_types_are_kept_and_not_model_input(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path)
    store.append(user_message("a"))
    with open(store.file, "a") as fh:
        fh.write(json.dumps({"type": "hologram", "id": "h1", "parentId": store.leaf_id, "ts": "x", "beam": 3}) + "\n")
    reopened = SessionStore.open(store.file)
    assert reopened.get("h1").data == {"beam": 3}
    assert not reopened.get("h1").is_model_input
    assert reopened.leaf_id == "h1"


def test_torn_last_line_is_reported_once_skipped_and_next_append_starts_fresh(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path)
    for i in range(3):
        store.append(user_message(f"m{i}"))
    with open(store.file, "ab") as fh:
        fh.write(b'{"type":"message","id":"torn","mess')
    with pytest.warns(UserWarning, match=r"torn last line") as record:
        reopened = SessionStore.open(store.file)
    assert sum("torn" in str(w.message) for w in record) == 1
    assert len(reopened.entries()) == 3
    size = store.file.stat().st_size
    new = reopened.append(user_message("after crash"))
    assert store.file.stat().st_size > size, "the file is only ever appended to"
    with warnings.catch_warnings(record=True) as later:
        warnings.simplefilter("always")
        again = SessionStore.open(store.file)
    assert [e.id for e in again.entries()][-1] == new.id
    assert len(again.entries()) == 4
    assert any(":5:" in str(w.message) for w in later), "the torn bytes stay, reported with their line"


def test_non_json_line_in_the_middle_names_file_and_line_and_keeps_the_rest(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path)
    store.append(user_message("a"))
    with open(store.file, "a") as fh:
        fh.write("this is not json\n")
    store2 = SessionStore.open(store.file)
    store2.append(user_message("b"))
    with pytest.warns(UserWarning, match=rf"{store.file.name}:3: not valid JSON"):
        reopened = SessionStore.open(store.file)
    assert [e.text for e in reopened.entries()] == ["a", "b"]
    assert reopened.problems and ":3:" in reopened.problems[0]


def test_missing_header_is_a_clear_error(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_text(json.dumps({"type": "message", "id": "x"}) + "\n")
    with pytest.raises(SessionError, match=r"s\.jsonl:1: missing session header"):
        SessionStore.open(f)


def test_wrong_version_is_a_clear_error_and_newer_version_opens_read_only(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_text(json.dumps({"type": "session", "version": "one", "id": "s"}) + "\n")
    with pytest.raises(SessionError, match="invalid format version 'one'"):
        SessionStore.open(f)
    f.write_text(json.dumps({"type": "session", "version": FORMAT_VERSION + 1, "id": "s"}) + "\n"
                 + json.dumps({"type": "future", "id": "e1", "parentId": None}) + "\n")
    with pytest.warns(UserWarning, match="newer"):
        store = SessionStore.open(f)
    assert store.get("e1").type == "future"
    with pytest.raises(SessionError, match="only reads it"):
        store.append(user_message("x"))


def test_parent_that_points_nowhere_is_warned_with_line_and_entry_kept(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path)
    store.append(user_message("a"))
    with open(store.file, "a") as fh:
        fh.write(json.dumps({"type": "message", "id": "orphan", "parentId": "ghost",
                             "message": {"role": "user", "content": "o"}}) + "\n")
    with pytest.warns(UserWarning, match=r":3: parentId 'ghost'"):
        reopened = SessionStore.open(store.file)
    assert "orphan" in reopened
    assert [e.id for e in reopened.path()] == ["orphan"]


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SessionError, match="no such session file"):
        SessionStore.open(tmp_path / "nope.jsonl")


def test_refresh_sees_entries_appended_by_another_writer(tmp_path: Path) -> None:
    writer = SessionStore.create(tmp_path)
    reader = SessionStore.open(writer.file)
    writer.append(user_message("one"))
    with open(writer.file, "ab") as fh:  # a writer mid-write: incomplete line, not torn yet
        fh.write(b'{"type":"message"')
    assert [e.text for e in reader.refresh()] == ["one"]
    assert reader.problems == [], "a lock-free refresh never calls an in-progress line torn"


def test_list_sessions_reads_headers(tmp_path: Path) -> None:
    SessionStore.create(tmp_path, session_id="aa")
    SessionStore.create(tmp_path, session_id="bb")
    (tmp_path / "junk.jsonl").write_text("nope\n")
    assert sorted(s.id for s in list_sessions(tmp_path)) == ["aa", "bb"]


def test_checkpoint_and_leaf_entries_are_not_model_input(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path)
    a = store.append(user_message("a"))
    store.append(checkpoint("milestone", "tests pass"))
    store.append(leaf_marker(a.id))
    assert [e.is_model_input for e in store.entries()] == [True, False, False]


def test_fsync_mode_writes_the_same_bytes(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path / "f", fsync=True)
    e = store.append(user_message("durable"))
    assert SessionStore.open(store.file).get(e.id).text == "durable"


def _append_many(path: str, tag: str, n: int) -> None:
    store = SessionStore.open(path)
    for i in range(n):
        store.append(Entry("message", {"message": {"role": "user", "content": f"{tag}-{i}" + "x" * (i % 300)}}))


def test_two_processes_appending_concurrently_never_interleave(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(str(store.file), tag, 2000)) for tag in ("A", "B")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    lines = _lines(store.file)
    assert len(lines) == 1 + 4000
    parsed = [json.loads(line) for line in lines[1:]]  # every line is valid JSON
    texts = {p["message"]["content"].rstrip("x") for p in parsed}
    assert texts == {f"{t}-{i}" for t in "AB" for i in range(2000)}
    reopened = SessionStore.open(store.file)
    assert len(reopened.entries()) == 4000 and reopened.problems == []
    # each writer picked up the other's lines before appending, so the file is one chain
    assert len(reopened.path()) == 4000


def test_second_writer_gets_clear_error_naming_the_session_when_lock_is_held(tmp_path: Path) -> None:
    import fcntl

    from soba_notebook.errors import SessionLockedError

    store = SessionStore.create(tmp_path, session_id="locked-one", lock_timeout=0.05)
    fd = os.open(store.file, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(SessionLockedError, match="locked-one"):
            store.append(user_message("blocked"))
    finally:
        os.close(fd)
    store.append(user_message("now free"))


def test_invalid_utf8_and_trailing_garbage_lines_are_reported_and_the_rest_kept(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path)
    store.append(user_message("a"))
    with open(store.file, "ab") as fh:
        fh.write(b'{"type":"message","id":"bad\xff","parentId":null}\n')
        fh.write(b'{"type":"message","id":"x1","parentId":null} trailing\n')
    SessionStore.open(store.file).append(user_message("b"))
    with pytest.warns(UserWarning) as record:
        reopened = SessionStore.open(store.file)
    assert [e.text for e in reopened.entries()] == ["a", "b"]
    messages = " ".join(str(w.message) for w in record)
    assert ":3: not valid JSON" in messages and ":4: not valid JSON" in messages


def test_capsule_whose_first_kept_entry_is_not_on_the_path_is_warned_not_silent(tmp_path: Path) -> None:
    from soba_notebook.session.context import build_context

    store = SessionStore.create(tmp_path)
    store.append(user_message("a"))
    store.append(Entry("capsule", {"firstKeptEntryId": "ghost", "state": {}}))
    after = store.append(user_message("b"))
    with pytest.warns(UserWarning, match="firstKeptEntryId 'ghost' is not on the path"):
        ctx = build_context(store.path())
    assert [e.id for e in ctx.messages] == [after.id]


def test_open_streams_the_file_in_chunks_and_reads_the_same_entries_as_in_one_piece(tmp_path, monkeypatch) -> None:
    import warnings

    from soba_notebook.session import store as store_module

    store = SessionStore.create(tmp_path)
    for i in range(40):
        store.append(user_message(f"entry {i} with ünïcödé and an emoji 🎉 " + "x" * (i * 7)))
    with open(store.file, "ab") as fh:
        fh.write(b'{"type": "message", bad json\n\n{"type":"message","id":"torn","parentId":null,"message":{"ro')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for chunk in (1, 7, 64, 300):
            monkeypatch.setattr(store_module, "OPEN_CHUNK_BYTES", 1 << 30)
            whole = SessionStore.open(store.file)
            monkeypatch.setattr(store_module, "OPEN_CHUNK_BYTES", chunk)
            streamed = SessionStore.open(store.file)
            assert streamed.entries() == whole.entries()
            assert [e.line for e in streamed.entries()] == [e.line for e in whole.entries()]
            assert streamed.problems == whole.problems and len(whole.problems) == 2
            assert streamed.leaf_id == whole.leaf_id and streamed._offset == whole._offset
            assert streamed._line_no == whole._line_no
            streamed.append(user_message("after"))  # the next round reads a file that grew


def test_append_many_writes_the_same_lines_as_one_append_each(tmp_path) -> None:
    from soba_notebook.session import Entry

    def batch() -> list[Entry]:
        out = [Entry("message", {"message": {"role": "user", "content": f"m{i} \u2028 ✓"}}, id=f"e{i}",
                     ts="2026-01-01T00:00:00.000Z") for i in range(5)]
        out.append(Entry("leaf", {"targetId": "e2", "reason": "rewind"}, id="l1", ts="2026-01-01T00:00:00.000Z"))
        out.append(Entry("message", {"message": {"role": "user", "content": "on a branch"}}, id="b1",
                         ts="2026-01-01T00:00:00.000Z"))
        return out

    one = SessionStore.create(tmp_path / "one", session_id="s")
    for entry in batch():
        one.append(entry)
    many = SessionStore.create(tmp_path / "many", session_id="s")
    written = many.append_many(batch())
    tail = lambda store: store.file.read_bytes().split(b"\n", 1)[1]  # noqa: E731 - the header holds a time
    assert tail(many) == tail(one)
    assert [e.line for e in written] == [e.line for e in one.entries()] == list(range(2, 9))
    assert written[-1].parent_id == "e2" and many.leaf_id == "b1" == one.leaf_id
    assert [e.id for e in many.path()] == ["e0", "e1", "e2", "b1"]
    assert SessionStore.open(many.file).entries() == many.entries()


def test_append_many_takes_one_lock_and_one_fsync_per_batch(tmp_path, monkeypatch) -> None:
    from soba_notebook.session import store as store_module

    store = SessionStore.create(tmp_path, fsync=True)
    calls = {"fsync": 0, "lock": 0}
    real_fsync, real_lock = os.fsync, store_module.lock_exclusive

    def fsync(fd: int) -> None:
        calls["fsync"] += 1
        real_fsync(fd)

    def lock_exclusive(fd: int, *, blocking: bool = True) -> bool:
        calls["lock"] += 1
        return real_lock(fd, blocking=blocking)

    monkeypatch.setattr(store_module.os, "fsync", fsync)
    monkeypatch.setattr(store_module, "lock_exclusive", lock_exclusive)
    store.append_many([user_message(f"m{i}") for i in range(500)])
    assert calls == {"fsync": 1, "lock": 1}
    assert len(SessionStore.open(store.file)) == 500


def test_append_many_writes_nothing_when_one_entry_is_invalid(tmp_path) -> None:
    from soba_notebook.session import Entry
    from soba_notebook.session.store import BatchEntryError

    store = SessionStore.create(tmp_path)
    store.append(user_message("first"))
    size = store.file.stat().st_size
    bad = [user_message("ok"), Entry("message", {"message": {"role": "user", "content": "\ud800"}}), user_message("x")]
    with pytest.raises(BatchEntryError, match="entry 1 of the batch") as err:
        store.append_many(bad)
    assert err.value.index == 1
    with pytest.raises(SessionError, match="already exists"):
        store.append_many([user_message("a").with_ids("dup", None, "t"), user_message("b").with_ids("dup", None, "t")])
    assert store.file.stat().st_size == size and len(store) == 1
