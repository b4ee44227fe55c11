"""Project Memory: only a validated, non-degraded, explicit compact may be mirrored, and every
refusal says why; the store lists, reads, removes and offers its capsules."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from soba_notebook.compaction.capsule import Capsule, Verification
from soba_notebook.compaction.triggers import Trigger
from soba_notebook.errors import CapsuleFormatError
from soba_notebook.memory.portable import PortableCapsule, load
from soba_notebook.memory.project import (
    SESSION_LOCAL_TRIGGERS,
    MemoryNotFoundError,
    MirrorDecision,
    ProjectMemory,
    mirror_decision,
)
from soba_notebook.session import Entry

TRIGGERS = [str(t) for t in Trigger] + ["capsule_load"]
QUALITIES = ["ok", "degraded"]


def test_session_local_triggers_are_every_trigger_but_the_explicit_user_compact() -> None:
    assert {str(t) for t in Trigger} - SESSION_LOCAL_TRIGGERS == {"user"}


def _expected_reason(trigger: str, quality: str, explicit: bool, remember: bool, config_switch: bool,
                     reason: str) -> bool:
    """Whether ``reason`` is the one the row's first failing rule gives (or the mirroring one)."""
    if trigger in SESSION_LOCAL_TRIGGERS:
        return reason == f"refused: trigger {trigger} capsules stay session-local"
    if trigger != "user":
        return reason.startswith("refused:") and "not an explicit user compact" in reason
    if not explicit:
        return reason.startswith("refused:") and "explicitly" in reason
    if quality == "degraded":
        return reason == "refused: degraded capsules are never mirrored"
    if not (remember or config_switch):
        return reason == "refused: explicit compact without --remember and memory.mirrorExplicitCompacts is off"
    return reason.startswith("mirrored:") and (
        "--remember" if remember else "memory.mirrorExplicitCompacts is on") in reason


