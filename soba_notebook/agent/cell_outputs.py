"""A cell's outputs as the model is given them: text it can read and images it can see.

``outputs_for_model(outputs)`` is the one formatter of a run's (or a saved cell's) nbformat
outputs for the model, used by ``notebook_read`` with ``include_images`` and by the cell runner:

* stream text and ``text/plain`` results: head and tail with the omission marked, and errors as
  ``ename: evalue`` with the traceback's last frames (:func:`.notebook_view.output_text`);
* a DataFrame (an output whose ``text/html`` is pandas' ``<table class="dataframe">``, or whose
  metadata holds the kernel's table facts): a compact table, its shape, its columns' dtypes and its
  first rows from the ``text/plain`` repr, never the HTML. The dtypes are no part of a mime bundle:
  the kernel adds them to the output's metadata when the cell runs (:mod:`.table_facts`), so the
  saved notebook keeps them for a later ``notebook_read``;
* a PNG or JPEG: an :class:`~soba_notebook.session.attachments.ImageAttachment` with its size read
  from the header bytes, and a one-line description in the text where it stands. An image too large
  to send (over :data:`MAX_IMAGE_BYTES`) or of unknown size stays a line of text.

Nothing is sent whole: every text is clipped and counted, so a 50 MB output reads as a few lines.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..image_tokens import image_pixel_size
from ..session.attachments import ImageAttachment
from ..textclip import head_tail
from .notebook_view import output_text, strip_ansi
from .table_facts import table_facts

__all__ = ["MAX_IMAGE_BYTES", "TABLE_HEAD_ROWS", "outputs_for_model", "table_summary"]

#: a larger image is described, not sent (the providers refuse images over about 5 MB)
MAX_IMAGE_BYTES = 5 * 1024 * 1024
#: rows of a DataFrame's repr shown under its shape
TABLE_HEAD_ROWS = 6
_SENT_MIMES = ("image/png", "image/jpeg")
_SHAPE = re.compile(r"\[?(\d[\d,]*) rows? (?:x|×) (\d[\d,]*) columns?\]?")
#: base64 characters read to find an image's size (a JPEG's EXIF may come before its frame header)
_HEADER_CHARS = 64 * 1024


def _joined(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


def table_summary(data: Mapping[str, Any], metadata: Mapping[str, Any] | None = None) -> str | None:
    """A DataFrame result as ``[table N rows × M columns]``, its dtypes (when the kernel recorded
    them in ``metadata``) and its first rows; None when it is no pandas table (no
    ``<table class="dataframe">`` in its HTML and no table facts in its metadata)."""
    html = _joined(data.get("text/html"))
    dims, dtypes = table_facts(metadata)
    if 'class="dataframe"' not in html[:2_000] and dims is None:
        return None
    plain = strip_ansi(_joined(data.get("text/plain"))).rstrip("\n")
    found = _SHAPE.search(plain[-200:]) or _SHAPE.search(html[-500:])
    lines = [line for line in plain.splitlines() if not _SHAPE.fullmatch(line.strip())]
    if dims is None and found:
        dims = (int(found[1].replace(",", "")), int(found[2].replace(",", "")))
    # without pandas' footer the frame is small and shows every row: a header line plus one per row
    shape = f"{dims[0]:,} rows × {dims[1]:,} columns" if dims else f"{max(len(lines) - 1, 0):,} rows"
    head = head_tail("\n".join(lines[:TABLE_HEAD_ROWS + 1]), head_lines=TABLE_HEAD_ROWS + 1, tail_lines=0,
                     line_chars=400, last_whole=False)
    more = f"\n… first {TABLE_HEAD_ROWS} rows shown" if len(lines) > TABLE_HEAD_ROWS + 1 else ""
    typed = f"\ndtypes: {', '.join(dtypes)}" if dtypes else ""
    return f"[table {shape}]{typed}\n{head}{more}"


def _image(mime: str, value: Any, cell_id: str | None) -> tuple[ImageAttachment | None, str]:
    text = "".join(_joined(value).split())
    size = None
    if len(text) * 3 // 4 <= MAX_IMAGE_BYTES:
        head = text[:_HEADER_CHARS]
        try:
            size = image_pixel_size(base64.b64decode(head[: len(head) // 4 * 4]))
        except (binascii.Error, ValueError):
            size = None
    if size is None:
        return None, f"[{mime} not sent: {len(text) * 3 // 4:,} bytes" + (
            ", size unknown]" if len(text) * 3 // 4 <= MAX_IMAGE_BYTES else ", too large to send]")
    image = ImageAttachment(mime, text, size[0], size[1], cell_id, f"figure {size[0]}×{size[1]}")
    return image, image.line


def outputs_for_model(outputs: Iterable[Mapping[str, Any]], *, cell_id: str | None = None,
                      ) -> tuple[str, tuple[ImageAttachment, ...]]:
    """The outputs' text (one block per output) and the images to send with it (module docstring)."""
    blocks: list[str] = []
    images: list[ImageAttachment] = []
    for output in outputs:
        data = output.get("data") if output.get("output_type") in ("execute_result", "display_data") else None
        if not isinstance(data, Mapping):
            blocks.append(output_text(output))
            continue
        metadata = output.get("metadata")
        table = table_summary(data, metadata if isinstance(metadata, Mapping) else None)
        sent = next((m for m in _SENT_MIMES if m in data), None)
        if table is not None:
            blocks.append(table)
        elif sent is not None:
            image, line = _image(sent, data[sent], cell_id)
            if image is not None:
                images.append(image)
            blocks.append(line)
        else:
            blocks.append(output_text(output))
    return "\n".join(blocks), tuple(images)
