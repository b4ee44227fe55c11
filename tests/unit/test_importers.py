"""Importers: real transcripts of other agents become valid SOBA sessions, nothing silently lost.

Two groups of tests:

* every real transcript under ``tests/data/transcripts`` (pi, mini-swe-agent, SWE-agent: copies of
  ``../shared/data/transcripts`` with their licences)
  imports; its sha256 is unchanged; entry counts, usage and tool pairs match what an independent
  reading of the source says.
* small hand-made files in ``tests/data/importers`` prove the mapping rules and that malformed
  input (run-together objects, truncation, a garbage line, unknown blocks) is reported with its
  line and never drops the rest.

Expected values are computed from the source files here, not by the importer's own code.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from conftest import PI_SESSION, TRANSCRIPTS, repo_python_env
from hypothesis import given, settings
from hypothesis import strategies as st

from soba_notebook.errors import SessionError
from soba_notebook.importers import (
    ImportReport,
    detect_format,
    import_transcript,
    import_transcript_with_report,
)
from soba_notebook.importers.jsonl_reader import read_jsonl
from soba_notebook.session import Entry, SessionStore
from soba_notebook.session.context import pair_problems

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "importers"


# -- the real transcripts under TRANSCRIPTS --------------------------------------------------------
def real_transcripts() -> list[Path]:
    return sorted(p for p in TRANSCRIPTS.rglob("*")
                  if p.is_file() and p.name.endswith((".jsonl", ".traj", ".traj.json")))


def expected_format(path: Path) -> str:
    if path.name.endswith(".traj.json"):
        return "mini_swe_agent"
    if path.name.endswith(".traj"):
        return "swe_agent"
    if path.name.endswith(".jsonl") and "pi-mono" in path.parts:
        return "pi"
    raise AssertionError(f"no expectation for {path}")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclasses.dataclass(frozen=True)
class Imported:
    source: Path
    sha_before: str
    session: Path
    report: ImportReport


@pytest.fixture(scope="module")
def imported_real(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, Imported]:
    """Every real transcript imported once (module scope: the tests below only read the results)."""
    out: dict[Path, Imported] = {}
    sessions = tmp_path_factory.mktemp("imported-sessions")
    for source in real_transcripts():
        before = sha256(source)
        session, report = import_transcript_with_report(source, sessions)
        out[source] = Imported(source, before, session, report)
    return out


# -- independent readings of the sources ----------------------------------------------------------
def source_records(source: Path) -> list[Mapping[str, Any]]:
    """The non-header records of a pi file, or the messages of a JSON trajectory, in order."""
    if source.name.endswith(".jsonl"):
        lines = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
        return [r for r in lines if r.get("type") != "session"]
    doc = json.loads(source.read_text())
    return doc["history"] if source.name.endswith(".traj") else doc["messages"]


def source_messages(source: Path) -> list[Mapping[str, Any]]:
    """Source messages in neutral terms: dicts with 'role' in user / assistant / tool."""
    out = []
    for r in source_records(source):
        msg = r.get("message") if source.name.endswith(".jsonl") else r
        if source.name.endswith(".jsonl") and r.get("type") != "message":
            continue
        role = {"toolResult": "tool"}.get(msg["role"], msg["role"])
        if role in ("user", "assistant", "tool"):
            out.append({**msg, "role": role})
    return out


def source_tool_pairs(source: Path) -> tuple[int, int]:
    """(calls without a result, results without a call) of a linear source, by a plain scan."""
    open_calls: set[str] = set()
    orphans = 0
    for msg in source_messages(source):
        if msg["role"] == "assistant":
            content = msg.get("content")
            for block in content if isinstance(content, list) else ():
                if isinstance(block, dict) and block.get("type") == "toolCall":
                    open_calls.add(block["id"])
            for call in msg.get("tool_calls") or ():
                open_calls.add(call["id"])
        elif msg["role"] == "tool":
            cid = msg.get("toolCallId") or msg.get("tool_call_id") or (msg.get("tool_call_ids") or [None])[0]
            if cid in open_calls:
                open_calls.discard(cid)
            else:
                orphans += 1
    return len(open_calls), orphans


def non_marker_entries(session: Path) -> list[Entry]:
    return [e for e in SessionStore.open(session).entries() if e.type != "leaf"]


# -- real transcripts: one test per rule, each over every transcript, naming every one that breaks it --
Check = Callable[[Path, Imported], None]


def _each_transcript(check: Check) -> Callable[[dict[Path, Imported]], None]:
    """A test that runs ``check`` on every real transcript and fails naming each transcript (and
    why) that breaks the rule."""
    def test(imported_real: dict[Path, Imported]) -> None:
        if not imported_real:
            raise AssertionError(f"no transcripts (*.jsonl, *.traj, *.traj.json) under {TRANSCRIPTS}")
        broken = []
        for source, result in imported_real.items():
            try:
                check(source, result)
            except AssertionError as error:
                broken.append(f"{source.relative_to(TRANSCRIPTS)}: {error}")
        assert not broken, f"{len(broken)} of {len(imported_real)} transcripts:\n" + "\n".join(broken)
    test.__name__, test.__qualname__, test.__doc__ = check.__name__, check.__qualname__, check.__doc__
    return test

@_each_transcript
def test_every_real_transcript_imports_into_a_valid_session(source: Path, result: Imported) -> None:
    store = SessionStore.open(result.session)
    assert store.problems == []
    assert store.leaf_id is not None
    assert result.report.entries_written == len(store.entries())


@_each_transcript
def test_import_never_modifies_the_source(source: Path, result: Imported) -> None:
    assert sha256(source) == result.sha_before == result.report.sha256


@_each_transcript
def test_header_records_imported_from_path_format_and_sha256(source: Path, result: Imported) -> None:
    header = SessionStore.open(result.session).header
    assert header["importedFrom"] == {"path": str(source.resolve()), "format": expected_format(source),
                                      "sha256": result.sha_before}


@_each_transcript
def test_format_detection_recognizes_each_real_transcript(source: Path, result: Imported) -> None:
    assert detect_format(source) == expected_format(source)


@_each_transcript
def test_entry_counts_match_the_source_message_counts(source: Path, result: Imported) -> None:
    entries = non_marker_entries(result.session)
    assert len(entries) == len(source_records(source))  # one entry per source record, none dropped
    messages = [e for e in entries if e.type == "message"]
    assert len(messages) == len(source_messages(source))
    assert [e.role for e in messages] == [m["role"] for m in source_messages(source)]
    assert result.report.message_entries == len(messages)


@_each_transcript
def test_tool_pairs_are_intact_where_the_source_has_them_intact(source: Path, result: Imported) -> None:
    unpaired, orphans = source_tool_pairs(source)
    assert (result.report.unpaired_tool_calls, result.report.orphan_tool_results) == (unpaired, orphans)
    path = [e for e in SessionStore.open(result.session).path() if e.is_model_input]
    problems = pair_problems(path)
    assert not [p for p in problems if "has no call" in p]  # every result follows its call
    assert len([p for p in problems if "has no result" in p]) == unpaired
    reported = [p for p in result.report.problems if "has no result in the source" in p]
    assert len(reported) == unpaired
    assert all(re.match(rf"{re.escape(str(source))}:\d+: ", p) for p in reported)


def pi_source() -> Path:
    return PI_SESSION


def test_pi_assistant_usage_is_preserved_exactly(imported_real: dict[Path, Imported]) -> None:
    source = pi_source()
    want = [{k: m["usage"][k] for k in ("input", "output", "cacheRead", "cacheWrite")}
            for m in source_messages(source) if m["role"] == "assistant"]
    got = [{k: e.message["usage"][k] for k in ("input", "output", "cacheRead", "cacheWrite")}
           for e in non_marker_entries(imported_real[source].session) if e.role == "assistant"]
    assert got == want
    assert len(want) == 453


def test_pi_timestamps_models_and_tool_results_are_kept(imported_real: dict[Path, Imported]) -> None:
    source = pi_source()
    records = source_records(source)
    entries = non_marker_entries(imported_real[source].session)
    assert [e.ts for e in entries] == [r["timestamp"] for r in records]  # already ISO-8601 UTC with ms
    for record, entry in zip(records, entries, strict=True):
        if record["type"] == "model_change":
            assert entry.type == "config"
            assert entry.data["changes"] == {"provider": record["provider"], "model": record["modelId"]}
        elif record["type"] == "thinking_level_change":
            assert entry.data["changes"] == {"thinkingLevel": record["thinkingLevel"]}
        elif record["message"]["role"] == "assistant":
            assert entry.message.get("model") == record["message"]["model"]
            assert entry.message.get("stopReason") == record["message"]["stopReason"]
            calls = [b for b in record["message"]["content"] if b["type"] == "toolCall"]
            assert [c.to_json() for c in entry.tool_calls] == [
                {"id": c["id"], "name": c["name"], "arguments": c["arguments"]} for c in calls]
        elif record["message"]["role"] == "toolResult":
            msg = record["message"]
            assert entry.message["toolCallId"] == msg["toolCallId"]
            assert entry.message["name"] == msg["toolName"]
            assert entry.message["isError"] == msg["isError"]
            assert entry.message["content"] == "\n".join(b["text"] for b in msg["content"])


def test_pi_thinking_and_aborted_request_errors_are_kept(imported_real: dict[Path, Imported]) -> None:
    source = pi_source()
    entries = non_marker_entries(imported_real[source].session)
    thinking = [e for e in entries if e.message.get("thinking")]
    assert len(thinking) == 1 and thinking[0].message["thinking"].startswith("The user wants me to use the thinking")
    errors = [e for e in entries if e.data.get("imported", {}).get("errorMessage")]
    assert len(errors) == 22


def test_mini_swe_agent_usage_model_and_timestamps_come_from_the_recorded_response(
        imported_real: dict[Path, Imported]) -> None:
    sources = [s for s in real_transcripts() if s.name.endswith(".traj.json")]
    assert sources, f"no mini-swe-agent transcript (*.traj.json) under {TRANSCRIPTS}"
    checked = 0
    for source in sources:
        messages = source_records(source)
        entries = non_marker_entries(imported_real[source].session)
        for msg, entry in zip(messages, entries, strict=True):
            if msg["role"] == "assistant":
                usage = msg["extra"]["response"]["usage"]
                got = entry.message["usage"]
                assert got["input"] + got["cacheRead"] == usage["prompt_tokens"]
                assert got["cacheRead"] == usage["prompt_tokens_details"]["cached_tokens"]
                assert got["output"] == usage["completion_tokens"]
                assert entry.message["model"] == msg["extra"]["response"]["model"]
                assert entry.ts is not None and entry.ts.endswith("Z")
                if msg.get("reasoning_content"):
                    assert entry.message["thinking"] == msg["reasoning_content"]
                checked += 1
            elif msg["role"] == "system":
                assert entry.type == "system" and not entry.is_model_input
                assert entry.data["content"] == msg["content"]
            elif msg["role"] == "exit":
                assert entry.type == "imported_message" and not entry.is_model_input
                assert entry.data["extra"]["exit_status"] == msg["extra"]["exit_status"]
    assert checked > 1000


def test_swe_agent_demonstrations_are_kept_as_marked_user_messages(imported_real: dict[Path, Imported]) -> None:
    demos = 0
    for source in (s for s in real_transcripts() if s.name.endswith(".traj")):
        for msg, entry in zip(source_records(source), non_marker_entries(imported_real[source].session),
                              strict=True):
            if msg.get("is_demo"):
                demos += 1
                assert entry.role == "user" and entry.message["source"] == "swe_agent_demonstration"
                assert entry.text == msg["content"]
            if msg["role"] == "tool":
                assert entry.tool_call_id == msg["tool_call_ids"][0]
    assert demos >= 1


# -- format detection -----------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "fmt"), [
    ("claude_code_session.jsonl", "claude_code"),
    ("claude_code_unknown_block.jsonl", "claude_code"),
    ("openai_messages.json", "openai_messages"),
    ("pi_v1_run_together.jsonl", "pi"),
    ("pi_v3_tree.jsonl", "pi"),
    ("pi_truncated.jsonl", "pi"),
    ("pi_garbage_middle.jsonl", "pi"),
])
def test_format_detection_recognizes_each_fixture(name: str, fmt: str) -> None:
    assert detect_format(FIXTURES / name) == fmt


def test_format_detection_reads_json_lines_of_chat_messages(tmp_path: Path) -> None:
    source = tmp_path / "chat.jsonl"
    source.write_text('{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "hello"}\n')
    assert detect_format(source) == "openai_messages"
    session = import_transcript(source, tmp_path / "sessions")
    assert [e.role for e in non_marker_entries(session)] == ["user", "assistant"]


def test_a_pi_file_with_a_damaged_header_is_still_detected_and_imported(tmp_path: Path) -> None:
    lines = (FIXTURES / "pi_v1_run_together.jsonl").read_text().splitlines()
    source = tmp_path / "damaged.jsonl"
    source.write_text("\n".join(['{"type":"session","id":', *lines[1:]]) + "\n")
    assert detect_format(source) == "pi"
    _, report = import_transcript_with_report(source, tmp_path / "sessions")
    assert report.problems[0].startswith(f"{source}:1: not valid JSON")
    assert any("no pi session header" in p for p in report.problems)
    assert report.message_entries == 6


@pytest.mark.parametrize(("content", "fragment"), [
    ('{"foo": 1, "bar": [1, 2]}', "unknown transcript format (a JSON object with keys bar, foo)"),
    ("just some notes\nnot json\n", "unknown transcript format"),
    ("", "empty file"),
    ('[1, 2, 3]', "not of chat messages"),
])
def test_unknown_formats_raise_a_session_error_naming_the_file(tmp_path: Path, content: str, fragment: str) -> None:
    source = tmp_path / "mystery.json"
    source.write_text(content)
    with pytest.raises(SessionError, match=re.escape(fragment)) as info:
        detect_format(source)
    assert str(source) in str(info.value)
    with pytest.raises(SessionError):
        import_transcript(source, tmp_path / "sessions")
    assert not (tmp_path / "sessions").exists() or not list((tmp_path / "sessions").iterdir())


def test_a_soba_session_is_refused_as_an_import_source(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path / "a")
    with pytest.raises(SessionError, match="already a SOBA session"):
        detect_format(store.file)


def test_missing_source_raises_a_session_error(tmp_path: Path) -> None:
    with pytest.raises(SessionError, match="no such transcript file"):
        import_transcript(tmp_path / "nope.jsonl", tmp_path / "sessions")


# -- the robust reader ----------------------------------------------------------------------------
def test_reader_splits_objects_run_together_on_one_line_and_reports_it() -> None:
    read = read_jsonl(b'{"a": 1}{"b": 2} {"c": 3}\n{"d": 4}\n', "f.jsonl")
    assert [(r.line, r.part, r.value) for r in read.records] == [
        (1, 0, {"a": 1}), (1, 1, {"b": 2}), (1, 2, {"c": 3}), (2, 0, {"d": 4})]
    assert read.problems == ("f.jsonl:1: 3 JSON objects run together on one line; split and imported separately",)


def test_reader_reports_garbage_with_its_line_and_keeps_reading() -> None:
    read = read_jsonl(b'{"a": 1}\nnot json at all\n{"b": 2}\n{"c": 3} trailing\n', "f.jsonl")
    assert [r.value for r in read.records] == [{"a": 1}, {"b": 2}, {"c": 3}]
    assert read.problems[0].startswith("f.jsonl:2: not valid JSON")
    assert read.problems[1].startswith("f.jsonl:4: unreadable data after 1 JSON object(s)")
    assert read.bad_lines == 2 and not read.truncated_tail


def test_reader_reports_a_truncated_last_line_and_keeps_everything_before() -> None:
    read = read_jsonl(b'{"a": 1}\n{"b": 2}\n{"c": "unfinis', "f.jsonl")
    assert [r.value for r in read.records] == [{"a": 1}, {"b": 2}]
    assert read.truncated_tail
    assert read.problems[0].startswith("f.jsonl:3: truncated last line")


def test_reader_splits_lines_on_newline_only() -> None:
    read = read_jsonl('{"a": "x\u2028y"}\r\n{"b": 1}'.encode(), "f.jsonl")
    assert [r.value for r in read.records] == [{"a": "x\u2028y"}, {"b": 1}]
    assert read.problems == ()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.dictionaries(st.text(max_size=5), json_values, max_size=4), st.booleans()),
                max_size=12))
def test_reader_recovers_every_object_whether_or_not_objects_are_run_together(
        items: list[tuple[dict[str, Any], bool]]) -> None:
    text = "".join(json.dumps(obj) + ("\n" if newline else "") for obj, newline in items)
    read = read_jsonl(text.encode(), "f.jsonl")
    assert [r.value for r in read.records] == [obj for obj, _ in items]
    assert not read.bad_lines and not read.truncated_tail


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_reader_never_raises_on_arbitrary_bytes(data: bytes) -> None:
    read = read_jsonl(data, "f.jsonl")
    assert all(re.match(r"f\.jsonl:\d+: ", p) for p in read.problems)


# -- malformed inputs through the whole import ----------------------------------------------------
def import_fixture(name: str, tmp_path: Path) -> tuple[ImportReport, list[Entry], SessionStore]:
    source = FIXTURES / name
    before = sha256(source)
    session, report = import_transcript_with_report(source, tmp_path / "sessions")
    assert sha256(source) == before
    store = SessionStore.open(session)
    assert store.problems == []
    return report, [e for e in store.entries() if e.type != "leaf"], store


def test_two_json_objects_on_one_line_are_split_reported_and_both_imported(tmp_path: Path) -> None:
    report, entries, store = import_fixture("pi_v1_run_together.jsonl", tmp_path)
    assert [p.split(": ", 1)[1] for p in report.problems] == [
        "2 JSON objects run together on one line; split and imported separately"]
    assert report.problems[0].startswith(f"{FIXTURES / 'pi_v1_run_together.jsonl'}:4:")
    assert [e.type for e in entries] == ["message", "message", "message", "config", "message",
                                         "imported_compaction", "message", "message"]
    assert entries[3].data["changes"] == {"thinkingLevel": "medium"}
    # v1 files have no ids: entries are chained in file order, the last one is the leaf.
    assert [e.parent_id for e in entries] == [None] + [e.id for e in entries[:-1]]
    assert store.leaf_id == entries[-1].id
    # v1 compaction's firstKeptEntryIndex (pi's list, header = 0) becomes the SOBA id of that entry.
    assert entries[5].data["firstKeptEntryId"] == entries[4].id
    assert not entries[5].is_model_input


def test_truncated_last_line_is_reported_and_the_rest_imported(tmp_path: Path) -> None:
    report, entries, _ = import_fixture("pi_truncated.jsonl", tmp_path)
    assert len(report.problems) == 1
    assert report.problems[0].startswith(f"{FIXTURES / 'pi_truncated.jsonl'}:6: truncated last line")
    assert [e.id for e in entries] == ["aa000001", "aa000002", "aa000003", "aa000004"]
    assert report.tool_pairs_intact


def test_garbage_line_in_the_middle_is_reported_by_line_and_the_rest_imported(tmp_path: Path) -> None:
    report, entries, store = import_fixture("pi_garbage_middle.jsonl", tmp_path)
    name = FIXTURES / "pi_garbage_middle.jsonl"
    assert report.problems[0].startswith(f"{name}:5: not valid JSON")
    assert report.problems[1] == (f"{name}:6: parent 'bb000004' is not an earlier entry of this file; attached "
                                  f"to the previous entry")
    assert [e.id for e in entries] == ["bb000001", "bb000002", "bb000003", "bb000005", "bb000006"]
    assert [e.id for e in store.path()] == ["bb000001", "bb000002", "bb000003", "bb000005", "bb000006"]


def test_unknown_block_types_are_reported_and_kept_as_placeholders(tmp_path: Path) -> None:
    report, entries, _ = import_fixture("claude_code_unknown_block.jsonl", tmp_path)
    name = FIXTURES / "claude_code_unknown_block.jsonl"
    assert report.problems == (
        f"{name}:2: unknown content block type 'server_tool_use'; kept as a '[server_tool_use]' text placeholder",
        f"{name}:2: unknown content block type 'web_search_tool_result'; kept as a '[web_search_tool_result]' "
        f"text placeholder",
        f"{name}:3: unknown content block type 'document'; kept as a '[document]' text placeholder",
    )
    by_id = {e.id: e for e in entries}
    assert by_id["c0000002-aaaa-4aaa-8aaa-000000000002"].text == (
        "Let me search for that.\n[server_tool_use]\n[web_search_tool_result]\n"
        "0.28 removed the deprecated `proxies` argument.")
    assert by_id["c0000003-aaaa-4aaa-8aaa-000000000003"].text.startswith("[document]\nDoes this note agree?")
    assert len(entries) == 8  # nothing after the unknown blocks was dropped


def test_unparseable_tool_arguments_are_kept_raw_and_reported(tmp_path: Path) -> None:
    report, entries, _ = import_fixture("openai_messages.json", tmp_path)
    starts = [i + 1 for i, line in enumerate((FIXTURES / "openai_messages.json").read_text().splitlines())
              if line == "  {"]
    call = {c.id: c for c in entries[2].tool_calls}
    assert call["call_1"].arguments == {"path": "README.md"}
    assert call["call_2"].arguments == {"_raw": '{"path": "notes.txt", "content": "unterminated'}
    assert any(p.startswith(f"{FIXTURES / 'openai_messages.json'}:{starts[2]}: arguments of tool call 'call_2' "
                            f"are not valid JSON") for p in report.problems)


def test_a_tool_result_without_its_call_is_kept_and_reported(tmp_path: Path) -> None:
    report, entries, _ = import_fixture("openai_messages.json", tmp_path)
    starts = [i + 1 for i, line in enumerate((FIXTURES / "openai_messages.json").read_text().splitlines())
              if line == "  {"]
    assert entries[5].tool_call_id == "call_9" and entries[5].text == "a stale result"
    assert report.orphan_tool_results == 1 and report.unpaired_tool_calls == 0
    assert (f"{FIXTURES / 'openai_messages.json'}:{starts[5]}: tool result for call 'call_9' has no matching "
            f"call before it; kept as it is") in report.problems


# -- mapping rules ---------------------------------------------------------------------------------
def test_openai_messages_map_to_the_neutral_form(tmp_path: Path) -> None:
    report, entries, _ = import_fixture("openai_messages.json", tmp_path)
    assert report.format == "openai_messages"
    system, user, assistant, result, *_rest, final = entries
    assert system.type == "system" and system.data["content"] == "You are a coding assistant."
    assert not system.is_model_input
    assert user.message == {"role": "user", "content": "Read the README and write a summary to notes.txt.\n[image]",
                            "images": 1}
    assert assistant.message["usage"] == {"input": 20, "output": 30, "cacheRead": 100, "cacheWrite": 0}
    assert assistant.message["content"] == ""
    assert result.message == {"role": "tool", "toolCallId": "call_1", "name": "read_file",
                              "content": "# Demo\nA demo project.", "isError": False}
    assert "usage" not in final.message  # no usage in the source: none invented
    assert report.skipped == {"image_data": 1}


def test_claude_code_ids_and_tree_are_preserved(tmp_path: Path) -> None:
    report, entries, store = import_fixture("claude_code_session.jsonl", tmp_path)
    lines = [json.loads(line) for line in (FIXTURES / "claude_code_session.jsonl").read_text().splitlines()]
    by_id = {e.id: e for e in entries}
    merged_away = {"c3f2e8d4-5d6a-4b7c-8d8e-9f0a1b2c3d4e", "d4a3f9e5-6e7b-4c8d-9e9f-0a1b2c3d4e5f"}
    for line in lines:
        if "uuid" in line and line["uuid"] not in merged_away:
            assert line["uuid"] in by_id
            assert by_id[line["uuid"]].ts == line["timestamp"]
    # an edited prompt branches the tree: both children of the same assistant message survive
    a3 = "29f8e4da-1d2a-4b3c-8d4e-5f60718293a4"
    assert {c.id for c in store.children(a3)} == {"3a09f5eb-2e3b-4c4d-9e5f-60718293a4b5",
                                                 "5c2b170d-405d-4e6f-9071-8293a4b5c6d7"}
    path_ids = [e.id for e in store.path()]
    assert store.leaf_id == "b2817d63-a6b3-44c5-96d7-e8f90a1b2c3d"  # last main-chain message
    assert "3a09f5eb-2e3b-4c4d-9e5f-60718293a4b5" not in path_ids  # the abandoned branch
    assert report.source_messages == sum(1 for line in lines if line["type"] in ("user", "assistant"))
    assert report.tool_pairs_intact and pair_problems([e for e in store.path() if e.is_model_input]) == []


def test_claude_code_split_response_lines_merge_into_one_assistant_message(tmp_path: Path) -> None:
    _, entries, _ = import_fixture("claude_code_session.jsonl", tmp_path)
    by_id = {e.id: e for e in entries}
    first = by_id["b2e1d7c3-4c5f-4a6b-9c7d-8e9f0a1b2c3d"]
    assert first.message["thinking"].startswith("The user wants a --verbose flag.")
    assert first.text == "I'll look at cli.py first."
    assert [c.name for c in first.tool_calls] == ["Read"]
    assert first.message["usage"] == {"input": 4, "output": 187, "cacheRead": 11530, "cacheWrite": 2381}
    assert first.message["stopReason"] == "tool_use" and first.message["provider"] == "anthropic"
    assert first.data["imported"]["sourceIds"] == ["b2e1d7c3-4c5f-4a6b-9c7d-8e9f0a1b2c3d",
                                                   "c3f2e8d4-5d6a-4b7c-8d8e-9f0a1b2c3d4e",
                                                   "d4a3f9e5-6e7b-4c8d-9e9f-0a1b2c3d4e5f"]
    # the tool result's parentUuid is the last split line: it resolves to the merged message
    assert by_id["e5b4a0f6-7f8c-4d9e-8f0a-1b2c3d4e5f60"].parent_id == first.id


def test_claude_code_tool_result_blocks_become_one_tool_entry_each(tmp_path: Path) -> None:
    _, entries, store = import_fixture("claude_code_session.jsonl", tmp_path)
    results = [e for e in entries if e.role == "tool" and e.id.startswith("07d6c2b8")]
    assert [(e.tool_call_id, e.message["name"], e.message["isError"]) for e in results] == [
        ("toolu_01B2cD3eF4gH5jK6lM7nP8qR", "Edit", False), ("toolu_01C3dE4fG5hJ6kL7mN8pQ9rS", "Bash", True)]
    assert results[1].parent_id == results[0].id
    # the next record's parentUuid names the user line: it hangs under the last of its entries
    assert store.get("18e7d3c9-0c1f-4a2b-9c3d-4e5f60718293").parent_id == results[1].id


def test_claude_code_usage_images_compaction_and_meta_are_mapped(tmp_path: Path) -> None:
    report, entries, _ = import_fixture("claude_code_session.jsonl", tmp_path)
    by_id = {e.id: e for e in entries}
    assert by_id["f6c5b1a7-8a9d-4e0f-9a1b-2c3d4e5f6071"].message["usage"] == {
        "input": 6, "output": 402, "cacheRead": 13911, "cacheWrite": 912}
    screenshot = by_id["5c2b170d-405d-4e6f-9071-8293a4b5c6d7"].message
    assert screenshot["images"] == 1 and screenshot["content"].endswith("\n[image]")
    assert by_id["7e4d392f-627f-4081-9293-a4b5c6d7e8f9"].message["images"] == 1
    boundary = by_id["8f5e4a30-7380-4192-83a4-b5c6d7e8f90a"]
    assert boundary.type == "imported_compaction" and not boundary.is_model_input
    assert boundary.parent_id == "7e4d392f-627f-4081-9293-a4b5c6d7e8f9"  # its logicalParentUuid
    assert (boundary.data["trigger"], boundary.data["tokensBefore"]) == ("manual", 17215)
    assert by_id["906f5b41-8491-42a3-94b5-c6d7e8f90a1b"].message["source"] == "claude_code_compact_summary"
    assert by_id["a1706c52-95a2-43b4-85c6-d7e8f90a1b2c"].message["source"] == "claude_code_meta"
    assert by_id["18e7d3c9-0c1f-4a2b-9c3d-4e5f60718293"].type == "system"
    assert report.skipped == {"image_data": 2, "tool_use_result_details": 1}
    kinds = [e.type for e in entries]
    assert kinds[0] == "imported_summary" and kinds[-1] == "imported_file-history-snapshot"


def test_claude_code_sidechains_stay_off_the_main_path(tmp_path: Path) -> None:
    _, entries, store = import_fixture("claude_code_unknown_block.jsonl", tmp_path)
    side = [e for e in entries if e.data.get("imported", {}).get("sidechain")]
    assert len(side) == 2
    path_ids = {e.id for e in store.path()}
    assert not path_ids & {e.id for e in side}
    assert store.leaf_id == "c0000008-aaaa-4aaa-8aaa-000000000008"


def test_pi_tree_ids_branches_and_record_kinds_are_kept(tmp_path: Path) -> None:
    report, entries, store = import_fixture("pi_v3_tree.jsonl", tmp_path)
    by_id = {e.id: e for e in entries}
    assert [e.id for e in entries] == [f"a{i}" for i in range(1, 17)]
    assert {c.id for c in store.children("a3")} == {"a4", "a5"}  # a branch, kept
    assert "a4" not in {e.id for e in store.path()} and store.leaf_id == "a16"
    assert by_id["a2"].message["thinking"] == "Run the test first to see the failure."
    assert by_id["a5"].message == {"role": "user", "source": "pi_branch_summary",
                                   "content": "Forcing UTC in the test was rejected: the code must handle local time."}
    assert by_id["a6"].message["images"] == 1 and by_id["a8"].message["images"] == 1
    assert by_id["a9"].type == "config" and by_id["a9"].data["changes"] == {"provider": "openai", "model": "gpt-5"}
    assert by_id["a10"].message["source"] == "pi_bash_execution"
    assert by_id["a10"].text == "$ git diff --stat\n src/date.ts | 4 ++--"
    assert by_id["a11"].message["source"] == "pi_custom_message:reminder"
    compaction = by_id["a12"]
    assert compaction.type == "imported_compaction" and not compaction.is_model_input
    assert (compaction.data["firstKeptEntryId"], compaction.data["tokensBefore"]) == ("a6", 5230)
    assert [by_id[i].type for i in ("a13", "a14", "a15")] == ["imported_label", "imported_custom",
                                                              "imported_future_thing"]
    assert report.problems == (f"{FIXTURES / 'pi_v3_tree.jsonl'}:16: unknown pi entry type 'future_thing'; kept "
                               f"as imported_future_thing entries, not model input",)


def test_timestamps_are_normalized_to_utc_iso_with_z(tmp_path: Path) -> None:
    stamps = ["2025-11-20T23:33:01.550Z", "2025-11-21T01:33:01.550+02:00",
              1763681581544,  # epoch milliseconds
              "1775786904.2521782",  # epoch seconds as text
              "yesterday"]
    source = tmp_path / "chat.json"
    source.write_text(json.dumps({"messages": [{"role": "user" if i % 2 == 0 else "assistant",
                                                "content": f"m{i}", "timestamp": ts} for i, ts in enumerate(stamps)]}))
    path, report = import_transcript_with_report(source, tmp_path / "sessions", format="openai_messages")
    entries = [e for e in SessionStore.open(path).entries() if e.type == "message"]
    assert [e.ts for e in entries] == ["2025-11-20T23:33:01.550Z", "2025-11-20T23:33:01.550Z",
                                       "2025-11-20T23:33:01.544Z", "2026-04-10T02:08:24.252Z",
                                       "2026-04-10T02:08:24.252Z"]  # not a date: the previous entry's, marked
    assert entries[-1].data["imported"]["tsInferred"] is True
    assert "imported" not in entries[-2].data or "tsInferred" not in entries[-2].data["imported"]
    assert any("timestamp 'yesterday' is not a date" in p for p in report.problems)


def test_entries_without_a_source_timestamp_take_their_neighbours_and_are_marked(tmp_path: Path) -> None:
    _, entries, _ = import_fixture("claude_code_session.jsonl", tmp_path)
    summary = entries[0]
    assert summary.ts == "2025-07-29T10:01:02.123Z" and summary.data["imported"]["tsInferred"] is True


# -- public interface and layering -----------------------------------------------------------------
def test_public_interface_has_the_agreed_names_and_signature() -> None:
    params = list(inspect.signature(import_transcript).parameters)
    assert params == ["source_path", "sessions_dir"]
    assert dataclasses.is_dataclass(ImportReport) and ImportReport.__dataclass_params__.frozen  # type: ignore[attr-defined]
    fields = {f.name for f in dataclasses.fields(ImportReport)}
    assert {"format", "entries_written", "problems", "skipped"} <= fields


def test_import_transcript_returns_the_new_session_path(tmp_path: Path) -> None:
    path = import_transcript(FIXTURES / "pi_truncated.jsonl", tmp_path / "sessions")
    assert path.parent == tmp_path / "sessions" and path.suffix == ".jsonl"
    assert SessionStore.open(path).header["importedFrom"]["format"] == "pi"


def test_importers_stay_headless() -> None:
    code = ("import sys, soba_notebook.importers as m\n"
            "from soba_notebook.importers import pi, claude_code, openai_messages\n"
            "bad = [n for n in ('IPython', 'pandas', 'ipywidgets', 'anywidget') if n in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, env=repo_python_env())


def test_import_writes_in_batches_and_repairs_lone_surrogates_in_any_entry(tmp_path: Path) -> None:
    from soba_notebook.importers import import_transcript_with_report

    messages = [{"role": "system", "content": "sys"}]
    for i in range(2_500):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"})
    raw = json.dumps({"messages": messages})
    raw = raw.replace('"message 2400"', '"bad \\ud800 text"').replace('"message 7"', '"also \\udfff bad"')
    source = tmp_path / "chat.json"
    source.write_text(raw)
    path, report = import_transcript_with_report(source, tmp_path / "sessions", format="openai_messages")
    store = SessionStore.open(path)
    contents = [e.text for e in store.entries() if e.type == "message"]
    assert len(contents) == 2_500 and report.message_entries == 2_500
    assert "bad \ufffd text" in contents and "also \ufffd bad" in contents
    assert sum("unpaired UTF-16 surrogates" in p for p in report.problems) == 2