def test_only_an_explicit_ok_user_compact_with_remember_or_the_switch_is_mirrored_and_refusals_say_why() -> None:
    """The whole decision table (every trigger x quality x explicit x --remember x config switch), one
    test that names every row that decides or explains wrongly."""
    wrong = []
    for row in itertools.product(TRIGGERS, QUALITIES, [False, True], [False, True], [False, True]):
        trigger, quality, explicit, remember, config_switch = row
        mirrored, reason = mirror_decision(trigger, quality, [], explicit, remember, config_switch)
        expected = trigger == "user" and explicit and quality == "ok" and (remember or config_switch)
        if mirrored is not expected or not _expected_reason(*row, reason):
            wrong.append(f"{row}: mirrored={mirrored} {reason!r}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(("remember", "config_switch"), [(True, False), (False, True), (True, True)])
def test_a_capsule_that_does_not_validate_is_never_mirrored(remember: bool, config_switch: bool) -> None:
    mirrored, reason = mirror_decision("user", "ok", ["goal must be a string"], True, remember, config_switch)
    assert not mirrored and reason == "refused: the capsule does not validate: goal must be a string"


def test_an_unknown_quality_is_refused() -> None:
    refused = (False, "refused: capsule quality 'great' is not ok")
    assert mirror_decision("user", "great", [], True, True, True) == refused


# -- ProjectMemory.mirror ------------------------------------------------------------------------
def capsule_entry(trigger: str = "user", quality: str = "ok", state: Any = None, ck: str = "ck_00000000aa") -> Entry:
    state = Capsule(goal="ship auth", verification=(Verification("pytest", "passed"),)).to_json() \
        if state is None else state
    return Entry("capsule", {"checkpointId": ck, "firstKeptEntryId": None, "trigger": trigger, "quality": quality,
                             "state": state, "tokensBefore": 40000, "tokensAfter": 9000, "source": "estimated",
                             "operationId": "op_1"}, id="e_cap", ts="2025-01-02T03:04:05.000Z")


def memory(tmp_path: Path) -> ProjectMemory:
    return ProjectMemory(tmp_path, environ={})


def test_explicit_validated_compact_with_remember_is_mirrored(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    decision = mem.mirror(capsule_entry(), explicit=True, validated=True, remember=True, config_switch=False,
                          session_id="s1")
    assert decision.mirrored and decision.path == tmp_path / ".soba" / "memory" / "mem_ck_00000000aa.capsule.md"
    pc = load(decision.path, strict=True)
    assert pc.capsule.goal == "ship auth" and pc.trigger == "user" and pc.quality == "ok"
    assert pc.source_checkpoint == "ck_00000000aa" and pc.source_session == "s1" and pc.token_count == 9000
    assert pc.created == "2025-01-02T03:04:05.000Z"


def test_the_config_switch_alone_mirrors_an_explicit_compact(tmp_path: Path) -> None:
    decision = memory(tmp_path).mirror(capsule_entry(), explicit=True, validated=True, remember=False,
                                       config_switch=True)
    assert decision.mirrored and "memory.mirrorExplicitCompacts is on" in decision.reason


@pytest.mark.parametrize("trigger", sorted(SESSION_LOCAL_TRIGGERS))
def test_automatic_and_mandatory_capsules_are_never_mirrored(tmp_path: Path, trigger: str) -> None:
    decision = memory(tmp_path).mirror(capsule_entry(trigger), explicit=True, validated=True, remember=True,
                                       config_switch=True)
    assert decision == MirrorDecision(False, f"refused: trigger {trigger} capsules stay session-local", None)
    assert not (tmp_path / ".soba" / "memory").exists()


def test_degraded_explicit_compact_is_refused(tmp_path: Path) -> None:
    decision = memory(tmp_path).mirror(capsule_entry(quality="degraded"), explicit=True, validated=True,
                                       remember=True, config_switch=True)
    assert decision == MirrorDecision(False, "refused: degraded capsules are never mirrored")


def test_explicit_compact_without_remember_or_switch_is_refused(tmp_path: Path) -> None:
    decision = memory(tmp_path).mirror(capsule_entry(), explicit=True, validated=True, remember=False,
                                       config_switch=False)
    assert decision.reason == "refused: explicit compact without --remember and memory.mirrorExplicitCompacts is off"
    assert memory(tmp_path).list() == []


def test_invalid_state_or_unvalidated_compact_is_refused(tmp_path: Path) -> None:
    bad = memory(tmp_path).mirror(capsule_entry(state={"goal": 3}), explicit=True, validated=True, remember=True,
                                  config_switch=False)
    assert not bad.mirrored and bad.reason == "refused: the capsule does not validate: goal must be a string"
    unvalidated = memory(tmp_path).mirror(capsule_entry(), explicit=True, validated=False, remember=True,
                                          config_switch=False)
    assert not unvalidated.mirrored and "did not validate" in unvalidated.reason


def test_a_non_capsule_entry_is_refused(tmp_path: Path) -> None:
    entry = Entry("message", {"message": {"role": "user", "content": "x"}}, id="m1")
    decision = memory(tmp_path).mirror(entry, explicit=True, validated=True, remember=True, config_switch=True)
    assert not decision.mirrored and "not a capsule" in decision.reason


def test_mirroring_the_same_checkpoint_twice_writes_it_once(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    first = mem.mirror(capsule_entry(), explicit=True, validated=True, remember=True, config_switch=False)
    assert first.path is not None
    before = first.path.read_bytes()
    second = mem.mirror(capsule_entry(), explicit=True, validated=True, remember=True, config_switch=False)
    assert second.mirrored and second.path == first.path and "already" in second.reason
    assert first.path.read_bytes() == before and len(mem.list()) == 1


def test_mirrored_capsules_are_redacted(tmp_path: Path) -> None:
    secret = "hf_0123456789abcdefghij"
    mem = ProjectMemory(tmp_path, environ={"HF_TOKEN": secret})
    state = Capsule(goal=f"download with {secret}").to_json()
    decision = mem.mirror(capsule_entry(state=state), explicit=True, validated=True, remember=True,
                          config_switch=False)
    assert decision.path is not None
    assert secret not in decision.path.read_text() and "[REDACTED:HF_TOKEN]" in decision.path.read_text()


# -- the store -------------------------------------------------------------------------------
def test_list_read_remove_and_offer(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    old = PortableCapsule(id="mem_old", capsule=Capsule(goal="old"), created="2025-01-01T00:00:00.000Z")
    new = PortableCapsule(id="mem_new", capsule=Capsule(goal="new"), created="2025-02-01T00:00:00.000Z")
    worse = PortableCapsule(id="mem_degraded", capsule=Capsule(goal="d"), created="2025-03-01T00:00:00.000Z",
                            quality="degraded")
    for pc in (new, old, worse):
        mem.add(pc)
    (mem.directory / "mem_broken.capsule.md").write_text("not a capsule")
    records = mem.list()
    assert [r.id for r in records] == ["mem_broken", "mem_old", "mem_new", "mem_degraded"]
    assert records[0].capsule is None and records[0].error and "missing front-matter header" in records[0].error
    assert records[1].capsule == old
    assert mem.read("mem_new") == new
    assert mem.offer() == [new, old]  # newest first; broken and degraded ones are not offered
    assert mem.remove("mem_old") == mem.directory / "mem_old.capsule.md"
    assert [r.id for r in mem.list()] == ["mem_broken", "mem_new", "mem_degraded"]
    with pytest.raises(MemoryNotFoundError, match="mem_old"):
        mem.remove("mem_old")
    with pytest.raises(MemoryNotFoundError, match="mem_old"):
        mem.read("mem_old")
    with pytest.raises(CapsuleFormatError, match=r"mem_broken\.capsule\.md:1:"):
        mem.read("mem_broken")


@pytest.mark.parametrize("bad_id", ["../escape", "a/b", ".hidden", "", "x" * 200])
def test_ids_that_could_leave_the_memory_directory_are_refused(tmp_path: Path, bad_id: str) -> None:
    with pytest.raises(MemoryNotFoundError):
        memory(tmp_path).read(bad_id)
    with pytest.raises(MemoryNotFoundError):
        memory(tmp_path).remove(bad_id)


def test_add_refuses_to_overwrite_an_existing_memory(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    pc = PortableCapsule(id="mem_a", capsule=Capsule(goal="a"))
    mem.add(pc)
    with pytest.raises(FileExistsError, match="already exists"):
        mem.add(pc)


def test_memory_directory_is_accepted_in_place_of_the_project_root(tmp_path: Path) -> None:
    by_root = ProjectMemory(tmp_path)
    by_dir = ProjectMemory(tmp_path / ".soba" / "memory")
    assert by_root.directory == by_dir.directory == tmp_path / ".soba" / "memory"
    assert by_dir.root == tmp_path


def test_empty_memory_lists_and_offers_nothing(tmp_path: Path) -> None:
    assert memory(tmp_path).list() == [] and memory(tmp_path).offer() == []
