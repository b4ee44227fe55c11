"""Continuity across compactions: what each capsule still carries of the history it replaced.

Run from the repository root (PYTHONPATH=.: its package is the one imported):
    PYTHONPATH=. .venv/bin/python bench/continuity.py [FOLDER_OR_FILE ...] [--windows 16000/2000/3000,24000/4000/6000]
        [--limit N] [--summarizer offline|inventive|both] [--per-transcript] [--no-pi]

Every transcript found (pi sessions, mini-swe-agent and SWE-agent trajectories, SOBA sessions;
default: ../shared/data/transcripts beside the checkout) is replayed through the real
compaction engine (:func:`~soba_notebook.compaction.simulate.replay`) at each window (context
window / max output / keep recent tokens), small enough that a long transcript compacts three
times or more in a row. Each capsule is then measured against the **full history it replaced**:
every source entry from the start up to the capsule's last covered entry (``covers.last_id``),
so what an earlier capsule dropped while rolling counts as lost. The truth is the deterministic
extractor run on that whole prefix (:func:`~soba_notebook.compaction.extract.extract_facts`):

* **files modified**: share of the prefix's modified files the capsule lists;
* **checks**: share of the prefix's verification commands the capsule lists *with their latest status*;
* **open errors**: share of checks whose latest status is ``failed`` that the capsule still shows
  failing (in its checks or a blocker naming the command);
* **constraints**: share of the user's messages after the first (clipped as the extractor clips a
  correction) that a capsule constraint quotes (normalised text, :func:`~soba_notebook.compaction.claims.normalise`);
* **latest request**: the latest user request at the compaction is still there verbatim: the
  capsule's ``latestRequest`` equals the prefix's, or the retained tail shows a newer one (the
  capsule then leaves it out, docs/CAPSULE_FORMAT.md);
* **ungrounded, dropped**: what the engine's grounding dropped from the summarizer's capsule, per
  field (the capsule entry's ``ungroundedByField``);
* **ungrounded, held**: claims the stored capsule still holds that the prefix does not support:
  goal and constraints no user message supports (:func:`~soba_notebook.compaction.claims.user_support`),
  files and checks the prefix's facts do not support, decisions/blockers/next steps naming what the
  prefix never shows; :func:`held_unsupported` lists them per field;
* **thrown away**: summaries generated and then not used (flight records: ``generated`` and an
  outcome other than ``completed``, or ``summary_used`` false: the local deterministic capsule was
  appended instead), their count, estimated tokens (input + output) and time.

Summarizers: ``offline`` is the engine without a model (the deterministic capsule); ``inventive``
is a NEGATIVE CONTROL, not a product: the deterministic capsule plus an invented user constraint,
an invented modified file and a next step naming an invented test file, so the dropped-claims
columns demonstrably catch invention. The real small model on the two local servers is the
``realmodel`` test tier (tests/test_continuity_realmodel.py), which uses :func:`measure_replay` too.

**pi's rules** (its file lists come from its tool calls): pi records a compaction's ``modifiedFiles``
from the paths of its ``write`` and ``edit`` tool calls over the summarized messages, rolled from
compaction to compaction, and its summary text is written by a model. When bench/install-pi.sh has
installed pi's code, bench/pi_continuity.py replays every transcript whose agent used pi's file
tools through pi's own cut point and file lists (one row per window, its model-text columns "not
reproduced"); ``--no-pi`` leaves it out, and without pi the output says why. The last column,
:func:`pi_modified_files`, applies pi's rule to SOBA's own prefixes (a re-implementation of the
measure, which needs no node): on pi's prefixes the two agree.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from soba_notebook.analysis._common import snapshot
from soba_notebook.analysis.simulation import simulation_config
from soba_notebook.compaction.capsule import Capsule
from soba_notebook.compaction.claims import haystack, normalise, unsupported_mentions, user_support
from soba_notebook.compaction.extract import deterministic_capsule, extract_facts, user_messages
from soba_notebook.compaction.grounding import history_of, ungrounded_by_field
from soba_notebook.compaction.latest_request import latest_request
from soba_notebook.compaction.shell_parse import normalize_path
from soba_notebook.compaction.simulate import SimulationResult, replay
from soba_notebook.compaction.summarize import ProgressFn, Summarizer, SummaryRequest
from soba_notebook.flight import FlightRecorder, read_flight_records
from soba_notebook.session.entries import Entry
from soba_notebook.tokens import TokenCounter

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "transcripts"
WINDOWS = ((16000, 2000, 3000), (24000, 4000, 6000))  # context window, max output, keep recent tokens
_SUFFIXES = (".jsonl", ".traj", ".traj.json")
#: the user's message as the extractor keeps a correction (compaction/extract.py CORRECTION_CHARS)
_QUOTE_CHARS = 200
#: pi's tools whose ``path`` argument it lists as modified
PI_MODIFY_TOOLS = frozenset({"write", "edit"})

INVENTED_CONSTRAINT = "User: never run the database migrations on the staging cluster"
INVENTED_FILE = "src/quantum_flux_capacitor.py"
INVENTED_STEP = "Next: run pytest tests/test_flux_capacitor_regression.py"


class InventiveSummarizer:
    """NEGATIVE CONTROL: the deterministic capsule plus three inventions, as a careless model would
    write them. Every replay that uses it must show them dropped (``ungroundedByField``)."""

    async def summarize(self, request: SummaryRequest, progress: ProgressFn) -> Capsule:
        base = deterministic_capsule(request.entries, request.previous)
        progress(1.0)
        return replace(base, constraints=(*base.constraints, INVENTED_CONSTRAINT),
                       files_modified=(*base.files_modified, INVENTED_FILE),
                       next_steps=(*base.next_steps, INVENTED_STEP))


@dataclass(frozen=True, slots=True)
class Recall:
    """Found / expected for one measure (``expected`` 0: nothing to recall, left out of means)."""

    found: int = 0
    expected: int = 0

    @property
    def share(self) -> float | None:
        return self.found / self.expected if self.expected else None


@dataclass(frozen=True, slots=True)
class CapsuleScore:
    """One capsule measured against the full history it replaced."""

    prefix_entries: int
    quality: str
    files_modified: Recall
    checks: Recall
    open_errors: Recall
    constraints: Recall
    latest_request: bool | None  # None: the prefix has no user request
    dropped: dict[str, int]
    held: dict[str, int]
    pi_files_modified: Recall
    pi_unsupported_files: int


@dataclass(frozen=True, slots=True)
class ReplayScore:
    """One transcript at one window with one summarizer."""

    name: str
    window: tuple[int, int, int]
    summarizer: str
    inferences: int
    capsules: tuple[CapsuleScore, ...]
    thrown_away: int = 0
    thrown_away_tokens: int = 0
    thrown_away_seconds: float = 0.0
    replay_seconds: float = 0.0
    flight: tuple[dict[str, object], ...] = field(default=())
    #: False for pi's rows: their checks, errors, constraints, request and summaries are model text,
    #: not reproduced (bench/pi_continuity.py)
    model_text: bool = True


def _paths(items: Iterable[str]) -> set[str]:
    return {normalize_path(p) or p.strip() for p in items if p.strip()}


def _command(text: str) -> str:
    return " ".join(text.strip().strip("`").split())


def pi_modified_files(entries: Sequence[Entry]) -> tuple[str, ...]:
    """pi's rule for a compaction's modified files: the ``path`` of every ``write`` or ``edit``
    tool call in ``entries`` (whatever its result; pi reads the calls, not the results)."""
    found: dict[str, None] = {}
    for e in entries:
        if e.role != "assistant":
            continue
        for call in e.tool_calls:
            path = call.arguments.get("path") if call.name in PI_MODIFY_TOOLS else None
            if isinstance(path, str) and path.strip():
                found[path] = None
    return tuple(found)


def quoted_constraints(prefix: Sequence[Entry]) -> tuple[str, ...]:
    """The user's messages after the first, as the normalised text a quote must hold (its first
    :data:`_QUOTE_CHARS` characters: the extractor clips a correction there)."""
    out = []
    for message in user_messages(prefix)[1:]:
        said = normalise(message[:_QUOTE_CHARS])
        said = " ".join(said.split()[:-1]) if len(message) > _QUOTE_CHARS else said  # the clip cuts a word
        if said:
            out.append(said)
    return tuple(dict.fromkeys(out))


def held_unsupported(capsule: Capsule, prefix: Sequence[Entry]) -> dict[str, int]:
    """Per field (JSON key), the claims ``capsule`` holds that ``prefix`` does not support: files,
    checks and skills beyond its facts (:func:`~soba_notebook.compaction.grounding.ungrounded_by_field`),
    a goal or constraint no user message supports, a decision, blocker or next step naming a file,
    command, cell or error the prefix never shows. Merged items (a bounded list's oldest) are
    checked as what they are: quotes of several messages, so each part after ``User:`` is checked."""
    facts = extract_facts(prefix)
    counts: Counter[str] = Counter(ungrounded_by_field(capsule, facts))
    history = history_of(prefix)
    if capsule.goal.strip() and not user_support(capsule.goal, history.users):
        counts["goal"] += 1
    for constraint in capsule.constraints:
        parts = [p for p in constraint.split("User: ") if p.strip(" ;…")] if "merged to bound" in constraint \
            else [constraint]
        claims = [p for p in parts[1:] or parts if normalise(p)]  # punctuation alone claims nothing
        if any(not user_support(p.strip(" ;"), history.users) for p in claims):
            counts["constraints"] += 1
    text = haystack([history.text])
    for key, items in (("decisions", [f"{d.what} {d.why}" for d in capsule.decisions]),
                       ("blockers", capsule.blockers), ("nextSteps", capsule.next_steps)):
        counts[key] += sum(bool(unsupported_mentions(i, text)) for i in items)
    return {k: n for k, n in counts.items() if n}


def score_capsule(capsule: Capsule, prefix: Sequence[Entry], *, quality: str = "ok",
                  dropped: dict[str, int] | None = None, held: bool = True, tail: Sequence[Entry] = ()) -> CapsuleScore:
    """``capsule`` measured against ``prefix``, the whole history it replaced. ``tail``: the entries
    kept verbatim after it, up to the compaction; the latest user request counts as carried when
    the capsule quotes it or the tail shows it (the capsule then leaves it out: docs/CAPSULE_FORMAT.md)."""
    facts = extract_facts(prefix)
    truth_files = _paths(facts.files_modified)
    kept_files = _paths(capsule.files_modified)
    checks = {_command(v.command): v.status for v in capsule.verification}
    truth_checks = [(_command(v.command), v.status) for v in facts.verification]
    failing = [c for c, s in truth_checks if s == "failed"]
    blockers = " ".join(capsule.blockers)
    quoted = normalise(" ".join(capsule.constraints))
    wanted = quoted_constraints(prefix)
    users = user_messages(prefix)
    in_tail = bool(user_messages(tail))
    pi_files = _paths(pi_modified_files(prefix))
    return CapsuleScore(
        prefix_entries=len(prefix), quality=quality,
        files_modified=Recall(len(truth_files & kept_files), len(truth_files)),
        checks=Recall(sum(checks.get(c) == s for c, s in truth_checks), len(truth_checks)),
        open_errors=Recall(sum(checks.get(c) == "failed" or c in blockers for c in failing), len(failing)),
        constraints=Recall(sum(w in quoted for w in wanted), len(wanted)),
        latest_request=True if in_tail else (capsule.latest_request == latest_request(users[-1])) if users else None,
        dropped=dict(dropped or {}), held=held_unsupported(capsule, prefix) if held else {},
        pi_files_modified=Recall(len(truth_files & pi_files), len(truth_files)),
        pi_unsupported_files=len(pi_files - truth_files))


def _prefix_end(source: Sequence[Entry], capsule: Capsule, first_kept: object) -> int:
    ids = {e.id: i for i, e in enumerate(source) if e.id is not None}
    if capsule.covers.last_id in ids:
        return ids[capsule.covers.last_id] + 1
    if isinstance(first_kept, str) and first_kept in ids:
        return ids[first_kept]
    raise ValueError(f"capsule covers {capsule.covers.last_id!r}, an entry the source does not hold")


def measure_replay(source: Sequence[Entry], result: SimulationResult,
                   flight: Sequence[dict[str, object]] = ()) -> tuple[tuple[CapsuleScore, ...], int, int, float]:
    """Each capsule of ``result`` scored against its prefix of ``source``, and the summaries thrown
    away according to the ``flight`` records: (scores, count, tokens, seconds)."""
    scores = []
    ids = {e.id: i for i, e in enumerate(source) if e.id is not None}
    for capsule, entry in zip(result.capsules, result.capsule_entries, strict=True):
        end = _prefix_end(source, capsule, entry.data.get("firstKeptEntryId"))
        moment = ids.get(entry.parent_id, end - 1) if entry.parent_id is not None else end - 1  # the leaf then
        by_field = entry.data.get("ungroundedByField") or {}
        scores.append(score_capsule(capsule, source[:end], quality=str(entry.data.get("quality")),
                                    dropped={str(k): int(v) for k, v in dict(by_field).items()},
                                    tail=source[end:moment + 1]))
    return (tuple(scores), *thrown_away(flight))


def thrown_away(flight: Sequence[dict[str, object]]) -> tuple[int, int, float]:
    """The model summaries generated and then not used, per the ``compaction`` flight records: nothing
    appended, or the local deterministic capsule appended instead (``summary_used`` false). Their
    count, estimated tokens (request input + summary output) and time (the compactions' durations, s)."""
    wasted = [r for r in flight if r.get("kind") == "compaction" and r.get("generated")
              and (r.get("outcome") != "completed" or r.get("summary_used") is False)]
    tokens = sum(int(str(r.get("summary_input_tokens") or 0)) + int(str(r.get("summary_output_tokens") or 0))
                 for r in wasted)
    seconds = sum(int(str(r.get("duration_ms") or 0)) for r in wasted) / 1000
    return len(wasted), tokens, seconds


def run_one(path: Path, window: tuple[int, int, int], summarizer: Summarizer | None, label: str,
            name: str | None = None, *, timeout_ms: int | None = None) -> ReplayScore:
    """Replay ``path`` at ``window`` with ``summarizer`` (None: the offline engine) and score it.
    ``timeout_ms``: the compaction's ``timeoutMs`` (default 15,000), past which a model's summary is
    abandoned for the local capsule (a small model on a loaded machine needs longer)."""
    snap = snapshot(path)
    source = list(snap.path)
    context, output, keep = window
    config = simulation_config({"contextWindow": context, "maxOutputTokens": output, "keepRecentTokens": keep,
                                **({"timeoutMs": timeout_ms} if timeout_ms is not None else {})})
    with tempfile.TemporaryDirectory() as tmp:
        recorder = FlightRecorder(Path(tmp) / "flight.jsonl")
        start = time.perf_counter()
        result = replay(source, config, counter=TokenCounter(snap.model()), summarizer=summarizer, flight=recorder)
        took = time.perf_counter() - start
        flight = read_flight_records(recorder.path)
    scores, wasted, tokens, seconds = measure_replay(source, result, flight)
    return ReplayScore(name or path.name, window, label, len(result.inferences), scores, wasted, tokens, seconds,
                       took, tuple(flight))


def transcripts(roots: Iterable[Path]) -> list[Path]:
    """Every transcript under ``roots`` (a file is taken as it is), sorted, without duplicates by content."""
    found: dict[tuple[str, int], Path] = {}
    for root in roots:
        if not root.exists():
            raise SystemExit(f"continuity: {root} does not exist")
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.name.endswith(_SUFFIXES))
        for p in files:
            found.setdefault((p.name, p.stat().st_size), p)  # the same file linked in two folders
    return sorted(found.values())


# -- the table ---------------------------------------------------------------------------------

def _mean(values: Iterable[float | None]) -> str:
    kept = [v for v in values if v is not None]
    return f"{100 * statistics.fmean(kept):.0f}%" if kept else "–"


def _pooled(recalls: Iterable[Recall]) -> str:
    items = list(recalls)
    expected = sum(r.expected for r in items)
    return f"{100 * sum(r.found for r in items) / expected:.0f}% ({expected:,})" if expected else "–"


def _fields(counts: Iterable[dict[str, int]]) -> str:
    total: Counter[str] = Counter()
    for c in counts:
        total.update(c)
    return ", ".join(f"{k} {n}" for k, n in sorted(total.items())) or "0"


NOT_REPRODUCED = "not reproduced (model text)"


def _model_cells(group: Sequence[ReplayScore], caps: Sequence[CapsuleScore]) -> list[str]:
    """The cells that measure a summary's text (checks, open errors, constraints, latest request)
    and the summaries thrown away: ``not reproduced`` for pi's rows, which call no model."""
    if not all(r.model_text for r in group):
        return [NOT_REPRODUCED] * 4 + ["not reproduced (model calls)"]
    latest = [c.latest_request for c in caps if c.latest_request is not None]
    return [_pooled(c.checks for c in caps), _pooled(c.open_errors for c in caps),
            _pooled(c.constraints for c in caps),
            f"{100 * sum(latest) / len(latest):.0f}% ({len(latest):,})" if latest else "–",
            f"{sum(r.thrown_away for r in group)}, {sum(r.thrown_away_tokens for r in group):,}, "
            f"{sum(r.thrown_away_seconds for r in group):.1f}"]


def table(rows: Sequence[ReplayScore]) -> str:
    """Markdown: one line per (summarizer, window) over all transcripts, capsules pooled."""
    head = ("| summarizer | window/out/keep | transcripts (≥3 compactions) | capsules | files modified | "
            "checks + status | open errors | constraints quoted | latest request | ungrounded dropped / capsule "
            "| ungrounded held / capsule | thrown away (n, tokens, s) | pi rule re-implemented: files modified "
            "(unsupported) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    groups: dict[tuple[str, tuple[int, int, int]], list[ReplayScore]] = {}
    for r in rows:
        groups.setdefault((r.summarizer, r.window), []).append(r)
    for (label, window), group in groups.items():
        caps = [c for r in group for c in r.capsules]
        n = max(len(caps), 1)
        checks, errors, constraints, latest, thrown = _model_cells(group, caps)
        dropped = sum(sum(c.dropped.values()) for c in caps)
        held = sum(sum(c.held.values()) for c in caps)
        lines.append(
            f"| {label} | {window[0]:,}/{window[1]:,}/{window[2]:,} | {len(group)} "
            f"({sum(len(r.capsules) >= 3 for r in group)}) | {len(caps):,} "
            f"| {_pooled(c.files_modified for c in caps)} | {checks} | {errors} | {constraints} | {latest} "
            f"| {dropped / n:.2f} ({_fields(c.dropped for c in caps)}) "
            f"| {held / n:.2f} ({_fields(c.held for c in caps)}) | {thrown} "
            f"| {_pooled(c.pi_files_modified for c in caps)} ({sum(c.pi_unsupported_files for c in caps)}) |")
    return "\n".join(lines)


def per_transcript(rows: Sequence[ReplayScore]) -> str:
    head = ("| transcript | summarizer | window | capsules | files | checks | open errors | constraints | latest "
            "| held | pi files |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        c = r.capsules
        checks, errors, constraints, latest, _ = _model_cells([r], c)
        if r.model_text:
            latest = _mean(float(x.latest_request) if x.latest_request is not None else None for x in c)
        lines.append(f"| {r.name} | {r.summarizer} | {r.window[0]:,} | {len(c)} "
                     f"| {_pooled(x.files_modified for x in c)} | {checks} | {errors} | {constraints} | {latest} "
                     f"| {_fields(x.held for x in c)} | {_pooled(x.pi_files_modified for x in c)} |")
    return "\n".join(lines)


def _window(text: str) -> tuple[int, int, int]:
    try:
        context, output, keep = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a window is CONTEXT/OUTPUT/KEEP (e.g. 16000/2000/3000), not {text!r}") from None
    return context, output, keep


def _pi_rows(found: Sequence[Path], windows: Sequence[tuple[int, int, int]], name: Callable[[Path], str],
             rows: list[ReplayScore]) -> str:
    """Append pi's rows (bench/pi_continuity.py) to ``rows``; what was and was not reproduced."""
    import pi_continuity  # beside this file; it imports this module

    reason = pi_continuity.pi_skip_reason()
    if reason is not None:
        return f"pi rules: not run: {reason}"
    skipped: set[Path] = set()
    for window in windows:
        for path in found:
            row = pi_continuity.pi_row(path, window, name(path))
            if row is None:
                skipped.add(path)
                continue
            rows.append(row)
            print(f"{row.summarizer} {window[0]:>6} {len(row.capsules):>3} compactions {row.name}", file=sys.stderr,
                  flush=True)
    return (f"pi rules: run on {len(found) - len(skipped)} of {len(found)} transcripts; the other {len(skipped)} "
            f"have no pi read/write/edit call with a path (their agents used bash, str_replace_editor …), so pi's "
            f"file lists would be empty by construction: not reproduced there")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("folders", nargs="*", type=Path, help=f"transcript folders or files (default: {SHARED})")
    parser.add_argument("--windows", type=lambda s: [_window(w) for w in s.split(",")],
                        default=list(WINDOWS), help="CONTEXT/OUTPUT/KEEP,... (default: "
                        "16000/2000/3000,24000/4000/6000)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many transcripts (largest first)")
    parser.add_argument("--summarizer", choices=("offline", "inventive", "both"), default="both")
    parser.add_argument("--per-transcript", action="store_true", help="also print one line per replay")
    parser.add_argument("--no-pi", action="store_true", help="leave out pi's rules (bench/pi_continuity.py)")
    args = parser.parse_args(argv)
    found = transcripts(args.folders or [SHARED])
    if args.limit is not None:
        found = sorted(found, key=lambda p: -p.stat().st_size)[:args.limit]
    labels = ["offline", "inventive"] if args.summarizer == "both" else [args.summarizer]
    rows = []

    def name(path: Path) -> str:
        return os.path.relpath(path, args.folders[0] if len(args.folders) == 1 and args.folders[0].is_dir()
                               else path.parent)

    for label in labels:
        for window in args.windows:
            for path in found:
                summarizer = InventiveSummarizer() if label == "inventive" else None
                row = run_one(path, window, summarizer, label, name=name(path))
                rows.append(row)
                print(f"{label} {window[0]:>6} {len(row.capsules):>3} capsules {row.replay_seconds:5.1f}s {row.name}",
                      file=sys.stderr, flush=True)
    pi_note = None if args.no_pi else _pi_rows(found, args.windows, name, rows)
    print(table(rows))
    if pi_note:
        print(f"\n{pi_note}")
    if args.per_transcript:
        print()
        print(per_transcript(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
