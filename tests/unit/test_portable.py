"""Portable Capsules: the .capsule.md format, its exact round trip, hand edits, errors, atomic
writes, and the headless handoff operations behind %capsule create|export|load|list|show."""

from __future__ import annotations

import builtins
import json
import os
import pickle
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import repo_python_env
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from soba_notebook.compaction.capsule import Capsule, Decision, EntryRange, Verification
from soba_notebook.errors import CapsuleFormatError
from soba_notebook.memory import (
    handoff,
    portable_reader,  # noqa: F401  # imported now: the no-exec test forbids exec
)
from soba_notebook.memory.portable import (
    ID_PATTERN,
    SECTIONS,
    CapsuleExistsError,
    CapsuleFileError,
    PortableCapsule,
    content_hash,
    export,
    export_text,
    is_plain,
    load,
    load_text,
    sweep_temp_files,
)
from soba_notebook.memory.redact import redact_portable
from soba_notebook.session import SessionStore, assistant_message, build_context, user_message
from soba_notebook.session.entries import Entry

# -- strategies ----------------------------------------------------------------------------------
TRICKY = [
    "", " ", "  leading", "trailing  ", " both ", "a\nb", "line\n", "\nline", "\n\n", "```", "```python\nx = 1\n```",
    "---", "--- \nkey: value\n---", "## Goal", "## Constraints\n- x", "# h1", "- item", "- ", "-", "* star",
    '"quoted"', '"', "\\", "\\n", "C:\\path\\to", "—", " — ", "a — b", "`", "`cmd`", "null", "true", "123", "-7",
    "\r\n", "\r", "\t", "\u2028", "\u2029", "\x85", "\x00", "\x1f", "\u00a0", "\ufeff", "é✓🙂", "日本語",
    "!!python/object/apply:os.system", "{{ 7*7 }}", "$(rm -rf /)", "<!-- c -->", "[REDACTED:X]", "first entry: x",
    "~", "+5", "1_000", "False", "NULL", "a: b", "key: value",
]
pieces = st.one_of(st.sampled_from(TRICKY), st.text(max_size=6))
texts = st.one_of(
    st.text(),
    st.sampled_from(TRICKY),
    st.lists(pieces, max_size=5).map("".join),
    st.text(alphabet=st.characters(blacklist_categories=()), max_size=8),  # lone surrogates too
)
items = st.lists(texts, max_size=4).map(tuple)
capsules = st.builds(
    Capsule,
    goal=texts, constraints=items, done=items, active=items, pending=items,
    decisions=st.lists(st.builds(Decision, texts, texts), max_size=3).map(tuple),
    blockers=items, next_steps=items, files_read=items, files_modified=items,
    verification=st.lists(st.builds(Verification, texts, st.sampled_from(["passed", "failed", "unknown"]), texts),
                          max_size=3).map(tuple),
    active_skills=items, artifacts=items, cells_run=items,
    covers=st.builds(EntryRange, st.none() | texts, st.none() | texts, st.integers(-5, 10**9)),
    rolled_from=items,
)
portables = st.builds(
    PortableCapsule,
    id=st.from_regex(ID_PATTERN, fullmatch=True),
    capsule=capsules, title=texts, created=texts, source_session=st.none() | texts,
    source_checkpoint=st.none() | texts, trigger=texts, quality=st.sampled_from(["ok", "degraded"]),
    token_count=st.integers(0, 10**9), edited=st.booleans(), as_of=st.none() | texts, kernel_state=items,
)


def sample() -> PortableCapsule:
    capsule = Capsule(
        goal="Fix the auth flow\n\n  keep the session cookie",
        constraints=("no new dependencies", " padded ", "two\nlines", "```", "## Goal", '"quoted"', "- dash"),
        done=("parser rewritten",), active=("token refresh",), pending=("docs",),
        decisions=(Decision("use httpx", "already a dependency — and async"), Decision("a — b", ""),
                   Decision("plain", "")),
        blockers=("CI flaky",), next_steps=("run the suite",),
        files_read=("src/auth.py",), files_modified=("src/auth.py", "tests/test_auth.py"),
        verification=(Verification("pytest -q", "passed", "12 passed"), Verification("echo `x`", "failed", ""),
                      Verification("ruff check", "unknown", "")),
        active_skills=("python",), artifacts=("report.html",), covers=EntryRange("e1", "e9", 9),
        rolled_from=("ck_0000000001",))
    return PortableCapsule(id="cap_0123456789abcdef", capsule=capsule, title="handoff auth work",
                           created="2025-01-01T12:00:00.000Z", source_session="20250101-120000-1a2b3c4d",
                           source_checkpoint="ck_0a1b2c3d4e", trigger="user", quality="ok", token_count=1840)


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.split("\n"), 1) if line == needle)


