"""A capsule rated ``ok`` holds only facts that happened (issue 20, item 6).

With a real small model the capsule said: goal ``<%= JSON.stringify(user_obj) %>``, files
modified ``https://jsoncafe.github.io/greet.py`` (no file was modified), quality ``ok``. The rules:
files read and modified, verification commands with their status and active skills come from the
history (the deterministic extractor), never from the model; a claim the history does not support
is dropped and counted (the count only); a goal, or every next step, that is template text or
empty makes the quality ``partial``. The summarizer here is a fake that answers with hostile
capsules; the session, the extractor, the barrier, the views and the completion line are real.
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any, get_args

import pytest
from compaction_support import FakeSummarizer, Recorder, capsules, make_engine, small_config, text_of

from soba_notebook import views
from soba_notebook.compaction import Capsule, CompactionOutcome, SummaryRequest, Trigger
from soba_notebook.compaction.capsule import Verification
from soba_notebook.compaction.grounding import is_placeholder, ungrounded_claims
from soba_notebook.events import Event
from soba_notebook.flight import read_flight_records
from soba_notebook.memory.project import mirror_decision
from soba_notebook.notebook.display import CompactionSummary, TerminalBudgetDisplay
from soba_notebook.session import SessionStore, ToolCall, assistant_message, tool_result, user_message
from soba_notebook.session.payloads import Quality

GOAL = "add a greeting to greet.py and make the tests pass"
GARBAGE_GOAL = "<%= JSON.stringify(user_obj) %>"


# -- is_placeholder: a small pure rule, examples both ways -------------------------------------------
@pytest.mark.parametrize("text", [
    "", "   \n\t", GARBAGE_GOAL, "{{ goal }}", "{{goal}}", "{% block goal %}", "${GOAL}", "{goal}", "[GOAL]",
    "<goal>", "<your goal here>", "YOUR_GOAL_HERE", "Your goal here", "insert goal here", "N/A", "n/a", "NA",
    "TODO", "TBD", "None", "null", "undefined", "...", "—", "-", "[]", "{}", "(not stated)", "str", "Step 1",
    "Next steps", "Goal: {{ goal }}", "Next step: <%= step %>", "`{{ next_step }}`", "\"TODO\"",
])
def test_template_text_and_stand_ins_are_placeholders(text: str) -> None:
    assert is_placeholder(text)


@pytest.mark.parametrize("text", [
    GOAL, "Fix the {{name}} rendering in the Jinja templates", "Step 2: run pytest -q", "TODO: remove the debug print",
    "Set ${PATH} before running make", "Goal: ship the CSV importer", "Run the tests again", "none of the tests fail",
    "https://jsoncafe.github.io/greet.py", "Refactor <%= %> tags out of views.erb", "Write docs", "v2",
    "Add a `--goal` option", "x" * 300,
])
def test_text_that_says_anything_besides_template_syntax_is_not_a_placeholder(text: str) -> None:
    assert not is_placeholder(text)


def test_partial_sits_between_ok_and_degraded_where_qualities_are_ordered_and_is_accepted_where_checked() -> None:
    """The vocabulary is one literal; what matters is how it behaves: the analysis views order a
    quality column ok < partial < degraded (an unknown value is missing, never a new category), and
    a portable capsule's quality is checked against the same three words."""
    from soba_notebook.analysis._common import QUALITY_CATEGORIES, categorical
    from soba_notebook.errors import CapsuleFormatError
    from soba_notebook.memory.portable import PortableCapsule, export_text, new_capsule_id

    assert get_args(Quality) == ("ok", "partial", "degraded")
    column = categorical(["degraded", "ok", "great", "partial"], QUALITY_CATEGORIES)
    assert list(column.cat.categories) == ["ok", "partial", "degraded"]
    assert column.isna().tolist() == [False, False, True, False]
    capsule = Capsule(goal=GOAL)
    assert "partial" in export_text(PortableCapsule(new_capsule_id(), capsule, quality="partial"))
    with pytest.raises(CapsuleFormatError, match="quality 'great' is not one of ok, partial, degraded"):
        export_text(PortableCapsule(new_capsule_id(), capsule, quality="great"))


# -- the barrier, with a hostile model ---------------------------------------------------------------
def work_history(store: SessionStore, last_words: str = "The test still fails.") -> None:
    """A real span of work: greet.py read and edited, ``pytest -q`` failed, skill ``python`` active,
    the assistant's ``last_words``; then one exchange of about 100 tokens, kept verbatim."""
    store.append(user_message(GOAL))
    store.append(assistant_message("reading it", [ToolCall("r1", "read_file", {"path": "greet.py"}),
                                                   ToolCall("k1", "activate_skill", {"name": "python"})]))
    store.append(tool_result("r1", "read_file", "def greet():\n    pass\n" + text_of(1200)))
    store.append(tool_result("k1", "activate_skill", "skill python is active"))
    store.append(assistant_message("editing", [ToolCall("e1", "edit_file", {"path": "greet.py", "old": "pass",
                                                                             "new": "return 'hi'"})]))
    store.append(tool_result("e1", "edit_file", "edited greet.py"))
    store.append(assistant_message("testing", [ToolCall("s1", "shell", {"command": "pytest -q"})]))
    store.append(tool_result("s1", "shell", "F...\n1 failed, 3 passed in 0.12s\n" + text_of(400), exit_code=1))
    store.append(assistant_message(f"{last_words} " + text_of(300)))
    store.append(user_message("ok, carry on"))
    store.append(assistant_message("carrying on. " + text_of(100)))


