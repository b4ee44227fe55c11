"""make every local-model example and ``--local-model`` config sized to its window: the project config
that ``scripts/quickstart.sh --local-model`` leads ``notebooks/quickstart.ipynb`` to write, built from the
script's own ``export SOBA_...`` line and the notebook's own first code cell (not copied values), opens an
agent whose tool schemas and system prompt leave every compaction trigger reachable
(:func:`soba_notebook.agent.window_fit.fit_warnings` says nothing)."""

from __future__ import annotations

import json
import os
import re
import shlex
import warnings
from pathlib import Path

import pytest
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from kernel_support import trust_project_config

from soba_notebook.agent import Agent
from soba_notebook.agent.window_fit import fit_warnings
from soba_notebook.config import ConfigWarning, load_config
from soba_notebook.events import EventBus
from soba_notebook.flight import FlightRecorder
from soba_notebook.providers.openai import OpenAIChatProvider
from soba_notebook.session import SessionStore

REPO = Path(__file__).resolve().parents[2]


def _local_model_environment() -> dict[str, str]:
    """The SOBA_* variables the script exports under ``--local-model`` (its port is any port)."""
    script = (REPO / "scripts" / "quickstart.sh").read_text()
    context = re.search(r"^\s*CONTEXT=(\d+)\s*$", script, re.M)
    export = re.search(r"^\s*export (SOBA_(?:.*\\\n)*.*)$", script, re.M)
    assert context and export, "scripts/quickstart.sh no longer sets CONTEXT= and export SOBA_... under --local-model"
    words = shlex.split(export.group(1).replace("\\\n", " ").replace("$CONTEXT", context.group(1))
                        .replace("$PORT", "8080"), comments=True)
    return dict(word.split("=", 1) for word in words)


def _notebook_config(where: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the notebook's first code cell (it writes the project's config and changes into it) in
    ``where`` under ``env``; the project it made."""
    cells = json.loads((REPO / "notebooks" / "quickstart.ipynb").read_text())["cells"]
    code = "".join(next(c for c in cells if c["cell_type"] == "code")["source"])
    for name in [n for n in os.environ if n.startswith("SOBA_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(where)
    namespace: dict[str, object] = {}
    exec(compile(code, "quickstart.ipynb cell 1", "exec"), namespace)  # the project's own notebook
    project = namespace["project"]
    assert isinstance(project, Path)
    return project


def test_the_local_model_quickstart_config_fits_its_window(tmp_path: Path, fake_server: FakeServer,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    env = _local_model_environment()
    assert env["SOBA_CONTEXT_WINDOW"] and env["SOBA_BASE_URL"]
    project = _notebook_config(tmp_path, env, monkeypatch)
    trust_project_config(project, tmp_path / "home")  # as the user does for its model.baseUrl
    config = load_config(home=tmp_path / "home", project_dir=project)
    assert config.model.context_window == int(env["SOBA_CONTEXT_WINDOW"])  # the script's window is the one used
    assert config.model.max_output_tokens == int(env["SOBA_MAX_OUTPUT_TOKENS"])
    assert config.compaction.keep_recent_tokens == int(env["SOBA_KEEP_RECENT_TOKENS"])
    provider = OpenAIChatProvider(config.model.model, base_url=fake_server.openai_base_url,
                                  api_key="test-key-not-secret", tool_protocol=config.model.tool_protocol)
    store = SessionStore.create(project / ".soba" / "sessions")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent = Agent(store, config, provider, workspace=project, bus=EventBus(),
                      flight=FlightRecorder(project / ".soba" / "flight.jsonl", store.id))
    said = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]
    assert agent.tools.names(), "the agent offers its tools"
    assert said == [] and agent.fit_notes == ()
    assert fit_warnings(config, agent.engine.base_tokens) == ()
    print(f"fixed prompt {agent.engine.base_tokens:,} tokens of {config.model.context_window:,}; "
          f"hard limit {config.hard_limit:,}")
