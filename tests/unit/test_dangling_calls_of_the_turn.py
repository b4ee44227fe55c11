"""Closing the tool calls a turn left without a result reads that turn, not the history: a long
session's every turn used to walk and collect its whole path (bench/bench_soak.py showed the
per-turn time rise with the turns), and an id answered in an earlier turn (servers that number
calls ``call_0`` afresh in every reply) hid a call of this turn that has no result."""

from __future__ import annotations

from pathlib import Path

from soba_notebook.agent import open_agent
from soba_notebook.demo.scripted import ScriptedModel
from soba_notebook.session import ToolCall, assistant_message, tool_result, user_message


def _agent_with_history(tmp_path: Path, turns: int):  # type: ignore[no-untyped-def]
    handle = open_agent(tmp_path, provider=ScriptedModel())
    store = handle.store
    for t in range(turns):
        store.append(user_message(f"turn {t}"))
        store.append(assistant_message("", [ToolCall("call_0", "read_file", {"path": "a.py"})]))
        store.append(tool_result("call_0", "read_file", "text"))
        store.append(assistant_message("done"))
    store.append(user_message("last turn"))
    store.append(assistant_message("", [ToolCall("call_0", "read_file", {"path": "b.py"})]))
    return handle


def test_a_call_of_this_turn_is_closed_even_when_its_id_was_answered_in_an_earlier_turn(tmp_path: Path) -> None:
    handle = _agent_with_history(tmp_path, 3)
    assert handle.agent.close_open_calls("not finished") == 1
    last = handle.store.path()[-1]
    assert last.role == "tool" and last.tool_call_id == "call_0" and last.text == "not finished"
    assert handle.agent.close_open_calls("again") == 0


def test_closing_the_turns_calls_reads_the_turn_not_the_history(tmp_path: Path) -> None:
    handle = _agent_with_history(tmp_path, 500)
    store = handle.store
    reads = 0
    real_get = store.get

    def counting_get(entry_id: str):  # type: ignore[no-untyped-def]
        nonlocal reads
        reads += 1
        return real_get(entry_id)

    store.get = counting_get  # type: ignore[method-assign]
    store.path = None  # type: ignore[assignment,method-assign]  # a whole-path read would fail here
    assert handle.agent.close_open_calls("not finished") == 1
    assert reads <= 3, f"read {reads:,} entries of {len(store):,} to close one call"
