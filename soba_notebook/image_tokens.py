"""What an image costs a model, counted before the request is sent: the providers' own rules.

Pure arithmetic over an image's pixel size, plus a reader of that size from the first bytes of a
PNG (its ``IHDR`` chunk) or a JPEG (its first ``SOF`` marker), so no imaging library is needed
and a 50 MB figure is never decoded to be measured.

The rules, as the providers publish them:

* OpenAI (https://platform.openai.com/docs/guides/vision, "Calculating costs"): ``detail: low``
  costs 85 tokens whatever the size. ``high`` (and ``auto``, which SOBA counts as ``high``, the
  larger) first scales the image to fit in 2048×2048, then so its shortest side is 768 px (never
  up), and costs 85 + 170 per 512-px tile of the result.
* Anthropic (https://docs.anthropic.com/en/docs/build-with-claude/vision, "Evaluate image size"):
  an image whose long edge is over 1568 px, or that is over about 1.15 megapixels, is scaled down
  (aspect kept) until it fits both; it then costs about ``width × height / 750`` tokens, rounded up.

Both pages were checked against public material that restates them (the library's search found
third-party restatements of the same numbers: 85/170/512/768/2048 and 750/1568).
"""

from __future__ import annotations

import math
import struct

__all__ = ["ANTHROPIC_MAX_EDGE", "ANTHROPIC_MAX_PIXELS", "OPENAI_LOW_TOKENS", "anthropic_image_tokens",
           "anthropic_scaled_size", "image_pixel_size", "image_tokens", "openai_image_tokens",
           "openai_scaled_size", "sent_image_rule"]

OPENAI_LOW_TOKENS = 85
_OPENAI_TILE_TOKENS = 170
_OPENAI_TILE = 512
_OPENAI_BOX = 2048
_OPENAI_SHORT = 768
ANTHROPIC_MAX_EDGE = 1568
#: about 1.15 megapixels: 1092×1092, the largest square the Anthropic page lists at ~1600 tokens
ANTHROPIC_MAX_PIXELS = 1_192_464
_ANTHROPIC_PIXELS_PER_TOKEN = 750


def openai_scaled_size(width: int, height: int) -> tuple[int, int]:
    """The size OpenAI tiles at ``detail: high``: fit in 2048×2048, then shortest side 768 (no upscaling)."""
    w, h = float(max(width, 1)), float(max(height, 1))
    if max(w, h) > _OPENAI_BOX:
        scale = _OPENAI_BOX / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > _OPENAI_SHORT:
        scale = _OPENAI_SHORT / min(w, h)
        w, h = w * scale, h * scale
    return round(w), round(h)


def openai_image_tokens(width: int, height: int, detail: str = "auto") -> int:
    """OpenAI's count for one image (module docstring); ``auto`` is counted as ``high``."""
    if detail == "low":
        return OPENAI_LOW_TOKENS
    w, h = openai_scaled_size(width, height)
    tiles = math.ceil(w / _OPENAI_TILE) * math.ceil(h / _OPENAI_TILE)
    return OPENAI_LOW_TOKENS + _OPENAI_TILE_TOKENS * tiles


def anthropic_scaled_size(width: int, height: int) -> tuple[int, int]:
    """The size Anthropic sees: long edge at most 1568 px and at most about 1.15 megapixels."""
    w, h = max(width, 1), max(height, 1)
    scale = min(1.0, ANTHROPIC_MAX_EDGE / max(w, h), math.sqrt(ANTHROPIC_MAX_PIXELS / (w * h)))
    if scale >= 1.0:
        return w, h
    return max(1, math.floor(w * scale)), max(1, math.floor(h * scale))


def anthropic_image_tokens(width: int, height: int) -> int:
    """Anthropic's count for one image: ``ceil(w × h / 750)`` after its resize."""
    w, h = anthropic_scaled_size(width, height)
    return math.ceil(w * h / _ANTHROPIC_PIXELS_PER_TOKEN)


def image_tokens(rule: str, width: int, height: int, detail: str = "auto") -> int:
    """The count by ``rule`` (``"openai"`` or ``"anthropic"``); any other rule is the larger of the two,
    since a server of unknown kind must not be under-counted."""
    if rule == "openai":
        return openai_image_tokens(width, height, detail)
    if rule == "anthropic":
        return anthropic_image_tokens(width, height)
    return max(openai_image_tokens(width, height, detail), anthropic_image_tokens(width, height))


def sent_image_rule(vision: str, accepts_images: bool, rule: str) -> str | None:
    """The token rule images are sent and counted by, or None when the model is sent none:
    ``model.vision`` (``"on"`` / ``"off"``) overrides what the provider declares (``"auto"``)."""
    if vision == "off" or (vision != "on" and not accepts_images):
        return None
    return rule


_PNG = b"\x89PNG\r\n\x1a\n"
#: JPEG start-of-frame markers (baseline, progressive, lossless…), not DHT (C4), JPG (C8), DAC (CC)
_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


def image_pixel_size(head: bytes) -> tuple[int, int] | None:
    """Width and height of a PNG or JPEG from its first bytes, or None when they do not tell.

    PNG: the ``IHDR`` chunk right after the signature. JPEG: the segments are walked to the first
    start-of-frame marker (EXIF and ICC segments before it can be long: pass a few tens of KB).
    """
    if head[:8] == _PNG and head[12:16] == b"IHDR" and len(head) >= 24:
        width, height = struct.unpack(">II", head[16:24])
        return (width, height) if width and height else None
    if head[:2] != b"\xff\xd8":
        return None
    pos = 2
    while pos + 4 <= len(head):
        if head[pos] != 0xFF:
            return None
        marker = head[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
            continue
        (length,) = struct.unpack(">H", head[pos + 2:pos + 4])
        if marker in _SOF:
            if pos + 9 > len(head):
                return None
            height, width = struct.unpack(">HH", head[pos + 5:pos + 9])
            return (width, height) if width and height else None
        pos += 2 + length
    return None
