"""The seed's hard and soft limits, and incremental effective-token measurement."""

from __future__ import annotations

from pathlib import Path

import pytest

from soba_notebook.budget import BudgetTracker, hard_limit, soft_limit
from soba_notebook.session import SessionStore, Usage, assistant_message, user_message
from soba_notebook.session.entries import Entry
from soba_notebook.tokens import REPLY_PRIMING, TokenCounter


def test_seed_example_hard_limit_is_48808() -> None:
    assert hard_limit(65000, 8000, 8192) == 48808


def test_seed_example_soft_limit_is_39046_with_default_thresholds() -> None:
    assert soft_limit(48808, 32000, 0.8) == 39046


def test_soft_limit_minimum_dominates_when_ratio_is_small() -> None:
    assert soft_limit(48808, 32000, 0.5) == 32000


def test_soft_limit_never_reaches_the_hard_limit() -> None:
    assert soft_limit(20000, 32000, 0.8) == 19999
    assert soft_limit(48808, 0, 1.0) == 48807


def _tracker(store: SessionStore, counter: TokenCounter, base: int = 0) -> BudgetTracker:
    return BudgetTracker(store, counter, context_window=65000, hard_limit=48808, soft_limit=39046, base_tokens=base)


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter("gpt-4o")


def test_effective_tokens_are_estimated_from_messages_and_base(tmp_path: Path, counter: TokenCounter) -> None:
    store = SessionStore.create(tmp_path)
    a = store.append(user_message("hello world"))
    check = _tracker(store, counter, base=100).check()
    assert check.source == "estimated"
    assert check.effective == 100 + counter.count_entry(a) + REPLY_PRIMING


def test_provider_usage_covers_prefix_plus_estimate_of_what_was_appended(tmp_path: Path,
                                                                         counter: TokenCounter) -> None:
    store = SessionStore.create(tmp_path)
    store.append(user_message("hello"))
    reply = store.append(assistant_message("hi there", usage=Usage(input=900, output=5, cache_read=100),
                                           context_key="root"))
    more = store.append(user_message("and now?"))
    check = _tracker(store, counter).check()
    assert check.source == "provider_usage"
    assert check.effective == 1000 + counter.count_entry(reply) + counter.count_entry(more)


def test_usage_from_before_a_capsule_is_not_a_prefix_of_the_new_input(tmp_path: Path,
                                                                       counter: TokenCounter) -> None:
    store = SessionStore.create(tmp_path)
    store.append(user_message("hello"))
    store.append(assistant_message("hi", usage=Usage(input=5000), context_key="root"))
    kept = store.append(user_message("keep me"))
    store.append(Entry("capsule", {"firstKeptEntryId": kept.id, "state": {"goal": "g"}}))
    check = _tracker(store, counter).check()
    assert check.source == "estimated"
    assert check.effective < 5000


def test_budget_check_only_counts_entries_appended_since_the_last_check(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path)
    counter = TokenCounter("gpt-4o")
    for i in range(200):
        store.append(user_message(f"message {i}"))
    tracker = _tracker(store, counter)
    tracker.check()
    calls = 0
    original = counter.count_entry

    def counting(entry: Entry) -> int:
        nonlocal calls
        calls += 1
        return original(entry)

    counter.count_entry = counting  # type: ignore[method-assign]
    store.append(user_message("one more"))
    store.append(user_message("and another"))
    tracker.check()
    assert calls == 2


def test_rewind_recomputes_the_budget_for_the_new_path(tmp_path: Path, counter: TokenCounter) -> None:
    store = SessionStore.create(tmp_path)
    a = store.append(user_message("short"))
    store.append(user_message("long " * 500))
    tracker = _tracker(store, counter)
    long_check = tracker.check()
    store.rewind(a.id)
    short_check = tracker.check()
    assert short_check.effective == counter.count_entry(a) + REPLY_PRIMING < long_check.effective
