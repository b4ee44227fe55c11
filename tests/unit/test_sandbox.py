"""Issue 23, item 4: ``tools.sandbox = "bwrap"`` runs the ``shell`` tool's commands under bubblewrap.

The argv is checked as a pure function; everything else runs real ``bwrap`` on real files, through
the tool registry and through the agent loop (against the loopback fake model server, which the
sandboxed command must not reach). Each rule that the sandbox adds is also run without it where
that proves the test could fail (the same write, the same connection, succeeding unsandboxed).
Under ``CI=true`` a missing or unusable bwrap fails these tests; elsewhere they skip and say why.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from agent_support import make_agent
from ci_support import unavailable
from fakeserver import FakeServer, fake_server_fixture  # noqa: F401
from kernel_support import trust_project_config

from soba_notebook.agent.sandbox import bwrap_argv, hidden_in_sandbox, sandbox_env
from soba_notebook.agent.tools import ToolContext, ToolOutcome, default_tools
from soba_notebook.cancel import CancelToken
from soba_notebook.config import ToolsConfig, load_config
from soba_notebook.errors import ConfigError

UPPER_BOUND_SEC = 60  # only ever a cap on a wait, never an expectation
SANDBOX = ToolsConfig(sandbox="bwrap", shell_timeout_sec=120)


@pytest.fixture(scope="module")
def bwrap() -> str:
    """The bwrap on PATH, after checking it can build this sandbox here (user namespaces may be off)."""
    found = shutil.which("bwrap")
    if found is None:
        unavailable("bwrap is not installed: apt-get install bubblewrap (scripts/test.sh does)")
    probe = subprocess.run([found, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net",
                            "--unshare-pid", "--cap-drop", "ALL", "--", "true"], capture_output=True, text=True,
                           timeout=UPPER_BOUND_SEC)
    if probe.returncode != 0:
        unavailable(f"bwrap cannot create a sandbox on this machine: {probe.stderr.strip()}")
    return found


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def run(command: str, ws: Path, config: ToolsConfig = SANDBOX, **ctx: Any) -> ToolOutcome:
    context = ToolContext(ws, config, **ctx)
    return asyncio.run(asyncio.wait_for(default_tools(config).run("shell", {"command": command}, context),
                                        UPPER_BOUND_SEC))


# -- the argv, as a pure function --------------------------------------------------------------

def test_bwrap_argv_binds_root_read_only_the_workspace_read_write_and_soba_read_only_over_it() -> None:
    ws = Path("/srv/project")
    argv = bwrap_argv(["bash", "-c", "make"], workspace=ws, soba_dirs=[ws / ".soba", Path("/root/.soba")],
                      bwrap="/usr/bin/bwrap")
    pairs = [(argv[i], argv[i + 1]) for i in range(len(argv) - 1)]
    assert argv[:4] == ["/usr/bin/bwrap", "--ro-bind", "/", "/"]
    rw = argv.index("--bind")
    assert argv[rw:rw + 3] == ["--bind", "/srv/project", "/srv/project"]
    ro = pairs.index(("--ro-bind", "/srv/project/.soba"))
    assert ro > rw, "the read-only .soba must be mounted over the read-write workspace, not under it"
    assert ("--ro-bind", "/root/.soba") not in pairs, "a state dir outside the workspace is read-only already"
    for flag in ("--unshare-net", "--unshare-pid", "--new-session", "--die-with-parent"):
        assert flag in argv
    assert ("--cap-drop", "ALL") in pairs and ("--chdir", "/srv/project") in pairs
    assert argv[-4:] == ["--", "bash", "-c", "make"]


def test_bwrap_argv_mounts_the_private_tmp_before_a_workspace_that_lies_under_it() -> None:
    ws = Path("/tmp/pytest/ws")
    argv = bwrap_argv(["true"], workspace=ws, soba_dirs=[ws / ".soba"])
    assert argv.index("/tmp") < argv.index(str(ws)), "a tmpfs mounted after the bind would hide the workspace"


def test_bwrap_argv_for_a_root_workspace_binds_root_read_write_before_dev_proc_and_tmp() -> None:
    argv = bwrap_argv(["true"], workspace=Path("/"), soba_dirs=[Path("/root/.soba")])
    assert argv[1:4] == ["--bind", "/", "/"]
    assert argv.count("--bind") == 1, "a later bind of / would cover the sandbox's own /proc and /tmp"
    at = argv.index("/root/.soba")
    assert argv.index("--proc") > 3 and argv[at - 1:at + 2] == ["--ro-bind", "/root/.soba", "/root/.soba"]


def test_sandbox_env_is_an_allow_list_plus_sandbox_env_names_and_never_a_secret() -> None:
    env = {"OPENAI_API_KEY": "sk-x", "AWS_SECRET_ACCESS_KEY": "s", "GH_PAT": "ghp_x", "PATH": "/usr/bin",
           "DATABASE_URL": "postgres://me:pw@db/x", "HOME": "/root", "TMPDIR": "/var/tmp/me", "LC_ALL": "C.UTF-8",
           "PGHOST": "db", "CUSTOM_KEY_VAR": "k", "MY_TOKEN": "t"}
    got = sandbox_env(env, extra=("PGHOST", "MY_TOKEN", "CUSTOM_KEY_VAR"), secret_names={"CUSTOM_KEY_VAR"})
    assert got == {"PATH": "/usr/bin", "HOME": "/root", "LC_ALL": "C.UTF-8", "PGHOST": "db", "TMPDIR": "/tmp"}
    argv = bwrap_argv(["true"], workspace=Path("/w"), soba_dirs=[])
    assert not any(value in argv for value in env.values()), "no value goes on bwrap's world-readable command line"
    assert not hidden_in_sandbox("PATH") and not hidden_in_sandbox("HOME") and hidden_in_sandbox("DB_PASSWORD_FILE")


def test_sandbox_env_config_takes_variable_names_and_refuses_a_secret_name_or_a_non_list(tmp_path: Path) -> None:
    f = tmp_path / ".soba" / "config.json"
    f.parent.mkdir()
    f.write_text(json.dumps({"tools": {"sandboxEnv": ["PGHOST", "VIRTUAL_ENV"]}}))
    assert load_config(home=tmp_path / "h", project_dir=tmp_path).tools.sandbox_env == (), "untrusted: ignored"
    trust_project_config(tmp_path, tmp_path / "h")
    assert load_config(home=tmp_path / "h", project_dir=tmp_path).tools.sandbox_env == ("PGHOST", "VIRTUAL_ENV")
    f.unlink()
    user = tmp_path / "h" / ".soba" / "config.json"  # the user's own config: always honoured, always checked
    user.parent.mkdir(parents=True, exist_ok=True)  # the trust record lives there too
    for bad, said in ((["GH_TOKEN"], "secret"), (["DB_PASSWORD_FILE"], "secret"), ("PGHOST", "a list"),
                      (["1X"], "not an environment variable name")):
        user.write_text(json.dumps({"tools": {"sandboxEnv": bad}}))
        with pytest.raises(ConfigError, match=said) as err:
            load_config(home=tmp_path / "h", project_dir=tmp_path)
        assert "tools.sandboxEnv" in str(err.value)


def test_the_model_is_told_the_shell_is_sandboxed_only_when_it_is() -> None:
    def shell_description(config: ToolsConfig) -> str:
        return next(s.description for s in default_tools(config).specs() if s.name == "shell")

    assert "Not sandboxed." in shell_description(ToolsConfig())
    told = shell_description(SANDBOX)
    assert "Not sandboxed." not in told and "no network" in told and "read-only" in told


# -- config ------------------------------------------------------------------------------------

def test_sandbox_defaults_to_none_and_an_unknown_value_is_a_config_error_naming_the_choices(tmp_path: Path) -> None:
    assert load_config(home=tmp_path / "h", project_dir=tmp_path).tools.sandbox == "none"
    f = tmp_path / ".soba" / "config.json"
    f.parent.mkdir()
    for bad in ("firejail", True):
        f.write_text(json.dumps({"tools": {"sandbox": bad}}))
        trust_project_config(tmp_path, tmp_path / "h")  # an untrusted one is ignored, not read
        with pytest.raises(ConfigError) as info:
            load_config(home=tmp_path / "h", project_dir=tmp_path)
        msg = str(info.value)
        assert str(f) in msg and "tools.sandbox" in msg and repr(bad) in msg and "none, bwrap" in msg, msg


def test_bwrap_sandbox_without_bwrap_installed_is_a_config_error_naming_the_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(ConfigError) as info:
        load_config(home=tmp_path / "h", project_dir=tmp_path, overrides={"tools": {"sandbox": "bwrap"}})
    assert "bwrap is not installed" in str(info.value) and "apt-get install bubblewrap" in str(info.value)
    assert info.value.key == "tools.sandbox"


def test_bwrap_missing_when_a_command_runs_refuses_the_command_and_never_runs_it_unsandboxed(
        ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bash_only = ws.parent / "bin"
    bash_only.mkdir()
    (bash_only / "bash").symlink_to(shutil.which("bash") or "/bin/bash")
    monkeypatch.setenv("PATH", str(bash_only))
    out = run("echo ran > ran.txt", ws)
    assert out.is_error and "apt-get install bubblewrap" in out.content
    assert not (ws / "ran.txt").exists()


# -- real bwrap through the tool registry ------------------------------------------------------

def test_sandboxed_command_writes_inside_the_workspace_and_nowhere_outside(bwrap: str, ws: Path) -> None:
    sibling = ws.parent / "outside.txt"
    elsewhere = Path(f"/var/tmp/soba-sandbox-{secrets.token_hex(6)}")
    probe = Path(f"/etc/soba-sandbox-probe-{secrets.token_hex(6)}")
    try:
        out = run(f"echo inside > made.txt; echo out > {sibling}; mkdir {elsewhere}; touch {probe}; echo done", ws)
        assert (ws / "made.txt").read_text() == "inside\n"
        assert not sibling.exists(), "a write next to the workspace reached the real file system"
        assert not elsewhere.exists() and not probe.exists()
        assert out.content.count("Read-only file system") >= 2, out.content
        # the same command without the sandbox does reach outside: the assertions above could fail
        run(f"echo out > {sibling}", ws, ToolsConfig())
        assert sibling.read_text() == "out\n"
    finally:
        if elsewhere.exists():
            elsewhere.rmdir()
        probe.unlink(missing_ok=True)


def test_sandboxed_root_cannot_remount_the_file_system_read_write(bwrap: str, ws: Path) -> None:
    """As root, bwrap keeps every capability unless told to drop them; with them, ``/`` can be remounted."""
    probe = Path(f"/etc/soba-sandbox-remounted-{secrets.token_hex(6)}")
    try:
        out = run(f"mount -o remount,rw / && touch {probe}; echo tried", ws)
        assert not probe.exists(), "the sandbox was remounted read-write"
        assert "tried" in out.content
    finally:
        probe.unlink(missing_ok=True)


def test_sandboxed_command_cannot_change_the_soba_config_of_the_workspace(bwrap: str, ws: Path) -> None:
    config = ws / ".soba" / "config.json"
    config.parent.mkdir()
    config.write_text('{"tools": {"sandbox": "bwrap"}}')
    out = run("echo '{\"tools\": {\"sandbox\": \"none\"}}' > .soba/config.json; rm -f .soba/config.json;"
              " mv .soba .soba-moved; rm -rf .soba; echo tried", ws)
    assert config.read_text() == '{"tools": {"sandbox": "bwrap"}}'
    assert not (ws / ".soba-moved").exists() and "tried" in out.content


def test_sandboxed_command_cannot_create_a_soba_config_where_there_was_none(bwrap: str, ws: Path) -> None:
    run("mkdir -p .soba && echo '{}' > .soba/config.json", ws)
    assert (ws / ".soba").is_dir() and not (ws / ".soba" / "config.json").exists()


def test_sandboxed_command_cannot_change_the_session_soba_when_the_workspace_holds_the_project(
        bwrap: str, ws: Path) -> None:
    """The workspace is the project's parent: the project's own .soba (where the transcript is) lies inside it."""
    from soba_notebook.session.store import SessionStore

    store = SessionStore.create(ws / "project" / ".soba" / "sessions")
    run("echo x > project/.soba/config.json; echo x >> project/.soba/sessions/*.jsonl", ws, store=store)
    assert not (ws / "project" / ".soba" / "config.json").exists()
    assert "echo x" not in store.file.read_text() and not store.file.read_text().endswith("x\n")


class _Listener:
    """A TCP server on 127.0.0.1 that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.sendall(b"hello from the host\n")
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[_Listener]:
    server = _Listener()
    yield server
    server.close()


