"""The stored form of a capsule: the JSON schema of a ``capsule`` entry's ``state``.

The transcript holds capsules as JSON, and reading the transcript needs to know whether one is
valid: the model input (:mod:`.context`) skips an invalid capsule (hand-edited, written by a buggy
tool) instead of sending it. So the schema belongs to the session floor, below compaction, which
builds capsules (:class:`~soba_notebook.compaction.capsule.Capsule` writes and reads this form).
This module owns the schema version, the field names and kinds, the verification statuses, and
:func:`validate_capsule_json`, which lists every problem with the field it concerns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CAPSULE_SCHEMA_VERSION", "LIST_FIELDS", "STATUSES", "STRING_LIST_FIELDS", "validate_capsule_json"]

CAPSULE_SCHEMA_VERSION = 1
#: Verification statuses, most to least informative.
STATUSES = ("passed", "failed", "unknown")

#: camelCase JSON keys whose value is a list of strings
STRING_LIST_FIELDS = ("constraints", "done", "active", "pending", "blockers", "nextSteps", "filesRead",
                      "filesModified", "activeSkills", "artifacts", "rolledFrom")
LIST_FIELDS = (*STRING_LIST_FIELDS, "decisions", "verification")


def validate_capsule_json(raw: Any) -> list[str]:
    """Every problem with a capsule's JSON form, each naming the field; empty when valid."""
    if not isinstance(raw, Mapping):
        return [f"expected an object, got {type(raw).__name__}"]
    problems: list[str] = []
    version = raw.get("schemaVersion", CAPSULE_SCHEMA_VERSION)
    if version != CAPSULE_SCHEMA_VERSION:
        problems.append(f"schemaVersion {version!r} is not supported (expected {CAPSULE_SCHEMA_VERSION})")
    if not isinstance(raw.get("goal", ""), str):
        problems.append("goal must be a string")
    for key in STRING_LIST_FIELDS:
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            problems.append(f"{key} must be a list of strings")
    decisions = raw.get("decisions", [])
    if not isinstance(decisions, list):
        problems.append("decisions must be a list")
    else:
        for i, d in enumerate(decisions):
            if not isinstance(d, Mapping) or not isinstance(d.get("what"), str) \
                    or not isinstance(d.get("why", ""), str):
                problems.append(f"decisions[{i}] must be {{'what': str, 'why': str}}")
    checks = raw.get("verification", [])
    if not isinstance(checks, list):
        problems.append("verification must be a list")
    else:
        for i, v in enumerate(checks):
            if not isinstance(v, Mapping) or not isinstance(v.get("command"), str):
                problems.append(f"verification[{i}] must have a 'command' string")
            elif v.get("status", "unknown") not in STATUSES:
                problems.append(f"verification[{i}].status {v.get('status')!r} is not one of {', '.join(STATUSES)}")
            elif not isinstance(v.get("detail", ""), str):
                problems.append(f"verification[{i}].detail must be a string")
    covers = raw.get("covers", {})
    if not isinstance(covers, Mapping):
        problems.append("covers must be an object")
    elif not isinstance(covers.get("count", 0), int):
        problems.append("covers.count must be an integer")
    known = {"schemaVersion", "goal", "covers", *LIST_FIELDS}
    problems.extend(f"unknown field {k!r}" for k in raw if k not in known)
    return problems