def compact(tmp_path: Path, answer: Capsule, *, last_words: str = "The test still fails.",
            ) -> tuple[SessionStore, CompactionOutcome, dict[str, Any], Recorder]:
    """An explicit compaction of :func:`work_history` whose model answers ``answer``."""
    summarizer = FakeSummarizer(answer=lambda _request: answer)
    store, engine, rec = make_engine(tmp_path, small_config(tmp_path, keepRecentTokens=50), summarizer)
    work_history(store, last_words)
    outcome = asyncio.run(engine.compact(Trigger.USER))
    assert outcome.outcome == "completed", outcome.reason
    (entry,) = capsules(store)
    return store, outcome, dict(entry.data), rec


HOSTILE = Capsule(
    goal=GARBAGE_GOAL, done=("edited greet.py",), next_steps=("make pytest -q pass",),
    files_read=("greet.py", "secrets/plan.md"), files_modified=("https://jsoncafe.github.io/greet.py",),
    verification=(Verification("pytest -q", "passed"), Verification("npm test", "passed")),
    active_skills=("python", "kubernetes"))


def test_files_checks_and_skills_come_from_the_history_and_unsupported_claims_are_dropped_and_counted(
        tmp_path: Path) -> None:
    _, outcome, data, _ = compact(tmp_path, HOSTILE)
    state = data["state"]
    assert state["filesRead"] == ["greet.py"]
    assert state["filesModified"] == ["greet.py"], "the URL the model named was never modified"
    assert [(v["command"], v["status"]) for v in state["verification"]] == [("pytest -q", "failed")]
    assert state["activeSkills"] == ["python"]
    # secrets/plan.md, the URL, pytest "passed" (it failed), npm test (never ran), kubernetes
    assert data["ungroundedClaims"] == outcome.ungrounded_claims == 5
    assert "ungrounded: 5 model claims" in (data["note"] or "")


def test_the_flight_record_counts_the_dropped_claims_and_never_holds_their_text(tmp_path: Path) -> None:
    compact(tmp_path, HOSTILE)
    (record,) = [r for r in read_flight_records(tmp_path / "flight.jsonl") if r.get("kind") == "compaction"]
    assert record["ungrounded_claims"] == 5 and record["quality"] == "partial"
    flight_text = (tmp_path / "flight.jsonl").read_text(encoding="utf-8")
    assert "jsoncafe" not in flight_text and "kubernetes" not in flight_text and "user_obj" not in flight_text


def test_claims_the_history_supports_are_kept_and_not_counted_so_the_capsule_is_ok(tmp_path: Path) -> None:
    honest = Capsule(goal="greet from greet.py", next_steps=("fix the failing test",), files_read=("./greet.py",),
                     files_modified=("greet.py",), verification=(Verification("pytest -q", "failed"),),
                     active_skills=("python",))
    _, outcome, data, _ = compact(tmp_path, honest)
    assert (data["quality"], outcome.quality, data["ungroundedClaims"], data["note"]) == ("ok", "ok", 0, None)
    assert data["state"]["goal"] == "greet from greet.py"


def test_a_template_goal_makes_the_capsule_partial_and_the_goal_comes_from_the_history(tmp_path: Path) -> None:
    _, outcome, data, _ = compact(tmp_path, HOSTILE)
    assert data["quality"] == outcome.quality == "partial"
    assert data["state"]["goal"] == GOAL
    assert "user_obj" not in json.dumps(data["state"])
    assert "partial: the model's summary gave no usable goal" in (data["note"] or "")


def test_an_empty_goal_makes_the_capsule_partial(tmp_path: Path) -> None:
    _, _, data, _ = compact(tmp_path, Capsule(goal="  ", next_steps=("fix the failing test",)))
    assert data["quality"] == "partial" and data["state"]["goal"] == GOAL


def test_next_steps_that_are_all_template_text_make_the_capsule_partial_and_are_dropped(tmp_path: Path) -> None:
    answer = Capsule(goal="greet from greet.py", next_steps=("{{ next_step }}", "TODO", "[NEXT STEP]"),
                     blockers=("N/A",))
    _, _, data, _ = compact(tmp_path, answer)
    assert data["quality"] == "partial"
    assert data["state"]["nextSteps"] == [] and data["state"]["blockers"] == []
    assert "no usable next steps" in (data["note"] or "")