def test_sandboxed_command_cannot_connect_to_a_loopback_server(bwrap: str, ws: Path, listener: _Listener) -> None:
    command = f"exec 3<>/dev/tcp/127.0.0.1/{listener.port} && cat <&3"
    out = run(command, ws)
    assert out.is_error and "hello from the host" not in out.content
    assert listener.accepted == 0
    unsandboxed = run(command, ws, ToolsConfig())  # the same command reaches it without the sandbox
    assert "hello from the host" in unsandboxed.content and listener.accepted == 1


def test_sandbox_environment_is_an_allow_list_so_unlisted_secrets_are_absent_and_listed_extras_present(
        bwrap: str, ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GH_PAT and DATABASE_URL end in no secret suffix: a deny list let them in; the allow list does not."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-" + "a1b2c3d4e5f6a7b8c9d0")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "short")
    monkeypatch.setenv("GH_PAT", "pat-value-1234")
    monkeypatch.setenv("DATABASE_URL", "postgres://app:hunter2@db.internal/prod")
    monkeypatch.setenv("SOBA_TEST_PLAIN", "not listed")
    monkeypatch.setenv("SOBA_TEST_EXTRA", "listed")
    monkeypatch.setenv("LANG", "C.UTF-8")
    command = 'echo "[${OPENAI_API_KEY:-absent}] [${AWS_SECRET_ACCESS_KEY:-absent}] [${GH_PAT:-absent}] ' \
              '[${DATABASE_URL:-absent}] [${SOBA_TEST_PLAIN:-absent}] [$SOBA_TEST_EXTRA] [$LANG] [$TMPDIR]"; env'
    out = run(command, ws, ToolsConfig(sandbox="bwrap", shell_timeout_sec=120, sandbox_env=("SOBA_TEST_EXTRA",)))
    assert "[absent] [absent] [absent] [absent] [absent] [listed] [C.UTF-8] [/tmp]" in out.content, out.content
    assert "hunter2" not in out.content and "pat-value-1234" not in out.content
    unsandboxed = run(command, ws, ToolsConfig())  # the same command sees them without the sandbox
    assert "[pat-value-1234]" in unsandboxed.content and "hunter2" in unsandboxed.content


