"""The user's most recent request, kept verbatim in every capsule.

After a compaction the model reads the capsule before anything else; a paraphrase of what the user
last asked can turn into a different request. So the capsule carries the latest request as the
user typed it (``latestRequest``, docs/CAPSULE_FORMAT.md), bounded: a long paste keeps its head and
tail around a marker that says how much was left out and where the rest is.
"""

from __future__ import annotations

__all__ = ["LATEST_REQUEST_CHARS", "latest_request"]

#: The latest user request is kept verbatim up to this many characters; a longer one keeps its
#: head and tail (half each) around a marker saying how much was left out.
LATEST_REQUEST_CHARS = 600


def latest_request(text: str, limit: int = LATEST_REQUEST_CHARS) -> str:
    """The user's request as it was typed (outer whitespace trimmed); past ``limit`` characters its
    head and tail, each half of ``limit``, around a marker naming how many characters it omits."""
    text = text.strip()
    if len(text) <= limit:
        return text
    half = limit // 2
    omitted = len(text) - 2 * half
    return (f"{text[:half]}\n[… {omitted:,} characters of the request omitted here; the transcript keeps it "
            f"whole …]\n{text[-half:]}")
