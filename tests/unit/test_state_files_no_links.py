"""Nothing SOBA writes under ``.soba/`` goes through a symbolic link (soba_notebook.statefiles).

A project's files are data: a repository can carry a ``.soba`` with links planted in it. Every test
here plants a real link next to (or in place of) a file SOBA writes, makes SOBA write, and checks
that the link's target is byte for byte what it was and that the error names the link.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from soba_notebook.agent.project import open_agent
from soba_notebook.agent.tool_output import bound_output
from soba_notebook.compaction.capsule import Capsule
from soba_notebook.errors import StateFileError
from soba_notebook.flight import FlightRecorder
from soba_notebook.memory.handoff import write_created
from soba_notebook.memory.portable import CapsuleExistsError, PortableCapsule, export
from soba_notebook.memory.project import ProjectMemory
from soba_notebook.session.entries import Entry
from soba_notebook.session.store import SessionStore

PRECIOUS = b"precious: must never change\n"


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """A file outside the project that a planted link points at."""
    file = tmp_path / "outside" / "bashrc"
    file.parent.mkdir()
    file.write_bytes(PRECIOUS)
    return file


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".soba").mkdir(parents=True)
    return root


def _session(project: Path) -> SessionStore:
    store = SessionStore.create(project / ".soba" / "sessions", cwd=str(project))
    store.append(Entry("message", {"role": "user", "content": "hi"}))
    return store


def _capsule(pid: str = "mem_x") -> PortableCapsule:
    return PortableCapsule(id=pid, capsule=Capsule(goal="g"), created="2025-01-01T00:00:00.000Z",
                           source_checkpoint="ck_00000000aa")


def test_a_planted_lock_link_is_refused_and_its_target_unchanged(project: Path, target: Path) -> None:
    store = _session(project)
    lock = project / ".soba" / "sessions" / f"{store.id}.lock"
    lock.symlink_to(target)
    with pytest.raises(StateFileError, match=rf"{lock}: is a symbolic link \(to {target}\)"):
        store.claim()
    with pytest.raises(StateFileError, match=str(lock)):  # resuming the session: the reported truncation
        open_agent(project, session=store.id)
    with pytest.raises(StateFileError, match=str(lock)):
        store.claim(take_over=True)
    assert target.read_bytes() == PRECIOUS and lock.is_symlink()


def test_a_session_jsonl_link_is_never_appended_through(project: Path, target: Path, tmp_path: Path) -> None:
    store = _session(project)
    elsewhere = tmp_path / "outside" / "real.jsonl"
    elsewhere.write_bytes(store.file.read_bytes())
    before = elsewhere.read_bytes()
    store.file.unlink()
    store.file.symlink_to(elsewhere)
    with pytest.raises(StateFileError, match=rf"{store.file}: is a symbolic link"):
        store.append(Entry("message", {"role": "user", "content": "again"}))
    with pytest.raises(StateFileError, match=str(store.file)):
        open_agent(project, session=store.id)
    assert elsewhere.read_bytes() == before
    assert not (project / ".soba" / "sessions" / f"{store.id}.lock").exists()  # refused before the lease


def test_a_new_session_is_not_created_through_a_linked_sessions_directory(project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside-sessions"
    outside.mkdir()
    (project / ".soba" / "sessions").symlink_to(outside)
    with pytest.raises(StateFileError, match=rf"{project / '.soba' / 'sessions'}: is a symbolic link"):
        SessionStore.create(project / ".soba" / "sessions")
    assert list(outside.iterdir()) == []


def test_flight_records_are_not_appended_through_a_link(project: Path, target: Path) -> None:
    flight = project / ".soba" / "flight.jsonl"
    flight.symlink_to(target)
    recorder = FlightRecorder(flight, "s1")
    with pytest.warns(RuntimeWarning, match=rf"{flight}: is a symbolic link"):
        recorder.record("budget", {"tokens": 1})
    assert target.read_bytes() == PRECIOUS


def test_a_planted_fifo_never_hangs_a_flight_record(project: Path) -> None:
    flight = project / ".soba" / "flight.jsonl"
    os.mkfifo(flight)
    with pytest.warns(RuntimeWarning, match=r"flight records are not being saved"):
        FlightRecorder(flight, "s1").record("budget", {"tokens": 1})


def test_a_torn_tail_copy_is_not_written_through_a_link(project: Path, target: Path) -> None:
    store = _session(project)
    size = store.file.stat().st_size
    with open(store.file, "ab") as fh:
        fh.write(b'{"type":"message","torn')
    copy = store.file.with_name(f"{store.file.name}.torn-{size}")
    copy.symlink_to(target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reopened = SessionStore.open(store.file)
    assert target.read_bytes() == PRECIOUS
    # the stale copy (a link) was removed, not its target, and the copy made as a real file
    assert not copy.is_symlink() and copy.read_bytes() == b'{"type":"message","torn'
    assert any(f"a copy of its bytes is in {copy}" in p for p in reopened.problems)


def test_tool_output_is_not_spilled_through_a_linked_outputs_directory(project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside-outputs"
    outside.mkdir()
    outputs = project / ".soba" / "outputs"
    outputs.symlink_to(outside)
    content, full, spilled = bound_output("x" * 5000, 500, outputs, project, label="shell")
    assert spilled is None and full == 5000
    assert f"{outputs}: is a symbolic link" in content
    assert list(outside.iterdir()) == []


def test_old_spills_are_collected_by_descriptor_not_through_links(project: Path, target: Path) -> None:
    outputs = project / ".soba" / "outputs"
    outputs.mkdir()
    (outputs / "shell-old.txt").symlink_to(target)  # a link is not a spill file: left alone
    _, _, spilled = bound_output("y" * 5000, 500, outputs, project, label="shell")
    assert spilled is not None and (project / spilled).read_text() == "y" * 5000
    assert target.read_bytes() == PRECIOUS and (outputs / "shell-old.txt").is_symlink()


def test_project_memory_is_not_written_or_removed_through_a_linked_directory(project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside-memory"
    outside.mkdir()
    (outside / "mem_x.capsule.md").write_bytes(PRECIOUS)
    (project / ".soba" / "memory").symlink_to(outside)
    memory = ProjectMemory(project)
    with pytest.raises(StateFileError, match=rf"{project / '.soba' / 'memory'}: is a symbolic link"):
        memory.add(_capsule("mem_y"))
    with pytest.raises(StateFileError, match=r"memory: is a symbolic link"):
        memory.remove("mem_x")
    assert sorted(p.name for p in outside.iterdir()) == ["mem_x.capsule.md"]
    assert (outside / "mem_x.capsule.md").read_bytes() == PRECIOUS


def test_a_capsule_export_replaces_a_planted_link_never_its_target(project: Path, target: Path) -> None:
    capsules = project / ".soba" / "capsules"
    capsules.mkdir()
    link = capsules / "ck_00000000aa.capsule.md"
    link.symlink_to(target)
    with pytest.raises(CapsuleExistsError, match="already exists"):
        write_created(project, _capsule())
    written = write_created(project, _capsule(), force=True)
    assert written == link and not link.is_symlink() and "goal" in link.read_text().lower()
    assert target.read_bytes() == PRECIOUS


def test_a_capsule_export_into_a_linked_capsules_directory_is_refused(project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside-capsules"
    outside.mkdir()
    (project / ".soba" / "capsules").symlink_to(outside)
    with pytest.raises(StateFileError, match=r"capsules: is a symbolic link"):
        export(_capsule(), project / ".soba" / "capsules" / "x.capsule.md")
    assert list(outside.iterdir()) == []


def test_a_soba_that_is_a_link_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir()
    root = tmp_path / "project"
    root.mkdir()
    (root / ".soba").symlink_to(real)
    with pytest.raises(StateFileError) as caught:
        open_agent(root)
    message = str(caught.value)
    assert message.startswith(f"{root / '.soba'}: is a symbolic link (to {real})")
    assert "Replace the link with a directory" in message
    assert list(real.iterdir()) == []
    with pytest.raises(StateFileError, match=rf"{root / '.soba'}: is a symbolic link"):
        SessionStore.create(root / ".soba" / "sessions")
    assert list(real.iterdir()) == []