def test_sandboxed_command_cannot_read_the_environment_of_a_process_outside(bwrap: str, ws: Path) -> None:
    """/proc/<pid>/environ of the kernel holds the API key; the sandbox's own PID namespace hides every host pid."""
    secret = "sk-test-" + secrets.token_hex(12)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                              env={**os.environ, "HOLDER_SECRET_VALUE": secret})
    try:
        command = (f"[ -e /proc/{holder.pid} ] && echo visible; cat /proc/{holder.pid}/environ | tr '\\0' '\\n' "
                   f"| grep HOLDER_SECRET_VALUE; echo checked")
        out = run(command, ws)
        assert "checked" in out.content and secret not in out.content and "visible" not in out.content
        unsandboxed = run(command, ws, ToolsConfig()).content
        assert "visible" in unsandboxed and "HOLDER_SECRET_VALUE=" in unsandboxed
    finally:
        holder.kill()
        holder.wait()


# -- the kill on timeout and cancel reaches into the sandbox -----------------------------------

def _host_pids(marker: str) -> set[int]:
    """Host pids of live processes whose command line starts with ``marker`` (pids inside the sandbox differ)."""
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cmdline.startswith(marker) and state not in ("Z", "X"):
            found.add(int(name))
    return found


def _wait_until(predicate: Any) -> bool:
    deadline = time.monotonic() + UPPER_BOUND_SEC
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _escaping_command() -> tuple[str, str]:
    """A command that leaves three sleepers behind in three ways (background, setsid, double fork)."""
    n = 4000 + secrets.randbelow(5000)
    marker = f"sleep {n}."
    return (f"sleep {n}.1 & setsid sleep {n}.2 & (setsid bash -c 'sleep {n}.3 & wait' &); touch started; wait",
            marker)


