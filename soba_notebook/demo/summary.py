"""The offline demo model's answer to a summarize request: the real extractor over the entries.

A language model reads the summarizer's prompt; the demo model has no language understanding,
so it must not pretend to by parsing that prompt text back. A summarize request carries what its
prompt was made from (:class:`~soba_notebook.providers.base.SummarySource`: the entries being
summarized and the previous capsule state), and the answer is the deterministic capsule of
:func:`soba_notebook.compaction.extract.deterministic_capsule` over exactly those entries, the
previous state rolled forward: the same goal, files, verification results
(:mod:`soba_notebook.compaction.verification`), milestones, decisions, blockers and skills the
local fallback would record. One extractor, so the demo's summaries can never drift from it.

The answer is written the way a model answers: one JSON object with the keys the summarizer's
system prompt asks for (no ``schemaVersion``, ``covers``, ``rolledFrom`` or ``latestRequest``, which
the code fills in itself), so it goes through the same parsing and validation as any model's.
"""

from __future__ import annotations

import json

from ..compaction.capsule import Capsule
from ..compaction.extract import deterministic_capsule
from ..providers.base import SummarySource

__all__ = ["summary_answer"]

#: Capsule keys the code sets itself (``latestRequest``: from the history, never asked of a model);
#: a model's answer leaves them out.
_NOT_ANSWERED = ("schemaVersion", "covers", "rolledFrom", "latestRequest")


def summary_answer(source: SummarySource) -> str:
    """The capsule JSON answer for the entries and previous state of ``source``.

    Deterministic: the same source always gives the same answer. It validates with
    :func:`~soba_notebook.compaction.summarize.parse_capsule_answer`.
    """
    previous = (Capsule.from_json(source.previous, where="previous capsule state")
                if source.previous is not None else None)
    answer = deterministic_capsule(source.entries, previous).to_json()
    for key in _NOT_ANSWERED:
        answer.pop(key, None)
    return json.dumps(answer, ensure_ascii=False)
