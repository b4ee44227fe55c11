"""fit_capsule: a capsule over its reserve loses its oldest history items, never its working state,
and says how many it lost (compaction/capsule_fit.py)."""

from __future__ import annotations

from dataclasses import replace

from compaction_support import COUNTER

from soba_notebook.compaction.capsule import Capsule, Decision, Verification, render, roll
from soba_notebook.compaction.capsule_fit import (
    KEPT_CONSTRAINTS,
    TRIMMED,
    capsule_reserve,
    fit_capsule,
    trimmed_counts,
)
from unit.test_capsule_reserve import CONSTRAINTS, GOAL, rolled_capsule


def tokens(capsule: Capsule) -> int:
    return COUNTER.count_message({"role": "user", "content": render(capsule, checkpoint_id="ck_0123456789")})


def test_a_capsule_within_its_budget_is_returned_unchanged() -> None:
    capsule = rolled_capsule(20)
    assert fit_capsule(capsule, tokens(capsule), tokens) is capsule


def test_the_reserve_is_a_quarter_of_the_hard_limit_and_at_most_8000_tokens() -> None:
    assert capsule_reserve(14_000) == 3_500 and capsule_reserve(48_808) == 8_000


def test_only_the_oldest_history_items_go_and_the_note_counts_them() -> None:
    capsule = rolled_capsule(300)
    fitted = fit_capsule(capsule, 3_500, tokens)
    assert tokens(fitted) <= 3_500 < tokens(capsule)
    counts = trimmed_counts(fitted)
    for attr in TRIMMED:
        before, after = getattr(capsule, attr), getattr(fitted, attr)
        after = after[1:] if attr == "done" else after  # the note is the first completed item
        dropped = len(before) - len(after)
        assert after == before[dropped:], f"{attr}: not its newest items"  # the oldest went, in order
        assert counts.get(attr, 0) == dropped, attr
    assert fitted.done[0].startswith("(Older items were trimmed to fit the capsule's reserve, the latest time ")
    assert f"{counts['done']:,} of Completed work" in fitted.done[0]
    for attr in ("goal", "constraints", "active", "pending", "blockers", "next_steps", "files_modified",
                 "active_skills", "covers", "rolled_from"):
        assert getattr(fitted, attr) == getattr(capsule, attr), attr


def test_a_budget_nothing_fits_keeps_the_working_state_and_the_newest_items_of_each_list() -> None:
    capsule = rolled_capsule(300)
    fitted = fit_capsule(capsule, 10, tokens)
    assert fitted.goal == GOAL and fitted.constraints == CONSTRAINTS
    assert fitted.files_modified == capsule.files_modified and fitted.next_steps == capsule.next_steps
    assert fitted.verification == capsule.verification[-TRIMMED["verification"]:]  # the latest results
    assert fitted.done[1:] == capsule.done[-TRIMMED["done"]:] and fitted.decisions == capsule.decisions[-3:]
    assert fitted.files_read == () and fitted.artifacts == ()
    assert fit_capsule(fitted, 10, tokens) == fitted  # nothing more to trim: the same state, counts unchanged


def test_a_later_trim_replaces_the_note_with_what_it_dropped() -> None:
    first = fit_capsule(rolled_capsule(300), 3_500, tokens)
    newer = Capsule(done=tuple(f"Later step {i}: refined the evaluator's errors for case {i}" for i in range(40)),
                    decisions=(Decision("keep errors short", "users read them in a terminal"),),
                    files_read=tuple(f"calc_demo/calc/later/module_{i}.py" for i in range(40)),
                    verification=(Verification("python -m unittest", "passed"),))
    rolled = roll(first, newer, previous_checkpoint="ck_later")
    second = fit_capsule(rolled, 3_500, tokens)
    assert tokens(second) <= 3_500
    assert sum("(Older items were trimmed" in d for d in second.done) == 1  # one note, not one per fit
    assert second.done[0].startswith("(Older items were trimmed")
    dropped = {attr: len(getattr(rolled, attr)) - len(getattr(second, attr)) for attr in TRIMMED}
    dropped["done"] = len(rolled.done) - 1 - (len(second.done) - 1)  # each holds one note
    assert trimmed_counts(second) == {attr: n for attr, n in dropped.items() if n}
    assert second.done[-1] == "Later step 39: refined the evaluator's errors for case 39"


def test_a_rolled_capsule_keeps_only_its_last_eight_checkpoint_ids() -> None:
    capsule = rolled_capsule(300)
    assert capsule.rolled_from == tuple(f"ck_{i:010x}" for i in range(292, 300))


def test_of_the_constraints_only_older_merged_items_go_and_every_correction_as_given_stays() -> None:
    # a model's capsule rolled over the extractor's kept one merged item per roll (the soak: most of the capsule)
    corrections = tuple(f"User: Turn {i}: keep the output format stable" for i in range(30))
    merged = tuple(f"[{n} earlier constraints merged to bound the capsule] " + "; ".join(corrections[:n]) * 3
                   for n in range(5, 30, 5))
    capsule = Capsule(goal=GOAL, constraints=tuple(x for pair in zip(corrections, merged, strict=False)
                                                   for x in pair) + corrections[len(merged):])
    fitted = fit_capsule(capsule, 1_500, tokens)
    assert tokens(capsule) > 1_500 >= tokens(fitted)
    assert set(corrections) <= set(fitted.constraints)
    assert [c for c in fitted.constraints if c.startswith("[")] == [merged[-1]]  # the newest merged item stays
    assert trimmed_counts(fitted) == {"constraints": len(merged) - 1}
    assert f"{len(merged) - 1:,} of Constraints" in fitted.done[0]


def test_older_corrections_go_only_when_nothing_else_may_and_the_newest_twelve_always_stay() -> None:
    # the extractor takes every later user message for a correction: a long session's model path holds hundreds
    corrections = tuple(f"User: Turn {i}: carry on with the project." for i in range(400))
    capsule = replace(rolled_capsule(300), constraints=corrections)
    roomy = fit_capsule(capsule, 6_500, tokens)  # the history's items make room: no correction goes
    assert roomy.constraints == corrections and tokens(roomy) <= 6_500
    tight = fit_capsule(capsule, 10, tokens)  # nothing fits: every list at its floor
    assert tight.constraints == corrections[-KEPT_CONSTRAINTS:]
    assert tight.files_read == () and tight.artifacts == () and len(tight.decisions) == TRIMMED["decisions"]
    assert trimmed_counts(tight)["constraints"] == 400 - KEPT_CONSTRAINTS