def test_cancel_kills_every_process_of_a_sandboxed_command(bwrap: str, ws: Path) -> None:
    command, marker = _escaping_command()
    token = CancelToken()
    ctx = ToolContext(ws, SANDBOX, cancel=token)

    async def scenario() -> tuple[ToolOutcome, set[int]]:
        task = asyncio.create_task(default_tools(SANDBOX).run("shell", {"command": command}, ctx))
        while len(_host_pids(marker)) < 3 and not task.done():
            await asyncio.sleep(0.05)
        running = _host_pids(marker)
        threading.Thread(target=token.cancel).start()  # the stop button lives on another thread
        return await asyncio.wait_for(task, UPPER_BOUND_SEC), running

    out, running = asyncio.run(scenario())
    assert len(running) == 3, running
    assert out.is_error and out.cancelled and "[killed " in out.content
    assert _wait_until(lambda: not _host_pids(marker)), f"left running: {_host_pids(marker)}"


def test_timeout_kills_every_process_of_a_sandboxed_command(bwrap: str, ws: Path) -> None:
    command, marker = _escaping_command()
    out = run(command, ws, ToolsConfig(sandbox="bwrap", shell_timeout_sec=3))
    assert out.data.get("timed_out") and out.content.endswith("[timed out after 3s]")
    assert (ws / "started").exists()
    assert _wait_until(lambda: not _host_pids(marker)), f"left running: {_host_pids(marker)}"


