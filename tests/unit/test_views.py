"""pandas views: columns and dtypes, values on a hand-built session, imported transcripts,
malformed input, read-only access, and a session that another thread keeps appending to."""

from __future__ import annotations

import hashlib
import json
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from conftest import PI_SESSION, TRANSCRIPTS

from soba_notebook import views
from soba_notebook.analysis.frames import FLIGHT_COLUMNS
from soba_notebook.compaction.capsule import Capsule, Verification
from soba_notebook.compaction.capsule_entry import capsule_message
from soba_notebook.errors import SessionError, SessionWarning
from soba_notebook.flight import FlightRecorder
from soba_notebook.session import (
    Entry,
    SessionStore,
    ToolCall,
    Usage,
    assistant_message,
    checkpoint,
    tool_result,
    user_message,
)
from soba_notebook.session.context import build_context
from soba_notebook.tokens import TokenCounter

UTC_NS = "datetime64[ns, UTC]"
TRANSCRIPT_DTYPES = {"id": "string", "parent_id": "string", "type": "category", "role": "category",
                     "tool_name": "string", "tokens": "Int64", "tokens_source": "category", "ts": UTC_NS,
                     "in_context": "bool", "on_path": "bool", "covered_by": "string", "line": "Int64",
                     "detail": "string"}
CAPSULE_DTYPES = {"checkpoint_id": "string", "trigger": "category", "quality": "category", "tokens_before": "Int64",
                  "tokens_after": "Int64", "reclaimed_tokens": "Int64", "reclaimed_percent": "float64",
                  "first_kept_entry_id": "string", "summarized_entries": "Int64", "duration_ms": "Int64",
                  "operation_id": "string", "ts": UTC_NS, "entry_id": "string", "source": "category",
                  "previous_checkpoint_id": "string", "on_path": "bool", "ungrounded_claims": "Int64"}
BUDGET_DTYPES = {"inference": "Int64", "event": "category", "entry_id": "string", "ts": UTC_NS,
                 "effective_tokens": "Int64", "tokens_after": "Int64", "estimated_tokens": "Int64",
                 "hard_limit": "Int64", "soft_limit": "Int64", "context_window": "Int64", "source": "category",
                 "origin": "category", "compaction_trigger": "category", "compaction_outcome": "category",
                 "checkpoint_id": "string"}
FLIGHT_DTYPES = {"kind": "category", "ts": UTC_NS, "session_id": "string", "inference": "Int64",
                 "effective": "Int64", "hard_limit": "Int64", "soft_limit": "Int64", "context_window": "Int64",
                 "source": "category", "operation_id": "string", "trigger": "category", "outcome": "category",
                 "reason": "string", "tokens_before": "Int64", "tokens_after": "Int64", "reclaimed_tokens": "Int64",
                 "reclaimed_percent": "float64", "checkpoint_id": "string", "duration_ms": "Int64",
                 "quality": "category"}


def assert_dtypes(frame: pd.DataFrame, expected: dict[str, str]) -> None:
    assert list(frame.columns)[:len(expected)] == list(expected), "columns or their order changed"
    actual = {name: str(frame[name].dtype) for name in expected}
    assert actual == expected


@dataclass(frozen=True)
class Native:
    """A hand-built SOBA session in a project, with its flight records and the ids to check."""

    project: Path
    path: Path
    ids: dict[str, str]


