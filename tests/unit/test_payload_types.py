"""The typed payloads (session/payloads.py) describe what the code really writes and reads.

mypy checks the fields' types, but it lets ``typed.get("no_such_key")`` pass (typed ``object``);
so a reader's keys are checked here against the declared fields, and what SOBA writes (entries
and events from a real compaction and a real turn) against the declared shapes. (The runtime
vocabularies are the Literals' values, ``typing.get_args``, so no test compares copies of them.)
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any, get_args, get_type_hints, is_typeddict

import pytest
from compaction_support import FakeSummarizer, capsules, fill, make_engine, small_config

import soba_notebook
from soba_notebook.compaction import Trigger, TurnState
from soba_notebook.events import EVENT_TYPES
from soba_notebook.session import (
    ToolCall,
    Usage,
    assistant_message,
    checkpoint,
    config_change,
    leaf_marker,
    payloads,
    tool_result,
    user_message,
)

PACKAGE = Path(soba_notebook.__file__).parent
ACCESSORS = {"message_data": payloads.MessageData, "capsule_data": payloads.CapsuleData,
             "checkpoint_data": payloads.CheckpointData, "leaf_data": payloads.LeafData,
             "config_data": payloads.ConfigData}
EVENT_PAYLOADS = {"budget": payloads.BudgetPayload, "compaction_start": payloads.CompactionStartPayload,
                  "compaction_progress": payloads.CompactionProgressPayload,
                  "compaction_end": payloads.CompactionEndPayload, "turn_start": payloads.TurnStartPayload,
                  "turn_end": payloads.TurnEndPayload, "message_delta": payloads.MessageDeltaPayload,
                  "tool_start": payloads.ToolStartPayload, "tool_end": payloads.ToolEndPayload,
                  "error": payloads.ErrorPayload, "request_start": payloads.RequestStartPayload,
                  "response_start": payloads.ResponseStartPayload, "retry": payloads.RetryPayload,
                  "cost": payloads.CostPayload}


def fields(typed: Any) -> set[str]:
    return set(get_type_hints(typed))


def conforms(value: dict[str, Any], typed: Any) -> list[str]:
    """What in ``value`` the TypedDict does not declare, and what it requires that is missing."""
    return ([f"undeclared {k!r}" for k in value if k not in fields(typed)]
            + [f"missing {k!r}" for k in typed.__required_keys__ if k not in value])


# -- event payloads ------------------------------------------------------------------------------
def test_every_event_type_has_a_payload_type() -> None:
    assert set(EVENT_PAYLOADS) == EVENT_TYPES
    assert all(is_typeddict(t) for t in EVENT_PAYLOADS.values())


# -- accessors: the same dict, typed --------------------------------------------------------------
def test_the_typed_accessors_return_the_entry_data_itself_not_a_copy() -> None:
    for entry, accessor in ((checkpoint("milestone", "m"), payloads.checkpoint_data),
                            (leaf_marker("x"), payloads.leaf_data),
                            (config_change({"auto": False}), payloads.config_data),
                            (user_message("hi"), payloads.message_data)):
        assert accessor(entry) is entry.data


def _keys_read_through_accessors(tree: ast.AST) -> list[tuple[str, str, int]]:
    """(accessor, key, line) for ``acc(x).get("k")``, ``acc(x)["k"]`` and ``v = acc(x)`` then ``v.get("k")``."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):  # names bound to an accessor's result (assignments and walruses)
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.NamedExpr):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
                and value.func.id in ACCESSORS:
            bound[target.id] = value.func.id

    def accessor_of(node: ast.expr) -> str | None:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ACCESSORS:
            return node.func.id
        if isinstance(node, ast.NamedExpr):
            return accessor_of(node.value)
        return bound.get(node.id) if isinstance(node, ast.Name) else None

    reads = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and isinstance(node.args[0], ast.Constant):
            acc, key = accessor_of(node.func.value), node.args[0].value
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            acc, key = accessor_of(node.value), node.slice.value
        else:
            continue
        if acc is not None:
            reads.append((acc, key, node.lineno))
    return reads


def test_every_key_read_through_a_typed_accessor_is_a_declared_field() -> None:
    reads, wrong = 0, []
    for file in sorted(PACKAGE.rglob("*.py")):
        for acc, key, line in _keys_read_through_accessors(ast.parse(file.read_text(), str(file))):
            reads += 1
            if key not in fields(ACCESSORS[acc]):
                wrong.append(f"{file.relative_to(PACKAGE)}:{line}: {acc}(...)[{key!r}] is no field of "
                             f"{ACCESSORS[acc].__name__}")
    assert wrong == []
    assert reads >= 25  # the reads of compaction/, session/ and the layers above go through them


