"""Import does each piece of work once: counted, never timed (issue 25 item 3, import speed).

* Every imported record becomes one :class:`Entry` built once, already carrying the line it lands
  on: the writer does not build it a second time to add the line number.
* The line on which each message of a JSON transcript starts (``.traj.json``, ``.traj``, a JSON
  list) is found only when a problem has to name it: a clean file is never scanned for it.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import pytest

import soba_notebook.importers.jsonl_reader as jsonl_reader
from soba_notebook.errors import SessionError
from soba_notebook.importers import import_transcript_with_report
from soba_notebook.session import Entry, SessionStore

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "importers"


@pytest.mark.parametrize("fixture", ["pi_v3_tree.jsonl", "claude_code_session.jsonl", "mini.traj.json"])
def test_every_imported_message_entry_is_built_once_with_its_line(fixture: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    source = FIXTURES / fixture
    if fixture == "mini.traj.json":  # mini-swe-agent: written here
        source = tmp_path / fixture
        source.write_text(json.dumps(_messages(20), indent=1), encoding="utf-8")
    built: list[tuple[str, int | None]] = []
    real_init = Entry.__init__

    def counting_init(self: Entry, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        if self.type == "message":
            built.append((self.id or "", self.line))

    monkeypatch.setattr(Entry, "__init__", counting_init)
    path, report = import_transcript_with_report(source, tmp_path / "sessions")
    monkeypatch.undo()
    assert report.message_entries > 0
    assert len(built) == report.message_entries
    # built once, already with the line the store keeps: the file's own line numbers
    on_disk = {e.id: e.line for e in SessionStore.open(path).entries() if e.type == "message"}
    assert dict(built) == on_disk


def _messages(n: int, *, bad_at: int | None = None) -> dict[str, Any]:
    """A mini-swe-agent trajectory of ``n`` exchanges, timestamped as mini-swe-agent does."""
    stamp = {"extra": {"timestamp": 1_760_000_000.5}}
    messages: list[Any] = [{"role": "system", "content": "You are a helpful assistant.", **stamp}]
    for k in range(n):
        messages.append({"role": "user", "content": f"step {k}", **stamp})
        messages.append({"role": "assistant", "content": f"reply {k}", **stamp})
    if bad_at is not None:
        messages[bad_at] = {"content": "a message without a role"}
    return {"messages": messages, "info": {"mini_version": "1.0"}, "trajectory_format": "mini-swe-agent-1"}


def _count_line_scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = jsonl_reader.array_element_lines

    def counting(text: str, key: str | None) -> list[int]:
        calls.append(1)
        return real(text, key)

    monkeypatch.setattr(jsonl_reader, "array_element_lines", counting)
    import soba_notebook.importers.openai_messages as openai_messages

    monkeypatch.setattr(openai_messages, "array_element_lines", counting)
    return calls


def test_a_clean_json_transcript_is_never_scanned_for_message_lines(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "clean.traj.json"
    source.write_text(json.dumps(_messages(50), indent=2), encoding="utf-8")
    calls = _count_line_scans(monkeypatch)
    _path, report = import_transcript_with_report(source, tmp_path / "sessions", format="mini_swe_agent")
    assert report.problems == ()
    assert report.message_entries == 100
    assert calls == []


def test_a_problem_in_a_json_transcript_still_names_the_line_the_message_starts_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "bad.traj.json"
    text = json.dumps(_messages(50, bad_at=7), indent=2)
    source.write_text(text, encoding="utf-8")
    starts = [n for n, row in enumerate(text.splitlines(), start=1) if row == "    {"]
    line = starts[7]
    calls = _count_line_scans(monkeypatch)
    _path, report = import_transcript_with_report(source, tmp_path / "sessions", format="mini_swe_agent")
    assert report.problems == (f"{source}:{line}: not a chat message (an object with a 'role'); skipped",)
    assert len(calls) == 1


def test_the_cyclic_collector_does_not_run_during_an_import_and_is_back_on_after(tmp_path: Path) -> None:
    """Nothing an import builds forms a cycle; before, the collector rescanned the growing heap
    dozens of times per import. Once it is back on it may run once (the import's few survivors)."""
    source = tmp_path / "long.traj.json"
    source.write_text(json.dumps(_messages(3_000)), encoding="utf-8")  # 6,001 messages
    broken = tmp_path / "broken.traj.json"
    broken.write_text('{"messages": [{"role": "user", "content": "cut', encoding="utf-8")
    starts: list[int] = []

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            starts.append(info["generation"])

    gc.collect()
    gc.callbacks.append(count)
    try:
        _path, report = import_transcript_with_report(source, tmp_path / "sessions")
        with pytest.raises(SessionError, match="not a valid JSON document"):  # raised while it is off
            import_transcript_with_report(broken, tmp_path / "sessions", format="mini_swe_agent")
    finally:
        gc.callbacks.remove(count)
    assert report.message_entries == 6_000
    assert len(starts) <= 1, starts
    assert gc.isenabled()


def test_the_lines_format_detection_parsed_are_not_parsed_again(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "long.jsonl"
    header = {"type": "session", "id": "s1", "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/tmp", "version": 3}
    lines = [header] + [{"type": "message", "id": f"m{k}", "parentId": f"m{k - 1}" if k else None,
                         "timestamp": "2025-01-01T00:00:01.000Z",
                         "message": {"role": "user", "content": f"step {k}"}} for k in range(200)]
    source.write_text("".join(json.dumps(v) + "\n" for v in lines), encoding="utf-8")
    parsed: list[int] = []
    real, real_scan = json.loads, jsonl_reader._SCAN

    def counting(text: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append(1)
        return real(text, *args, **kwargs)

    def counting_scan(text: str, at: int) -> tuple[Any, int]:  # the reader's own parse of a line
        parsed.append(1)
        return real_scan(text, at)

    monkeypatch.setattr(json, "loads", counting)
    monkeypatch.setattr(jsonl_reader, "_SCAN", counting_scan)
    _path, report = import_transcript_with_report(source, tmp_path / "sessions")
    assert report.format == "pi" and report.message_entries == 200
    # every line once, plus detection's check that the first line is not the whole document and the
    # header of the new session; before, the 64 lines of the head were parsed twice
    assert len(parsed) == len(lines) + 2


_AWKWARD = [
    b' {"a":1} \r\n{"b":NaN}\r\n[1,2] [3]\n"x"\t\n{"c":"\\u00e9\\ud83d"}\x0c\n',  # spaces, CRLF, two values
    b'{"a":1}\n{"b":2}{"c":3}\nnot json\n\n{"d":4}\n{"e":',  # run together, garbage, blank, truncated tail
    b'\xef\xbb\xbf{"a":1}\n{"b":2}\n',  # a BOM, a final newline
    b'{"a":1}\n{"b":2}\n{"cut":\n\n  \n',  # the last non-empty line is a bad one, blank lines after it
    b'{"a":1}\n{"b":\xff2}\n{"c":3}',  # bad UTF-8, no final newline
]


@pytest.mark.parametrize("data", _AWKWARD)
def test_a_whole_read_after_a_head_read_is_the_whole_read(data: bytes) -> None:
    whole = jsonl_reader.read_jsonl(data, "f.jsonl")
    for n in range(1, data.count(b"\n") + 3):
        head = jsonl_reader.read_jsonl(data, "f.jsonl", max_lines=n)
        assert jsonl_reader.read_jsonl(data, "f.jsonl", head=head) == whole


def test_each_line_holding_one_value_reads_as_json_loads_reads_it() -> None:
    lines = [b' {"a": 1} ', b'{"b": NaN}\r', b'[1, 2.50, -0.0, 1e400]', b'"x"\t', b'{"c": "\\u00e9\\ud83d"}',
             b'12345678901234567890', b'{"d": {"e": [null, true, false]}}']
    read = jsonl_reader.read_jsonl(b"\n".join(lines) + b"\n", "f.jsonl")
    assert read.problems == ()
    assert [r.line for r in read.records] == list(range(1, len(lines) + 1))
    assert repr([r.value for r in read.records]) == repr([json.loads(line) for line in lines])
