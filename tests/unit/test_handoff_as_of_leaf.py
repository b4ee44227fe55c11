"""A hand-off states the session as of its leaf: exported capsules are brought up to date or refused."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from soba_notebook.agent import open_agent
from soba_notebook.memory import handoff
from soba_notebook.memory.leaf import StaleCapsuleError
from soba_notebook.memory.portable import PortableCapsule, export_text, load, load_text
from soba_notebook.session.entries import leaf_marker, user_message

CHECK = "cd calc_demo && python3 -m unittest discover -s tests -v"


def _quickstart_session(root: Path):
    """The quickstart's three turns and its %compact, offline, and the checkpoint the quickstart
    exports: the newest one (the %compact's, or the last automatic one when %compact finds
    nothing old enough; which of the two depends on the demo model's capsule sizes)."""
    (root / ".soba").mkdir(parents=True)
    (root / ".soba" / "config.json").write_text(json.dumps({
        "model": {"contextWindow": 16000, "maxOutputTokens": 1000},
        "compaction": {"safetyReserveTokens": 1000, "keepRecentTokens": 3000, "minTokensForAutoCompact": 4000,
                       "minReclaimableTokens": 1000}}))
    handle = open_agent(root, overrides={"tools": {"approval": "never"}})  # the demo runs without questions
    for prompt in ("Create a tiny calculator package and make its tests pass.",
                   "Add a parser so that expressions like 2 * (3 + 4) can be evaluated.",
                   "Add a command-line interface, so I can run python3 -m calc '1 + 2'."):
        assert asyncio.run(handle.agent.run_turn(prompt)).outcome == "completed"
    outcome = asyncio.run(handle.agent.compact())
    assert outcome.outcome in ("completed", "skipped"), outcome
    checkpoints = [e.data["checkpointId"] for e in handle.store.path() if e.type == "capsule"]
    assert checkpoints and (outcome.checkpoint_id or checkpoints[-1]) == checkpoints[-1]
    return handle, checkpoints[-1]


def test_export_after_the_passing_run_says_passed_has_no_stale_blocker_and_names_its_leaf(tmp_path: Path) -> None:
    handle, ck = _quickstart_session(tmp_path / "p")
    store = handle.store
    raw = handoff.find_checkpoint(store, ck).capsule
    # the context capsule alone is stale: the passing run sits in its retained tail
    assert any("FAILED" in b for b in raw.blockers)
    path = handoff.export_checkpoint(store, tmp_path / "p", ck, tmp_path / "handoff.capsule.md")
    text = path.read_text()
    assert f"\nas-of: {store.leaf_id}\n" in text.split("\n---\n", 1)[0] + "\n"
    pc = load(path, strict=True)
    assert pc.as_of == store.leaf_id
    assert [(v.command, v.status) for v in pc.capsule.verification] == [(CHECK, "passed")]
    assert pc.capsule.blockers == ()
    assert not any("fix" in step.lower() for step in pc.capsule.next_steps)
    assert any(item.startswith("Resolved: ") and "FAILED" in item for item in pc.capsule.done)
    assert "Milestone: command line tests pass" in pc.capsule.done
    assert "calc_demo/calc/cli.py" in pc.capsule.files_modified
    assert any("Add a command-line interface" in c for c in pc.capsule.constraints), "the latest request"
    assert pc.capsule.covers.last_id == [e for e in store.path() if e.type != "capsule"][-1].id


def test_export_of_a_checkpoint_on_another_branch_is_refused_pointing_to_capsule_create(tmp_path: Path) -> None:
    handle, ck = _quickstart_session(tmp_path / "p")
    store = handle.store
    capsule_entry = next(e for e in store.path() if e.data.get("checkpointId") == ck)
    store.append(leaf_marker(capsule_entry.parent_id))  # rewind to before the compaction…
    store.append(user_message("try another way"))  # …and go on on another branch
    with pytest.raises(StaleCapsuleError, match="%capsule create"):
        handoff.export_checkpoint(store, tmp_path / "p", ck, tmp_path / "x.capsule.md")
    assert not (tmp_path / "x.capsule.md").exists()


def test_created_capsules_state_their_leaf_and_old_files_without_as_of_or_kernel_state_still_load(
        tmp_path: Path) -> None:
    handle, _ = _quickstart_session(tmp_path / "p")
    capsule = handoff.find_checkpoint(handle.store, handoff.list_capsules(handle.store)[-1]["ref"]).capsule
    created = handoff.create_portable(handle.store, capsule, "handoff", kernel_state=("df: DataFrame shape (3, 2)",))
    assert created.as_of == handle.store.leaf_id
    text = export_text(created)
    assert load_text(text, strict=True) == created
    assert "## Kernel state (informative only)" in text and "cannot recreate" in text
    old = "\n".join(line for line in text.splitlines() if not line.startswith("as-of:"))
    old = old.split("## Kernel state", 1)[0]
    loaded = load_text(old)  # a file written before either existed (its hash covers no kernel state)
    assert loaded.as_of is None and loaded.kernel_state == () and loaded.capsule == created.capsule
    assert isinstance(loaded, PortableCapsule)
