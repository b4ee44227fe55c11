"""Where SOBA's prebuilt JupyterLab extension lives and how a build is known to be current.

The extension (sources in the checkout's ``labextension/``, see ``docs/ARCHITECTURE.md``) is built
by ``scripts/build-labextension.sh`` into ``soba_notebook/labextension/`` and committed, so
installing soba_notebook never runs node. JupyterLab finds it in
``<prefix>/share/jupyter/labextensions/soba-notebook/``: a wheel installs it there as data files,
and the install scripts link it there for the editable install (``scripts/install-labextension.sh``).
``SOURCES.sha256`` beside the build records the hash of the sources it was built from;
``tests/unit/test_labextension.py`` fails when they differ.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["BUILD_DIR", "NAME", "SOURCES_HASH_FILE", "SOURCE_FILES", "built_from", "sources_hash"]

#: The npm name JupyterLab knows the extension by (``labextension/package.json``).
NAME = "soba-notebook"
#: The prebuilt federated extension inside the package.
BUILD_DIR = Path(__file__).resolve().parents[1] / "labextension"
SOURCES_HASH_FILE = BUILD_DIR / "SOURCES.sha256"
#: The files the build is made from, relative to the source directory.
SOURCE_FILES = ("package.json", "package-lock.json", "src/index.js", "style/index.css")


def sources_hash(source_dir: Path | None = None) -> str:
    """SHA-256 over the extension's source files (names and bytes), in :data:`SOURCE_FILES` order."""
    root = source_dir if source_dir is not None else BUILD_DIR.parents[1] / "labextension"
    digest = hashlib.sha256()
    for name in SOURCE_FILES:
        digest.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
    return digest.hexdigest()


def built_from() -> str | None:
    """The sources hash the committed build records, or ``None`` when there is no build."""
    try:
        return SOURCES_HASH_FILE.read_text().strip() or None
    except OSError:
        return None