def _hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def native(tmp_path: Path) -> Native:
    project = tmp_path / "proj"
    store = SessionStore.create(project / ".soba" / "sessions", session_id="native")
    ids: dict[str, str] = {}

    def add(name: str, entry: Entry) -> None:
        ids[name] = store.append(entry).id or ""

    add("u1", user_message("fix the parser: headers with a trailing space are rejected"))
    add("a1", assistant_message("reading it", [ToolCall("c1", "read_file", {"path": "src/parser.py"})],
                                usage=Usage(input=900), model="gpt-4o"))
    add("t1", tool_result("c1", "read_file", "def parse_header(line):\n    return line.split(':')\n" * 20))
    add("a2", assistant_message("fixed it", usage=Usage(input=20, cache_read=1300), model="gpt-4o"))
    add("u2", user_message("now the cli"))
    add("a3", assistant_message("", [ToolCall("c2", "read_file", {"path": "src/cli.py"}),
                                     ToolCall("c3", "shell", {"command": "pytest -q"})],
                                usage=Usage(input=10, cache_read=1500, cache_write=40), model="gpt-4o"))
    add("t2", tool_result("c2", "read_file", "import argparse\n" * 30))
    add("t3", tool_result("c3", "shell", "12 passed in 0.40s"))
    state = Capsule(goal="fix the parser", files_read=("src/parser.py",),
                    verification=(Verification("pytest -q", "passed"),)).to_json()
    add("cap", Entry("capsule", {"checkpointId": "ck_1", "firstKeptEntryId": ids["u2"], "trigger": "auto_threshold",
                                 "quality": "ok", "state": state, "tokensBefore": 5000, "tokensAfter": 1200,
                                 "source": "provider_usage", "operationId": "op_1", "previousCheckpointId": None,
                                 "summarizedEntries": 4}))
    add("a4", assistant_message("cli looks fine", usage=Usage(input=30, cache_read=1250), model="gpt-4o"))
    add("ms", checkpoint("milestone", "cli reviewed"))
    add("x1", user_message("try a completely different approach"))  # abandoned by the rewind below
    ids["leaf"] = store.rewind(ids["ms"]).id or ""
    add("u3", user_message("continue"))

    rec = FlightRecorder(project / ".soba" / "flight.jsonl", "native")
    limits = {"hard_limit": 48808, "soft_limit": 39046, "context_window": 65000}
    rec.record("budget", {"inference": 0, "effective": 900, **limits, "source": "estimated"})
    rec.record("budget", {"inference": 0, "effective": 5000, **limits, "source": "provider_usage"})
    rec.record("compaction", {"operation_id": "op_1", "trigger": "auto_threshold", "outcome": "completed",
                              "reason": None, "tokens_before": 5000, "tokens_after": 1200, "reclaimed_tokens": 3800,
                              "reclaimed_percent": 76.0, "checkpoint_id": "ck_1", "duration_ms": 42,
                              "quality": "ok", "source": "provider_usage", "hardLimit": 48808, "softLimit": 39046,
                              "contextWindow": 65000})
    rec.record("budget", {"inference": 0, "effective": 1200, **limits, "source": "provider_usage"})
    rec.record("budget", {"inference": 1, "effective": 1300, **limits, "source": "provider_usage"})
    rec.record("compaction", {"operation_id": "op_2", "trigger": "user", "outcome": "skipped",
                              "reason": "nothing to compact", "tokens_before": 1300, "tokens_after": 1300,
                              "duration_ms": 3, "hardLimit": 48808, "softLimit": 39046, "contextWindow": 65000})
    FlightRecorder(project / ".soba" / "flight.jsonl", "another-session").record(
        "budget", {"inference": 0, "effective": 777, **limits, "source": "estimated"})
    return Native(project, store.file, ids)


# -- transcript -------------------------------------------------------------------------------------
def test_transcript_columns_dtypes_and_values(native: Native) -> None:
    df = views.transcript(native.path)
    assert_dtypes(df, TRANSCRIPT_DTYPES)
    assert list(df.columns) == list(views.TRANSCRIPT_COLUMNS)
    ids = native.ids
    store = SessionStore.open(native.path)
    assert df["id"].tolist() == [e.id for e in store.entries()]
    assert df["line"].tolist() == list(range(2, 2 + len(store.entries())))
    row = df.set_index("id")

    assert row.loc[ids["a1"], "tool_name"] == "read_file"
    assert row.loc[ids["a3"], "tool_name"] == "read_file,shell"
    assert row.loc[ids["t3"], "tool_name"] == "shell"
    assert pd.isna(row.loc[ids["u1"], "tool_name"])
    assert row.loc[ids["a1"], "role"] == "assistant" and row.loc[ids["t1"], "role"] == "tool"
    assert pd.isna(row.loc[ids["cap"], "role"]) and row.loc[ids["cap"], "type"] == "capsule"

    counter = TokenCounter("gpt-4o")
    for name in ("u1", "a1", "t1", "a3", "t3"):
        assert row.loc[ids[name], "tokens"] == counter.count_entry(store.get(ids[name]))
    assert row.loc[ids["cap"], "tokens"] == counter.count_message(capsule_message(store.get(ids["cap"])))
    assert row.loc[ids["ms"], "tokens"] == 0
    assert set(df["tokens_source"]) == {"exact"}  # gpt-4o is counted with its own encoding

    # summarized by ck_1: everything before its first kept entry
    covered = dict(zip(df["id"], df["covered_by"].fillna(""), strict=True))
    assert {n for n, i in ids.items() if covered[i] == "ck_1"} == {"u1", "a1", "t1", "a2"}
    assert {covered[i] for n, i in ids.items() if n not in ("u1", "a1", "t1", "a2")} == {""}
    ctx = build_context(store.path())
    assert set(df.loc[df["in_context"], "id"]) == {e.id for e in ctx.messages} | {ids["cap"]}
    assert {n for n, i in ids.items() if row.loc[i, "in_context"]} == {"cap", "u2", "a3", "t2", "t3", "a4", "u3"}
    assert {n for n, i in ids.items() if not row.loc[i, "on_path"]} == {"x1", "leaf"}
    assert df["ts"].notna().all()