def test_a_background_process_ends_with_its_sandboxed_command(bwrap: str, ws: Path) -> None:
    n = 4000 + secrets.randbelow(5000)
    out = run(f"nohup sleep {n}.4 >/dev/null 2>&1 & echo $! > bg.pid; echo left", ws)
    assert out.content.endswith("[exit code 0]") and (ws / "bg.pid").exists()
    assert _wait_until(lambda: not _host_pids(f"sleep {n}.4")), "a background process outlived the sandbox"


# -- through the agent loop --------------------------------------------------------------------

def _calls(*calls: tuple[str, str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": cid, "name": name, "arguments": args} for cid, name, args in calls]


def _results(agent: Any) -> Mapping[str, str]:
    return {e.tool_call_id: e.text for e in agent.store.path() if e.role == "tool"}


def test_agent_turn_runs_shell_in_the_sandbox(bwrap: str, tmp_path: Path, fake_server: FakeServer,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's own server is on loopback: a sandboxed command cannot call it, nor see the API key."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-" + "f0e1d2c3b4a5968778695a4b")
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url, tools={"sandbox": "bwrap"})
    port = fake_server.openai_base_url.split(":")[2].split("/")[0]
    fake_server.openai.enqueue(tool_calls=_calls(
        ("w", "shell", {"command": "echo made > made.txt && cat made.txt"}),
        ("n", "shell", {"command": f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo reached"}),
        ("s", "shell", {"command": 'echo "key=[${OPENAI_API_KEY:-absent}]"'}),
        ("c", "shell", {"command": f"echo x > {tmp_path}/project/.soba/config.json; echo tried"})))
    fake_server.openai.enqueue(text="done")
    requests_before = len(fake_server.requests)
    result = asyncio.run(agent.run_turn("try the sandbox"))
    assert result.outcome == "completed"
    out = _results(agent)
    assert (agent.workspace / "made.txt").read_text() == "made\n" and out["w"].endswith("[exit code 0]")
    assert "reached" not in out["n"] and "[exit code 0]" not in out["n"]
    assert "key=[absent]" in out["s"]
    # (the project lies under /tmp, which the sandbox replaces with its own: the write fails either way)
    assert "tried" in out["c"] and not (tmp_path / "project" / ".soba" / "config.json").exists()
    assert len(fake_server.requests) == requests_before + 2, "only the agent's own two requests reached the server"


def test_stop_during_a_sandboxed_command_in_an_agent_turn_kills_it(bwrap: str, tmp_path: Path,
                                                                  fake_server: FakeServer) -> None:
    agent, _, _ = make_agent(tmp_path, "openai", fake_server.openai_base_url,
                             tools={"sandbox": "bwrap", "shellTimeoutSec": 600})
    command, marker = _escaping_command()
    fake_server.openai.enqueue(tool_calls=_calls(("s1", "shell", {"command": command})))
    cancel = CancelToken()

    async def scenario() -> Any:
        task = asyncio.ensure_future(agent.run_turn("sleep", cancel))
        while len(_host_pids(marker)) < 3 and not task.done():
            await asyncio.sleep(0.05)
        cancel.cancel()
        return await asyncio.wait_for(task, UPPER_BOUND_SEC)

    result = asyncio.run(scenario())
    assert result.outcome == "cancelled"
    assert _wait_until(lambda: not _host_pids(marker)), f"left running: {_host_pids(marker)}"
    assert "[killed " in _results(agent)["s1"]
