"""Property-based checks over random transcripts: what the model sees after any compaction."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from compaction_support import COUNTER, FakeSummarizer, make_engine, small_config, text_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soba_notebook.compaction import TurnState
from soba_notebook.session import ToolCall, assistant_message, tool_result, user_message
from soba_notebook.session.context import build_context, pair_problems

# a step: (number of parallel tool calls, size of each result, size of the assistant text)
step = st.tuples(st.integers(0, 3), st.integers(5, 900), st.integers(1, 200))
turn = st.tuples(st.integers(1, 400), st.lists(step, min_size=1, max_size=6))
transcript = st.lists(turn, min_size=1, max_size=14)


def _check_invariants(store, engine, check) -> None:
    path = store.path()
    ctx = build_context(path)
    assert pair_problems(ctx.messages) == [], "no tool result without its call, no call without its result"
    assert check.effective <= check.hard_limit, "no request over the hard limit is ever made"
    messages = engine.model_messages()
    capsule_msgs = [m for m in messages if str(m.get("content", "")).startswith("<context_capsule")]
    if ctx.capsule is not None:
        assert len(capsule_msgs) == 1 and messages[0] is not None and messages[0] == capsule_msgs[0]
    else:
        assert capsule_msgs == []
    # nothing is silently dropped: each capsule summarizes exactly the context before its cut
    start = 0
    for i, e in enumerate(path):
        if e.type != "capsule":
            continue
        first = e.data["firstKeptEntryId"]
        cut = next((j for j, p in enumerate(path) if p.id == first), i) if first else i
        assert cut >= start, "a later capsule never keeps less history than an earlier one summarized"
        between = [p for p in path[start:cut] if p.type != "capsule"]
        assert e.data["summarizedEntries"] == len(between)
        start = cut


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transcript, st.sampled_from([2000, 4000, 7000]), st.booleans())
def test_model_input_after_any_compaction_is_valid_and_loses_nothing(turns, keep, use_model) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        config = small_config(tmp_path, keepRecentTokens=keep)
        store, engine, _ = make_engine(tmp_path, config, FakeSummarizer() if use_model else None, flight=False)

        async def drive() -> None:
            n = 0
            for user_size, steps in turns:
                state = TurnState()
                store.append(user_message(text_of(user_size, n)))
                for calls, result_size, text_size in steps:
                    check = await engine.preflight(state)
                    _check_invariants(store, engine, check)
                    tcs = [ToolCall(f"c{n}_{k}", "read_file", {"path": f"f{n}_{k}.py"}) for k in range(calls)]
                    store.append(assistant_message(text_of(text_size, n), tcs))
                    for tc in tcs:
                        store.append(tool_result(tc.id, "read_file", text_of(result_size, n + 1)))
                    n += 1
                engine.record_turn_complete()
            check = await engine.preflight(TurnState())
            _check_invariants(store, engine, check)

        asyncio.run(drive())
        assert COUNTER.count_messages(engine.model_messages()) <= config.hard_limit
