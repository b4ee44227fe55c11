"""The offline demo model lives in its own package beside the real providers.

``soba_notebook/demo/`` implements the same ``Provider`` interface; the real providers do not
depend on what the demo needs (the compaction extractor), and the factory builds the demo model
with a plain import whichever package is imported first.
"""

from __future__ import annotations

import ast
import asyncio
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.providers import AnthropicProvider, ModelRequest, OpenAIChatProvider
from soba_notebook.providers.base import SummarySource
from soba_notebook.session.entries import user_message

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "soba_notebook"


def _imported_modules(path: Path, package: str) -> set[str]:
    """Every ``soba_notebook`` module ``path`` imports, relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return {n for n in names if n.startswith("soba_notebook.")}


def test_the_providers_import_nothing_from_compaction() -> None:
    offenders = {}
    for path in (PACKAGE / "providers").rglob("*.py"):
        bad = {m for m in _imported_modules(path, "soba_notebook.providers")
               if m.startswith("soba_notebook.compaction")}
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}


def test_no_demo_model_code_or_data_is_left_in_the_providers() -> None:
    left = sorted(p.name for p in (PACKAGE / "providers").iterdir() if "scripted" in p.name or "scenario" in p.name)
    assert left == []


def test_the_demo_files_are_package_data_of_the_demo() -> None:
    files = resources.files("soba_notebook.demo").joinpath("scenario_files")
    names = sorted(f.name for f in files.iterdir() if f.name.endswith(".txt"))
    assert len(names) == 12 and "calc_demo__calc__ops.py.v1.txt" in names


@pytest.mark.parametrize("first", ["soba_notebook.demo", "soba_notebook.demo.scenario", "soba_notebook.providers",
                                   "soba_notebook.providers.factory", "soba_notebook.agent"])
def test_the_factory_builds_the_demo_model_whichever_package_is_imported_first(first: str) -> None:
    code = (f"import {first}\n"
            "from soba_notebook.providers import make_provider\n"
            "print(type(make_provider({'provider': 'scripted'})).__module__)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "soba_notebook.demo.scripted"


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_real_providers_send_the_same_request_with_or_without_the_summary_source(fake_server: FakeServer,
                                                                                  wire: str) -> None:
    entries = (user_message("a private detail only the prompt may carry").with_ids("e1", None, "t"),)
    plain = ModelRequest("m", "summarize", ({"role": "user", "content": "the prompt"},), purpose="summarize")
    carrying = ModelRequest("m", "summarize", ({"role": "user", "content": "the prompt"},), purpose="summarize",
                            summary_source=SummarySource(entries, {"goal": "g"}))

    async def send(request: ModelRequest) -> None:
        provider = (OpenAIChatProvider("m", base_url=fake_server.openai_base_url) if wire == "openai"
                    else AnthropicProvider("m", base_url=fake_server.anthropic_base_url, api_key="sk-ant-test"))
        try:
            await provider.complete(request)
        finally:
            await provider.aclose()

    for request in (plain, carrying):
        getattr(fake_server, wire).enqueue(text="{}")
        asyncio.run(send(request))
    (_, _, first), (_, _, second) = fake_server.requests[-2:]
    assert first == second
    assert "private detail" not in repr(second)
