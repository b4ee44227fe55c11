"""Import speed work changes no output: imported entry lines of real transcripts are pinned, and a
JSON transcript is parsed whole once per import.

The digests were taken from the importer before the speed work (issue 25, item 3); ``now_iso`` is
pinned because the final ``leaf`` marker is stamped with the import time, and the header line
(creation time, working directory, source path) is left out.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import TRANSCRIPTS

import soba_notebook.session.store as store_module
from soba_notebook.importers import import_transcript

PINNED = {
    "pi-mono/large-session.jsonl": "1215a5693140f895c4a929e63270fb52a93a6a91e3ac9ebc41b1d2f8f3a41ecc",
    "mini-swe-agent-deepseek/deepseek_reasoner_dev/sqlfluff__sqlfluff-1733/sqlfluff__sqlfluff-1733.traj.json":
        "8039c859c7dc78eb6413bf7dd1e71a60efdf85e10ddf897b05bb259a088892c6",
    "swe-agent/trajectories/demonstrations/function_calling_simple.traj":
        "bf6e16637482415c0936616ac056edccf190fd31edc15a9e4aeea262bc421032",
}
MINI = next(iter(k for k in PINNED if k.endswith(".traj.json")))


@pytest.mark.parametrize("relative", sorted(PINNED))
def test_imported_entry_lines_are_byte_identical_to_the_importer_before_the_speed_work(
        relative: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = TRANSCRIPTS / relative
    monkeypatch.setattr(store_module, "now_iso", lambda moment=None: "2000-01-01T00:00:00.000Z")
    body = import_transcript(source, tmp_path).read_bytes().split(b"\n", 1)[1]
    assert hashlib.sha256(body).hexdigest() == PINNED[relative]


def test_a_json_transcript_is_parsed_whole_once_per_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = TRANSCRIPTS / MINI
    size = len(source.read_bytes().decode("utf-8"))
    real = json.loads
    whole: list[int] = []

    def counting(text: Any, *args: Any, **kwargs: Any) -> Any:
        if len(text) >= size - 4:  # the document itself (a BOM or trailing space aside), not one record
            whole.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", counting)
    import_transcript(source, tmp_path)
    assert len(whole) == 1
