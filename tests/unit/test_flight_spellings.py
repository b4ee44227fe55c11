"""A flight record is read in one spelling, whichever its file used (flight.snake_fields)."""

from __future__ import annotations

from soba_notebook.flight import snake_fields


def test_camel_snake_and_renamed_spellings_of_one_field_read_as_one_snake_case_field() -> None:
    old = {"kind": "budget", "sessionId": "s1", "effectiveTokens": 900, "hardLimit": 1000, "contextWindow": 2000}
    new = {"kind": "budget", "sessionId": "s1", "effective": 900, "hard_limit": 1000, "context_window": 2000}
    assert snake_fields(old) == snake_fields(new) == {
        "kind": "budget", "session_id": "s1", "effective": 900, "hard_limit": 1000, "context_window": 2000}


def test_a_spelling_without_a_value_gives_way_to_one_with_a_value() -> None:
    assert snake_fields({"tokens_after": None, "tokensAfter": 12})["tokens_after"] == 12
