"""Issue 13, items 1, 2, 5 and 7: the file tools cannot lift the agent's limits, follow links out, race
the check, destroy a file on a failed write, or copy a huge file to .soba/outputs on every read."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from kernel_support import trust_project_config

from soba_notebook.agent.project import open_agent
from soba_notebook.agent.tools import ToolContext, ToolOutcome, default_tools
from soba_notebook.config import ToolsConfig, load_config
from soba_notebook.errors import ConfigError

UPPER_BOUND_SEC = 60


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def run(name: str, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
    return asyncio.run(asyncio.wait_for(default_tools(ctx.config).run(name, args, ctx), UPPER_BOUND_SEC))


# -- item 1: .soba is off-limits, and config cannot widen the workspace ------------------------

@pytest.mark.parametrize("rel", [".soba/config.json", ".soba/sessions/s.jsonl", ".soba/memory/m.md",
                                 ".soba/skills/x/SKILL.md", ".soba/flight.jsonl", ".soba/outputs/note.txt"])
def test_every_file_tool_refuses_every_path_under_project_soba(ws: Path, rel: str) -> None:
    target = ws / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text('{"tools": {"allowShell": false}}\n')
    ctx = ToolContext(ws)
    calls = [("read_file", {"path": rel}), ("write_file", {"path": rel, "content": "x"}),
             ("edit_file", {"path": rel, "old": "false", "new": "true"}), ("list_files", {"path": ".soba"}),
             ("grep", {"pattern": "allow", "path": ".soba"}), ("write_file", {"path": ".soba/new.json", "content": ""})]
    for name, args in calls:
        out = run(name, args, ctx)
        assert out.is_error and "soba's own state" in out.content, (name, out.content)
    assert target.read_text() == '{"tools": {"allowShell": false}}\n'
    assert not (ws / ".soba/new.json").exists()


def test_soba_of_a_project_below_a_parent_workspace_and_the_users_soba_are_refused(
        ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = ws / "proj"
    (project / ".soba").mkdir(parents=True)
    (project / ".soba" / "config.json").write_text("{}")
    home = ws / "home"
    (home / ".soba").mkdir(parents=True)
    (home / ".soba" / "config.json").write_text("{}")
    monkeypatch.setenv("HOME", str(home))
    ctx = ToolContext(ws)
    for path in ("proj/.soba/config.json", "home/.soba/config.json", str(home / ".soba" / "config.json"),
                 "proj/./.SOBA/../.soba/config.json"):
        out = run("edit_file", {"path": path, "old": "{}", "new": '{"tools":{"allowShell":true}}'}, ctx)
        assert out.is_error and "soba's own state" in out.content, (path, out.content)
    grep = run("grep", {"pattern": "{}"}, ctx)
    assert ".soba" not in grep.content


def test_a_link_into_soba_is_refused_like_the_directory_itself(ws: Path) -> None:
    (ws / ".soba").mkdir()
    (ws / ".soba" / "config.json").write_text("{}")
    (ws / "cfg").symlink_to(ws / ".soba", target_is_directory=True)
    (ws / "cfg.json").symlink_to(".soba/config.json")
    ctx = ToolContext(ws)
    assert "soba's own state" in run("write_file", {"path": "cfg/config.json", "content": "x"}, ctx).content
    assert "soba's own state" in run("read_file", {"path": "cfg.json"}, ctx).content
    assert (ws / ".soba" / "config.json").read_text() == "{}"


@pytest.mark.parametrize("workspace", ["/", "HOME"])
def test_a_project_config_cannot_make_the_workspace_the_disk_or_home(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workspace: str) -> None:
    home = tmp_path / "home"
    project = home / "proj"
    (project / ".soba").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    value = str(home) if workspace == "HOME" else "/"
    (project / ".soba" / "config.json").write_text(json.dumps(
        {"tools": {"workspace": value, "allowBroadWorkspace": True}}))
    trust_project_config(project, home)  # even trusted, a project cannot widen its own workspace
    with pytest.warns(UserWarning, match="cannot widen the workspace"), \
            pytest.raises(ConfigError, match="allowBroadWorkspace") as info:
        open_agent(project, config=load_config(project_dir=project, home=home))
    assert info.value.key == "tools.workspace"
    # the explicit, documented opt-in lives in the user's own config, which the agent cannot write
    (home / ".soba" / "config.json").write_text(json.dumps({"tools": {"allowBroadWorkspace": True}}))
    (project / ".soba" / "config.json").write_text(json.dumps({"tools": {"workspace": value}}))
    trust_project_config(project, home)
    handle = open_agent(project, config=load_config(project_dir=project, home=home))
    assert handle.agent.workspace == Path(value).resolve()


# -- item 2: links, hard links and races --------------------------------------------------------

def test_writes_to_a_file_with_more_than_one_hard_link_are_refused(ws: Path) -> None:
    outside = ws.parent / "outside.txt"
    outside.write_text("original\n")
    os.link(outside, ws / "inside.txt")
    ctx = ToolContext(ws)
    write = run("write_file", {"path": "inside.txt", "content": "pwned\n"}, ctx)
    edit = run("edit_file", {"path": "inside.txt", "old": "original", "new": "pwned"}, ctx)
    assert write.is_error and "2 hard links" in write.content
    assert edit.is_error and "hard links" in edit.content
    assert outside.read_text() == "original\n"


def test_links_inside_the_workspace_still_work(ws: Path) -> None:
    (ws / "real").mkdir()
    (ws / "real" / "a.txt").write_text("alpha\n")
    (ws / "alias").symlink_to("real", target_is_directory=True)
    (ws / "abs.txt").symlink_to(ws / "real" / "a.txt")
    ctx = ToolContext(ws)
    assert "alpha" in run("read_file", {"path": "alias/a.txt"}, ctx).content
    assert "alpha" in run("read_file", {"path": "abs.txt"}, ctx).content
    assert not run("edit_file", {"path": "alias/a.txt", "old": "alpha", "new": "beta"}, ctx).is_error
    assert (ws / "real" / "a.txt").read_text() == "beta\n"


def test_a_symlink_swapped_in_during_reads_never_returns_outside_content(ws: Path) -> None:
    outside = ws.parent / "secret.txt"
    outside.write_text("OUTSIDE SECRET\n")
    (ws / "a.txt").write_text("inside\n")
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            tmp = ws / "a.tmp"
            with __import__("contextlib").suppress(OSError):
                tmp.symlink_to(outside)
                os.replace(tmp, ws / "a.txt")
            with __import__("contextlib").suppress(OSError):
                (ws / "b.tmp").write_text("inside\n")
                os.replace(ws / "b.tmp", ws / "a.txt")

    from soba_notebook.agent import workspace as wsmod

    thread = threading.Thread(target=swap, daemon=True)
    thread.start()
    leaked = 0
    try:
        for _ in range(1_500):
            try:
                text = wsmod.read_file(ws, "a.txt").text
            except Exception:  # a refusal or a vanished file is fine; content is what counts
                continue
            leaked += "OUTSIDE" in text
    finally:
        stop.set()
        thread.join(UPPER_BOUND_SEC)
    assert leaked == 0


def test_grep_skips_a_symlink_loop_with_a_note(ws: Path) -> None:
    (ws / "loop").symlink_to("loop")
    (ws / "a").symlink_to("b")
    (ws / "b").symlink_to("a")
    (ws / "own.txt").write_text("needle\n")
    out = run("grep", {"pattern": "needle"}, ToolContext(ws))
    assert not out.is_error
    assert out.content.splitlines()[0] == "own.txt:1: needle"
    assert "[skipped 3 symbolic links that loop: a, b, loop]" in out.content


def test_grep_never_opens_a_fifo(ws: Path) -> None:
    os.mkfifo(ws / "pipe.txt")
    (ws / "own.txt").write_text("needle\n")
    out = run("grep", {"pattern": "needle"}, ToolContext(ws))
    assert out.content == "own.txt:1: needle"
    read = run("read_file", {"path": "pipe.txt"}, ToolContext(ws))
    assert read.is_error and "not a regular file" in read.content


# -- item 5: atomic writes ----------------------------------------------------------------------

def test_write_and_edit_replace_the_file_atomically_and_keep_its_mode(ws: Path) -> None:
    script = ws / "run.sh"
    script.write_text("echo one\n")
    script.chmod(0o750)
    before = script.stat().st_ino
    ctx = ToolContext(ws)
    assert not run("edit_file", {"path": "run.sh", "old": "one", "new": "two"}, ctx).is_error
    assert script.stat().st_ino != before  # a new inode renamed into place, not an in-place rewrite
    assert script.stat().st_mode & 0o777 == 0o750
    assert not run("write_file", {"path": "run.sh", "content": "echo three\n"}, ctx).is_error
    assert script.read_text() == "echo three\n" and script.stat().st_mode & 0o777 == 0o750
    assert sorted(p.name for p in ws.iterdir()) == ["run.sh"]  # no temporary file left behind


def test_a_failed_write_leaves_the_old_file_byte_identical(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (ws / "keep.txt").write_bytes(b"precious\n")
    real_write = os.write

    def full_disk(fd: int, data: Any) -> int:
        if os.fstat(fd).st_size > 0 or len(data) > 4:
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_disk)
    ctx = ToolContext(ws)
    write = run("write_file", {"path": "keep.txt", "content": "new text that does not fit\n"}, ctx)
    edit = run("edit_file", {"path": "keep.txt", "old": "precious", "new": "destroyed"}, ctx)
    monkeypatch.undo()
    for out in (write, edit):
        assert out.is_error and "No space left on device" in out.content and "keep.txt" in out.content
        assert "left unchanged" in out.content
    assert (ws / "keep.txt").read_bytes() == b"precious\n"
    assert sorted(p.name for p in ws.iterdir()) == ["keep.txt"]


# -- item 7: huge files ---------------------------------------------------------------------------

def test_read_file_on_a_huge_file_reads_a_bounded_window_and_writes_no_spill(ws: Path) -> None:
    with open(ws / "big.log", "w") as fh:
        for i in range(400_000):
            fh.write(f"record {i:07d} " + "x" * 40 + "\n")
    ctx = ToolContext(ws, ToolsConfig(max_output_chars=5_000))
    for _ in range(3):
        out = run("read_file", {"path": "big.log"}, ctx)
        assert not out.is_error and len(out.content) <= 5_000 and out.full_chars is None
    last = out.content.splitlines()[-1]
    assert last.startswith("[lines 1-") and "of 400,000 in big.log" in last
    assert f"({(ws / 'big.log').stat().st_size:,} bytes)" in last and "continue with start_line=" in last
    nxt = int(last.rsplit("start_line=", 1)[1].rstrip("]"))
    page = run("read_file", {"path": "big.log", "start_line": nxt}, ctx)
    assert page.content.startswith(f"{nxt:>6}\trecord {nxt - 1:07d}")
    assert not (ws / ".soba" / "outputs").exists()


def test_read_file_cuts_a_single_giant_line_with_a_marker(ws: Path) -> None:
    (ws / "min.js").write_text("a" * 300_000 + "\nsecond\n")
    out = run("read_file", {"path": "min.js"}, ToolContext(ws, ToolsConfig(max_output_chars=5_000)))
    assert "[line cut: 300,000 bytes in all]" in out.content and len(out.content) <= 5_000


def test_spill_directory_is_capped_and_collected_oldest_first(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from soba_notebook.agent import tool_output

    outputs = ws / ".soba" / "outputs"
    outputs.mkdir(parents=True)
    for i in range(6):
        old = outputs / f"shell-{i:016x}.txt"
        old.write_text("x" * 10_000)
        os.utime(old, (1_000 + i, 1_000 + i))
    monkeypatch.setattr(tool_output, "SPILL_DIR_MAX_BYTES", 45_000)
    ctx = ToolContext(ws, ToolsConfig(max_output_chars=2_000))
    out = run("python", {"code": "print('y' * 12_000)"}, ctx)
    spill = ws / out.data["spill_path"]
    left = sorted(p.name for p in outputs.iterdir())
    assert spill.name in left
    assert sum(p.stat().st_size for p in outputs.iterdir()) <= 45_000
    assert "shell-0000000000000000.txt" not in left and "shell-0000000000000005.txt" in left
