"""Fault injection (issue 13): kill -9 during an append and during write_file, a full disk, and hostile
workspace layouts. Run alone with ``pytest -m faults``.

The full-disk tests mount a small tmpfs, which needs root: under CI (which runs as root) a mount
that fails fails them; elsewhere they skip with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_support import make_agent
from ci_support import unavailable
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401

from soba_notebook.agent import workspace as wsmod
from soba_notebook.agent.tools import ToolContext, default_tools
from soba_notebook.errors import SessionError, SessionWarning, ToolError
from soba_notebook.session.entries import user_message
from soba_notebook.session.store import SessionStore

REPO = Path(__file__).resolve().parents[2]
UPPER_BOUND_SEC = 60

_APPENDER = """
import sys
from soba_notebook.session.store import SessionStore
from soba_notebook.session.entries import user_message
store = SessionStore.open(sys.argv[1])
n = 0
while True:
    e = store.append(user_message("x" * 4000 + str(n)))
    print(e.id, flush=True)
    n += 1
"""

_WRITER = """
import sys
from pathlib import Path
from soba_notebook.agent.workspace import write_file
n = 0
while True:
    write_file(Path(sys.argv[1]), "big.txt", (f"version {n}\\n" * 50_000) + "end\\n")
    print(n, flush=True)
    n += 1