def test_transcript_accepts_str_path_and_store(native: Native) -> None:
    by_path = views.transcript(native.path)
    pd.testing.assert_frame_equal(views.transcript(str(native.path)), by_path)
    pd.testing.assert_frame_equal(views.transcript(SessionStore.open(native.path)), by_path)


def test_empty_session_gives_typed_empty_frames(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path / "s")
    assert_dtypes(views.transcript(store), TRANSCRIPT_DTYPES)
    assert_dtypes(views.capsules(store), CAPSULE_DTYPES)
    assert_dtypes(views.budget_history(store), BUDGET_DTYPES)
    assert_dtypes(views.flight_records(store), FLIGHT_DTYPES)
    assert all(len(f) == 0 for f in (views.transcript(store), views.capsules(store), views.budget_history(store)))


# -- capsules and flight records ----------------------------------------------------------------------
def test_capsules_columns_and_flight_join(native: Native) -> None:
    df = views.capsules(native.path)
    assert_dtypes(df, CAPSULE_DTYPES)
    assert len(df) == 1
    cap = df.iloc[0]
    assert (cap["checkpoint_id"], cap["trigger"], cap["quality"]) == ("ck_1", "auto_threshold", "ok")
    assert (cap["tokens_before"], cap["tokens_after"], cap["reclaimed_tokens"]) == (5000, 1200, 3800)
    assert cap["reclaimed_percent"] == 76.0
    assert cap["first_kept_entry_id"] == native.ids["u2"] and cap["summarized_entries"] == 4
    assert cap["duration_ms"] == 42 and cap["operation_id"] == "op_1"  # joined from flight.jsonl
    assert cap["source"] == "provider_usage" and bool(cap["on_path"])


def test_capsules_without_flight_file_have_no_duration(native: Native, tmp_path: Path) -> None:
    elsewhere = tmp_path / "loose" / native.path.name
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(native.path.read_bytes())
    df = views.capsules(elsewhere)
    assert len(df) == 1 and pd.isna(df.iloc[0]["duration_ms"])


def test_flight_records_from_file_session_and_store(native: Native) -> None:
    flight_file = native.project / ".soba" / "flight.jsonl"
    every = views.flight_records(flight_file)
    assert_dtypes(every, FLIGHT_DTYPES)
    assert len(every) == 7 and "another-session" in set(every["session_id"])
    mine = views.flight_records(native.path)
    pd.testing.assert_frame_equal(mine, views.flight_records(SessionStore.open(native.path)))
    assert len(mine) == 6 and set(mine["session_id"]) == {"native"}
    assert mine["kind"].tolist() == ["budget", "budget", "compaction", "budget", "budget", "compaction"]
    compaction = mine[mine["kind"] == "compaction"].iloc[0]
    # camelCase hardLimit of compaction records lands in the same snake_case column
    assert compaction["hard_limit"] == 48808 and compaction["duration_ms"] == 42
    assert compaction["reclaimed_percent"] == 76.0


def test_flight_records_flatten_nested_and_extra_fields(tmp_path: Path) -> None:
    file = tmp_path / "flight.jsonl"
    FlightRecorder(file, "s").record("budget", {"effective": 10, "extraInfo": {"retryCount": 2, "note": "x"},
                                                "isFinal": True})
    df = views.flight_records(file)
    assert df["extra_info.retry_count"].dtype == "Int64" and df["extra_info.retry_count"].iloc[0] == 2
    assert df["extra_info.note"].dtype == "string" and df["is_final"].dtype == "boolean"


