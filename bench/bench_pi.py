"""Optional: SOBA against pi's own session and compaction code, on the same pi session files.

Run: bash bench/install-pi.sh && .venv/bin/python bench/bench_pi.py [--repeat 5] [--clock process|wall]

pi is the coding agent whose session files ``soba_notebook.importers`` reads
(``@mariozechner/pi-coding-agent`` on npm, version pinned in bench/install-pi.sh). The pi-mono
session in ../shared/data/transcripts is replicated 1x, 4x and 16x into pi's own format (one
chain of entries linked by id/parentId); bench/pi_compare.mjs times pi's exported code on those
files under node, and this script times SOBA's equivalents on the same files imported once:

* open: pi ``SessionManager.open`` | SOBA ``SessionStore.open``;
* model input of a just-opened session: pi ``buildSessionContext`` | SOBA ``build_context`` on
  the path, and the engine's incremental builder (a fresh ``CompactionEngine.model_messages()``);
* prepare a compaction: pi ``prepareCompaction`` (branch, tokensBefore, cut point, messages to
  summarize, file operations) | SOBA ``measure()`` + ``plan()`` (budget check, cut point, plan),
  with a fresh token counter (every entry counted with tiktoken: the first budget check of a
  session, which a live session pays one entry at a time as it appends) and again with the
  exact counts held (kept with the model input, as before every later compaction);
* the cut point alone: pi ``findCutPoint`` | SOBA ``tail_cut_point`` over the counts and
  tool-call index the model input keeps (what ``plan()`` runs), and the whole-context
  ``find_cut_point`` it replaced (kept as the reference).

Token counting differs, and the figures say so: pi estimates chars/4 per message (its
tokensBefore uses the last reply's reported usage plus that estimate); SOBA counts with tiktoken
(o200k_base for gpt-4o), caching the count per entry id, and its budget check also starts from
the last reported usage. Per request pi keeps its agent's message list in memory and builds the
context only on resume, compaction and tree moves; SOBA's next-request figure has no pi twin.

Without node, or without the package installed (bench/install-pi.sh has not run), it prints
``skipped: <reason>`` and exits 0. Nothing is downloaded at run time. Every figure is the best
of --repeat rounds; each round runs pi (one node process, one untimed warm-up pass for the JIT)
then SOBA, over every size, so load from other jobs on the machine hits both sides alike. By
default every figure is process time (Python ``time.process_time()``, node ``process.cpuUsage()``,
user + system), so the other jobs of a loaded machine count on neither side; ``--clock wall``
times wall clock instead.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from soba_notebook.compaction import CompactionEngine, find_cut_point
from soba_notebook.compaction.tail_cut import tail_cut_point
from soba_notebook.compaction.triggers import Trigger
from soba_notebook.config import SobaConfig
from soba_notebook.importers import import_transcript
from soba_notebook.session import SessionStore, user_message
from soba_notebook.session.context import build_context
from soba_notebook.tokens import TokenCounter

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "transcripts"
PI = SHARED / "pi-mono" / "large-session.jsonl"
PI_PACKAGE = "@mariozechner/pi-coding-agent"
PI_VERSION = "0.73.1"  # the version bench/install-pi.sh pins
PI_SESSION_VERSION = 3  # pi's CURRENT_SESSION_VERSION: entries carry id/parentId
#: where bench/install-pi.sh installed pi (its --prefix); the same variable moves both
PACKAGE_DIR_ENV = "SOBA_PI_BENCH_DIR"
COMPARE_JS = Path(__file__).resolve().parent / "pi_compare.mjs"
SIZES = (1, 4, 16)
#: fields of pi entries that name another entry by id
_ID_REFS = ("firstKeptEntryId", "targetId", "fromId")


def package_dir() -> Path:
    return Path(os.environ.get(PACKAGE_DIR_ENV) or REPO / "build" / "pi-bench")


def skip_reason(pkg_dir: Path, node: str | None, source: Path = PI) -> str | None:
    """Why this bench cannot run here, or None when it can."""
    install = "run `bash bench/install-pi.sh` (it needs npm and the npm registry, at install time only)"
    if node is None:
        return f"node is not on PATH; install Node.js >= 20, then {install}"
    manifest = pkg_dir.joinpath("node_modules", *PI_PACKAGE.split("/"), "package.json")
    if not manifest.is_file():
        return f"{PI_PACKAGE} is not installed in {pkg_dir}: {install}"
    found = json.loads(manifest.read_text(encoding="utf-8")).get("version")
    if found != PI_VERSION:
        return f"{PI_PACKAGE} {found} is installed in {pkg_dir}, this bench pins {PI_VERSION}: {install}"
    if not source.is_file():
        return f"the pi-mono session {source} is absent (../shared/data/transcripts beside the repository)"
    return None


# -- replication into pi's own format ----------------------------------------------------------------
def replicate_pi(source: Path, dest: Path, copies: int) -> Path:
    """Write ``copies`` copies of pi session ``source`` to ``dest`` as ONE chain, in pi's format.

    The header line is kept (its version raised to pi's current one, since every entry gets an
    id). Each copy's ids are made distinct; a copy's root entry (or, for a version-1 file without
    ids, its first entry) gets the previous copy's last entry as parent, so the leaf of the file
    is the leaf of one path through all copies. References to other entries (a compaction's
    first kept entry, a label's target) are renamed with their copy.
    """
    lines = [line for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    header = json.loads(lines[0])
    if header.get("type") != "session":
        raise ValueError(f"{source}: the first line is not a pi session header")
    entries = [json.loads(line) for line in lines[1:]]
    old_version = header.get("version") or 1
    header["version"] = max(old_version, PI_SESSION_VERSION)
    out = [json.dumps(header, ensure_ascii=False)]
    previous_last: str | None = None
    for copy in range(copies):
        if old_version < 2:  # version 1: a list in file order, no ids
            ids = [f"c{copy}e{i}" for i in range(len(entries))]
            parents = [previous_last, *ids[:-1]]
        else:
            ids = [f"c{copy}-{e['id']}" for e in entries]
            parents = [f"c{copy}-{e['parentId']}" if e.get("parentId") else previous_last for e in entries]
        rename = dict(zip((e.get("id") for e in entries), ids, strict=True)) if old_version >= 2 else {}
        for index, (entry, new_id, parent) in enumerate(zip(entries, ids, parents, strict=True)):
            written = {**entry, "id": new_id, "parentId": parent}
            for key in _ID_REFS:
                if isinstance(written.get(key), str) and written[key] in rename:
                    written[key] = rename[written[key]]
            kept = written.pop("firstKeptEntryIndex", None)
            if isinstance(kept, int) and 1 <= kept <= len(entries):  # v1: an index into the file's lines
                written["firstKeptEntryId"] = ids[kept - 1]
            if written.get("type") == "message" and written["message"].get("role") == "hookMessage":
                written["message"] = {**written["message"], "role": "custom"}  # pi's v3 name for it
            out.append(json.dumps(written, ensure_ascii=False))
            if index == len(entries) - 1:
                previous_last = new_id
    dest.write_text("\n".join(out) + "\n", encoding="utf-8")
    return dest


# -- the two sides ------------------------------------------------------------------------------------
def run_pi(node: str, pkg_dir: Path, files: Sequence[Path], clock_name: str = "process") -> dict[str, Any]:
    """One node process: an untimed warm-up pass, then one timed pass over ``files``."""
    done = subprocess.run([node, str(COMPARE_JS), "--pkg", str(pkg_dir), "--repeat", "1", "--warmup", "1",
                           "--clock", clock_name, *map(str, files)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench/pi_compare.mjs failed ({done.returncode}): {done.stderr.strip()}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


#: what clock() reads: process time (the default) or wall clock (--clock wall)
TIMER: Callable[[], float] = time.process_time


def clock(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = TIMER()
    value = fn()
    return (TIMER() - start) * 1e3, value


def run_soba(path: Path) -> tuple[dict[str, float], dict[str, Any]]:
    """One timed pass of SOBA's equivalents on an imported session (ms, and what they found)."""
    config = SobaConfig()
    ms: dict[str, float] = {}
    ms["open"], store = clock(lambda: SessionStore.open(path))
    ms["context"], _ = clock(lambda: build_context(store.path()))
    engine = CompactionEngine(store, config, TokenCounter("gpt-4o"))
    ms["engine"], request = clock(engine.model_messages)
    store.append(user_message("one more question"))
    ms["next"], _ = clock(engine.model_messages)
    cold = CompactionEngine(store, config, TokenCounter("gpt-4o"))  # nothing counted yet
    ms["prepare_cold"], plan = clock(lambda: cold.plan(Trigger.USER, cold.measure()))
    ms["prepare_warm"], _ = clock(lambda: cold.plan(Trigger.USER, cold.measure()))
    inputs = cold.inputs
    entries, cum, index = inputs.context_entries(), inputs.cumulative_tokens(), inputs.tool_index
    tokens = [cum[i + 1] - cum[i] for i in range(len(entries))]
    keep = config.compaction.keep_recent_tokens
    ms["cut"], cut = clock(lambda: tail_cut_point(entries, cum, index, keep))
    ms["cut_whole"], whole = clock(lambda: find_cut_point(entries, tokens, keep))
    if whole != cut:
        raise SystemExit(f"tail_cut_point {cut} != find_cut_point {whole}: the two cut points disagree")
    facts = {"path": len(store.path_ids()), "messages": len(request), "context": len(entries), "cut": cut,
             "tokens": sum(tokens), "summarized": getattr(plan, "entry_count", None)}
    return ms, facts


# -- report -------------------------------------------------------------------------------------------
FIGURES = (  # (label, pi key, SOBA key)
    ("open a session", "open_ms", "open"),
    ("model input at open: pi buildSessionContext | SOBA build_context(path)", "context_ms", "context"),
    ("model input at open: pi buildSessionContext | SOBA engine.model_messages() (fresh engine)",
     "context_ms", "engine"),
    ("prepare a compaction: pi prepareCompaction | SOBA measure()+plan(), fresh counter", "prepare_ms",
     "prepare_cold"),
    ("prepare a compaction: pi prepareCompaction | SOBA measure()+plan(), exact counts held", "prepare_ms",
     "prepare_warm"),
    ("cut point alone: pi findCutPoint | SOBA tail_cut_point (what plan() runs)", "cut_ms", "cut"),
    ("cut point alone: pi findCutPoint | SOBA find_cut_point (whole context, the reference)", "cut_ms",
     "cut_whole"),
)


def _ms(value: float) -> str:
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def report(sizes: Sequence[int], pi: dict[int, dict[str, float]], soba: dict[int, dict[str, float]]) -> list[str]:
    """One line per figure: per-size ms on both sides, each side's growth and pi/SOBA per size."""
    lo, hi = sizes[0], sizes[-1]
    lines = []
    for label, pk, sk in FIGURES:
        pi_ms = ", ".join(f"{k}x {_ms(pi[k][pk])}" for k in sizes)
        soba_ms = ", ".join(f"{k}x {_ms(soba[k][sk])}" for k in sizes)
        ratios = ", ".join(f"{k}x {pi[k][pk] / soba[k][sk]:,.2f}" for k in sizes)
        lines.append(f"{label}: pi {pi_ms} ms ({hi}x/{lo}x {pi[hi][pk] / pi[lo][pk]:,.1f}x); SOBA {soba_ms} ms "
                     f"({hi}x/{lo}x {soba[hi][sk] / soba[lo][sk]:,.1f}x); pi/SOBA {ratios}")
    nxt = ", ".join(f"{k}x {_ms(soba[k]['next'])}" for k in sizes)
    lines.append(f"model input, next request after one append (SOBA only: pi keeps its agent's message list in "
                 f"memory): SOBA {nxt} ms ({hi}x/{lo}x {soba[hi]['next'] / soba[lo]['next']:,.1f}x)")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="rounds; each figure is the best (default 5)")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="replications (default 1,4,16)")
    parser.add_argument("--clock", choices=("process", "wall"), default="process",
                        help="process time on both sides (default) or wall clock")
    args = parser.parse_args(argv)
    global TIMER
    TIMER = time.process_time if args.clock == "process" else time.perf_counter
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    pkg_dir = package_dir()
    node = shutil.which("node")
    reason = skip_reason(pkg_dir, node)
    if reason is not None or node is None:
        print(f"skipped: {reason}")
        return 0
    with tempfile.TemporaryDirectory(prefix="soba-bench-pi-") as tmp_name:
        tmp = Path(tmp_name)
        pi_files = {k: replicate_pi(PI, tmp / f"pi-{k}x.jsonl", k) for k in sizes}
        soba_files: dict[int, Path] = {}
        for k, file in pi_files.items():
            took, soba_files[k] = clock(lambda file=file, k=k: import_transcript(file, tmp / f"soba-{k}x"))
            print(f"import into SOBA (once, not compared): {k}x {took:,.0f} ms")
        pi_best: dict[int, dict[str, float]] = {}
        soba_best: dict[int, dict[str, float]] = {}
        pi_run: dict[str, Any] = {}
        soba_facts: dict[int, dict[str, Any]] = {}
        for _ in range(args.repeat):
            pi_run = run_pi(node, pkg_dir, [pi_files[k] for k in sizes], args.clock)
            for k, row in zip(sizes, pi_run["files"], strict=True):
                pi_best[k] = {key: min(v, pi_best.get(k, {}).get(key, v)) for key, v in row.items()
                              if key.endswith("_ms")}
            for k in sizes:
                work = tmp / "work" / soba_files[k].name  # a fresh copy: run_soba appends to it
                work.parent.mkdir(exist_ok=True)
                shutil.copyfile(soba_files[k], work)
                ms, soba_facts[k] = run_soba(work)
                soba_best[k] = {key: min(v, soba_best.get(k, {}).get(key, v)) for key, v in ms.items()}
    print(f"pi {pi_run['version']} on node {pi_run['node']}; SOBA from this tree; best of {args.repeat} rounds; "
          f"{args.clock} time; load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    print(f"tokens: pi estimates chars/4 per message after the last reported usage; SOBA counts with tiktoken "
          f"({TokenCounter('gpt-4o').encoding_name}), cached per entry id, its budget check also from the last "
          f"reported usage; keepRecentTokens pi {pi_run['settings']['keepRecentTokens']:,}, SOBA "
          f"{SobaConfig().compaction.keep_recent_tokens:,}")
    for k, row in zip(sizes, pi_run["files"], strict=True):
        f = soba_facts[k]
        print(f"{k}x: pi path {row['path']:,} entries, {row['messages']:,} messages, cut at "
              f"{row['firstKeptEntryIndex']:,}, tokensBefore {row['tokensBefore'] or 0:,} (chars/4 after last "
              f"usage); SOBA path {f['path']:,} entries, {f['messages']:,} messages, cut at {f['cut'] or 0:,} "
              f"of {f['context']:,}, {f['tokens']:,} tokens in context (tiktoken)")
    for line in report(sizes, pi_best, soba_best):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