# -- the round trip ------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(portables)
def test_load_text_of_export_text_is_exactly_the_capsule(pc: PortableCapsule) -> None:
    text = export_text(pc)
    assert load_text(text, strict=True) == pc
    assert all(line.isprintable() for line in text.split("\n"))  # one item is always one printable line


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow])
@given(portables)
def test_load_of_export_is_exactly_the_capsule_through_a_file(tmp_path: Path, pc: PortableCapsule) -> None:
    assume(redact_portable(pc, {}) == pc)  # secret-shaped text is redacted on export, by design
    path = export(pc, tmp_path / "x.capsule.md", force=True, environ={})
    assert load(path, strict=True) == pc


def test_sample_round_trips_and_reads_like_markdown(tmp_path: Path) -> None:
    pc = sample()
    path = export(pc, tmp_path / "handoff.capsule.md", environ={})
    text = path.read_text(encoding="utf-8")
    assert load(path, strict=True) == pc
    assert text.startswith("---\nsoba-capsule: 1\nid: cap_0123456789abcdef\ntitle: handoff auth work\n")
    assert f"hash: {pc.content_hash}" in text
    for title, _ in SECTIONS:
        assert f"\n## {title}\n" in text
    assert "## Goal\n\nFix the auth flow\n\n  keep the session cookie\n" in text
    assert '- " padded "\n- "two\\nlines"\n' in text
    assert "- use httpx — already a dependency — and async\n" in text
    assert "- `pytest -q` — passed — 12 passed\n" in text
    assert '- "echo `x`" — failed\n' in text
    assert "- first entry: e1\n- last entry: e9\n- entries: 9\n" in text


def test_plain_rule_keeps_readable_text_bare_and_quotes_the_rest() -> None:
    assert is_plain("src/auth.py") and is_plain("a — b") and is_plain("## Goal") and is_plain("- x")
    for text in ("", " a", "a ", "a\nb", '"a"', "a\tb", "```", "x\u2028y"):
        assert not is_plain(text)


@pytest.mark.parametrize("bad", [
    PortableCapsule(id="../x", capsule=Capsule()),
    PortableCapsule(id="cap_q", quality="great"),
    PortableCapsule(id="cap_t", token_count=-1),
    PortableCapsule(id="cap_v", capsule=Capsule(verification=(Verification("x", "maybe"),))),
])
def test_export_refuses_a_capsule_that_could_not_be_loaded_back(tmp_path: Path, bad: PortableCapsule) -> None:
    with pytest.raises(CapsuleFormatError, match="cannot export capsule"):
        export(bad, tmp_path / "x.capsule.md", environ={})
    assert list(tmp_path.iterdir()) == []


