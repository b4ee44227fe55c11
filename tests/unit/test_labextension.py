"""The prebuilt JupyterLab extension is current and is installed where JupyterLab looks.

The build under ``soba_notebook/labextension/`` is committed (installing never runs node); these
rules catch a source edit without ``scripts/build-labextension.sh``, and a wheel that would leave
part of the build out of ``share/jupyter/labextensions/soba-notebook/``.
"""

from __future__ import annotations

import glob
import json
import tomllib
from pathlib import Path

from soba_notebook.notebook import labextension

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_build_was_made_from_the_current_sources() -> None:
    assert labextension.built_from() == labextension.sources_hash(REPO / "labextension"), (
        "labextension/ changed since soba_notebook/labextension/ was built: run scripts/build-labextension.sh "
        "and commit its output")


def test_the_build_names_the_extension_and_its_entry_point_exists() -> None:
    meta = json.loads((labextension.BUILD_DIR / "package.json").read_text())
    assert meta["name"] == labextension.NAME
    assert (labextension.BUILD_DIR / meta["jupyterlab"]["_build"]["load"]).is_file()
    source = json.loads((REPO / "labextension" / "package.json").read_text())
    assert source["name"] == labextension.NAME and not source["dependencies"]  # JupyterLab's singletons only


def test_the_wheel_installs_every_built_file_where_jupyterlab_looks_for_extensions() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    installed: set[str] = set()
    for target, patterns in config["tool"]["setuptools"]["data-files"].items():
        assert target.startswith(f"share/jupyter/labextensions/{labextension.NAME}")
        for pattern in patterns:
            for found in glob.glob(str(REPO / pattern)):
                installed.add(f"{target}/{Path(found).name}")
    built = {f"share/jupyter/labextensions/{labextension.NAME}/{p.relative_to(labextension.BUILD_DIR)}"
             for p in labextension.BUILD_DIR.rglob("*") if p.is_file() and p.name != "SOURCES.sha256"}
    assert installed == built
