"""Importing a whole folder of transcripts: hundreds of SWE-bench trajectories in one call.

:func:`import_transcripts` runs :func:`~soba_notebook.importers.import_transcript_with_report`
once per transcript file under a folder, in parallel on any :class:`concurrent.futures.Executor`
(a process pool by default; a Dask or Ray executor runs the same call on a cluster), with a
progress bar (:func:`bar_class`: a widget in a Jupyter kernel, text on standard error elsewhere).
There is no home-made distribution here: the executor decides where
each file is imported, and every worker writes its own new session file, so nothing is shared.

A file that cannot be imported (not a transcript, unreadable) does not stop the others: its
error is kept in :attr:`FolderImport.errors` next to the reports of the files that worked.

:func:`transcript_files` is the one rule for which files of a folder are transcripts; the fleet
simulation (:func:`soba_notebook.views.simulate_many`) uses it too.
"""

from __future__ import annotations

import concurrent.futures
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..trusted_import import trusted_import

__all__ = ["TRANSCRIPT_SUFFIXES", "FolderImport", "bar_class", "import_transcripts", "run_all", "transcript_files"]

#: File name endings that may hold a transcript (pi / Claude Code JSONL, OpenAI / SWE-agent JSON).
TRANSCRIPT_SUFFIXES = (".jsonl", ".json", ".traj")

_T = TypeVar("_T")


def transcript_files(folder: str | os.PathLike[str]) -> list[Path]:
    """Files under ``folder`` (recursively, hidden entries skipped) that may hold a transcript, sorted."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        from ..errors import SessionError

        raise SessionError(f"{root}: not a folder of transcripts")
    out = [p for p in root.rglob("*") if p.is_file() and p.name.endswith(TRANSCRIPT_SUFFIXES)
           and not any(part.startswith(".") for part in p.relative_to(root).parts)]
    return sorted(out)


def bar_class() -> Any:
    """The progress bar for this call: a widget bar in a Jupyter kernel, else a text bar.

    Decided at each call from the running shell, never once per process as ``tqdm.auto`` decides
    at its first import: a process that merely had IPython loaded then printed widget reprs to
    standard output for good. IPython is looked up, never imported (this layer is headless).
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None and type(shell).__name__ == "ZMQInteractiveShell":
        return trusted_import("tqdm.notebook").tqdm
    return trusted_import("tqdm.std").tqdm


def run_all(fn: Callable[..., _T], jobs: Sequence[tuple[Any, ...]], executor: concurrent.futures.Executor | None, *,
            desc: str, unit: str, progress: bool = True) -> list[_T]:
    """``[fn(*job) for job in jobs]``, run on ``executor`` (default: a process pool), in job order.

    ``fn`` must be a module-level function (it may be sent to another process); the progress bar
    (:func:`bar_class`) advances as jobs finish in any order.
    """
    tqdm = bar_class()
    own = executor is None
    if own:
        workers = max(1, min(os.cpu_count() or 1, len(jobs)))
        executor = concurrent.futures.ProcessPoolExecutor(max_workers=workers)
    assert executor is not None
    results: dict[int, _T] = {}
    try:
        futures = {executor.submit(fn, *job): i for i, job in enumerate(jobs)}
        with tqdm(total=len(jobs), desc=desc, unit=unit, disable=not progress) as bar:
            for future in concurrent.futures.as_completed(futures):
                results[futures[future]] = future.result()
                bar.update(1)
    finally:
        if own:
            executor.shutdown(wait=True, cancel_futures=True)
    return [results[i] for i in range(len(jobs))]


@dataclass(frozen=True, slots=True)
class FolderImport:
    """What :func:`import_transcripts` did: one report per imported file, one error per failed one."""

    sessions_dir: Path
    reports: tuple[Any, ...]  # ImportReport, in the order of the source files
    errors: Mapping[Path, str] = field(default_factory=dict)

    @property
    def sessions(self) -> list[Path]:
        """The new session files, in the order of the source files."""
        return [r.session for r in self.reports]


def _import_one(source: str, sessions_dir: str) -> tuple[Any, str | None]:
    from ..errors import SessionError
    from . import import_transcript_with_report

    try:
        return import_transcript_with_report(source, sessions_dir)[1], None
    except SessionError as exc:
        return None, str(exc)


def import_transcripts(folder: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
                       sessions_dir: str | os.PathLike[str], executor: concurrent.futures.Executor | None = None,
                       *, progress: bool = True) -> FolderImport:
    """Import every transcript under ``folder`` (or each file of an iterable) into ``sessions_dir``.

    Runs on ``executor`` (default: a process pool with one worker per CPU); any
    :class:`concurrent.futures.Executor` works, a Dask or Ray one included, as long as its workers
    see both paths. A progress bar shows files done (``progress=False`` hides it). Files that are
    not transcripts are listed in :attr:`FolderImport.errors` with the reason; nothing raises for
    one bad file. The sources are only read.
    """
    files = transcript_files(folder) if isinstance(folder, str | os.PathLike) else [Path(f) for f in folder]
    out_dir = Path(sessions_dir).expanduser()
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(str(f), str(out_dir)) for f in files]
    results = run_all(_import_one, jobs, executor, desc="import", unit="file", progress=progress)
    reports = tuple(report for report, _ in results if report is not None)
    errors = {f: err for f, (_, err) in zip(files, results, strict=True) if err is not None}
    return FolderImport(out_dir, reports, errors)