def test_content_hash_is_sha256_of_canonical_state_json() -> None:
    import hashlib

    capsule = sample().capsule
    canonical = json.dumps(capsule.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    assert content_hash(capsule) == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


# -- hand edits ----------------------------------------------------------------------------------
def test_hand_edited_file_loads_non_strict_with_edited_flag_and_new_content(tmp_path: Path) -> None:
    path = export(sample(), tmp_path / "h.capsule.md", environ={})
    text = path.read_text(encoding="utf-8")
    text = text.replace("Fix the auth flow\n\n  keep the session cookie", "Ship the auth flow")
    text = text.replace("- docs\n", "- docs\n- a bullet added by hand\n")
    path.write_text(text, encoding="utf-8")
    pc = load(path)
    assert pc.edited is True
    assert pc.capsule.goal == "Ship the auth flow"
    assert pc.capsule.pending == ("docs", "a bullet added by hand")
    assert pc.capsule.constraints == sample().capsule.constraints  # the rest is untouched
    # the recomputed hash is what a re-export writes; that file then loads strictly, still "edited"
    again = export(pc, tmp_path / "again.capsule.md", environ={})
    assert load(again, strict=True) == pc
    assert "edited: true" in again.read_text()


def test_hand_edited_file_is_refused_in_strict_mode_at_the_hash_line(tmp_path: Path) -> None:
    path = export(sample(), tmp_path / "h.capsule.md", environ={})
    text = path.read_text().replace("- docs\n", "- docs\n- more\n")
    path.write_text(text)
    with pytest.raises(CapsuleFormatError) as info:
        load(path, strict=True)
    hash_line = next(i for i, line in enumerate(text.split("\n"), 1) if line.startswith("hash: "))
    assert info.value.line == hash_line
    assert str(info.value).startswith(f"{path}:{hash_line}: content hash mismatch")


def test_forgiving_where_people_edit_crlf_bom_star_bullets_spaces_and_omitted_sections() -> None:
    text = ("\ufeff---\r\nsoba-capsule: 1\r\nid: cap_x\r\ntitle: 2025\r\n---\r\n"
            "## goal\r\nDo it   \r\n\r\n## Next Steps\r\n* first  \r\n  - second\r\n-\r\n"
            "## Verification\r\n- `make test`—PASSED—all good\r\n")
    pc = load_text(text)
    assert pc.title == "2025" and pc.edited is True  # no hash: a hand-written capsule
    assert pc.capsule.goal == "Do it"
    assert pc.capsule.next_steps == ("first", "second", "")
    assert pc.capsule.verification == (Verification("make test", "passed", "all good"),)
    assert pc.capsule.constraints == () and pc.trigger == "user" and pc.quality == "ok"


def test_text_that_looks_like_structure_stays_inside_its_item() -> None:
    capsule = Capsule(goal="## Goal\n---", constraints=("---", "## Goal", "```", "- ## Decisions"),
                      decisions=(Decision("## Next steps", "---"),))
    pc = PortableCapsule(id="cap_s", capsule=capsule)
    assert load_text(export_text(pc), strict=True) == pc


# -- broken files: file, line and problem --------------------------------------------------------
def _broken(tmp_path: Path, text: str) -> CapsuleFileError:
    path = tmp_path / "broken.capsule.md"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CapsuleFormatError) as info:
        load(path, strict=True)
    err = info.value
    assert isinstance(err, CapsuleFileError) and err.source == str(path)
    assert str(err).startswith(f"{path}:{err.line}: ")
    return err


def _good() -> str:
    return export_text(sample())


def test_missing_header_is_an_error_on_line_1(tmp_path: Path) -> None:
    err = _broken(tmp_path, "## Goal\nx\n")
    assert err.line == 1 and "missing front-matter header" in err.problem


def test_unclosed_front_matter_is_an_error(tmp_path: Path) -> None:
    err = _broken(tmp_path, "---\nsoba-capsule: 1\nid: cap_x\n")
    assert "not closed" in err.problem


def test_unknown_format_version_is_an_error_on_its_line(tmp_path: Path) -> None:
    err = _broken(tmp_path, _good().replace("soba-capsule: 1", "soba-capsule: 2"))
    assert err.line == 2 and "unknown format version 2" in err.problem


def test_duplicated_section_names_both_lines(tmp_path: Path) -> None:
    text = _good().replace("## Next steps\n", "## Next steps\n\n- a\n\n## Next steps\n")
    err = _broken(tmp_path, text)
    first = line_of(text, "## Next steps")
    assert err.line == first + 4 and f"duplicated section '## Next steps' (first on line {first})" in err.problem


def test_missing_goal_section_is_an_error(tmp_path: Path) -> None:
    text = _good()
    start, end = text.index("## Goal"), text.index("## Constraints")
    err = _broken(tmp_path, text[:start] + text[end:])
    assert "missing required section '## Goal'" in err.problem


@pytest.mark.parametrize(("bad", "problem"), [
    ("- pytest -q — passed", "the command in backticks or as a JSON string"),
    ("- `pytest -q` passed", "expected '— <status>' after the command"),
    ("- `pytest -q` — maybe", "status 'maybe' is not one of passed, failed, unknown"),
    ("- `pytest -q — passed", "closing backtick is missing"),
    ('- "pytest -q — passed', "must be a JSON string"),
])
def test_malformed_verification_line_is_an_error_on_its_line(tmp_path: Path, bad: str, problem: str) -> None:
    text = _good().replace("- `pytest -q` — passed — 12 passed", bad)
    err = _broken(tmp_path, text)
    assert err.line == line_of(text, bad) and problem in err.problem


