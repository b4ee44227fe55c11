"""One spelling per layer for flight records: Python hands the recorder snake_case, the file holds
camelCase only (as the seed's files and the transcript do), and read_flight_records, the one reader
of older files' spellings, gives every record back in snake_case (flight.snake_fields)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from soba_notebook.flight import FlightRecorder, read_flight_records, snake_fields


def keys_of(value: Any) -> set[str]:
    """Every key of a JSON object and of the objects nested in it."""
    if not isinstance(value, dict):
        return set()
    return set(value) | {k for v in value.values() for k in keys_of(v)}


def test_camel_snake_and_renamed_spellings_of_one_field_read_as_one_snake_case_field() -> None:
    old = {"kind": "budget", "sessionId": "s1", "effectiveTokens": 900, "hardLimit": 1000, "contextWindow": 2000}
    new = {"kind": "budget", "sessionId": "s1", "effective": 900, "hard_limit": 1000, "context_window": 2000}
    assert snake_fields(old) == snake_fields(new) == {
        "kind": "budget", "session_id": "s1", "effective": 900, "hard_limit": 1000, "context_window": 2000}


def test_a_spelling_without_a_value_gives_way_to_one_with_a_value() -> None:
    assert snake_fields({"tokens_after": None, "tokensAfter": 12})["tokens_after"] == 12


def test_the_file_holds_camel_case_only_and_reads_back_as_what_python_wrote(tmp_path: Path) -> None:
    fields = {"inference": 2, "effective": 900, "hard_limit": 48_808, "soft_limit": 39_046, "context_window": 65_000,
              "source": "estimated", "summary_cost": {"usd": None, "status": "local", "reason_text": None}}
    FlightRecorder(tmp_path / "flight.jsonl", "s1").record("budget", fields)
    (line,) = (tmp_path / "flight.jsonl").read_text().splitlines()
    on_disk = json.loads(line)
    assert not [k for k in keys_of(on_disk) if "_" in k], on_disk
    assert (on_disk["hardLimit"], on_disk["summaryCost"]["reasonText"]) == (48_808, None)
    (read,) = read_flight_records(tmp_path / "flight.jsonl")
    assert {k: read[k] for k in fields} == fields and read["session_id"] == "s1"


def test_an_older_file_with_mixed_spellings_reads_in_snake_case(tmp_path: Path) -> None:
    file = tmp_path / "flight.jsonl"
    file.write_text(json.dumps({"kind": "budget", "sessionId": "s", "effectiveTokens": 5, "hard_limit": 9}) + "\n"
                    + json.dumps({"kind": "compaction", "sessionId": "s", "tokens_before": 7, "hardLimit": 9,
                                  "measuredAfter": 3}) + "\n")
    budget, compaction = read_flight_records(file)
    assert (budget["effective"], budget["hard_limit"]) == (5, 9)
    assert (compaction["tokens_before"], compaction["hard_limit"], compaction["measured_after"]) == (7, 9, 3)