def test_template_text_among_real_next_steps_is_dropped_and_makes_it_partial(tmp_path: Path) -> None:
    answer = Capsule(goal="greet from greet.py", next_steps=("{{ next_step }}", "fix the failing test"))
    _, _, data, _ = compact(tmp_path, answer)
    assert data["quality"] == "partial" and data["state"]["nextSteps"] == ["fix the failing test"]
    assert "junk dropped" in (data["note"] or "") and "nextSteps 1" in (data["note"] or "")


def test_no_next_steps_when_the_history_names_some_is_partial_and_they_are_filled_from_it(tmp_path: Path) -> None:
    _, _, data, _ = compact(tmp_path, Capsule(goal="greet from greet.py"),
                            last_words="The test still fails.\nNext: fix the assertion in test_greet.py\n")
    assert data["quality"] == "partial"
    assert data["state"]["nextSteps"] == ["fix the assertion in test_greet.py"]


def test_no_next_steps_when_the_history_names_none_either_is_ok(tmp_path: Path) -> None:
    """Finished work has no next step: an empty list the history agrees with is not a defect."""
    _, _, data, _ = compact(tmp_path, Capsule(goal="greet from greet.py"), last_words="All done.")
    assert data["quality"] == "ok" and data["state"]["nextSteps"] == []


def test_a_claim_the_previous_capsule_holds_is_grounded_by_it(tmp_path: Path) -> None:
    """Second compaction: the model repeats the rolled facts (greet.py, pytest -q); they are
    supported by the previous capsule, so nothing is counted."""
    def answer(request: SummaryRequest) -> Capsule:
        previous = request.previous or Capsule()
        return Capsule(goal="greet from greet.py", next_steps=("fix the failing test",),
                       files_modified=previous.files_modified, verification=previous.verification)

    summarizer = FakeSummarizer(answer=answer)
    store, engine, _ = make_engine(tmp_path, small_config(tmp_path, keepRecentTokens=50), summarizer)
    work_history(store)
    assert asyncio.run(engine.compact(Trigger.USER)).outcome == "completed"
    store.append(user_message("now the docs"))
    store.append(assistant_message("reading", [ToolCall("r2", "read_file", {"path": "README.md"})]))
    store.append(tool_result("r2", "read_file", text_of(1500)))
    store.append(assistant_message("read it"))
    store.append(user_message("thanks"))
    store.append(assistant_message("welcome. " + text_of(100)))
    second = asyncio.run(engine.compact(Trigger.USER))
    assert second.outcome == "completed" and second.ungrounded_claims == 0 and second.quality == "ok"
    state = capsules(store)[-1].data["state"]
    assert state["filesModified"] == ["greet.py"] and state["filesRead"] == ["greet.py", "README.md"]


def test_ungrounded_claims_compares_paths_and_commands_as_the_history_writes_them() -> None:
    facts = Capsule(files_read=("src/a.py",), files_modified=("src/b.py",),
                    verification=(Verification("pytest -q", "failed"),), active_skills=("python",))
    model = Capsule(files_read=("./src/a.py", "src/b.py", ""), files_modified=("src/./b.py", "src/a.py"),
                    verification=(Verification("`pytest  -q`", "unknown"), Verification("pytest -q", "passed")),
                    active_skills=("python", "rust"))
    # a.py was only read (not modified); pytest did not pass; rust is not active
    assert ungrounded_claims(model, facts) == 3


# -- what the user sees -----------------------------------------------------------------------------
def test_views_capsules_show_the_partial_quality_and_the_dropped_claims(tmp_path: Path) -> None:
    store, _, _, _ = compact(tmp_path, HOSTILE)
    df = views.capsules(SessionStore.open(store.file))
    assert list(df["quality"].astype(str)) == ["partial"]
    assert list(df["ungrounded_claims"]) == [5] and str(df["ungrounded_claims"].dtype) == "Int64"


def test_the_completion_line_says_partial_and_the_terminal_marks_it(tmp_path: Path) -> None:
    _, _, _, rec = compact(tmp_path, HOSTILE)
    (end,) = rec.of("compaction_end")
    summary = CompactionSummary.from_event(end.data)
    assert summary.status == "partial" and summary.chip.endswith("(partial)")
    assert "partial (the model's summary lacked a usable goal or next steps, or held junk)" in summary.text
    out = io.StringIO()
    TerminalBudgetDisplay(out, ansi=False).handle(Event("compaction_end", dict(end.data)))
    assert out.getvalue().strip().startswith("⚠ Context compaction") and "partial (" in out.getvalue()


def test_an_ok_capsule_has_no_quality_note_in_the_completion_line(tmp_path: Path) -> None:
    honest = Capsule(goal="greet from greet.py", next_steps=("fix the failing test",))
    _, _, _, rec = compact(tmp_path, honest)
    summary = CompactionSummary.from_event(rec.of("compaction_end")[0].data)
    assert summary.status == "completed" and "partial" not in summary.text and "degraded" not in summary.text


def test_a_partial_capsule_is_never_mirrored_into_project_memory() -> None:
    allowed, why = mirror_decision("user", "partial", [], explicit=True, remember=True, config_switch=True)
    assert not allowed and "partial" in why
    assert mirror_decision("user", "ok", [], explicit=True, remember=True, config_switch=True)[0]
