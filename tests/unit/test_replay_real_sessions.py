"""The real pi-mono session through the store and the compaction engine (65k window)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import PI_SESSION

from soba_notebook.compaction.simulate import replay
from soba_notebook.config import load_config
from soba_notebook.importers import import_transcript
from soba_notebook.session import SessionStore


def _pi_modified_calls() -> dict[str, str]:
    """Call id -> path for pi's edit and write calls whose results were not errors, from the source."""
    calls: dict[str, str] = {}
    ok: dict[str, str] = {}
    for line in PI_SESSION.read_text().splitlines():
        obj = json.loads(line)
        msg = obj.get("message") or {}
        if msg.get("role") == "assistant":
            for block in msg.get("content") or []:
                if block.get("type") == "toolCall" and block.get("name") in ("edit", "write"):
                    calls[block["id"]] = block["arguments"]["path"]
        elif msg.get("role") == "toolResult" and msg.get("toolCallId") in calls and not msg.get("isError"):
            ok[msg["toolCallId"]] = calls[msg["toolCallId"]]
    return ok


def test_pi_mono_session_loads_into_the_store_with_every_message(tmp_path: Path) -> None:
    path = import_transcript(PI_SESSION, tmp_path)
    store = SessionStore.open(path)
    source_messages = sum(1 for line in PI_SESSION.read_text().splitlines()
                          if json.loads(line).get("type") == "message")
    assert sum(1 for e in store.entries() if e.type == "message") == source_messages
    assert store.problems == []


def test_pi_mono_replay_at_65k_compacts_within_the_rules(tmp_path: Path) -> None:
    store = SessionStore.open(import_transcript(PI_SESSION, tmp_path / "imported"))
    config = load_config(home=tmp_path, project_dir=tmp_path,
                         overrides={"model": {"contextWindow": 65000, "maxOutputTokens": 8000}})
    result = replay(store.path(), config, workdir=tmp_path / "replay")
    inferences = result.inferences
    assert len(inferences) > 400
    completed = [r for r in inferences if r.outcome == "completed"]
    assert completed, "a session this long must compact under a 65k window"
    for r in inferences:
        assert r.hard_limit == 48808 and r.soft_limit == 39046
        assert not r.oversized and r.tokens_after <= r.hard_limit, f"inference {r.index} over the hard limit"
        assert r.pairs_intact, f"inference {r.index} separates a tool call from its result"
        if r.trigger == "hard_limit":
            assert r.effective_tokens > r.hard_limit
        if r.trigger == "auto_threshold":
            assert r.effective_tokens >= r.soft_limit
    # turn_complete fires only where the pre-generation ROI passes (seed section 6)
    for r in completed:
        if r.trigger in ("turn_complete", "auto_threshold"):
            assert r.effective_tokens - config.compaction.keep_recent_tokens >= config.compaction.min_reclaimable_tokens
    # Every file pi's edit/write tools modified before the last capsule's cut is listed in that
    # capsule (rolling carries earlier capsules' files forward); the rest is in the retained tail.
    calls = _pi_modified_calls()
    assert calls, "the pi session edits files"
    replayed = SessionStore.open(result.session_path).path()
    last = result.capsule_entries[-1]
    cut = next(i for i, e in enumerate(replayed) if e.id == last.data["firstKeptEntryId"])
    before_cut = {c.id for e in replayed[:cut] for c in e.tool_calls}
    summarized_files = {path for cid, path in calls.items() if cid in before_cut}
    assert summarized_files and summarized_files <= set(result.capsules[-1].files_modified)
    tail_files = {path for cid, path in calls.items() if cid not in before_cut}
    assert summarized_files | tail_files == set(calls.values())
