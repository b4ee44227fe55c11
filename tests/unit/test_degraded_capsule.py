"""The degraded (deterministic) capsule rolls the previous capsule forward without dropping any of
its state (seed section 2.2): bounded lists merge their oldest items and say so, never cut."""

from __future__ import annotations

from soba_notebook.compaction.capsule import Capsule, Decision
from soba_notebook.compaction.extract import deterministic_capsule
from soba_notebook.session import ToolCall, assistant_message, tool_result, user_message
from soba_notebook.session.entries import Entry, checkpoint


def _entries() -> list[Entry]:
    out: list[Entry] = [user_message("keep going with the refactor")]
    for n in range(14):
        out.append(checkpoint("milestone", f"new milestone {n}"))
        out.append(checkpoint("plan_pivot", f"new pivot {n}"))
        out.append(user_message(f"new constraint {n}: keep the API stable"))
        out.append(assistant_message("", [ToolCall(f"s{n}", "shell", {"command": f"make step{n}"})]))
        out.append(tool_result(f"s{n}", "shell", "cancelled", cancelled=True))
    return out


PREVIOUS = Capsule(
    goal="refactor the tokenizer",
    constraints=tuple(f"old constraint {i}" for i in range(12)),
    done=tuple(f"old done {i}" for i in range(20)),
    pending=tuple(f"old pending {i}" for i in range(8)),
    decisions=tuple(Decision(f"old decision {i}", f"reason {i}") for i in range(12)),
)


def _text(items: tuple[str, ...]) -> str:
    return "\n".join(items)


def test_degraded_capsule_keeps_every_item_of_the_previous_capsule_unless_superseded() -> None:
    rolled = deterministic_capsule(_entries(), PREVIOUS, "ck_previous")
    for field, kept in (("constraints", rolled.constraints), ("done", rolled.done), ("pending", rolled.pending)):
        for item in getattr(PREVIOUS, field):
            assert item in _text(kept), f"{field}: {item!r} was dropped"
    decisions = _text(tuple(d.what for d in rolled.decisions))
    for d in PREVIOUS.decisions:
        assert d.what in decisions, f"decision {d.what!r} was dropped"
    assert rolled.goal == "refactor the tokenizer" and "ck_previous" in rolled.rolled_from


def test_degraded_capsule_bounds_lists_by_merging_and_says_so() -> None:
    rolled = deterministic_capsule(_entries(), PREVIOUS, "ck_previous")
    assert len(rolled.done) <= 20 and len(rolled.constraints) <= 12 and len(rolled.pending) <= 8
    assert len(rolled.decisions) <= 12
    for items in (rolled.done, rolled.constraints, rolled.pending, tuple(d.what for d in rolled.decisions)):
        merged = [i for i in items if "merged to bound the capsule" in i]
        assert len(merged) == 1 and items[0] == merged[0], "the oldest items are merged into one, marked"
    # rolling again folds the merged item instead of nesting it or dropping it
    again = deterministic_capsule(_entries(), rolled, "ck_rolled")
    for item in PREVIOUS.done:
        assert item in _text(again.done)
    assert sum("merged to bound the capsule" in i for i in again.done) == 1


def test_merged_items_stay_bounded_over_a_long_session_and_say_how_much_they_elided() -> None:
    from soba_notebook.compaction.extract import MAX_MERGED_CHARS, _bounded

    items = tuple(f"finished step {i} of the long refactor with its tests passing" for i in range(400))
    bounded: tuple[str, ...] = ()
    for start in range(0, 400, 20):  # roll 20 new items in at a time, as compactions do
        bounded = _bounded((*bounded, *items[start:start + 20]), 12, "completed items")
    assert len(bounded) == 12 and bounded[-1] == items[-1]
    head = bounded[0]
    assert head.startswith("[389 earlier completed items merged to bound the capsule] [… ")
    assert len(head) < MAX_MERGED_CHARS + 200, "the capsule does not grow with the history"
    elided = int(head.split("[… ", 1)[1].split(" characters", 1)[0].replace(",", ""))
    kept = len(head.split("all …] ", 1)[1])
    whole = len("; ".join(items[:389]))
    assert elided + kept == whole, "every elided character is counted"


def test_copies_of_a_merged_item_are_counted_once_so_the_count_never_doubles_per_roll() -> None:
    # a model's capsule copies the extractor's merged item, and rolling it over the extractor's own
    # kept one put two copies of the same older items into one list: their counts were summed, so
    # a soak's capsule said "162766609868284718931985 earlier constraints merged"
    from soba_notebook.compaction.extract import MERGED_ITEM, _bounded

    items = tuple(f"correction {i}: keep the public API stable" for i in range(30))
    bounded = _bounded(items, 12, "constraints")
    assert MERGED_ITEM.match(bounded[0]) and bounded[0].startswith("[19 earlier constraints")
    rolled = bounded
    for n in range(40):  # each roll: the previous list, a model's copy of its merged item, one new item
        rolled = _bounded((rolled[0], *rolled, f"new correction {n}"), 12, "constraints")
    head = MERGED_ITEM.match(rolled[0])
    assert head is not None
    # 30 distinct corrections and 40 new ones, 11 of them kept as they are
    assert int(head.group(1)) <= 30 + 40 - 11, rolled[0][:80]