"""


def _spawn(code: str, arg: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", code, str(arg)], stdout=subprocess.PIPE, text=True, env=env)


def _kill_after_some_output(proc: subprocess.Popen[str], lines: int) -> list[str]:
    out: list[str] = []
    assert proc.stdout is not None
    while len(out) < lines:
        line = proc.stdout.readline()
        if not line:
            break
        out.append(line.strip())
    time.sleep(random.random() * 0.02)
    proc.send_signal(signal.SIGKILL)
    rest, _ = proc.communicate(timeout=UPPER_BOUND_SEC)
    return out + [line for line in rest.splitlines() if line.strip()]


def test_kill_9_during_append_loses_no_acknowledged_entry(tmp_path: Path) -> None:
    store = SessionStore.create(tmp_path)
    acknowledged: list[str] = []
    for round_ in range(8):
        acknowledged += _kill_after_some_output(_spawn(_APPENDER, store.file), 5 + round_)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a torn tail is expected here; the entries are what counts
            reopened = SessionStore.open(store.file)
        missing = [i for i in acknowledged if i not in reopened]
        assert missing == [], f"round {round_}: acknowledged entries lost: {missing[:3]}"
    reopened.append(user_message("still usable"))
    assert SessionStore.open(store.file).path()[-1].text == "still usable"


def test_kill_9_during_write_file_leaves_one_whole_version(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("original\n")
    for _ in range(6):
        _kill_after_some_output(_spawn(_WRITER, tmp_path), 2)
        text = (tmp_path / "big.txt").read_text()
        assert text == "original\n" or (text.endswith("end\n") and len(set(text.splitlines()[:-1])) == 1), \
            "write_file left a torn file"


# -- a full disk ----------------------------------------------------------------------------------

@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        unavailable("a full disk needs a small tmpfs, and mounting one needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        unavailable(f"cannot mount a tmpfs at {mount}: {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _fill(disk: Path, leave: int = 0) -> Path:
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)
    if leave:
        os.truncate(filler, max(filler.stat().st_size - leave, 0))
    return filler


def test_full_disk_write_file_and_edit_file_leave_the_file_byte_identical(tiny_disk: Path) -> None:
    (tiny_disk / "src.py").write_text("x = 1\n" * 1000)
    before = (tiny_disk / "src.py").read_bytes()
    _fill(tiny_disk)
    ctx = ToolContext(tiny_disk)
    tools = default_tools(ctx.config)
    for name, args in (("write_file", {"path": "src.py", "content": "y = 2\n" * 5000}),
                       ("edit_file", {"path": "src.py", "old": "x = 1\n", "new": "z = 3\n", "replace_all": True})):
        out = asyncio.run(tools.run(name, args, ctx))
        assert out.is_error and "No space left on device" in out.content and "src.py" in out.content, out.content
        assert (tiny_disk / "src.py").read_bytes() == before
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["filler", "src.py"]


def test_full_disk_append_is_one_clear_error_and_the_tail_is_quarantined(tiny_disk: Path) -> None:
    store = SessionStore.create(tiny_disk / "sessions")
    store.append(user_message("kept"))
    filler = _fill(tiny_disk, leave=1000)
    with pytest.raises(SessionError, match=rf"{store.file}: could not append .*(No space left|bytes were written)"):
        store.append(user_message("y" * 20_000))
    filler.unlink()
    store.append(user_message("after the disk was freed"))
    with pytest.warns() as seen:
        reopened = SessionStore.open(store.file)
    assert [e.text for e in reopened.path()] == ["kept", "after the disk was freed"]
    assert any("a write failed" in str(w.message) or "not valid JSON" in str(w.message) for w in seen)


def test_full_disk_batch_append_is_one_clear_error_like_a_single_append(tiny_disk: Path) -> None:
    """Issue 21 item 13: append_many let a raw OSError out; both appends share one write path."""
    store = SessionStore.create(tiny_disk / "sessions")
    store.append(user_message("kept"))
    filler = _fill(tiny_disk, leave=1000)
    with pytest.raises(SessionError, match=rf"{store.file}: could not append the batch of 3 entries "
                                           rf"\(No space left on device\); it was not saved"):
        store.append_many([user_message("z" * 20_000) for _ in range(3)])
    filler.unlink()
    store.append(user_message("after the disk was freed"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reopened = SessionStore.open(store.file)
    assert [e.text for e in reopened.path()] == ["kept", "after the disk was freed"]


def test_a_torn_tail_is_copied_whole_or_the_warning_says_nothing_could_be_copied(tiny_disk: Path) -> None:
    """Issue 21 item 9: on a still-full disk the ``.torn-N`` copy was left empty, and every later
    open said the torn bytes were in it."""
    store = SessionStore.create(tiny_disk / "sessions")
    store.append(user_message("kept"))
    filler = _fill(tiny_disk, leave=8192)
    with pytest.raises(SessionError):
        store.append(user_message("y" * 40_000))
    raw = store.file.read_bytes()
    tail = raw[raw.rfind(b"\n") + 1:]
    assert tail, "the failed append left no torn bytes to copy"
    copy = store.file.with_name(f"{store.file.name}.torn-{len(raw) - len(tail)}")
    with pytest.warns(SessionWarning) as full:
        SessionStore.open(store.file)
    said = " ".join(str(w.message) for w in full)
    assert "could not be copied" in said and "No space left" in said and str(copy) not in said
    assert not copy.exists() or copy.read_bytes() == tail  # never a copy that lacks the bytes
    filler.unlink()
    for _ in range(2):  # the open that can copy them, and one after it
        with pytest.warns(SessionWarning) as freed:
            SessionStore.open(store.file)
        assert f"a copy of its bytes is in {copy}" in " ".join(str(w.message) for w in freed)
        assert copy.read_bytes() == tail


def test_full_disk_during_a_turn_ends_it_cleanly_naming_the_path(tiny_disk: Path, fake_server: FakeServer) -> None:
    agent, _, _ = make_agent(tiny_disk, "openai", fake_server.openai_base_url)
    fake_server.openai.enqueue(text="a reply that will not fit " * 4000)
    _fill(tiny_disk, leave=2000)
    result = asyncio.run(agent.run_turn("hello " * 10))
    assert result.outcome == "failed"
    assert str(agent.store.file) in (result.error or "") and "not saved" in (result.error or "")


# -- hostile workspaces ---------------------------------------------------------------------------

def test_a_directory_swapped_for_an_outside_link_during_writes_never_writes_outside(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                os.rename(ws / "sub", ws / "sub.real")
                os.symlink(outside, ws / "sub")
                os.unlink(ws / "sub")
                os.rename(ws / "sub.real", ws / "sub")

    thread = threading.Thread(target=swap, daemon=True)
    thread.start()
    try:
        for i in range(1_000):
            with contextlib.suppress(ToolError, OSError):
                wsmod.write_file(ws, f"sub/f{i}.txt", "data")
    finally:
        stop.set()
        thread.join(UPPER_BOUND_SEC)
    assert list(outside.iterdir()) == []


def test_hardlinks_symlinks_and_soba_writes_in_one_hostile_tree(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE\n")
    os.link(secret, ws / "notes.txt")
    (ws / "etc").symlink_to("/etc", target_is_directory=True)
    (ws / ".soba").mkdir()
    (ws / ".soba" / "config.json").write_text("{}")
    ctx = ToolContext(ws)
    tools = default_tools(ctx.config)

    def run(name: str, **args: object) -> str:
        return asyncio.run(tools.run(name, args, ctx)).content

    assert "hard links" in run("write_file", path="notes.txt", content="x")
    assert "outside the workspace" in run("read_file", path="etc/hostname")
    assert "soba's own state" in run("write_file", path=".soba/config.json", content='{"tools":{}}')
    (ws / "sub").mkdir()
    assert "soba's own state" in run("write_file", path="sub/../.soba/evil.json", content="{}")
    assert secret.read_text() == "PRIVATE\n" and (ws / ".soba" / "config.json").read_text() == "{}"
