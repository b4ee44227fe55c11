"""Every config example in README.md and docs/*.md loads, and one sized for a small window fits it:
a reader who copies an example gets a working config, not a ConfigError or a trigger that never fires."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest

from soba_notebook.agent import Agent
from soba_notebook.config import ConfigWarning, SobaConfig, load_config
from soba_notebook.demo import ScriptedModel
from soba_notebook.session import SessionStore

ROOT = Path(__file__).resolve().parents[2]
_BLOCK = re.compile(r"```json\n(.*?)```", re.S)


def _examples() -> list[tuple[str, dict]]:
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            value = json.loads(match[1])
            # a config, not a record
            if isinstance(value, dict) and value and set(value) <= set(SobaConfig().to_json()):
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{doc.relative_to(ROOT)}:{line}", value))
    return found


EXAMPLES = _examples()


def test_the_docs_hold_config_examples() -> None:
    assert {where.split(":")[0] for where, _ in EXAMPLES} >= {"README.md", "docs/PROVIDERS.md"}


@pytest.mark.parametrize(("where", "example"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_every_docs_config_example_loads_and_fits_its_window(where: str, example: dict, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no instructions of the machine's user
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)  # an unknown key in an example is a docs bug too
        config = load_config(home=tmp_path / "home", project_dir=tmp_path, overrides=example)
        # the fixed prompt as an agent on this config measures it (every tool the example offers)
        store = SessionStore.create(tmp_path / ".soba" / "sessions")
        agent = Agent(store, config, ScriptedModel(), workspace=tmp_path)
    assert agent.fit_notes == (), f"{where}: {agent.fit_notes}"
