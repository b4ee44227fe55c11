"""A long session's rolled capsule stays within the room the plan reserves for it, and a hard-limit
compaction keeps the prompt the user just typed (seed sections 2.2 and 4, and its practical
guidance: never lose "the current tool batch or immediate task details").

Found by bench/bench_soak.py (seed 5, turns 288-289): after hundreds of compactions the rolled
capsule was about 6,400 tokens against its 3,500-token reserve, the hard-limit shrink kept no tail
at all, the turn's own prompt was summarized, and the scripted model started over until the step
limit stopped the turn. ``rolledFrom`` held every earlier checkpoint id (546 by turn ~470).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from compaction_support import COUNTER, capsules, make_engine, small_config, text_of

from soba_notebook.compaction import Capsule, CompactionEngine, Trigger, TurnState
from soba_notebook.compaction.capsule import Decision, Verification, roll
from soba_notebook.compaction.capsule_entry import capsule_message, capsule_of
from soba_notebook.session import SessionStore, ToolCall, assistant_message, tool_result, user_message
from soba_notebook.session.entries import Entry

GOAL = "Build the expression calculator: tokenizer, parser and evaluator, with tests for every rule"
CONSTRAINTS = ("User: keep the public API of calc.ops stable", "User: no third-party dependencies")


def rolled_capsule(compactions: int = 300) -> Capsule:
    """The state after ``compactions`` roll-ups, each adding history items (the real merge)."""
    capsule: Capsule | None = None
    for i in range(compactions):
        newer = Capsule(
            goal=GOAL if i == 0 else "", constraints=CONSTRAINTS if i == 0 else (),
            done=(f"Step {i}: implemented and tested the rule for operator number {i} in the evaluator",),
            decisions=(Decision(f"parse operator {i} with precedence level {i % 7}", "it matches the grammar"),),
            files_read=(f"calc_demo/calc/rules/operator_rule_number_{i}.py",),
            files_modified=(f"calc_demo/calc/module_{i % 12}.py",),
            verification=(Verification(f"python -m unittest tests.test_rule_{i % 30}", "passed"),),
            artifacts=(f"calc_demo/build/coverage_report_{i}.html",),
            next_steps=(f"Add the rule for operator number {i + 1}",))
        capsule = roll(capsule, newer, previous_checkpoint=f"ck_{i:010x}" if i else None)
    assert capsule is not None
    return capsule


def append_capsule(store: SessionStore, capsule: Capsule, checkpoint_id: str = "ck_previous") -> None:
    """``capsule`` as the capsule in force (keeping nothing before it), as a compaction appends it."""
    store.append(Entry("capsule", {"checkpointId": checkpoint_id, "firstKeptEntryId": None, "trigger": "user",
                                   "quality": "ok", "state": capsule.to_json()}))


def add_turn(store: SessionStore, n: int, result_tokens: int, prompt: str | None = None) -> str:
    """A turn: its prompt, a tool call and its result, the answer; returns the prompt's entry id."""
    prompt_entry = store.append(user_message(prompt or f"step {n}: " + text_of(60, n)))
    call = ToolCall(f"c{n}", "read_file", {"path": f"src/mod{n}.py"})
    store.append(assistant_message(f"reading {n}", [call]))
    store.append(tool_result(call.id, "read_file", text_of(result_tokens, n + 7)))
    store.append(assistant_message(f"done with step {n}. " + text_of(60, n + 3)))
    assert prompt_entry.id is not None
    return prompt_entry.id


def rendered_tokens(entry: Entry) -> int:
    return COUNTER.count_message(capsule_message(entry))


def reserve(engine: CompactionEngine) -> int:
    """A quarter of the hard limit (at most 8,000): what the plan leaves the capsule."""
    return min(8_000, engine.config.hard_limit // 4)


def test_a_capsule_rolled_over_300_compactions_renders_within_its_reserve_and_says_what_it_trimmed(
        tmp_path: Path) -> None:
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), flight=False)
    previous = rolled_capsule()
    append_capsule(store, previous)
    for n in range(6):
        add_turn(store, n, 1000)
    outcome = asyncio.run(engine.compact(Trigger.USER))
    assert outcome.outcome == "completed", outcome.reason
    entry = capsules(store)[-1]
    new = capsule_of(entry)
    assert rendered_tokens(entry) <= reserve(engine), (
        f"capsule renders as {rendered_tokens(entry):,} tokens, over its reserve of {reserve(engine):,}")
    # what was trimmed is said inside the capsule, as model input shows it
    assert new.done[0].startswith("(Older items were trimmed to fit the capsule's reserve")
    assert "the transcript keeps every one and the recall tool reads them" in capsule_message(entry)["content"]
    # the oldest history went first; the newest is still there
    assert "Step 0: " not in " ".join(new.done) and any("Step 299: " in d for d in new.done)
    assert "calc_demo/calc/rules/operator_rule_number_0.py" not in new.files_read
    # never trimmed: the goal, the user's corrections, next steps, every file modified
    assert new.goal == GOAL
    assert all(c in new.constraints for c in CONSTRAINTS)
    assert "Add the rule for operator number 300" in new.next_steps
    assert set(previous.files_modified) <= set(new.files_modified)


def test_rolled_from_keeps_the_last_eight_checkpoint_ids(tmp_path: Path) -> None:
    previous = rolled_capsule()
    assert len(previous.rolled_from) <= 8 and previous.rolled_from[-1] == f"ck_{299:010x}"
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), flight=False)
    append_capsule(store, previous, "ck_previous")
    for n in range(6):
        add_turn(store, n, 1000)
    assert asyncio.run(engine.compact(Trigger.USER)).outcome == "completed"
    stored = capsules(store)[-1].data["state"]["rolledFrom"]
    assert len(stored) <= 8 and stored[-1] == "ck_previous", stored


def test_a_hard_limit_compaction_with_a_large_capsule_keeps_the_current_prompt_verbatim(tmp_path: Path) -> None:
    # a capsule the reserve cannot hold (its goal is never trimmed) leaves room for the current turn
    # only, not for the retained tail the plan wants (keepRecentTokens 4,000)
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path), flight=False)
    append_capsule(store, Capsule(goal=text_of(10_000), next_steps=("carry on",)))
    for n in range(3):
        add_turn(store, n, 1000)
    prompt = "Turn 99: add the modulo operator to the parser"
    prompt_id = add_turn(store, 99, 1200, prompt=prompt)
    assert engine.measure().over_hard
    after = asyncio.run(engine.preflight(TurnState()))
    assert after.effective <= after.hard_limit
    entry = capsules(store)[-1]
    assert entry.data["trigger"] == "hard_limit"
    ids = [e.id for e in store.path()]
    first_kept = entry.data["firstKeptEntryId"]
    assert first_kept is not None and ids.index(first_kept) <= ids.index(prompt_id), (
        f"first kept entry {first_kept} is after the current prompt {prompt_id}: the prompt was summarized")
    assert any(m.get("content") == prompt for m in engine.model_messages()[1:])