@pytest.mark.parametrize(("old", "new", "problem"), [
    ("## Artifacts", "## Notes", "unknown section '## Notes'"),
    ("- docs", "docs without a bullet", "expected a '- ' list item"),
    ("- docs", '- "unterminated', "must be a JSON string"),
    ("- docs", '- "a" trailing', "unexpected text 'trailing'"),
    ("quality: ok", "quality: great", "quality 'great' is not one of ok, partial, degraded"),
    ("tokens: 1840", "tokens: many", "tokens must be int"),
    ("id: cap_0123456789abcdef", "id: ../../etc/passwd", "must be letters, digits"),
    ("title: handoff auth work", "title handoff", "expected 'key: value'"),
    ("trigger: user", "colour: blue", "unknown key 'colour'"),
    ("- entries: 9", "- entries: nine", "entries must be an integer"),
])
def test_other_breakage_is_reported_at_its_line(tmp_path: Path, old: str, new: str, problem: str) -> None:
    text = _good().replace(old, new, 1)
    err = _broken(tmp_path, text)
    assert err.line == line_of(text, new) and problem in err.problem


def test_non_utf8_file_reports_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bin.capsule.md"
    path.write_bytes(b"---\nsoba-capsule: 1\n\xff\n")
    with pytest.raises(CapsuleFormatError, match=r"bin\.capsule\.md:3: not UTF-8"):
        load(path)


def test_missing_file_is_a_capsule_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(CapsuleFormatError, match=r"nope\.capsule\.md: no such capsule file"):
        load(tmp_path / "nope.capsule.md")


# -- loading never executes anything -------------------------------------------------------------
PAYLOADS = ("!!python/object/apply:os.system ['touch pwned']", "{{ __import__('os').system('touch pwned') }}",
            "$(touch pwned)", "`touch pwned`", "${HOME}", "%(x)s", "__import__('os')")


def test_loading_never_executes_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    text = (f"---\nsoba-capsule: 1\nid: cap_evil\ntitle: {PAYLOADS[0]}\ncreated: {PAYLOADS[1]}\n---\n"
            f"## Goal\n{PAYLOADS[2]}\n## Constraints\n" + "".join(f"- {p}\n" for p in PAYLOADS)
            + "## Verification\n- `touch pwned` — unknown — $(touch pwned)\n")

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("loading a capsule must not evaluate anything")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(os, "system", forbidden)
    monkeypatch.setattr(subprocess, "Popen", forbidden)
    pc = load_text(text)
    assert pc.title == PAYLOADS[0] and pc.created == PAYLOADS[1]
    assert pc.capsule.goal == PAYLOADS[2]
    assert pc.capsule.constraints == PAYLOADS
    assert pc.capsule.verification == (Verification("touch pwned", "unknown", "$(touch pwned)"),)
    assert not (tmp_path / "pwned").exists()
    # and the payloads survive a round trip as plain text
    assert load_text(export_text(pc), strict=True) == pc


# -- export: no overwrite, atomic ----------------------------------------------------------------
def test_export_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    path = tmp_path / "h.capsule.md"
    path.write_text("precious")
    with pytest.raises(CapsuleExistsError, match=re.escape(f"{path}: file already exists")):
        export(sample(), path, environ={})
    assert path.read_text() == "precious"
    export(sample(), path, force=True, environ={})
    assert load(path, strict=True) == sample()