# -- budget ------------------------------------------------------------------------------------------
def test_budget_history_from_flight_records(native: Native) -> None:
    df = views.budget_history(native.path)
    assert_dtypes(df, BUDGET_DTYPES)
    assert df["origin"].tolist() == ["flight"] * 4
    assert df["event"].tolist() == ["inference", "inference", "inference", "compaction"]
    assert df["effective_tokens"].tolist() == [900, 5000, 1300, 1300]
    assert df["tokens_after"].tolist() == [900, 1200, 1300, 1300]  # the 'after' budget record joins row 1
    assert df.loc[1, "compaction_trigger"] == "auto_threshold" and df.loc[1, "checkpoint_id"] == "ck_1"
    assert df.loc[3, "compaction_trigger"] == "user" and df.loc[3, "compaction_outcome"] == "skipped"
    assert df["source"].tolist()[:3] == ["estimated", "provider_usage", "provider_usage"]
    assert pd.isna(df["source"].iloc[3])  # that compaction record carries no source
    assert (df["hard_limit"] == 48808).all() and (df["soft_limit"] == 39046).all()


def test_budget_history_walks_the_session_without_flight(native: Native, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.soba/config.json: the limits are the defaults
    loose = tmp_path / "loose" / "s.jsonl"
    loose.parent.mkdir()
    loose.write_bytes(native.path.read_bytes())
    df = views.budget_history(loose)
    assert_dtypes(df, BUDGET_DTYPES)
    ids = native.ids
    assert df["entry_id"].tolist() == [ids["a1"], ids["a2"], ids["a3"], ids["a4"]]
    assert df["origin"].tolist() == ["session"] * 4 and (df["source"] == "provider_usage").all()
    assert df["tokens_after"].tolist() == [900, 1320, 1550, 1280]  # input + cacheRead + cacheWrite
    # a1's request held u1 only: our own estimate is its count plus the reply priming
    counter = TokenCounter("gpt-4o")
    store = SessionStore.open(loose)
    assert df.loc[0, "estimated_tokens"] == counter.count_entry(store.get(ids["u1"])) + 3
    # the capsule appended before a4 marks that inference
    assert df.loc[3, "compaction_trigger"] == "auto_threshold" and df.loc[3, "effective_tokens"] == 5000
    assert df.loc[3, "checkpoint_id"] == "ck_1"
    assert df["hard_limit"].iloc[0] == 48808  # the defaults: no project config beside a loose file


def test_plot_budget_draws_limits_and_compactions(native: Native) -> None:
    ax = views.plot_budget(native.path)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "tokens sent" in labels
    assert any(label.startswith("hard limit (48,808)") for label in labels)
    assert any(label.startswith("soft limit (39,046)") for label in labels)
    assert any(label.startswith("compaction: auto_threshold") for label in labels)
    assert any(label.startswith("user, not completed") for label in labels)
    hard = next(line for line in ax.get_lines() if line.get_label().startswith("hard limit"))
    assert set(hard.get_ydata()) == {48808}
    plt.close("all")
    fig, own = plt.subplots()
    assert views.plot_budget(views.budget_history(native.path), ax=own) is own
    plt.close(fig)
    with pytest.raises(ValueError, match="missing columns: effective_tokens"):
        views.plot_budget(pd.DataFrame({"hard_limit": [1], "soft_limit": [1]}))


def test_plot_budget_line_is_what_was_sent_and_history_over_the_limit_is_labelled_never_sent() -> None:
    frame = pd.DataFrame({"inference": [1, 2, 3], "effective_tokens": [9000, 15709, 5000],
                          "tokens_after": [9000, 4553, 5000], "hard_limit": [14000] * 3, "soft_limit": [11000] * 3,
                          "compaction_trigger": [None, "hard_limit", None],
                          "compaction_outcome": [None, "completed", None]})
    ax = views.plot_budget(frame)
    sent = next(line for line in ax.get_lines() if line.get_label() == "tokens sent")
    assert list(sent.get_ydata()) == [9000, 4553, 5000]
    assert max(sent.get_ydata()) <= 14000, "the line a reader follows never crosses the hard limit"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "compaction: hard_limit (1), history before it (never sent)" in labels
    plt.close("all")


# -- imported transcripts ---------------------------------------------------------------------------
def _mini_swe() -> Path:
    return TRANSCRIPTS / "mini-swe-agent-deepseek" / "deepseek_chat_dev" / "marshmallow-code__marshmallow-1343" / \
        "marshmallow-code__marshmallow-1343.traj.json"


def _swe_agent() -> Path:
    return TRANSCRIPTS / "swe-agent" / "trajectories" / "demonstrations" / "function_calling_simple.traj"


@pytest.mark.parametrize("source", [lambda: PI_SESSION, _mini_swe, _swe_agent], ids=["pi", "mini-swe-agent",
                                                                                     "swe-agent"])
def test_every_view_on_an_imported_transcript(source, tmp_path: Path) -> None:
    path = source()
    before = _hash(path)
    store = views.open_session(path)
    assert views.open_session(path) is store  # imported once per process
    df = views.transcript(path)
    assert_dtypes(df, TRANSCRIPT_DTYPES)
    assert len(df) == len(store.entries()) and df["on_path"].any()
    assert df["tokens"].sum() > 0 and set(df["tokens_source"]) == {"estimate"}
    assert not df["covered_by"].notna().any()  # foreign transcripts carry no SOBA capsules
    assert_dtypes(views.capsules(path), CAPSULE_DTYPES)
    flight = views.flight_records(path)
    assert list(flight.columns) == list(FLIGHT_COLUMNS) and len(flight) == 0
    budget = views.budget_history(path)
    assert_dtypes(budget, BUDGET_DTYPES)
    assistants = sum(1 for e in store.path() if e.role == "assistant")
    assert len(budget) == assistants and (budget["origin"] == "session").all()
    assert _hash(path) == before


def test_pi_budget_uses_provider_usage(pi_session: Path) -> None:
    df = views.budget_history(pi_session)
    source = df["source"].value_counts()
    assert source["provider_usage"] > 400 and source["estimated"] > 0  # aborted replies report no usage
    first = json.loads(next(line for line in pi_session.read_text().splitlines()
                            if '"usage"' in line and '"input":0,' not in line))["message"]["usage"]
    expected = first["input"] + first["cacheRead"] + first["cacheWrite"]
    assert df.loc[df["source"] == "provider_usage", "tokens_after"].iloc[0] == expected


# -- malformed input --------------------------------------------------------------------------------
def test_missing_and_wrong_inputs_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(SessionError, match="no such session or transcript file"):
        views.transcript(tmp_path / "nope.jsonl")
    with pytest.raises(SessionError, match="is a directory"):
        views.capsules(tmp_path)
    garbage = tmp_path / "notes.txt"
    garbage.write_text("just some notes\nnot a transcript\n")
    with pytest.raises(SessionError, match="unknown transcript format"):
        views.transcript(garbage)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(SessionError, match="empty"):
        views.budget_history(empty)
    with pytest.raises(TypeError, match="got int"):
        views.transcript(42)  # type: ignore[arg-type]
    with pytest.raises(SessionError, match="no such flight record or session file"):
        views.flight_records(tmp_path / "flight.jsonl")
    with pytest.raises(TypeError, match="flight_records needs"):
        views.flight_records(3.5)  # type: ignore[arg-type]


def test_corrupt_lines_are_reported_and_skipped(native: Native, tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    lines = native.path.read_text().splitlines()
    broken.write_text("\n".join([*lines[:3], "{not json", *lines[3:]]) + "\n")
    with pytest.warns(SessionWarning, match=r"broken.jsonl:4: not valid JSON"):
        df = views.transcript(broken)
    assert len(df) == len(lines) - 1
    flight = tmp_path / "flight.jsonl"
    flight.write_text('{"kind":"budget","effective":1}\nnot json\n{"kind":"budget","effective":2}\n')
    with pytest.warns(RuntimeWarning, match="flight.jsonl:2: not valid JSON"):
        assert views.flight_records(flight)["effective"].tolist() == [1, 2]


def test_a_malformed_capsule_entry_does_not_break_the_views(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path / "s")
    store.append(user_message("hello"))
    store.append(Entry("capsule", {"checkpointId": "ck_bad", "state": "not a capsule", "tokensBefore": "many",
                                   "trigger": "invented_trigger"}))
    df = views.transcript(store)
    assert df["tokens"].iloc[1] > 0  # counted as raw text
    caps = views.capsules(store)
    assert caps["checkpoint_id"].tolist() == ["ck_bad"]
    assert pd.isna(caps["tokens_before"].iloc[0]) and pd.isna(caps["reclaimed_percent"].iloc[0])
    assert pd.isna(caps["trigger"].iloc[0])  # not one of the seven triggers


def test_views_never_write(native: Native) -> None:
    flight = native.project / ".soba" / "flight.jsonl"
    before = (_hash(native.path), _hash(flight))
    for view in (views.transcript, views.capsules, views.flight_records, views.budget_history,
                 views.estimator_report):
        view(native.path)
    views.simulate(native.path, 65000, 8000)
    assert (_hash(native.path), _hash(flight)) == before
    assert sorted(p.name for p in native.path.parent.iterdir()) == [native.path.name]


# -- a session being appended to --------------------------------------------------------------------
def _check_consistent(df: pd.DataFrame) -> None:
    ids = df["id"].tolist()
    assert len(set(ids)) == len(ids)
    known = set(ids)
    assert all(p in known for p in df["parent_id"].dropna())
    lines = df["line"].tolist()
    assert lines == sorted(lines)
    path = df[df["on_path"]]
    # the path is one chain: each entry's parent is the previous path entry
    assert path["parent_id"].iloc[1:].tolist() == path["id"].iloc[:-1].tolist()
    assert df["in_context"].sum() <= len(path)


def test_views_of_a_session_another_thread_is_appending_to(tmp_path: Path) -> None:
    writer = SessionStore.create(tmp_path / "live")
    writer.append(user_message("start"))
    stop = threading.Event()
    errors: list[BaseException] = []

    def append() -> None:
        n = 0
        try:
            while not stop.is_set() and n < 3000:
                call = ToolCall(f"c{n}", "read_file", {"path": f"f{n}.py"})
                writer.append(assistant_message(f"step {n}", [call], usage=Usage(input=100 + n), model="gpt-4o"))
                writer.append(tool_result(call.id, "read_file", "x = 1\n" * (n % 50)))
                n += 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=append)
    thread.start()
    sizes: list[int] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", SessionWarning)  # a half-written line must never be seen
            for _ in range(15):
                by_path = views.transcript(writer.file)  # a fresh reader on the file
                by_store = views.transcript(writer)  # the writer's own store object, mid-append
                for df in (by_path, by_store):
                    _check_consistent(df)
                sizes.append(len(by_path))
                budget = views.budget_history(writer)
                assert budget["entry_id"].notna().all()
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0], "the views saw the session grow"
    final = views.transcript(writer.file)
    _check_consistent(final)
    assert len(final) == len(SessionStore.open(writer.file).entries())


