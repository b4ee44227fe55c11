"""pi's own compaction rules replayed on the continuity bench's transcripts, measured the same way.

bench/continuity.py measures what SOBA's capsules keep; this module gives it pi's rows. pi's code
(``@mariozechner/pi-coding-agent``, installed by bench/install-pi.sh, never committed) decides,
under node (bench/pi_continuity.mjs), when to compact (as its agent session does: ``shouldCompact``
on its own chars/4 estimate at the end of each agent run and before each prompt, and on overflow
when a request mid-run no longer fits the window), where to cut (``prepareCompaction``:
``findCutPoint`` with ``keepRecentTokens``) and which files a compaction lists
(``computeFileLists`` over its ``read``/``write``/``edit`` tool calls, rolled from the previous
compaction's ``details``). Each pi compaction is then scored with
:func:`continuity.score_capsule` against the whole history before its first kept entry, like a
SOBA capsule: files modified recall, and its files read/modified beyond the facts as held
unsupported claims.

Reproducible, and so reported, only for what pi's code decides: its cut points and its file
lists. The rest of a pi compaction (goal, progress, checks, errors, constraints) is text its model
writes; no model is called, so those columns are "not reproduced". And only for transcripts whose
agent used pi's tools (a ``read``, ``write`` or ``edit`` call with a ``path``): pi's lists come
from those calls alone, so for a mini-swe-agent or SWE-agent session (bash, ``str_replace_editor``)
they are empty by construction, which says nothing about pi.

Window mapping: context window = pi's model ``contextWindow``; max output = pi's
``reserveTokens`` (it compacts when the context passes window − reserve); keep = ``keepRecentTokens``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench_pi import package_dir, skip_reason
from continuity import CapsuleScore, Recall, ReplayScore, score_capsule

from soba_notebook.analysis._common import snapshot
from soba_notebook.compaction.capsule import Capsule
from soba_notebook.session.entries import Entry

__all__ = ["PI_FILE_TOOLS", "PiCompaction", "pi_entries", "pi_row", "pi_skip_reason", "reproducible", "run_pi_rules",
           "score_pi"]

SCRIPT = Path(__file__).resolve().parent / "pi_continuity.mjs"
#: the tools whose ``path`` pi's compaction lists (read, and written or edited as modified)
PI_FILE_TOOLS = frozenset({"read", "write", "edit"})


@dataclass(frozen=True, slots=True)
class PiCompaction:
    """One compaction pi's rules made: the first entry it keeps, and the file lists of its details."""

    first_kept_id: str
    #: ``threshold`` (after a run or before a prompt) or ``overflow`` (a request past the window, mid-run)
    reason: str
    is_split_turn: bool
    tokens_before: int
    tokens_after: int
    read_files: tuple[str, ...]
    modified_files: tuple[str, ...]


def pi_skip_reason() -> str | None:
    """Why pi's rules cannot run here (no node, pi not installed: bench/install-pi.sh), or None."""
    return skip_reason(package_dir(), shutil.which("node"), source=Path(__file__))


def reproducible(source: Sequence[Entry]) -> bool:
    """Whether the agent of ``source`` used pi's file tools: a ``read``/``write``/``edit`` call with a path."""
    return any(c.name in PI_FILE_TOOLS and isinstance(c.arguments.get("path"), str)
               for e in source if e.role == "assistant" for c in e.tool_calls)


def _text(text: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": text}] if text else []


def pi_entries(source: Sequence[Entry]) -> list[dict[str, Any]]:
    """``source``'s messages as pi session entries (its v3 shapes), with the source's ids. No usage
    is carried: pi's own estimate decides (see bench/pi_continuity.mjs). The system prompt and
    SOBA's non-message entries have no pi twin in a session's path and are left out."""
    out: list[dict[str, Any]] = []
    for i, e in enumerate(source):
        raw = e.message
        if e.role == "user":
            message: dict[str, Any] = {"role": "user", "content": _text(e.text)}
        elif e.role == "assistant":
            thinking = raw.get("thinking")
            calls = [{"type": "toolCall", "id": c.id, "name": c.name, "arguments": dict(c.arguments)}
                     for c in e.tool_calls]
            message = {"role": "assistant", "provider": "replay", "model": "replay",
                       "stopReason": "toolUse" if calls else "stop",
                       "content": ([{"type": "thinking", "thinking": thinking}] if isinstance(thinking, str) else [])
                       + _text(e.text) + calls}
        elif e.role == "tool":
            message = {"role": "toolResult", "toolCallId": e.tool_call_id or "", "toolName": str(raw.get("name", "")),
                       "content": _text(e.text), "isError": bool(raw.get("isError"))}
        else:
            continue
        out.append({"type": "message", "id": e.id or f"entry-{i}", "timestamp": e.ts or "", "message":
                    {**message, "timestamp": i}})
    return out


def run_pi_rules(source: Sequence[Entry], window: tuple[int, int, int], *, node: str = "node",
                 pkg_dir: Path | None = None) -> tuple[str, tuple[PiCompaction, ...]]:
    """pi's version and the compactions its rules make replaying ``source`` at ``window``."""
    context, output, keep = window
    with tempfile.TemporaryDirectory(prefix="soba-pi-continuity-") as tmp:
        file = Path(tmp) / "session.jsonl"
        file.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in pi_entries(source)),
                        encoding="utf-8")
        done = subprocess.run([node, str(SCRIPT), "--pkg", str(pkg_dir or package_dir()), "--context", str(context),
                               "--reserve", str(output), "--keep", str(keep), str(file)],
                              capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench/pi_continuity.mjs failed ({done.returncode}): {done.stderr.strip()}")
    result = json.loads(done.stdout)
    return str(result["version"]), tuple(
        PiCompaction(c["firstKeptEntryId"], str(c["reason"]), bool(c["isSplitTurn"]), int(c["tokensBefore"]),
                     int(c["tokensAfter"]), tuple(c["readFiles"]), tuple(c["modifiedFiles"]))
        for c in result["compactions"])


def score_pi(source: Sequence[Entry], compactions: Sequence[PiCompaction]) -> tuple[CapsuleScore, ...]:
    """Each pi compaction scored against the history before its first kept entry: its file lists as
    a capsule's (recall, and unsupported ones held); the model-text measures left empty (not reproduced)."""
    index = {e.id: i for i, e in enumerate(source) if e.id is not None}
    scores = []
    for c in compactions:
        if c.first_kept_id not in index:
            raise ValueError(f"pi kept {c.first_kept_id!r} first, an entry the source does not hold")
        prefix = source[:index[c.first_kept_id]]
        score = score_capsule(Capsule(files_read=c.read_files, files_modified=c.modified_files), prefix,
                              quality="pi")
        scores.append(replace(score, checks=Recall(), open_errors=Recall(), constraints=Recall(),
                              latest_request=None))
    return tuple(scores)


def pi_row(path: Path, window: tuple[int, int, int], name: str) -> ReplayScore | None:
    """pi's row for one transcript at one window, or None when pi's lists cannot be reproduced on it."""
    source = list(snapshot(path).path)
    if not reproducible(source):
        return None
    version, compactions = run_pi_rules(source, window, node=shutil.which("node") or "node")
    return ReplayScore(name, window, f"pi {version} rules", 0, score_pi(source, compactions), model_text=False)

