"""A DataFrame's shape and dtypes, which no mime bundle holds, kept in its output's metadata.

pandas gives a frame's display as ``text/html`` and ``text/plain``: the rows, never the dtypes, and
the shape only in the footer of a long frame. The kernel knows the object while a cell runs, so
:func:`table_metadata` records them in the output's metadata under :data:`TABLE_KEY`
(``{"table": {"shape": [rows, columns], "dtypes": [[column, dtype], …]}}``; nbformat allows any
output metadata, and the saved notebook keeps it); :func:`table_facts` reads them back for the
model (:func:`.cell_outputs.table_summary`). Its own module because both the cell runner
(:mod:`.cell_exec`, the notebook layer's display formatter) and the outputs' formatter use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["TABLE_COLUMNS", "TABLE_KEY", "table_facts", "table_metadata"]

#: columns whose dtypes a table's facts list (a wider frame says how many more)
TABLE_COLUMNS = 40
#: the output metadata key of the kernel's table facts
TABLE_KEY = "soba"


def table_metadata(value: Any) -> dict[str, Any] | None:
    """The output metadata a DataFrame result carries (:data:`TABLE_KEY`): its shape and its first
    :data:`TABLE_COLUMNS` columns' dtypes; None for anything else. Duck-typed (pandas is never
    imported) and never raises: a frame whose dtypes cannot be read gets no facts."""
    if type(value).__name__ != "DataFrame":
        return None
    try:
        shape = value.shape
        dtypes = [[str(name)[:80], str(dtype)] for name, dtype in list(value.dtypes.items())[:TABLE_COLUMNS]]
        rows, columns = int(shape[0]), int(shape[1])
    except Exception:  # a frame-like object of another library: its reprs still stand
        return None
    return {TABLE_KEY: {"table": {"shape": [rows, columns], "dtypes": dtypes}}}


def table_facts(metadata: Mapping[str, Any] | None) -> tuple[tuple[int, int] | None, list[str]]:
    """The kernel's table facts in an output's metadata: its shape, and ``column dtype`` items."""
    ours = metadata.get(TABLE_KEY) if isinstance(metadata, Mapping) else None
    table = ours.get("table") if isinstance(ours, Mapping) else None
    if not isinstance(table, Mapping):
        return None, []
    shape = table.get("shape")
    dims = (shape[0], shape[1]) if isinstance(shape, list) and len(shape) == 2 and all(
        isinstance(n, int) for n in shape) else None
    dtypes = [f"{d[0]} {d[1]}" for d in table.get("dtypes") or () if isinstance(d, list) and len(d) == 2]
    if dims is not None and dims[1] > len(dtypes) and dtypes:
        dtypes.append(f"+{dims[1] - len(dtypes):,} more columns")
    return dims, dtypes