# -- demo sessions ----------------------------------------------------------------------------------
def test_synthetic_session_has_capsules_flight_records_and_usage(tmp_path: Path) -> None:
    path = views.synthetic_session(tmp_path, turns=14, seed=3)
    assert path == tmp_path / ".soba" / "sessions" / "demo-3.jsonl"
    df = views.transcript(path)
    assert {"user", "assistant", "tool"} <= set(df["role"].dropna())
    caps = views.capsules(path)
    assert len(caps) >= 2 and caps["duration_ms"].notna().all()
    assert set(caps["trigger"]) >= {"milestone", "auto_threshold"}
    budget = views.budget_history(path)
    assert (budget["origin"] == "flight").all() and (budget["compaction_outcome"] == "completed").sum() == len(caps)
    assert (budget["tokens_after"] <= budget["hard_limit"]).all()
    assert len(views.estimator_report(path)) > 10
    assert views.newest_session(tmp_path) == path


def test_demo_session_falls_back_to_synthetic_when_the_agent_cannot_run(tmp_path: Path) -> None:
    demo = views.demo_session(tmp_path, agent=lambda root, timeout: (None, "no agent here"))
    assert demo.kind == "synthetic" and demo.note == "no agent here"
    assert len(views.transcript(demo.path)) > 50
    assert views.demo_session(tmp_path / "b", prefer_agent=False).kind == "synthetic"


def test_default_demo_session_always_gives_a_session(tmp_path: Path) -> None:
    demo = views.demo_session(tmp_path)
    assert demo.kind in ("scripted agent", "synthetic")
    df = views.transcript(demo.path)
    assert (df["role"] == "assistant").sum() >= 2
    assert len(views.budget_history(demo.path)) >= 2
