"""A project whose ``.soba`` is a symbolic link, in a real kernel (issue 37, item 4).

A cloned repository may carry ``.soba`` as a link (to ``~/.ssh``, to another project's state). SOBA
keeps its state only in a real directory: ``%soba`` says so in one line naming the link, shows no
traceback (a ``UsageError``: the cell fails, as for any bad input to a magic), and writes nothing
through it.
"""

from __future__ import annotations

import json
from pathlib import Path

from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from kernel_support import Kernel, fake_server_project


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def test_a_soba_that_is_a_link_is_one_line_naming_it_and_its_target_is_unchanged(
        tmp_path: Path, fake_server: FakeServer) -> None:
    project = fake_server_project(tmp_path, fake_server.openai_base_url)
    target = tmp_path / "elsewhere"
    (project / ".soba").rename(target)  # its config.json goes with it: the link's target looks like a .soba
    (project / ".soba").symlink_to(target)
    home = tmp_path / "home"
    (home / ".soba").mkdir(parents=True)
    (home / ".soba" / "config.json").write_text((target / "config.json").read_text())
    before = _tree(target)
    fake_server.openai.enqueue(text="hello back")
    kernel = Kernel(project, home, env={"SOBA_TEST_KEY": "test-key-not-secret"})
    try:
        status, text = kernel.run("%soba hello")
    finally:
        kernel.close()
    lines = [line for line in text.splitlines() if line.strip()]
    assert status == "error" and len(lines) == 1 and "Traceback" not in text, text  # IPython's UsageError: no stack
    assert lines[0].startswith(f"UsageError: {project / '.soba'}: is a symbolic link (to {target}); SOBA keeps its "
                               f"state only in a real directory"), text
    assert _tree(target) == before
    assert fake_server.requests == []  # no turn ran
    assert json.loads((target / "config.json").read_text())["model"]["apiKeyEnv"] == "SOBA_TEST_KEY"
