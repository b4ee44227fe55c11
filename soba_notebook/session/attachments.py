"""Images a tool result carries for the model, and the rule that lets old ones go first.

A tool result (``notebook_read`` with ``include_images``, a cell run) may carry figures. They are
stored in the tool-result entry under ``attachments``, one JSON object per image (see
:class:`ImageAttachment`); a transcript without the key reads as one without images, and a
malformed item is skipped, never an error.

Images are the heaviest part of a context (a figure costs 1,000-1,600 tokens where its description
costs 20), so they are the first thing the model input lets go: :func:`evict_old_images` keeps the
newest ``keep`` images and turns every older one into its one-line description plus where to get
it again (``notebook_read`` with the cell id and ``include_images``), before any text is
summarised. The rule is a pure function of the message list, so the request, the budget and the
preflight see the same reduction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ImageAttachment", "attachments_of", "evict_old_images", "image_placeholder", "shown_attachments"]


@dataclass(frozen=True, slots=True)
class ImageAttachment:
    """One image for the model: ``data`` is base64 (no data-URL prefix), the size is in pixels."""

    mime: str
    data: str
    width: int
    height: int
    cell_id: str | None = None
    description: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mime": self.mime, "data": self.data, "width": self.width, "height": self.height,
                               "description": self.description}
        if self.cell_id is not None:
            out["cellId"] = self.cell_id
        return out

    @classmethod
    def from_json(cls, raw: Any) -> ImageAttachment | None:
        """The attachment stored as ``raw``, or None when it is not one (an unknown or damaged item)."""
        if not isinstance(raw, Mapping):
            return None
        mime, data, width, height = raw.get("mime"), raw.get("data"), raw.get("width"), raw.get("height")
        if not (isinstance(mime, str) and isinstance(data, str) and isinstance(width, int)
                and isinstance(height, int)) or width <= 0 or height <= 0:
            return None
        cell, description = raw.get("cellId"), raw.get("description")
        return cls(mime, data, width, height, cell if isinstance(cell, str) else None,
                   description if isinstance(description, str) else "")

    @property
    def line(self) -> str:
        """The one-line description a model that sees no image is given instead."""
        where = f" from cell {self.cell_id}" if self.cell_id else ""
        about = f": {self.description}" if self.description else ""
        return f"[image {self.mime} {self.width}×{self.height}{where}{about}]"


def attachments_of(message: Mapping[str, Any]) -> tuple[ImageAttachment, ...]:
    """The images a stored message carries (none for messages written before images existed)."""
    raw = message.get("attachments")
    if not isinstance(raw, list | tuple):
        return ()
    found = (ImageAttachment.from_json(item) for item in raw)
    return tuple(a for a in found if a is not None)


def image_placeholder(attachment: ImageAttachment) -> str:
    """What an evicted image becomes: its description and how to see it again."""
    again = (f"notebook_read cell {attachment.cell_id} include_images" if attachment.cell_id
             else "run the cell again")
    return f"{attachment.line} (not shown any more; to see it again: {again})"


def shown_attachments(messages: Sequence[Mapping[str, Any]], keep: int) -> list[tuple[int, ImageAttachment]]:
    """The newest ``keep`` images of ``messages`` as ``(message index, image)``, oldest first."""
    shown: list[tuple[int, ImageAttachment]] = []
    for i in range(len(messages) - 1, -1, -1):
        if len(shown) >= keep:
            break
        images = attachments_of(messages[i])
        for image in reversed(images):
            if len(shown) >= keep:
                break
            shown.append((i, image))
    shown.reverse()
    return shown


def evict_old_images(messages: Sequence[Mapping[str, Any]], keep: int, *,
                     placeholder: Callable[[ImageAttachment], str] = image_placeholder) -> list[Mapping[str, Any]]:
    """``messages`` with all but the newest ``keep`` images replaced by ``placeholder`` lines
    appended to their message's text. Messages without evicted images are the same objects."""
    keep = max(keep, 0)
    counts = [len(attachments_of(m)) if "attachments" in m else 0 for m in messages]
    remaining = keep
    out: list[Mapping[str, Any]] = list(messages)
    for i in range(len(messages) - 1, -1, -1):
        n = counts[i]
        if not n:
            continue
        kept = min(n, remaining)
        remaining -= kept
        if kept == n:
            continue
        images = attachments_of(messages[i])
        gone, stay = images[:n - kept], images[n - kept:]
        message = dict(messages[i])
        text = message.get("content")
        lines = "\n".join(placeholder(a) for a in gone)
        message["content"] = f"{text}\n{lines}" if isinstance(text, str) and text else lines
        if stay:
            message["attachments"] = [a.to_json() for a in stay]
        else:
            message.pop("attachments", None)
        out[i] = message
    return out
