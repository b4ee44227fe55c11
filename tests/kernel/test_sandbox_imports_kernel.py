"""A sandboxed command cannot get code run in the kernel by planting a module: a real kernel, a real
background cell, a real render (real bwrap). The kernel-free rules are in
``tests/unit/test_sandbox_imports.py``."""

from __future__ import annotations

import json
from pathlib import Path

from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from kernel_support import Kernel, fake_server_project
from unit.test_sandbox import bwrap  # noqa: F401  (the fixture: bwrap present and usable, or skip/fail as there)
from unit.test_sandbox_imports import PLANT

_MARKER_NAME = "PLANTED_RAN"


def test_sandboxed_planted_module_does_not_run_when_a_background_cell_renders_the_reply(
        bwrap: str, tmp_path: Path, fake_server: FakeServer) -> None:  # noqa: F811
    """The issue's path: a sandboxed ``cat > mistune.py`` under approval "never" (so the file is kept,
    and said so), then the background cell renders the model's markdown reply with ``mistune``: the
    planted module must not run, the real one renders, and the status lines say what runs unasked."""
    project = fake_server_project(tmp_path, fake_server.openai_base_url)
    config = json.loads((project / ".soba" / "config.json").read_text())
    config["tools"] = {"sandbox": "bwrap", "approval": "never"}
    (project / ".soba" / "config.json").write_text(json.dumps(config))
    marker = tmp_path / _MARKER_NAME
    plant = f"cat > mistune.py <<'X'\n{PLANT.format(marker=str(marker))}X\n"
    fake_server.openai.enqueue(tool_calls=[{"id": "c0", "name": "shell", "arguments": {"command": plant}}])
    fake_server.openai.enqueue(text="**rendered** reply")
    kernel = Kernel(project, tmp_path / "home", env={"SOBA_TEST_KEY": "test-key-not-secret"}, approval=None)
    try:
        assert kernel.value("'mistune' in __import__('sys').modules") == "False"  # the render is its first import
        msg_id = kernel.submit("%%soba --background\nrender something")
        kernel.wait(msg_id)
        shown = ""
        for _ in range(600):  # the background turn ends after its cell; wait for its rendered reply
            status, shown = kernel.run("import sys; print(sys.modules.get('mistune').__file__ "
                                       "if 'mistune' in sys.modules else None)")
            if "None" not in shown:
                break
        assert status == "ok" and "site-packages" in shown and str(project) not in shown, shown
        assert not marker.exists(), "the planted mistune.py ran in the kernel"
        assert (project / "mistune.py").exists()  # kept under "never", and the result says so:
        (session,) = (project / ".soba" / "sessions").glob("*.jsonl")
        results = [json.loads(line) for line in session.read_text().splitlines() if '"role": "tool"' in line
                   or '"role":"tool"' in line]
        assert any("[kept (approval never)" in str(r["message"]["content"]) for r in results), results
        status, text = kernel.run("%soba approval ask")
        assert "asks first: shell (sandboxed; tools.sandboxSkipsApproval is false)" in text, text
        assert "asks first: shell (sandboxed" in kernel.run("%soba status")[1]
    finally:
        kernel.close()
