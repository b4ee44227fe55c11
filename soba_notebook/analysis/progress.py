"""Progress bars for the analysis layer's long loops (simulating several configs, and the like).

Owns :func:`progress`: a widget bar in a Jupyter kernel, a text bar on standard error everywhere
else. The choice is made at each call from the running shell, not once at import as ``tqdm.auto``
does (its first import decides for the whole process, so a process that once looked like a kernel
kept printing widget reprs to standard output). A loop of one item gets no bar (it would only
flash), and a finished bar is removed (``leave=False``) so an executed notebook keeps its results,
not a row of full bars.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from ..importers.fleet import bar_class

__all__ = ["progress"]

T = TypeVar("T")


def progress(items: Iterable[T], *, total: int | None = None, desc: str = "", unit: str = "it") -> Iterator[T]:
    """Iterate ``items`` with a progress bar (:func:`~.importers.fleet.bar_class`); none for fewer than two."""
    if total is not None and total < 2:
        yield from items
        return
    yield from bar_class()(items, total=total, desc=desc, unit=unit, leave=False)
