"""Redaction: no environment secret and no well-known token shape reaches a capsule file or memory."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from soba_notebook.compaction.capsule import Capsule, Decision, EntryRange, Verification
from soba_notebook.memory import handoff
from soba_notebook.memory.portable import PortableCapsule, export, load
from soba_notebook.memory.project import ProjectMemory
from soba_notebook.memory.redact import (
    KNOWN_SECRET_VARIABLES,
    redact_capsule,
    redact_json,
    redact_portable,
    redact_text,
    secret_variables,
)
from soba_notebook.scrub import Scrubber, mark_tokens
from soba_notebook.session import Entry, SessionStore

SECRET = "k3y-VALUE-0123456789abcdef"


@pytest.mark.parametrize("name", KNOWN_SECRET_VARIABLES)
def test_known_key_variables_are_redacted_by_name(name: str) -> None:
    assert redact_text(f"key={SECRET}!", {name: SECRET}) == f"key=[REDACTED:{name}]!"


@pytest.mark.parametrize("name", ["MY_API_KEY", "SERVICE_TOKEN", "DB_SECRET", "ADMIN_PASSWORD", "lower_api_key"])
def test_variables_with_secret_suffixes_are_redacted(name: str) -> None:
    assert redact_text(f"a {SECRET} b {SECRET}", {name: SECRET}) == f"a [REDACTED:{name}] b [REDACTED:{name}]"


def test_short_values_and_ordinary_variables_are_left_alone() -> None:
    env = {"SHORT_TOKEN": "abc1234", "HOME": "/home/someone/projects", "PATH": "/usr/bin:/bin",
           "TOKENIZER": "cl100k_base_value"}
    assert secret_variables(env) == {}
    text = "abc1234 in /home/someone/projects with cl100k_base_value"
    assert redact_text(text, env) == text


def test_longest_secret_wins_when_one_contains_another() -> None:
    env = {"A_TOKEN": "abcdefgh", "B_TOKEN": "abcdefgh-and-more"}
    assert redact_text("abcdefgh-and-more / abcdefgh", env) == "[REDACTED:B_TOKEN] / [REDACTED:A_TOKEN]"


def test_environment_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", SECRET)
    assert redact_text(f"x {SECRET}") == "x [REDACTED:OPENROUTER_API_KEY]"


@pytest.mark.parametrize(("text", "expected"), [
    ("key sk-proj-AbCdEf0123456789xyzXYZ end", "key [REDACTED:openai_key] end"),
    ("sk-ant-api03-AbCdEf0123456789_xyz-XYZ", "[REDACTED:anthropic_key]"),
    ("ghp_0123456789abcdefghijABCDEFGHIJ", "[REDACTED:github_token]"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "[REDACTED:github_pat]"),
    ("xoxb-1234567890-abcdefghij", "[REDACTED:slack_token]"),
    ("xoxp-1234567890-abcdefghij", "[REDACTED:slack_token]"),
    ("id AKIAIOSFODNN7EXAMPLE.", "id [REDACTED:aws_access_key]."),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.abc", "Authorization: Bearer [REDACTED:bearer_token]"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc==\n-----END RSA PRIVATE KEY-----\nafter",
     "[REDACTED:private_key]\nafter"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\ntruncated paste", "[REDACTED:private_key]"),
    ("-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----", "[REDACTED:private_key]"),
])
def test_common_token_patterns_are_redacted_by_kind(text: str, expected: str) -> None:
    assert redact_text(text, {}) == expected


@pytest.mark.parametrize("text", [
    "task-0123456789abcdefghij", "disk-0123456789abcdefghij", "sk-short", "ghp_short", "AKIA1234",
    "the bearer of bad news", "Bearer certificates", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
])
def test_ordinary_text_is_not_mistaken_for_a_token(text: str) -> None:
    assert redact_text(text, {}) == text


def test_redaction_is_idempotent() -> None:
    env = {"OPENAI_API_KEY": SECRET}
    once = redact_text(f"{SECRET} sk-ant-api03-AbCdEf0123456789 Bearer abcdefgh12345", env)
    assert redact_text(once, env) == once
    assert SECRET not in once


def test_redact_capsule_reaches_every_string_field() -> None:
    s = SECRET
    capsule = Capsule(goal=s, constraints=(s,), done=(s,), active=(s,), pending=(s,), decisions=(Decision(s, s),),
                      blockers=(s,), next_steps=(s,), files_read=(s,), files_modified=(s,),
                      verification=(Verification(f"curl -H 'x: {s}'", "failed", s),), active_skills=(s,),
                      artifacts=(s,), covers=EntryRange("e1", "e2", 2), rolled_from=("ck_1",))
    red = redact_capsule(capsule, {"HF_TOKEN": s})
    assert SECRET not in repr(red)
    m = "[REDACTED:HF_TOKEN]"
    assert red.goal == m and red.decisions == (Decision(m, m),)
    assert red.constraints == red.done == red.active == red.pending == red.blockers == (m,)
    assert red.next_steps == red.files_read == red.files_modified == red.active_skills == red.artifacts == (m,)
    assert red.verification[0].detail == m
    assert red.verification[0].command == "curl -H 'x: [REDACTED:HF_TOKEN]'"
    assert red.covers == capsule.covers and red.rolled_from == capsule.rolled_from


def test_clean_capsule_comes_back_unchanged() -> None:
    capsule = Capsule(goal="nothing secret", constraints=("x",))
    assert redact_capsule(capsule, {"HF_TOKEN": SECRET}) is capsule


def test_redact_json_redacts_values_not_keys() -> None:
    env = {"GITHUB_TOKEN": SECRET}
    assert redact_json({SECRET: [SECRET, 1, None, {"k": SECRET}]}, env) == {
        SECRET: ["[REDACTED:GITHUB_TOKEN]", 1, None, {"k": "[REDACTED:GITHUB_TOKEN]"}]}


def test_redact_portable_covers_the_title() -> None:
    pc = PortableCapsule(id="cap_t", capsule=Capsule(goal="g"), title=f"handoff {SECRET}")
    assert redact_portable(pc, {"ANTHROPIC_API_KEY": SECRET}).title == "handoff [REDACTED:ANTHROPIC_API_KEY]"


# -- end to end: no secret in any file ----------------------------------------------------------
def _files_text(root: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in root.rglob("*.capsule.md"))


def test_no_secret_lands_in_capsule_files_or_project_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    token = "ghp_0123456789abcdefghijABCDEFGHIJ"
    capsule = Capsule(goal=f"call the api with {SECRET}", constraints=(f"token {token}",),
                      verification=(Verification(f"curl -H 'Authorization: Bearer {SECRET}'", "passed", ""),))
    root = tmp_path / "proj"
    store = SessionStore.create(root / ".soba" / "sessions", session_id="s1", cwd=str(root))
    store.append(Entry("capsule", {"checkpointId": "ck_0000000001", "firstKeptEntryId": None, "trigger": "user",
                                   "quality": "ok", "state": capsule.to_json(), "tokensBefore": 1, "tokensAfter": 1,
                                   "source": "estimated", "operationId": "op"}))
    created = handoff.write_created(root, handoff.create_portable(store, capsule, f"title {SECRET}"))
    exported = handoff.export_checkpoint(store, root, "ck_0000000001", root / "out.capsule.md")
    decision = ProjectMemory(root).mirror(store.entries()[-1], explicit=True, validated=True, remember=True,
                                          config_switch=False)
    assert decision.mirrored and decision.path is not None
    direct = export(PortableCapsule(id="cap_d", capsule=capsule), root / "direct.capsule.md")
    text = _files_text(root)
    assert {created, exported, decision.path, direct} <= set(root.rglob("*.capsule.md"))
    assert SECRET not in text and token not in text
    assert "[REDACTED:OPENAI_API_KEY]" in text and "[REDACTED:github_token]" in text
    assert load(direct, strict=True).capsule.goal == "call the api with [REDACTED:OPENAI_API_KEY]"


_FRAGMENTS = ["sk-", "sk-ant-", "ghp_", "gho_", "github_pat_", "xoxb-", "xoxp-", "AKIA", "Bearer ", "bearer\t",
              "-----BEGIN RSA PRIVATE KEY-----\n", "-----END RSA PRIVATE KEY-----", "PRIVATE KEY", "task-", " ",
              "0123456789", "ABCDEFGHIJKLMNOP", "abcdefghij_-", "\n", ".", "/", "="]


@given(st.lists(st.sampled_from(_FRAGMENTS) | st.text(max_size=6), max_size=12).map("".join))
def test_the_one_scan_prefilter_never_lets_a_token_shape_through(text: str) -> None:
    """Scrubber.text skips the token shapes when one scan finds none of their literal parts;
    the result is the same as applying every shape."""
    assert Scrubber().text(text) == mark_tokens(text)