def test_export_failing_at_replace_leaves_no_half_capsule_and_no_temp_file(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(src: object, dst: object, **dir_fds: object) -> None:
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        export(sample(), tmp_path / "new.capsule.md", environ={})
    assert list(tmp_path.iterdir()) == []  # no target, no stray temporary file
    old = tmp_path / "old.capsule.md"
    old.write_text("old content")
    with pytest.raises(OSError, match="simulated crash"):
        export(sample(), old, force=True, environ={})
    assert old.read_text() == "old content" and list(tmp_path.iterdir()) == [old]


def test_export_killed_mid_write_leaves_target_absent_and_the_temp_file_is_swept(tmp_path: Path) -> None:
    target = tmp_path / "k.capsule.md"
    code = (
        "import os, signal, sys\n"
        "from soba_notebook.memory import portable\n"
        "from soba_notebook.compaction.capsule import Capsule\n"
        "def die(fd):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "portable.os.fsync = die\n"
        f"portable.export(portable.PortableCapsule(id='cap_k', capsule=Capsule(goal='g' * 100000)), {str(target)!r},"
        " environ={})\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=repo_python_env())
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert not target.exists()
    leftovers = [p.name for p in tmp_path.iterdir()]
    assert len(leftovers) == 1 and leftovers[0].startswith(".k.capsule.md.") and leftovers[0].endswith(".tmp")
    assert sweep_temp_files(tmp_path, older_than=60) == []  # a fresh one may be a live writer's
    assert [p.name for p in sweep_temp_files(tmp_path, older_than=0)] == leftovers
    assert list(tmp_path.iterdir()) == []


def test_export_redacts_environment_secrets(tmp_path: Path) -> None:
    secret = "s3cr3t-v4lue-0123456789"
    pc = PortableCapsule(id="cap_r", capsule=Capsule(goal=f"use key {secret}"), title=f"t {secret}")
    path = export(pc, tmp_path / "r.capsule.md", environ={"MY_SERVICE_TOKEN": secret})
    text = path.read_text()
    assert secret not in text and "[REDACTED:MY_SERVICE_TOKEN]" in text
    assert load(path, strict=True).capsule.goal == "use key [REDACTED:MY_SERVICE_TOKEN]"


# -- handoff operations --------------------------------------------------------------------------
def _project(tmp_path: Path) -> tuple[Path, SessionStore]:
    root = tmp_path / "proj"
    store = SessionStore.create(root / ".soba" / "sessions", session_id="s1", cwd=str(root))
    return root, store


def _capsule_entry(ck: str, first_kept: str | None, goal: str, trigger: str = "auto_threshold") -> Entry:
    return Entry("capsule", {"checkpointId": ck, "firstKeptEntryId": first_kept, "trigger": trigger,
                             "quality": "ok", "state": Capsule(goal=goal).to_json(), "tokensBefore": 50000,
                             "tokensAfter": 9000, "source": "estimated", "operationId": "op_1"})


def test_create_writes_a_capsule_file_without_touching_model_input(tmp_path: Path) -> None:
    root, store = _project(tmp_path)
    store.append(user_message("hi"))
    before = (store.file.read_bytes(), build_context(store.path()))
    pc = handoff.create_portable(store, sample().capsule, "handoff auth work", token_count=1200)
    path = handoff.write_created(root, pc, environ={})
    assert path == root / ".soba" / "capsules" / f"{pc.source_checkpoint}.capsule.md"
    assert pc.source_checkpoint.startswith("ck_") and pc.source_session == "s1" and pc.id.startswith("cap_")
    assert load(path, strict=True) == pc
    assert (store.file.read_bytes(), build_context(store.path())) == before
    assert handoff.find_checkpoint(store, pc.source_checkpoint) == pc  # project root found from the store


def test_export_checkpoint_from_the_transcript(tmp_path: Path) -> None:
    root, store = _project(tmp_path)
    a = store.append(user_message("a"))
    store.append(assistant_message("b"))
    store.append(_capsule_entry("ck_aaaaaaaaaa", a.id, "old goal", trigger="user"))
    out = handoff.export_checkpoint(store, root, "ck_aaaaaaaaaa", tmp_path / "out.capsule.md", environ={})
    pc = load(out, strict=True)
    assert pc.capsule.goal == "old goal" and pc.source_checkpoint == "ck_aaaaaaaaaa" and pc.source_session == "s1"
    assert pc.trigger == "user" and pc.token_count == 9000
    with pytest.raises(CapsuleExistsError):
        handoff.export_checkpoint(store, root, "ck_aaaaaaaaaa", out, environ={})
    assert handoff.export_checkpoint(store, root, "ck_aaaaaaaaaa", out, force=True, environ={}) == out
    with pytest.raises(handoff.CheckpointNotFoundError, match="ck_aaaaaaaaaa"):
        handoff.find_checkpoint(store, "ck_missing")


def test_load_into_new_session_starts_model_input_with_the_capsule(tmp_path: Path) -> None:
    root, _ = _project(tmp_path)
    path = export(sample(), tmp_path / "in.capsule.md", environ={})
    store = handoff.load_into_new_session(path, root / ".soba" / "sessions")
    ctx = build_context(store.path())
    assert ctx.capsule is not None and ctx.messages == ()
    data = ctx.capsule.data
    assert data["trigger"] == "capsule_load" and data["firstKeptEntryId"] is None
    assert data["checkpointId"].startswith("ck_") and data["quality"] == "ok"
    assert Capsule.from_json(data["state"]) == sample().capsule
    assert data["loadedFrom"] == {"path": str(path.resolve()), "capsuleId": sample().id, "title": sample().title,
                                  "sourceSession": sample().source_session,
                                  "sourceCheckpoint": sample().source_checkpoint, "hash": sample().content_hash,
                                  "edited": False}
    reply = store.append(user_message("continue"))
    assert build_context(store.path()).messages == (reply,)
    # the transcript on disk says where it came from
    on_disk = SessionStore.open(store.file).entries()[0]
    assert on_disk.data["loadedFrom"]["capsuleId"] == sample().id


def test_load_continuing_a_session_replaces_its_model_input_but_keeps_its_history(tmp_path: Path) -> None:
    root, store = _project(tmp_path)
    store.append(user_message("old work"))
    store.append(assistant_message("done"))
    before = store.file.read_bytes()
    path = export(sample(), tmp_path / "in.capsule.md", environ={})
    same = handoff.load_into_new_session(path, root / ".soba" / "sessions", continue_store=store)
    assert same is store
    ctx = build_context(store.path())
    assert ctx.capsule is not None and ctx.capsule.data["trigger"] == "capsule_load" and ctx.messages == ()
    assert store.file.read_bytes().startswith(before)


def test_loading_a_broken_file_creates_no_session(tmp_path: Path) -> None:
    root, _ = _project(tmp_path)
    bad = tmp_path / "bad.capsule.md"
    bad.write_text("no header\n")
    sessions = root / ".soba" / "sessions"
    count = len(list(sessions.glob("*.jsonl")))
    with pytest.raises(CapsuleFormatError):
        handoff.load_into_new_session(bad, sessions)
    assert len(list(sessions.glob("*.jsonl"))) == count


def test_list_capsules_covers_checkpoints_created_files_and_memory(tmp_path: Path) -> None:
    from soba_notebook.memory.project import ProjectMemory

    root, store = _project(tmp_path)
    a = store.append(user_message("a"))
    store.append(_capsule_entry("ck_1111111111", a.id, "one"))
    store.append(user_message("b"))
    store.append(_capsule_entry("ck_2222222222", None, "two"))
    created = handoff.create_portable(store, Capsule(goal="made"), "made by hand", token_count=77)
    handoff.write_created(root, created, environ={})
    ProjectMemory(root, environ={}).add(PortableCapsule(id="mem_x", capsule=Capsule(goal="m"), created="2025"))
    (root / ".soba" / "capsules" / "ck_broken.capsule.md").write_text("garbage")
    rows = handoff.list_capsules(store, root)
    assert [(r["kind"], r["ref"]) for r in rows] == [
        ("checkpoint", "ck_1111111111"), ("checkpoint", "ck_2222222222"),
        ("created", "ck_broken"), ("created", created.source_checkpoint), ("memory", "mem_x")]
    first, second = rows[0], rows[1]
    assert first["trigger"] == "auto_threshold" and first["quality"] == "ok" and first["tokens"] == 9000
    assert first["date"] and not first["current"] and second["current"]
    assert rows[3]["title"] == "made by hand" and rows[3]["tokens"] == 77 and rows[3]["path"]
    assert rows[2]["error"] and "missing front-matter header" in rows[2]["error"]
    # every ref resolves, and show_text is the redacted file text
    assert handoff.resolve(store, "ck_2222222222").capsule.goal == "two"
    assert handoff.resolve(store, created.source_checkpoint) == created
    assert handoff.resolve(store, "mem_x").capsule.goal == "m"
    assert handoff.show_text(created, {}) == export_text(created)
    with pytest.raises(handoff.CheckpointNotFoundError):
        handoff.resolve(store, "ck_nothing")
