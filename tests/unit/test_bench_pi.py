"""bench/bench_pi.py: the optional comparison with pi's own code skips saying why, and its pi files
are what it claims (one chain in pi's format that SOBA's importer reads as k times the original).

No node and no pi package are needed: the skip is exercised with an empty package folder, and
the replicated file is checked with SOBA's own importer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import PI_SESSION, REPO

from soba_notebook.importers import import_transcript
from soba_notebook.session import SessionStore

sys.path.insert(0, str(REPO / "bench"))

import bench_pi  # bench/ is not a package: imported from its folder


def test_bench_pi_skips_with_its_reason_when_the_package_folder_is_empty(tmp_path: Path) -> None:
    env = {**os.environ, bench_pi.PACKAGE_DIR_ENV: str(tmp_path), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(REPO / "bench" / "bench_pi.py"), "--repeat", "1"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("skipped: "), done.stdout
    assert "bench/install-pi.sh" in lines[0]


def test_skip_reason_names_the_missing_package_folder_and_the_installer(tmp_path: Path) -> None:
    reason = bench_pi.skip_reason(tmp_path, "/usr/bin/node", source=Path(__file__))
    assert reason is not None
    assert bench_pi.PI_PACKAGE in reason and str(tmp_path) in reason and "bench/install-pi.sh" in reason


def test_skip_reason_names_node_when_node_is_absent(tmp_path: Path) -> None:
    reason = bench_pi.skip_reason(tmp_path, None, source=Path(__file__))
    assert reason is not None and "node is not on PATH" in reason and "bench/install-pi.sh" in reason


def test_skip_reason_names_both_versions_when_another_pi_is_installed(tmp_path: Path) -> None:
    manifest = tmp_path.joinpath("node_modules", *bench_pi.PI_PACKAGE.split("/"), "package.json")
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"name": bench_pi.PI_PACKAGE, "version": "0.1.0"}), encoding="utf-8")
    reason = bench_pi.skip_reason(tmp_path, "/usr/bin/node", source=Path(__file__))
    assert reason is not None and "0.1.0" in reason and bench_pi.PI_VERSION in reason
    manifest.write_text(json.dumps({"name": bench_pi.PI_PACKAGE, "version": bench_pi.PI_VERSION}),
                        encoding="utf-8")
    assert bench_pi.skip_reason(tmp_path, "/usr/bin/node", source=Path(__file__)) is None


def test_replicated_pi_session_is_one_chain_of_k_distinct_copies(tmp_path: Path) -> None:
    source = PI_SESSION
    copies = 3
    replicated = bench_pi.replicate_pi(source, tmp_path / "pi-3x.jsonl", copies)
    records = [json.loads(line) for line in replicated.read_text(encoding="utf-8").splitlines()]
    header, entries = records[0], records[1:]
    original = source.read_text(encoding="utf-8").splitlines()
    assert header["type"] == "session" and header["id"] == json.loads(original[0])["id"]
    assert header["version"] == bench_pi.PI_SESSION_VERSION
    assert len(entries) == copies * (len(original) - 1)
    ids = [e["id"] for e in entries]
    assert len(set(ids)) == len(ids), "every copy's ids are distinct"
    # one chain: a single root, and every entry's parent is the entry before it (a real id)
    assert entries[0]["parentId"] is None
    assert [e["parentId"] for e in entries[1:]] == ids[:-1]

    one = SessionStore.open(import_transcript(source, tmp_path / "soba-1x")).path()
    many = SessionStore.open(import_transcript(replicated, tmp_path / "soba-3x")).path()
    assert len(many) == copies * len(one)
    assert [e.type for e in many] == [e.type for e in one] * copies
