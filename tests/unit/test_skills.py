"""Skills: discovery in the workspace and home, front matter, the active set, and the system text."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from soba_notebook.agent.skills import Skill, SkillRegistry
from soba_notebook.agent.tools import ToolContext, default_tools
from soba_notebook.config import ToolsConfig
from soba_notebook.errors import ToolError


def write_skill(root: Path, directory: str, text: str) -> Path:
    path = root / ".soba" / "skills" / directory / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    return workspace, home


def test_skills_are_found_in_the_workspace_and_home(dirs: tuple[Path, Path]) -> None:
    workspace, home = dirs
    a = write_skill(workspace, "testing", "---\nname: testing\ndescription: How we test\n---\nRun pytest -q.\n")
    b = write_skill(home, "style", "# Style guide\n\nUse type hints.\n")
    skills = SkillRegistry(workspace, home=home).available()
    assert skills == [
        Skill("style", "Style guide", b, "# Style guide\n\nUse type hints.\n"),
        Skill("testing", "How we test", a, "Run pytest -q."),
    ]


def test_front_matter_name_and_quoted_description_are_used(dirs: tuple[Path, Path]) -> None:
    workspace, home = dirs
    write_skill(workspace, "dir-name", '---\nname: "release-notes"\ndescription: \'Write notes: short\'\n---\nBody')
    (skill,) = SkillRegistry(workspace, home=home).available()
    assert (skill.name, skill.description, skill.body) == ("release-notes", "Write notes: short", "Body")


def test_workspace_skill_hides_a_home_skill_of_the_same_name(dirs: tuple[Path, Path]) -> None:
    workspace, home = dirs
    write_skill(home, "deploy", "home version")
    write_skill(workspace, "deploy", "project version")
    (skill,) = SkillRegistry(workspace, home=home).available()
    assert skill.body == "project version"


def test_unknown_skill_error_lists_the_available_ones(dirs: tuple[Path, Path]) -> None:
    workspace, home = dirs
    write_skill(workspace, "alpha", "a")
    write_skill(home, "beta", "b")
    registry = SkillRegistry(workspace, home=home)
    with pytest.raises(ToolError, match=r"unknown skill 'gamma'; available skills: alpha, beta"):
        registry.activate("gamma")
    empty = SkillRegistry(workspace / "nothing", home=home / "nothing")
    with pytest.raises(ToolError, match=r"no skills are installed"):
        empty.activate("gamma")


def test_activate_and_deactivate_return_the_new_active_tuple(dirs: tuple[Path, Path]) -> None:
    workspace, home = dirs
    for name in ("a", "b", "c"):
        write_skill(workspace, name, f"body {name}")
    registry = SkillRegistry(workspace, home=home)
    assert registry.activate("b") == ("b",)
    assert registry.activate("a") == ("b", "a")
    assert registry.activate("b") == ("b", "a")  # already active: unchanged
    assert registry.deactivate("b") == ("a",)
    assert registry.deactivate("c") == ("a",)  # known but inactive: unchanged
    assert registry.active() == ("a",)
    with pytest.raises(ToolError):
        registry.deactivate("zzz")


def test_system_text_holds_the_bodies_of_active_skills_only(dirs: tuple[Path, Path]) -> None:
    workspace, home = dirs
    write_skill(workspace, "on", "---\ndescription: d\n---\nALWAYS RUN RUFF")
    write_skill(workspace, "off", "NEVER SHOWN")
    registry = SkillRegistry(workspace, home=home)
    assert registry.system_text() == ""
    registry.activate("on")
    text = registry.system_text()
    assert "ALWAYS RUN RUFF" in text and "NEVER SHOWN" not in text and 'name="on"' in text
    registry.deactivate("on")
    assert registry.system_text() == ""


def test_restored_active_set_is_kept_and_missing_skills_are_named(dirs: tuple[Path, Path]) -> None:
    workspace, home = dirs
    write_skill(workspace, "present", "here")
    registry = SkillRegistry(workspace, home=home)
    assert registry.set_active(["present", "gone", "present"]) == ("present", "gone")
    text = registry.system_text()
    assert "here" in text and 'name="gone" missing="true"' in text


def test_skills_written_after_start_are_found(dirs: tuple[Path, Path]) -> None:
    workspace, home = dirs
    registry = SkillRegistry(workspace, home=home)
    assert registry.available() == []
    write_skill(workspace, "late", "arrived later")
    assert registry.activate("late") == ("late",)


def test_skill_files_are_never_executed(dirs: tuple[Path, Path]) -> None:
    workspace, home = dirs
    sentinel = workspace / "executed"
    payload = f"import pathlib; pathlib.Path({str(sentinel)!r}).write_text('boom')"
    skill_dir = write_skill(workspace, "evil", f"---\nname: evil\n---\n```python\n{payload}\n```\n$(touch {sentinel})\n"
                            ).parent
    (skill_dir / "__init__.py").write_text(payload)
    (skill_dir / "skill.py").write_text(payload)
    (skill_dir / "run.sh").write_text(f"touch {sentinel}\n")
    registry = SkillRegistry(workspace, home=home)
    registry.available()
    registry.activate("evil")
    text = registry.system_text()
    assert payload in text  # the body is carried as text, verbatim
    out = asyncio.run(default_tools(ToolsConfig(allow_shell=False, allow_python=False)).run(
        "activate_skill", {"name": "evil"}, ToolContext(workspace, ToolsConfig(allow_shell=False), skills=registry)))
    assert not out.is_error
    assert not sentinel.exists()


def test_skill_tools_report_the_active_set_for_the_config_entry(dirs: tuple[Path, Path]) -> None:
    workspace, home = dirs
    write_skill(workspace, "pandas", "Use vectorized ops.")
    registry = SkillRegistry(workspace, home=home)
    ctx = ToolContext(workspace, skills=registry)
    tools = default_tools(ctx.config)

    on = asyncio.run(tools.run("activate_skill", {"name": "pandas"}, ctx))
    assert not on.is_error and on.data == {"activeSkills": ["pandas"], "changed": True}
    off = asyncio.run(tools.run("deactivate_skill", {"name": "pandas"}, ctx))
    assert off.data == {"activeSkills": [], "changed": True}
    unknown = asyncio.run(tools.run("activate_skill", {"name": "numpy"}, ctx))
    assert unknown.is_error and "available skills: pandas" in unknown.content
    no_registry = asyncio.run(tools.run("activate_skill", {"name": "pandas"}, ToolContext(workspace)))
    assert no_registry.is_error and "unavailable" in no_registry.content
