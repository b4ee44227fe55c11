"""The capsule's notebook cells run and figures seen: facts of the transcript's notebook tool
results (cell, notebook, outcome, and what the model said of a figure), merged like the other
grounded lists, and absent from capsules (and their hashes) that have none."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

from compaction_support import FakeSummarizer, capsules, make_engine, small_config, text_of

from soba_notebook.agent.cell_exec import CellRun
from soba_notebook.agent.notebook_run import cell_runs
from soba_notebook.compaction import Trigger
from soba_notebook.compaction.capsule import Capsule, render, roll
from soba_notebook.compaction.cell_facts import MAX_CELLS, REMARK_CHARS
from soba_notebook.compaction.extract import deterministic_capsule, extract_facts
from soba_notebook.compaction.grounding import ground
from soba_notebook.compaction.summarize import parse_capsule_answer
from soba_notebook.memory.portable import PortableCapsule, content_hash, export_text, load_text
from soba_notebook.session import ToolCall, assistant_message, tool_result, user_message
from soba_notebook.session.entries import Entry
from unit.test_images_for_model import attachment

_ERROR = {"output_type": "error", "ename": "KeyError", "evalue": "'price'", "traceback": ["KeyError: 'price'"]}


def run_session(remark: str = "The histogram is right-skewed: most prices are under 10.") -> list[Entry]:
    """A user asks; the agent runs two cells (the second draws a figure), then says what it sees;
    then runs a third cell that raises."""
    call = ToolCall("call_1", "notebook_run", {"path": "analysis.ipynb", "cell_ids": ["load", "plot"]})
    runs = [("load", CellRun(3, [{"output_type": "stream", "name": "stdout", "text": "1,200 rows\n"}])),
            ("plot", CellRun(4, []))]
    failing = ToolCall("call_2", "notebook_run", {"path": "analysis.ipynb", "cell_ids": ["fit"]})
    return [
        user_message("plot the price distribution"),
        assistant_message("", [call]),
        tool_result("call_1", "notebook_run", "ran 2 cells of analysis.ipynb", images=[attachment(640, 480, "plot")],
                    cell_runs=cell_runs("analysis.ipynb", runs)),
        assistant_message(remark, [failing]),
        tool_result("call_2", "notebook_run", "cell fit raised KeyError", is_error=True,
                    cell_runs=cell_runs("analysis.ipynb", [("fit", CellRun(5, [_ERROR]))])),
    ]


def test_cells_run_and_figures_seen_come_from_the_notebook_run_results() -> None:
    facts = extract_facts(run_session())
    assert facts.cells_run == (
        "analysis.ipynb cell load: ran [3] ok",
        "analysis.ipynb cell plot: ran [4] ok; figure 640×480 seen (to see again: notebook_read cell plot "
        "include_images) — the model said: \"The histogram is right-skewed: most prices are under 10.\"",
        "analysis.ipynb cell fit: ran [5] raised KeyError: 'price'",
    )


def test_the_models_remark_on_a_figure_is_clipped() -> None:
    facts = extract_facts(run_session("word " * 200))
    plot = next(item for item in facts.cells_run if "cell plot" in item)
    said = plot.split('the model said: "', 1)[1].rstrip('"')
    assert len(said) == REMARK_CHARS and said.endswith("…")


def test_a_figure_seen_through_notebook_read_is_recorded_with_where_to_see_it_again() -> None:
    call = ToolCall("call_9", "notebook_read", {"cell_ids": ["c7"], "include_images": True})
    entries = [user_message("look at the figure"), assistant_message("", [call]),
               tool_result("call_9", "notebook_read", "cell c7", images=[attachment(800, 600, "c7")]),
               assistant_message("Two clusters, well separated.")]
    assert extract_facts(entries).cells_run == (
        "(the kernel's notebook) cell c7: figure 800×600 seen (to see again: notebook_read cell c7 include_images)"
        " — the model said: \"Two clusters, well separated.\"",)


def test_a_later_run_of_a_cell_replaces_its_item_when_capsules_roll() -> None:
    older = deterministic_capsule(run_session())
    again = ToolCall("call_3", "notebook_run", {"path": "analysis.ipynb", "cell_ids": ["fit"]})
    newer = [assistant_message("", [again]),
             tool_result("call_3", "notebook_run", "ran 1 cell", cell_runs=cell_runs(
                 "analysis.ipynb", [("fit", CellRun(6, []))]))]
    rolled = deterministic_capsule(newer, older)
    assert [item.split(":", 1)[0] for item in rolled.cells_run] == [
        "analysis.ipynb cell load", "analysis.ipynb cell plot", "analysis.ipynb cell fit"]
    assert rolled.cells_run[-1] == "analysis.ipynb cell fit: ran [6] ok"
    assert roll(older, Capsule()).cells_run == older.cells_run  # nothing newer: all carried


def test_the_extractor_lists_at_most_the_latest_cells() -> None:
    entries: list[Entry] = [user_message("run them all")]
    for n in range(MAX_CELLS + 5):
        call = ToolCall(f"call_{n}", "notebook_run", {"cell_ids": [f"c{n}"]})
        entries += [assistant_message("", [call]), tool_result(call.id, "notebook_run", "ran", cell_runs=cell_runs(
            "nb.ipynb", [(f"c{n}", CellRun(n + 1, []))]))]
    items = extract_facts(entries).cells_run
    assert len(items) == MAX_CELLS and items[0].startswith("nb.ipynb cell c5:") and "c44:" in items[-1]


def test_a_model_capsule_gets_the_cells_from_the_history_never_its_own() -> None:
    answer = parse_capsule_answer(json.dumps({"goal": "plot the price distribution",
                                              "cellsRun": ["nb.ipynb cell x: ran [1] ok"]}))
    assert answer.cells_run == ()  # the code's field: a model's claim is not read
    facts = extract_facts(run_session())
    grounded = ground(Capsule(goal="plot the price distribution", cells_run=("invented: ran",)), facts)
    assert grounded.capsule.cells_run == facts.cells_run
    assert "## Notebook cells run and figures seen\n- analysis.ipynb cell load: ran [3] ok" in render(grounded.capsule)


def test_a_capsule_without_cells_keeps_its_stored_form_and_hash() -> None:
    old = {"schemaVersion": 1, "goal": "g", "constraints": [], "done": [], "active": [], "pending": [],
           "decisions": [], "blockers": [], "nextSteps": [], "filesRead": [], "filesModified": ["a.py"],
           "verification": [], "activeSkills": [], "artifacts": [],
           "covers": {"firstId": "e1", "lastId": "e2", "count": 2}, "rolledFrom": []}
    capsule = Capsule.from_json(old)  # a capsule stored before the field existed loads
    assert capsule.cells_run == () and capsule.to_json() == old
    canonical = json.dumps(old, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    assert content_hash(capsule) == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    # a file written before the section existed (no "## Notebook cells run" heading) loads strictly
    text = export_text(PortableCapsule(id="cap_0123456789abcdef", capsule=capsule, title="t", created="c",
                                       source_session=None, source_checkpoint=None, trigger="user", quality="ok",
                                       token_count=1))
    before = text.replace("## Notebook cells run and figures seen\n\n", "")
    assert before != text
    assert load_text(before, strict=True).capsule == capsule


def test_a_capsule_with_cells_round_trips_through_its_file() -> None:
    capsule = extract_facts(run_session())
    pc = PortableCapsule(id="cap_0123456789abcdef", capsule=capsule, title="t", created="c", source_session=None,
                         source_checkpoint=None, trigger="user", quality="ok", token_count=1)
    assert load_text(export_text(pc), strict=True).capsule == capsule


def test_figures_a_compaction_summarized_are_described_in_its_capsule_with_where_to_see_them(tmp_path: Path) -> None:
    # the model's capsule names no cell: the grounded facts put them in
    summarizer = FakeSummarizer(answer=lambda _request: Capsule(goal="plot the 6 runs", next_steps=("compare runs",)))
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path, keepRecentTokens=50), summarizer)
    store.append(user_message("plot the 6 runs"))
    for n in range(6):
        call = ToolCall(f"call_{n}", "notebook_run", {"path": "runs.ipynb", "cell_ids": [f"run{n}"]})
        store.append(assistant_message("", [call]))
        store.append(tool_result(call.id, "notebook_run", f"ran 1 cell of runs.ipynb\n{text_of(200, n)}",
                                 images=[attachment(800, 600, f"run{n}")],
                                 cell_runs=cell_runs("runs.ipynb", [(f"run{n}", CellRun(n + 1, []))])))
        store.append(assistant_message(f"Run {n} converges after {n + 3} epochs."))
    store.append(user_message("ok, carry on"))
    assert asyncio.run(engine.compact(Trigger.USER)).outcome == "completed"
    (entry,) = capsules(store)
    items = entry.data["state"]["cellsRun"]
    assert items[0] == ("runs.ipynb cell run0: ran [1] ok; figure 800×600 seen (to see again: notebook_read cell run0 "
                        "include_images) — the model said: \"Run 0 converges after 3 epochs.\"")
    covered = [item.split(":", 1)[0] for item in items]  # the runs the capsule summarized (the tail keeps the rest)
    assert len(covered) >= 4 and covered == [f"runs.ipynb cell run{n}" for n in range(len(covered))]
    sent = "\n".join(str(m.get("content")) for m in engine.model_messages())
    assert f"notebook_read cell run{len(covered) - 1} include_images" in sent  # the capsule the model reads says it
