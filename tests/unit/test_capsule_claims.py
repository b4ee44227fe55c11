"""The matching rules that decide whether a model's sentence is supported by the history
(compaction/claims.py; docs/CAPSULE_FORMAT.md "Grounding"), on real-looking examples."""

from __future__ import annotations

import pytest

from soba_notebook.compaction.claims import (
    USER_OVERLAP,
    Mention,
    content_words,
    haystack,
    junk_reason,
    mentions,
    normalise,
    unsupported_mentions,
    user_support,
)
from soba_notebook.compaction.latest_request import LATEST_REQUEST_CHARS, latest_request
from soba_notebook.compaction.summarize import PROMPT_INSTRUCTIONS

USERS = ("The parser test fails on empty rows, can you fix it? Do not touch tests/fixtures.",
         "Use pandas for the CSV part, never numpy directly",
         "keep the public API of parse_rows unchanged")


def test_normalise_casefolds_strips_punctuation_quotes_and_the_attribution() -> None:
    assert normalise('User: Run the command: "python3 -m argparse -c"') == "run the command python3 m argparse c"
    assert normalise("The user wants to  KEEP\tthe API!") == "keep the api"


def test_content_words_keep_negations_and_meet_paraphrases_at_a_stem() -> None:
    assert "not" in content_words("do not touch the fixtures")
    assert content_words("failing tests") == content_words("the test fails")


@pytest.mark.parametrize("claim", [
    "User: Run the command: python3 -m argparse -c",  # the constraint a small model invented
    "The user.git has no git-support",
    "User said to use numpy directly",  # the opposite of what was said
    "User: always rewrite the fixtures",
    "",
])
def test_a_claim_no_user_message_supports_is_unsupported(claim: str) -> None:
    assert not user_support(claim, USERS)


@pytest.mark.parametrize("claim", [
    "User: do not touch tests/fixtures",  # a quote
    "Fix the failing parser test",  # a close paraphrase: every content word is in one message
    "never use numpy directly",
    "User wants the public API of parse_rows kept unchanged",
])
def test_a_quote_or_close_match_of_one_user_message_is_supported(claim: str) -> None:
    assert user_support(claim, USERS)


def test_support_needs_the_threshold_share_of_the_claims_words_in_one_message() -> None:
    claim = "use pandas to rewrite the fixtures"  # a third of its words in each of two messages
    assert USER_OVERLAP == 0.6
    assert not user_support(claim, USERS)
    assert user_support(claim, USERS, threshold=0.3)


def test_mentions_find_files_commands_cells_and_errors() -> None:
    found = mentions("Fix the KeyError in cell 3, then run `pytest -q tests/test_parser.py` and edit src/app.py")
    assert Mention("error", "keyerror") in found and Mention("cell", "3") in found
    assert Mention("file", "src/app.py") in found and Mention("command", "pytest") in found
    assert Mention("command", "tests/test_parser.py") in found
    assert mentions("Run python3 -m argparse -c to check") == (
        Mention("command", "python3"), Mention("command", "-m"), Mention("command", "argparse"),
        Mention("command", "-c"))
    assert mentions("Keep the parser simple") == ()


def test_unsupported_mentions_are_what_the_history_never_shows() -> None:
    history = haystack(['read_file {"path": "src/parser.py"}', "pytest -q tests/test_parser.py",
                        "KeyError: 'x'", "In [3]: df.head()"])
    assert unsupported_mentions("Fix the KeyError in cell 3 in parser.py, rerun pytest -q", history) == ()
    assert unsupported_mentions("Decided to rewrite src/app.py after the ValueError in cell 7", history) == (
        Mention("file", "src/app.py"), Mention("cell", "7"), Mention("error", "valueerror"))
    assert unsupported_mentions("Run python3 -m argparse -c", history) == (
        Mention("command", "python3"), Mention("command", "-m"), Mention("command", "argparse"),
        Mention("command", "-c"))


@pytest.mark.parametrize(("item", "reason"), [
    ("", "empty"), ("Continue", "one word"), ("`pytest`", "one word"),
    ("concrete next steps", "prompt echo"), ("Keep facts, drop chatter", "prompt echo"),
    ("Never invent files or results.", "prompt echo"), ("Answer with the JSON object only", "prompt echo"),
    ("keep what is still true", "prompt echo"), ("verification commands with their last result", "prompt echo"),
])
def test_empty_one_word_and_prompt_echo_items_are_junk(item: str, reason: str) -> None:
    assert junk_reason(item, PROMPT_INSTRUCTIONS) == reason


@pytest.mark.parametrize("item", [
    "Add a test for empty rows", "Run the verification commands again after the fix", "fix the failing test",
    "Decided to keep parse_rows's signature",
])
def test_items_about_the_work_are_not_junk(item: str) -> None:
    assert junk_reason(item, PROMPT_INSTRUCTIONS) is None


def test_the_latest_request_is_verbatim_and_a_long_one_keeps_head_and_tail_around_a_marker() -> None:
    short = "  Please fix `parse_rows`:\n\n  keep the API.  "
    assert latest_request(short) == short.strip()
    long = "HEAD " + "x" * 5_000 + " TAIL"
    kept = latest_request(long)
    assert kept.startswith("HEAD ") and kept.endswith(" TAIL")
    omitted = len(long) - LATEST_REQUEST_CHARS
    assert f"[… {omitted:,} characters of the request omitted here; the transcript keeps it whole …]" in kept
    assert len(kept) < LATEST_REQUEST_CHARS + 120