def test_a_misspelled_key_is_caught_by_the_read_check() -> None:
    tree = ast.parse("def f(e):\n    d = capsule_data(e)\n    return d.get('checkpointID'), leaf_data(e)['target']\n")
    assert sorted((a, k) for a, k, _ in _keys_read_through_accessors(tree)) == [
        ("capsule_data", "checkpointID"), ("leaf_data", "target")]
    assert "checkpointID" not in fields(payloads.CapsuleData) and "target" not in fields(payloads.LeafData)


# -- what SOBA writes has the declared shape ------------------------------------------------------
def test_the_entry_constructors_write_the_declared_shapes() -> None:
    assert conforms(dict(checkpoint("plan_pivot", "why").data), payloads.CheckpointData) == []
    assert conforms(dict(leaf_marker(None).data), payloads.LeafData) == []
    assert conforms(dict(config_change({"auto": False}).data), payloads.ConfigData) == []
    messages = [user_message("hi", source="queue"),
                assistant_message("ok", [ToolCall("c1", "read_file", {"path": "a"}, raw_arguments="{")],
                                  usage=Usage(1, 2, 3, 4), model="m", provider="p", stop_reason="stop",
                                  thinking="t", context_key="k", estimated_input=5, partial=True),
                tool_result("c1", "read_file", "text", is_error=True, cancelled=True, full_chars=10, exit_code=1,
                            files_changed={"modified": ["a"]})]
    for entry in messages:
        assert conforms(dict(entry.data), payloads.MessageData) == []
        assert conforms(dict(entry.data["message"]), payloads.MessageBody) == []
    assert conforms(messages[1].data["message"]["toolCalls"][0], payloads.ToolCallData) == []
    assert conforms(messages[1].data["message"]["usage"], payloads.UsageData) == []


@pytest.mark.parametrize("with_kernel_state", [False, True])
def test_a_real_compaction_writes_a_capsule_entry_and_events_of_the_declared_shapes(
        tmp_path: Path, with_kernel_state: bool) -> None:
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path), FakeSummarizer(),
                                     kernel_state=(lambda: ["df: DataFrame (3, 2)"]) if with_kernel_state else None)
    fill(store, 14000)
    asyncio.run(engine.preflight(TurnState()))
    (cap,) = capsules(store)
    assert conforms(dict(cap.data), payloads.CapsuleData) == []
    assert ("kernelState" in cap.data) is with_kernel_state
    seen = {e.type for e in rec.events}
    assert {"budget", "compaction_start", "compaction_progress", "compaction_end"} <= seen
    for event in rec.events:
        assert conforms(dict(event.data), EVENT_PAYLOADS[event.type]) == [], event.type


def test_a_compaction_with_nothing_to_plan_sends_the_six_required_start_fields(tmp_path: Path) -> None:
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path), FakeSummarizer())
    fill(store, 500)
    outcome = asyncio.run(engine.run(Trigger.USER))
    assert outcome.outcome == "skipped"
    (start,) = rec.of("compaction_start")
    assert set(start.data) == set(payloads.CompactionStartPayload.__required_keys__)


def test_a_real_turn_writes_entries_and_events_of_the_declared_shapes(tmp_path: Path) -> None:
    from soba_notebook.agent import open_agent
    from soba_notebook.demo.scenario import DEMO_PROMPTS
    from soba_notebook.demo.scripted import ScriptedModel

    handle = open_agent(tmp_path, provider=ScriptedModel(), overrides={"tools": {"approval": "never"}})
    events: list[Any] = []
    handle.agent.bus.subscribe(events.append)
    result = asyncio.run(handle.agent.run_turn(DEMO_PROMPTS[0]))
    assert result.outcome in get_args(payloads.TurnOutcome)
    assert {"turn_start", "tool_start", "tool_end", "budget", "turn_end", "request_start",
            "response_start"} <= {e.type for e in events}
    for event in events:
        assert conforms(dict(event.data), EVENT_PAYLOADS[event.type]) == [], event.type
    shapes = {"checkpoint": payloads.CheckpointData, "leaf": payloads.LeafData, "config": payloads.ConfigData,
              "capsule": payloads.CapsuleData, "message": payloads.MessageData}
    written = [e for e in handle.store.entries() if e.type in shapes]
    assert {"message", "checkpoint"} <= {e.type for e in written}
    for entry in written:
        assert conforms(dict(entry.data), shapes[entry.type]) == [], entry.type
        if entry.type == "message":
            assert conforms(dict(entry.message), payloads.MessageBody) == []
