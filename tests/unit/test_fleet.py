"""Fleet analysis: a folder of transcripts imported and simulated on any executor, one frame out."""

from __future__ import annotations

import concurrent.futures
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import TRANSCRIPTS

from soba_notebook import views
from soba_notebook.importers import import_transcript_with_report, import_transcripts, transcript_files
from soba_notebook.session import SessionStore

CONFIGS = {"48k": {"contextWindow": 48000}, "65k keep 8k": {"contextWindow": 65000, "keepRecentTokens": 8000}}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Three real trajectories of other agents, one not-a-transcript file and a hidden one."""
    src = tmp_path / "fleet"
    picked = sorted(TRANSCRIPTS.rglob("*.traj"))[:2] + sorted(TRANSCRIPTS.rglob("*.traj.json"))[:1]
    for i, path in enumerate(picked):
        (src / f"run{i}").mkdir(parents=True)
        shutil.copy(path, src / f"run{i}" / path.name)
    (src / "notes.json").write_text('{"hello": "not a transcript"}')
    (src / ".cache").mkdir()
    (src / ".cache" / "x.jsonl").write_text("{}\n")
    return src


def test_import_transcripts_imports_every_file_of_a_folder_like_one_by_one(folder: Path, tmp_path: Path) -> None:
    files = transcript_files(folder)
    assert files[0].name == "notes.json" and len(files) == 4 and not any(".cache" in str(f) for f in files)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        result = import_transcripts(folder, tmp_path / "sessions", pool, progress=False)
    assert list(result.errors) == [folder / "notes.json"] and "format" in result.errors[folder / "notes.json"]
    assert [r.source for r in result.reports] == files[1:]
    for report in result.reports:
        _, alone = import_transcript_with_report(report.source, tmp_path / "alone")
        ours = [(e.type, dict(e.data)) for e in SessionStore.open(report.session).entries()]
        theirs = [(e.type, dict(e.data)) for e in SessionStore.open(alone.session).entries()]
        assert ours == theirs and report.problems == alone.problems


def test_import_transcripts_runs_on_a_process_pool_by_default(folder: Path, tmp_path: Path) -> None:
    result = import_transcripts(folder, tmp_path / "sessions", progress=False)
    assert len(result.reports) == 3 and len(list((tmp_path / "sessions").glob("*.jsonl"))) == 3


def test_simulate_many_gives_each_session_the_rows_compare_gives_it(folder: Path, capsys) -> None:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        frame = views.simulate_many(folder, CONFIGS, pool)
    assert "simulate" in capsys.readouterr().err, "a tqdm progress bar counts the sessions"
    files = [str(f) for f in transcript_files(folder)]
    assert list(frame.columns) == list(views.FLEET_COLUMNS)
    assert frame["session"].tolist() == [f for f in files for _ in CONFIGS]
    assert frame["config"].tolist() == list(CONFIGS) * len(files)
    bad = frame[frame["session"] == str(folder / "notes.json")]
    assert bad["error"].notna().all() and bad["compactions"].isna().all()
    good = frame[frame["error"].isna()]
    assert len(good) == 6
    for path in files[1:]:
        expected = views.compare(path, CONFIGS)
        got = good[good["session"] == path].set_index("config")[list(views.COMPARE_COLUMNS)]
        got.index = got.index.astype(object)
        expected.index = expected.index.astype(object)
        pd.testing.assert_frame_equal(got.astype("float64"), expected.astype("float64"), check_names=False)


def test_simulate_many_uses_a_process_pool_by_default_and_accepts_stores(folder: Path, tmp_path: Path) -> None:
    imported = import_transcripts(folder, tmp_path / "sessions", progress=False)
    stores = [SessionStore.open(p) for p in imported.sessions]
    default = views.simulate_many(stores, [{"contextWindow": 48000}], progress=False)
    serial = views.simulate_many([str(p) for p in imported.sessions], [{"contextWindow": 48000}],
                                 concurrent.futures.ThreadPoolExecutor(1), progress=False)
    assert default["config"].tolist() == ["0"] * 3 and default["error"].isna().all()
    pd.testing.assert_frame_equal(default, serial)
