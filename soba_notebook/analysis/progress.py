"""Progress bars for the analysis layer's long loops (simulating several configs, and the like).

Owns :func:`progress`: ``tqdm.auto``, which renders as a widget in Jupyter and as a text bar in a
terminal. A loop of one item gets no bar (it would only flash), and a finished bar is removed
(``leave=False``) so an executed notebook keeps its results, not a row of full bars.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

__all__ = ["progress"]

T = TypeVar("T")


def progress(items: Iterable[T], *, total: int | None = None, desc: str = "", unit: str = "it") -> Iterator[T]:
    """Iterate ``items`` with a ``tqdm.auto`` bar (none for fewer than two items)."""
    if total is not None and total < 2:
        yield from items
        return
    from tqdm.auto import tqdm

    yield from tqdm(items, total=total, desc=desc, unit=unit, leave=False)
