"""The capsule's fields are defined once (``session/capsule_schema.py``, metadata on the
``Capsule`` dataclass) and everything that names them is derived: the summarizer's prompt and its
constrained-output schema, the stored form and its validator, the rendered model input and the
``.capsule.md`` sections. These tests exercise the derived things, not copies of the list."""

from __future__ import annotations

import json
import re
from typing import Any

from soba_notebook.compaction.capsule import render
from soba_notebook.compaction.summarize import (
    ASKED_FIELDS,
    SUMMARY_SYSTEM_PROMPT,
    capsule_schema,
    parse_capsule_answer,
    summary_system_prompt,
)
from soba_notebook.memory.portable import PortableCapsule, export_text, load_text
from soba_notebook.session.capsule_schema import CAPSULE_FIELDS, Capsule, CapsuleField, validate_capsule_json

SAMPLE: dict[str, Any] = {"text": "ship the parser", "strings": ["an item"],
                          "decisions": [{"what": "use lark", "why": "it is tested"}],
                          "verification": [{"command": "pytest -q", "status": "passed", "detail": "3 passed"}]}


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _answer_filling_every_asked_field() -> str:
    return json.dumps({f.key: SAMPLE[f.kind] for f in ASKED_FIELDS})


def test_the_prompt_and_the_output_schema_ask_for_every_field_the_definition_marks_as_asked() -> None:
    asked = [f for f in CAPSULE_FIELDS if f.ask is not None]
    assert {f.attr for f in asked} >= {"goal", "next_steps", "files_modified", "verification"}
    prompt = _flat(SUMMARY_SYSTEM_PROMPT)
    schema = capsule_schema(4_000)
    for f in asked:
        assert f'"{f.key}":' in prompt and f.ask in prompt, f.key
        assert f.key in schema["properties"] and f.key in schema["required"], f.key
    for f in CAPSULE_FIELDS:
        if f.ask is None:  # the code fills these (covers, rolledFrom): never asked of the model
            assert f'"{f.key}"' not in prompt and f.key not in schema["properties"], f.key


def test_a_field_added_to_the_definition_is_asked_for_in_the_prompt_and_the_schema() -> None:
    risks = CapsuleField("risks", "risks", "strings", "Open risks", "open risks the user should know")
    prompt = _flat(summary_system_prompt((*ASKED_FIELDS, risks)))
    assert '"risks": [str]' in prompt and "open risks the user should know" in prompt
    assert all(f'"{f.key}":' in prompt for f in ASKED_FIELDS)
    schema = capsule_schema(4_000, (*ASKED_FIELDS, risks))
    assert schema["properties"]["risks"]["type"] == "array" and "risks" in schema["required"]


def test_an_answer_filling_every_asked_field_is_read_back_into_every_field() -> None:
    capsule = parse_capsule_answer(_answer_filling_every_asked_field())
    for f in ASKED_FIELDS:
        assert getattr(capsule, f.attr), f"{f.key} was asked for but not read back"
    assert Capsule.from_json(capsule.to_json()) == capsule
    assert validate_capsule_json(capsule.to_json()) == []


def test_an_answer_cannot_set_the_fields_the_code_fills() -> None:
    answer = json.loads(_answer_filling_every_asked_field())
    answer.update(covers={"firstId": "x", "lastId": "y", "count": 99}, rolledFrom=["ck_invented"])
    capsule = parse_capsule_answer(json.dumps(answer))
    assert capsule.covers.count == 0 and capsule.rolled_from == ()


def test_every_asked_field_is_rendered_under_its_title_and_every_field_survives_a_capsule_file() -> None:
    capsule = parse_capsule_answer(_answer_filling_every_asked_field())
    text = render(capsule)
    for f in ASKED_FIELDS:
        assert f"## {f.title}\n" in text, f.title
    pc = PortableCapsule(id="cap_fields", title="fields", created="2025-01-01T00:00:00Z", source_session="s",
                         source_checkpoint=None, trigger="user", quality="ok", token_count=1, capsule=capsule)
    file_text = export_text(pc)
    for f in CAPSULE_FIELDS:
        assert f"## {f.title}\n" in file_text, f.title
    assert load_text(file_text, source="fields.capsule.md").capsule == capsule


def test_the_validator_checks_every_field_by_its_kind() -> None:
    wrong: dict[str, Any] = {"text": 1, "strings": [1], "decisions": [{"why": "no what"}],
                             "verification": [{"command": "pytest", "status": "skipped"}], "range": []}
    for f in CAPSULE_FIELDS:
        problems = validate_capsule_json({f.key: wrong[f.kind]})
        assert problems and all(p.startswith(f.key) for p in problems), (f.key, problems)
    assert validate_capsule_json({"risks": []}) == ["unknown field 'risks'"]
