"""Rewind across capsules: moving the leaf to any earlier entry — before the first capsule,
between two capsules, onto a capsule, on another branch — restores exactly the model input that
entry had when it was the leaf (the capsule in force then and its retained tail), and the JSONL
only ever grows."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soba_notebook.compaction.capsule import Capsule
from soba_notebook.session import (
    Entry,
    ModelContext,
    SessionStore,
    ToolCall,
    assistant_message,
    build_context,
    checkpoint,
    tool_result,
    user_message,
)


def capsule(ck: str, first_kept: str | None, goal: str) -> Entry:
    return Entry("capsule", {"checkpointId": ck, "firstKeptEntryId": first_kept, "trigger": "auto_threshold",
                             "quality": "ok", "state": Capsule(goal=goal).to_json(), "tokensBefore": 40000,
                             "tokensAfter": 12000, "source": "estimated", "operationId": f"op_{ck}"})


class Recorder:
    """A store plus the model input each entry had at the moment it was the leaf."""

    def __init__(self, directory: Path) -> None:
        self.store = SessionStore.create(directory, session_id="rewind")
        self.seen: dict[str, ModelContext] = {}
        self.size = self.store.file.stat().st_size

    def add(self, entry: Entry) -> Entry:
        entry = self.store.append(entry)
        assert entry.id is not None
        self.seen[entry.id] = build_context(self.store.path())
        self.grew()
        return entry

    def grew(self) -> None:
        before = self.size
        data = self.store.file.read_bytes()
        assert len(data) > before, "every operation appends"
        self.size = len(data)

    def rewind_and_check(self, entry_id: str) -> ModelContext:
        prefix = self.store.file.read_bytes()
        self.store.rewind(entry_id)
        self.grew()
        assert self.store.file.read_bytes().startswith(prefix), "an earlier line changed"
        ctx = build_context(self.store.path())
        assert ctx == self.seen[entry_id]
        # a fresh reader of the file agrees
        assert build_context(SessionStore.open(self.store.file).path()) == ctx
        return ctx


def ids(entries: tuple[Entry, ...]) -> list[str | None]:
    return [e.id for e in entries]


def test_rewind_restores_the_model_input_of_every_earlier_entry(tmp_path: Path) -> None:
    r = Recorder(tmp_path)
    u1 = r.add(user_message("start"))
    a1 = r.add(assistant_message("ok"))
    u2 = r.add(user_message("read the parser"))
    a2 = r.add(assistant_message("", [ToolCall("c1", "read_file", {"path": "p.py"})]))
    t2 = r.add(tool_result("c1", "read_file", "code"))
    a2b = r.add(assistant_message("read it"))
    c1 = r.add(capsule("ck_1", u2.id, "goal one"))  # keeps u2..a2b verbatim
    u3 = r.add(user_message("now fix it"))
    a3 = r.add(assistant_message("fixed"))
    m = r.add(checkpoint("milestone", "parser fixed"))  # not model input
    u4 = r.add(user_message("and the docs"))
    c2 = r.add(capsule("ck_2", u4.id, "goal two"))  # rolls C1; keeps u4 only
    a4 = r.add(assistant_message("docs done"))
    u5 = r.add(user_message("ship"))

    # expectations spelled out, independently of the recorder
    assert r.seen[a1.id].capsule is None and ids(r.seen[a1.id].messages) == [u1.id, a1.id]
    assert r.seen[c1.id].capsule == c1 and ids(r.seen[c1.id].messages) == [u2.id, a2.id, t2.id, a2b.id]
    assert r.seen[m.id].capsule == c1 and ids(r.seen[m.id].messages) == [u2.id, a2.id, t2.id, a2b.id, u3.id, a3.id]
    assert r.seen[c2.id].capsule == c2 and ids(r.seen[c2.id].messages) == [u4.id]
    assert r.seen[u5.id].capsule == c2 and ids(r.seen[u5.id].messages) == [u4.id, a4.id, u5.id]

    everything = [u1, a1, u2, a2, t2, a2b, c1, u3, a3, m, u4, c2, a4, u5]
    # before the first capsule, between the capsules, onto each capsule, after the last, and back again
    for target in (a1, t2, c1, u3, m, u4, c2, u5, u1, a2b, a4):
        assert target.id is not None
        r.rewind_and_check(target.id)
    # older capsules and everything else stay in the transcript
    reopened = SessionStore.open(r.store.file)
    assert [e for e in reopened.entries() if e.type != "leaf"] == everything


def test_rewind_onto_a_capsule_then_continue_builds_on_that_capsule(tmp_path: Path) -> None:
    r = Recorder(tmp_path)
    r.add(user_message("a"))
    b = r.add(assistant_message("b"))
    c1 = r.add(capsule("ck_1", b.id, "one"))
    r.add(user_message("c"))
    r.add(capsule("ck_2", None, "two"))
    assert c1.id is not None
    r.rewind_and_check(c1.id)
    new = r.add(user_message("a different direction"))
    ctx = build_context(r.store.path())
    assert ctx.capsule == c1 and ids(ctx.messages) == [b.id, new.id]


def test_rewind_across_branches_each_with_its_own_capsule(tmp_path: Path) -> None:
    r = Recorder(tmp_path)
    u1 = r.add(user_message("root"))
    a1 = r.add(assistant_message("ok"))
    main_cap = r.add(capsule("ck_main", a1.id, "main"))
    main_tail = r.add(user_message("main tail"))
    assert u1.id and a1.id and main_cap.id and main_tail.id
    r.rewind_and_check(u1.id)
    side = r.add(assistant_message("side branch"))
    side_cap = r.add(capsule("ck_side", side.id, "side"))
    side_tail = r.add(user_message("side tail"))
    assert side_tail.id and side_cap.id
    assert build_context(r.store.path()).capsule == side_cap
    r.rewind_and_check(main_tail.id)  # back on the main branch: its capsule, not the side one
    assert build_context(r.store.path()).capsule == main_cap
    r.rewind_and_check(side_cap.id)
    r.rewind_and_check(a1.id)


# -- property: any sequence of appends, compactions and rewinds --------------------------------
ops = st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool", "capsule", "capsule", "rewind"]),
                         st.integers(0, 10**6)), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow])
@given(ops)
def test_any_history_of_compactions_and_rewinds_restores_each_entrys_model_input(
        tmp_path_factory: pytest.TempPathFactory,
        sequence: list[tuple[str, int]]) -> None:
    r = Recorder(tmp_path_factory.mktemp("prop"))
    for n, (kind, pick) in enumerate(sequence, 1):
        if kind == "rewind" and r.seen:
            r.rewind_and_check(sorted(r.seen)[pick % len(r.seen)])
        elif kind == "capsule":
            tail = build_context(r.store.path()).messages
            # keep a suffix of the current model input (or nothing) verbatim, as the planner does
            kept = [e for e in tail if e.role != "tool"]
            first = kept[pick % len(kept)].id if kept and pick % 3 else None
            r.add(capsule(f"ck_{n}", first, f"goal {n}"))
        elif kind == "tool":
            r.add(assistant_message("", [ToolCall(f"c{n}", "shell", {"cmd": "ls"})]))
            r.add(tool_result(f"c{n}", "shell", "out"))
        else:
            r.add(user_message(f"u{n}") if kind == "user" else assistant_message(f"a{n}"))
    # every entry, revisited at the end, still gives back its own model input
    for entry_id in list(r.seen):
        r.rewind_and_check(entry_id)
